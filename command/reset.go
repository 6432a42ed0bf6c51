package command

import (
	"flag"
	"fmt"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/executor"
)

// ResetCommand clears a failed service's restart history and starts it.
type ResetCommand struct {
	UI cli.Ui
}

func (c *ResetCommand) Synopsis() string { return "Clears a failed service and starts it again" }

func (c *ResetCommand) Help() string {
	return strings.TrimSpace(`
Usage: mariposa reset [options] SERVICE
       mariposa reset [options] UNIT/K

  Asks the "mariposa run" of this node, through its control socket, to
  forget SERVICE's restart history (the attempts that left it failed) and
  start it again, like systemctl reset-failed followed by start. With
  -node, asks NODE's mariposa, through its HTTP API. Either way the reset
  is in the node's audit file and events, with who asked.

  With UNIT/K (and no -node), clears a failed count slot in Consul instead:
  a slot whose reschedules were exhausted stays unclaimed until reset;
  once reset, its history is cleared and the best-ranked node claims it.
  The reset and its audit record are one transaction. With -node, UNIT/K
  is the instance of that slot on NODE.

Options:

` + controlSocketHelp + `
` + strings.ReplaceAll(nodeFlagHelp, "PERM", "service:write") + `

` + consulFlagsHelp + `
`)
}

func (c *ResetCommand) Run(args []string) int {
	o, svc, ok := controlArgs(c.UI, "reset", c.Help(), flag.NewFlagSet("reset", flag.ContinueOnError), args)
	if !ok {
		return 1
	}
	if strings.Contains(svc, "/") && o.node == "" {
		unit, k, err := cluster.ParseSlot(svc)
		if err == nil {
			var cc *api.Client
			if cc, err = o.cf.client(); err == nil {
				err = resetSlot(cc, unit, k, actor())
			}
		}
		if err != nil {
			c.UI.Error("mariposa reset: " + consulErrText(err))
			return 1
		}
		c.UI.Output(fmt.Sprintf("slot %s/%d: reset; the best-ranked node claims it", unit, k))
		return 0
	}
	ctx, cancel := o.opContext()
	defer cancel()
	client, err := o.client(ctx)
	if err == nil {
		svc, err = client.Operate(ctx, "reset", svc)
	}
	if err != nil {
		c.UI.Error("mariposa reset: " + o.errText(err, svc))
		return 1
	}
	c.UI.Output(fmt.Sprintf("%s%s: restart history cleared; starting", svc, o.on()))
	return 0
}

// resetSlot resets a failed slot: one the fleet's step machine failed
// (its mark, cluster.FailedKey, under control/) by executor.ResetSlot,
// else a slot key whose value says failed (written by an older
// mariposa, or left by a reset's race) by cluster.ResetSlot.
func resetSlot(c *api.Client, unit string, k int, by string) error {
	p, _, err := c.KV().Get(cluster.FailedKey(unit, k), &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		return err
	}
	if p != nil {
		return executor.ResetSlot(c, unit, k, by)
	}
	return cluster.ResetSlot(c, unit, k, by)
}
