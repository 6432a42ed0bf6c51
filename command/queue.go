package command

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/cluster"
)

// QueueCommand lists what the paused fleet holds back.
type QueueCommand struct {
	UI cli.Ui
}

func (c *QueueCommand) Synopsis() string { return "Lists what a paused fleet holds back" }

func (c *QueueCommand) Help() string {
	return strings.TrimSpace(`
Usage: mariposa queue [options]
       mariposa queue drop [options] ID

  While the fleet is paused (mariposa pause), each node lists what it
  holds back in mariposa/nodes/<node>/intents: restarts of children that
  exited, claims of free slots, reschedules of failed instances, updates
  to a new spec. queue prints them all, with the ID of each entry.

  queue drop ID drops a held restart: it does not happen at the resume,
  and the instance stays down, failed, until mariposa restart or reset.
  Claims, reschedules and updates are planned again at the resume, so
  they cannot be dropped. The drop and its audit record are one
  transaction.

Options:

  -json              Print the entries as a JSON array.

` + consulFlagsHelp + `
`)
}

func (c *QueueCommand) Run(args []string) int {
	var cf consulFlags
	var asJSON bool
	fs := flag.NewFlagSet("queue", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cf.register(fs)
	fs.BoolVar(&asJSON, "json", false, "")
	if err := fs.Parse(args); err != nil {
		c.UI.Error("mariposa queue: " + consulErrText(err) + "\n\n" + c.Help())
		return 1
	}
	if fs.NArg() > 0 {
		c.UI.Error("mariposa queue: unknown argument " + fs.Arg(0) + "\n\n" + c.Help())
		return 1
	}
	client, err := cf.client()
	if err != nil {
		c.UI.Error("mariposa queue: " + consulErrText(err))
		return 1
	}
	q, problems, err := cluster.ReadQueue(client)
	if err != nil {
		c.UI.Error("mariposa queue: " + consulErrText(err))
		return 1
	}
	for key, p := range problems {
		c.UI.Warn(fmt.Sprintf("Warning: %s cannot be read (%s); skipped", key, p))
	}
	if asJSON {
		if q == nil {
			q = []cluster.Intent{}
		}
		b, _ := json.MarshalIndent(q, "", "  ")
		c.UI.Output(string(b))
		return 0
	}
	if len(q) == 0 {
		c.UI.Output("The queue is empty.")
		return 0
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNODE\tACTION\tTARGET\tDETAIL\tSINCE")
	for _, in := range q {
		detail := in.Detail
		if in.Dropped != "" {
			detail = "dropped by " + in.Dropped
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", in.ID, in.Node, in.Kind, in.Target, detail, ago(in.Since, time.Now()))
	}
	_ = tw.Flush()
	c.UI.Output(strings.TrimRight(b.String(), "\n"))
	return 0
}

// QueueDropCommand is mariposa queue drop ID.
type QueueDropCommand struct {
	UI cli.Ui
}

func (c *QueueDropCommand) Synopsis() string { return "Drops a held restart from the queue" }

func (c *QueueDropCommand) Help() string { return (&QueueCommand{}).Help() }

func (c *QueueDropCommand) Run(args []string) int {
	var cf consulFlags
	fs := flag.NewFlagSet("queue drop", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cf.register(fs)
	if err := fs.Parse(args); err != nil {
		c.UI.Error("mariposa queue drop: " + consulErrText(err) + "\n\n" + c.Help())
		return 1
	}
	if fs.NArg() != 1 {
		c.UI.Error("mariposa queue drop: name one entry by its ID (mariposa queue lists them)\n\n" + c.Help())
		return 1
	}
	client, err := cf.client()
	if err != nil {
		c.UI.Error("mariposa queue drop: " + consulErrText(err))
		return 1
	}
	var in cluster.Intent
	err = retryNoLeader(func() (err error) { in, err = cluster.DropIntent(client, fs.Arg(0), actor()); return err })
	if err != nil {
		c.UI.Error("mariposa queue drop: " + consulErrText(err))
		return 1
	}
	c.UI.Output(fmt.Sprintf("Dropped %s: %s %s on %s (%s)", in.ID, in.Kind, in.Target, in.Node, in.Detail))
	return 0
}
