package command

import (
	"flag"
	"io"
	"strings"
	"time"

	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/cluster"
)

// WhyCommand explains where a unit's slots are and how the nodes rank.
type WhyCommand struct {
	UI cli.Ui
}

func (c *WhyCommand) Synopsis() string { return "Explains where a cluster unit runs and why" }

func (c *WhyCommand) Help() string {
	return strings.TrimSpace(`
Usage: mariposa why [options] UNIT

  Shows each slot of a deployed unit (a service with a count, or a group
  with one): which node holds it, or, for a free slot, how every live
  supervisor ranks for it, from what Consul says now: the feasibility
  verdict (which constraint failed, with its file:line:col), the score
  components (affinity, spread, anti-affinity, penalty, stickiness, load)
  and the rank. Each node computes the same ranking and claims in rank
  order; the Consul lock, not the ranking, makes a slot one node's.

Options:

` + consulFlagsHelp + `
`)
}

func (c *WhyCommand) Run(args []string) int {
	var cf consulFlags
	fs := flag.NewFlagSet("why", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cf.register(fs)
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
		msg := "mariposa why: name one UNIT"
		if err != nil {
			msg = "mariposa why: " + err.Error()
		}
		c.UI.Error(msg + "\n\n" + c.Help())
		return 1
	}
	client, err := cf.client()
	if err != nil {
		c.UI.Error("mariposa why: " + consulErrText(err))
		return 1
	}
	st, err := cluster.ReadState(client)
	if err != nil {
		c.UI.Error("mariposa why: " + consulErrText(err))
		return 1
	}
	out, err := st.Why(fs.Arg(0), time.Now())
	if err != nil {
		c.UI.Error("mariposa why: " + consulErrText(err))
		return 1
	}
	c.UI.Output(strings.TrimRight(out, "\n"))
	return 0
}
