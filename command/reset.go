package command

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/cluster"
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
  start it again, like systemctl reset-failed followed by start.

  With UNIT/K, clears a failed count slot in Consul instead: a slot whose
  reschedules were exhausted stays unclaimed until reset; once reset, its
  history is cleared and the best-ranked node claims it. The reset and its
  audit record are one transaction.

Options:

` + controlSocketHelp + `

` + consulFlagsHelp + `
`)
}

func (c *ResetCommand) Run(args []string) int {
	var cf consulFlags
	fs := flag.NewFlagSet("reset", flag.ContinueOnError)
	cf.register(fs)
	client, svc, ok := controlArgs(c.UI, "reset", c.Help(), fs, args)
	if !ok {
		return 1
	}
	if strings.Contains(svc, "/") {
		unit, k, err := cluster.ParseSlot(svc)
		if err == nil {
			var cc *api.Client
			if cc, err = cf.client(); err == nil {
				err = cluster.ResetSlot(cc, unit, k, actor())
			}
		}
		if err != nil {
			c.UI.Error("mariposa reset: " + err.Error())
			return 1
		}
		c.UI.Output(fmt.Sprintf("slot %s/%d: reset; the best-ranked node claims it", unit, k))
		return 0
	}
	if err := client.Reset(context.Background(), svc); err != nil {
		c.UI.Error("mariposa reset: " + err.Error())
		return 1
	}
	c.UI.Output(fmt.Sprintf("%s: restart history cleared; starting", svc))
	return 0
}
