package command

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/cluster"
)

// ResumeCommand lifts the storm brake.
type ResumeCommand struct {
	UI cli.Ui
}

func (c *ResumeCommand) Synopsis() string {
	return "Resumes what mariposa pause or the storm brake paused"
}

func (c *ResumeCommand) Help() string {
	return strings.TrimSpace(`
Usage: mariposa resume [options]

  Lifts the pauses of the fleet (mariposa pause) and the storm brake. What
  was held back happens now: held restarts restart, free slots are
  claimed, failed instances are rescheduled, rollouts go on. Entries
  dropped from the queue (mariposa queue drop) stay dropped.

  The storm brake: when more than half of the fleet's supervisors vanish
  within a minute, the first node to see it pauses takeovers of the slots
  lost with them (control/storm in Consul, with an audit record);
  released and free slots are still placed, and nodes that come back
  claim their own slots again. Once the cause is understood, resume lets
  the other nodes take over what is still lost.

  Each key is deleted by check-and-set, with its audit record, in one
  transaction. With nothing paused, says so and exits 0.

Options:

  -group=UNIT        Lift only the pause of UNIT (mariposa pause -group);
                     the fleet-wide pause and the storm brake stay.

` + consulFlagsHelp + `
`)
}

func (c *ResumeCommand) Run(args []string) int {
	var cf consulFlags
	var group string
	fs := flag.NewFlagSet("resume", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cf.register(fs)
	fs.StringVar(&group, "group", "", "")
	if err := fs.Parse(args); err != nil {
		c.UI.Error("mariposa resume: " + consulErrText(err) + "\n\n" + c.Help())
		return 1
	}
	if fs.NArg() > 0 {
		c.UI.Error("mariposa resume: takes no arguments\n\n" + c.Help())
		return 1
	}
	client, err := cf.client()
	if err != nil {
		c.UI.Error("mariposa resume: " + consulErrText(err))
		return 1
	}
	var l cluster.Lifted
	err = retryNoLeader(func() (err error) { l, err = cluster.ResumeAll(client, group, actor()); return err })
	if err != nil {
		c.UI.Error("mariposa resume: " + consulErrText(err))
		return 1
	}
	if len(l.Pauses) == 0 && l.Storm == nil {
		c.UI.Output("Nothing is paused.")
		return 0
	}
	for _, p := range l.Pauses {
		target := "the fleet"
		if p.Unit != "" {
			target = p.Unit
		}
		c.UI.Output(fmt.Sprintf("Resumed %s: the pause (scope %s) %s is lifted.", target, p.Scope, p.Why()))
	}
	if r := l.Storm; r != nil && r.At.IsZero() {
		c.UI.Output("Resumed: removed a corrupt storm record; takeovers of lost slots go on.")
	} else if r != nil {
		c.UI.Output(fmt.Sprintf("Resumed: the storm brake engaged by %s at %s (%s) is lifted; takeovers of lost slots go on.",
			r.Node, r.At.UTC().Format(time.RFC3339), r.Reason()))
	}
	return 0
}
