package command

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/internal/control"
)

// LogsCommand prints a service's recent output from a node's mariposa.
type LogsCommand struct {
	UI cli.Ui
	// Context, when set, ends -f instead of SIGINT/SIGTERM (tests).
	Context context.Context
}

func (c *LogsCommand) Synopsis() string { return "Prints a service's recent output" }

func (c *LogsCommand) Help() string {
	return strings.TrimSpace(`
Usage: mariposa logs [options] SERVICE

  Prints the last lines SERVICE's process wrote, kept in memory by the
  "mariposa run" of this node and read through its control socket, or
  with -node by NODE's, read through its HTTP API. Lines from stderr
  start with "[stderr] ". With -f, keeps printing new lines until
  interrupted; when the reader falls behind, lines are dropped and the
  count is printed on standard error.
` + serviceArgHelp + `

Options:

  -n=100                How many of the last lines to print (0: none).
  -f                    Follow: print new lines as they come.
  -timestamps           Start each line with the time mariposa read it.
` + controlSocketHelp + `
` + strings.ReplaceAll(nodeFlagHelp, "PERM", "service:read") + `

` + consulFlagsHelp + `
`)
}

func (c *LogsCommand) Run(args []string) int {
	var n int
	var follow, stamps bool
	fs := flag.NewFlagSet("logs", flag.ContinueOnError)
	fs.IntVar(&n, "n", control.DefaultLines, "")
	fs.BoolVar(&follow, "f", false, "")
	fs.BoolVar(&stamps, "timestamps", false, "")
	o, svc, ok := controlArgs(c.UI, "logs", c.Help(), fs, args)
	if !ok {
		return 1
	}
	if n < 0 {
		c.UI.Error(fmt.Sprintf("mariposa logs: -n must be 0 or more, got %d", n))
		return 1
	}
	ctx := c.Context
	if ctx == nil {
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
	}
	// Finding NODE's API is bounded; so is reading its lines, unless they
	// are followed.
	lookup, cancel := context.WithTimeout(ctx, remoteTimeout)
	client, err := o.client(lookup)
	cancel()
	if err != nil {
		c.UI.Error("mariposa logs: " + o.errText(err, svc))
		return 1
	}
	if !follow && o.node != "" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, remoteTimeout)
		defer cancel()
	}
	err = client.Logs(ctx, svc, control.LogsOptions{N: n, Follow: follow}, func(e control.LogEntry) error {
		if e.Dropped > 0 {
			c.UI.Error(fmt.Sprintf("-- %d lines dropped: this reader fell behind --", e.Dropped))
		}
		if e.Stream == "" {
			return nil
		}
		c.UI.Output(formatLogLine(e, stamps))
		return nil
	})
	if err != nil {
		c.UI.Error("mariposa logs: " + o.errText(err, svc))
		return 1
	}
	if follow && ctx.Err() == nil {
		who := "mariposa"
		if o.node != "" {
			who = "node " + o.node + "'s mariposa"
		}
		c.UI.Error(fmt.Sprintf("mariposa logs: the stream ended: %s stopped or %s was removed", who, svc))
	}
	return 0
}

func formatLogLine(e control.LogEntry, stamps bool) string {
	var b strings.Builder
	if stamps {
		b.WriteString(e.Time.Local().Format(time.RFC3339Nano))
		b.WriteByte(' ')
	}
	if e.Stream == "stderr" {
		b.WriteString("[stderr] ")
	}
	b.WriteString(e.Text)
	return b.String()
}
