package command

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/cluster"
)

// PauseCommand freezes the fleet's automatic actions.
type PauseCommand struct {
	UI cli.Ui
}

func (c *PauseCommand) Synopsis() string { return "Freezes the fleet's automatic actions" }

func (c *PauseCommand) Help() string {
	return strings.TrimSpace(`
Usage: mariposa pause [options] -reason TEXT

  Freezes automatic actions across the fleet within about a second: every
  node follows mariposa/control/ with one blocking query, and so does a
  mariposa run without -cluster (its restarts wait under scope all). What a node
  holds back is listed by mariposa queue, and happens at mariposa resume.

  Scopes:

    placement   no claims of free slots and no reschedules of failed
                instances
    deploy      no instance moves to a new spec (in-flight updates
                finish the instance they replace), and no auto_revert
    all         both, and no automatic restarts: a child that exits
                stays down, and its supervisor check says "paused: would
                restart after exit 1 (...)"; a failing health check does
                not restart it

  Never paused: stopping a child whose slot or leadership can no longer
  be confirmed, a graceful shutdown, scale-downs and removals a deploy
  asks for, and operator commands (mariposa restart, reset).

  The pause and its audit record are one transaction. A second pause of
  the same target replaces the first.

Options:

  -group=UNIT        Pause only UNIT (a service or group with count, or a
                     node's own service by name). Default: the fleet.
  -reason=TEXT       Why (required): every held instance and the queue
                     show it.
  -scope=SCOPE       all, placement or deploy (default all).

` + consulFlagsHelp + `
`)
}

func (c *PauseCommand) Run(args []string) int {
	var cf consulFlags
	var group, scope, reason string
	fs := flag.NewFlagSet("pause", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cf.register(fs)
	fs.StringVar(&group, "group", "", "")
	fs.StringVar(&scope, "scope", cluster.PauseAll, "")
	fs.StringVar(&reason, "reason", "", "")
	if err := fs.Parse(args); err != nil {
		c.UI.Error("mariposa pause: " + consulErrText(err) + "\n\n" + c.Help())
		return 1
	}
	if fs.NArg() > 0 {
		c.UI.Error("mariposa pause: takes no arguments (the unit goes in -group)\n\n" + c.Help())
		return 1
	}
	client, err := cf.client()
	if err != nil {
		c.UI.Error("mariposa pause: " + consulErrText(err))
		return 1
	}
	var r cluster.PauseRecord
	err = retryNoLeader(func() (err error) { r, err = cluster.Pause(client, group, scope, reason, actor()); return err })
	if err != nil {
		c.UI.Error("mariposa pause: " + consulErrText(err))
		return 1
	}
	target := "The fleet"
	if group != "" {
		target = group
	}
	c.UI.Output(fmt.Sprintf("%s is paused (scope %s): %s. mariposa queue lists what is held back; mariposa resume lifts it.",
		target, r.Scope, r.Reason))
	return 0
}
