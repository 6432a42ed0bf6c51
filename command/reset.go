package command

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/mitchellh/cli"
)

// ResetCommand clears a failed service's restart history and starts it.
type ResetCommand struct {
	UI cli.Ui
}

func (c *ResetCommand) Synopsis() string { return "Clears a failed service and starts it again" }

func (c *ResetCommand) Help() string {
	return strings.TrimSpace(`
Usage: mariposa reset [options] SERVICE

  Asks the "mariposa run" of this node, through its control socket, to
  forget SERVICE's restart history (the attempts that left it failed) and
  start it again, like systemctl reset-failed followed by start.

Options:

` + controlSocketHelp + `
`)
}

func (c *ResetCommand) Run(args []string) int {
	client, svc, ok := controlArgs(c.UI, "reset", c.Help(), flag.NewFlagSet("reset", flag.ContinueOnError), args)
	if !ok {
		return 1
	}
	if err := client.Reset(context.Background(), svc); err != nil {
		c.UI.Error("mariposa reset: " + err.Error())
		return 1
	}
	c.UI.Output(fmt.Sprintf("%s: restart history cleared; starting", svc))
	return 0
}
