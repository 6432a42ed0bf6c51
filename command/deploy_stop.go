package command

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/cluster"
)

// DeployStopCommand stops a deployment's instances, and with -purge
// removes its records.
type DeployStopCommand struct {
	UI cli.Ui
}

func (c *DeployStopCommand) Synopsis() string {
	return "Stops a deployment (and with -purge removes it)"
}

func (c *DeployStopCommand) Help() string {
	return strings.TrimSpace(`
Usage: mariposa deploy stop [options] NAME

  Stops deployment NAME: its next spec has no units, so every node stops
  its instances of the deployment's services and releases their slots, as
  for a service no longer deployed. A rollout still in progress is
  cancelled. The deployment stays listed (stopped) with its history;
  deploying files to it again starts it again.

  With -purge, once every slot of its services is released, the
  deployment's records (mariposa/deploy/NAME/, mariposa/units/UNIT/) and
  its services' slot keys are deleted: mariposa status lists it no more,
  and its service names are free for any deployment. The audit log keeps
  the stop and the purge.

Options:

  -purge             Remove the deployment's records once its slots are
                     released.

  -timeout=DURATION  How long -purge waits for the slots to be released
                     (default 5m); the deployment stays stopped if it
                     runs out, and -purge may be run again.

` + consulFlagsHelp + `
`)
}

func (c *DeployStopCommand) Run(args []string) int {
	var (
		cf      consulFlags
		purge   bool
		timeout time.Duration
	)
	fs := flag.NewFlagSet("deploy stop", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cf.register(fs)
	fs.BoolVar(&purge, "purge", false, "")
	fs.DurationVar(&timeout, "timeout", 5*time.Minute, "")
	if err := fs.Parse(args); err != nil {
		c.UI.Error("mariposa deploy stop: " + err.Error() + "\n\n" + c.Help())
		return 1
	}
	if fs.NArg() != 1 {
		c.UI.Error("mariposa deploy stop: name one deployment\n\n" + c.Help())
		return 1
	}
	client, err := cf.client()
	if err != nil {
		c.UI.Error("mariposa deploy stop: " + err.Error())
		return 1
	}
	name := fs.Arg(0)
	var res cluster.StopResult
	err = retryNoLeader(func() (err error) { res, err = cluster.StopDeployment(client, name, actor()); return err })
	if err != nil {
		c.UI.Error("mariposa deploy stop: " + err.Error())
		return 1
	}
	switch {
	case res.AlreadyStopped:
		c.UI.Output(fmt.Sprintf("Deployment %s: already stopped (spec %d has no units)", name, res.N))
	default:
		c.UI.Output(fmt.Sprintf("Deployment %s: stopped (spec %d has no units): %s stop, and their holders release their slots",
			name, res.N, strings.Join(res.Units, ", ")))
	}
	if res.Superseded > 0 {
		c.UI.Output(fmt.Sprintf("Deployment %s/%d, still rolling out, is cancelled", name, res.Superseded))
	}
	if !purge {
		return 0
	}
	pr, err := cluster.PurgeDeployment(context.Background(), client, name, actor(), timeout)
	if err != nil {
		c.UI.Error("mariposa deploy stop: -purge: " + err.Error())
		return 1
	}
	c.UI.Output(fmt.Sprintf("Deployment %s purged: %d records under %s%s/ and %d slot keys deleted", name, pr.Keys,
		cluster.DeployPrefix, name, pr.SlotKeys))
	return 0
}
