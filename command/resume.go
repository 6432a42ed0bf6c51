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

func (c *ResumeCommand) Synopsis() string { return "Resumes takeovers of lost slots after a storm" }

func (c *ResumeCommand) Help() string {
	return strings.TrimSpace(`
Usage: mariposa resume [options]

  Lifts the storm brake. When more than half of the fleet's supervisors
  vanish within a minute, the first node to see it pauses takeovers of the
  slots lost with them (control/storm in Consul, with an audit record);
  released and free slots are still placed, and nodes that come back
  claim their own slots again. Once the cause is understood, resume lets
  the other nodes take over what is still lost. The resume and its audit
  record are one transaction.

  With nothing paused, says so and exits 0.

Options:

` + consulFlagsHelp + `
`)
}

func (c *ResumeCommand) Run(args []string) int {
	var cf consulFlags
	fs := flag.NewFlagSet("resume", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cf.register(fs)
	if err := fs.Parse(args); err != nil {
		c.UI.Error("mariposa resume: " + err.Error() + "\n\n" + c.Help())
		return 1
	}
	if fs.NArg() > 0 {
		c.UI.Error("mariposa resume: takes no arguments\n\n" + c.Help())
		return 1
	}
	client, err := cf.client()
	if err != nil {
		c.UI.Error("mariposa resume: " + err.Error())
		return 1
	}
	r, err := cluster.Resume(client, actor())
	if err != nil {
		c.UI.Error("mariposa resume: " + err.Error())
		return 1
	}
	if r == nil {
		c.UI.Output("Nothing is paused.")
		return 0
	}
	if r.At.IsZero() {
		c.UI.Output("Resumed: removed a corrupt storm record; takeovers of lost slots go on.")
		return 0
	}
	c.UI.Output(fmt.Sprintf("Resumed: the storm brake engaged by %s at %s (%s) is lifted; takeovers of lost slots go on.",
		r.Node, r.At.UTC().Format(time.RFC3339), r.Reason()))
	return 0
}
