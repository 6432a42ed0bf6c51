package command

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/cluster"
)

// DrainCommand moves a node's slots away.
type DrainCommand struct {
	UI cli.Ui
}

func (c *DrainCommand) Synopsis() string { return "Moves a node's slots to other nodes" }

func (c *DrainCommand) Help() string {
	return strings.TrimSpace(`
Usage: mariposa drain [options] NODE

  Moves the slots NODE holds to other nodes, one at a time, and keeps NODE
  out of placement until -undo. A non-exclusive slot is released while its
  instance keeps running; another node claims it and starts its own, and
  the old instance stops once the new one passes its checks: the service
  stays at its count the whole time (one more during each handoff). An
  exclusive slot cannot run twice: its instance stops, the slot is
  released, and the next slot moves once the new holder's instance
  passes. Past the deadline, whatever is left is given up at once.

  The drain is mariposa/control/drain/<node>, written with its audit
  record; every node follows it with the watch it already holds.

Options:

  -deadline=DURATION   Give up what is left after this long (default 5m).
  -undo                Let NODE take slots again.
  -wait                Wait until NODE holds no slot (exit 0), printing
                       each slot as it leaves.

` + consulFlagsHelp + `
`)
}

func (c *DrainCommand) Run(args []string) int {
	var cf consulFlags
	var undo, wait bool
	var deadline time.Duration
	fs := flag.NewFlagSet("drain", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cf.register(fs)
	fs.BoolVar(&undo, "undo", false, "")
	fs.BoolVar(&wait, "wait", false, "")
	fs.DurationVar(&deadline, "deadline", 5*time.Minute, "")
	if err := fs.Parse(args); err != nil {
		c.UI.Error("mariposa drain: " + err.Error() + "\n\n" + c.Help())
		return 1
	}
	if fs.NArg() != 1 {
		c.UI.Error("mariposa drain: name one node\n\n" + c.Help())
		return 1
	}
	node := fs.Arg(0)
	client, err := cf.client()
	if err != nil {
		c.UI.Error("mariposa drain: " + err.Error())
		return 1
	}
	if undo {
		var was bool
		err = retryNoLeader(func() (err error) { was, err = cluster.UndoDrain(client, node, actor()); return err })
		switch {
		case err != nil:
			c.UI.Error("mariposa drain: " + err.Error())
			return 1
		case !was:
			c.UI.Output(fmt.Sprintf("Node %s is not draining.", node))
		default:
			c.UI.Output(fmt.Sprintf("Node %s takes slots again.", node))
		}
		return 0
	}
	held, _, err := cluster.HeldBy(client, node, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		c.UI.Error("mariposa drain: " + err.Error())
		return 1
	}
	var r cluster.DrainRecord
	err = retryNoLeader(func() (err error) { r, err = cluster.StartDrain(client, node, deadline, actor()); return err })
	if err != nil {
		c.UI.Error("mariposa drain: " + err.Error())
		return 1
	}
	c.UI.Output(fmt.Sprintf("Node %s is draining %s (deadline %s).", node, nSlots(len(held)), r.Deadline.Format(time.RFC3339)))
	if !wait {
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var index uint64
	for {
		now, next, err := cluster.HeldBy(client, node, (&api.QueryOptions{WaitIndex: index, WaitTime: 30 * time.Second}).WithContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				c.UI.Error("mariposa drain: stopped waiting; the drain goes on")
				return 1
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for _, id := range held {
			if !slices.Contains(now, id) {
				c.UI.Output("  " + id + " moved")
			}
		}
		held = now
		if len(held) == 0 {
			c.UI.Output(fmt.Sprintf("Node %s holds no slot.", node))
			return 0
		}
		if next < index {
			next = 0
		}
		index = next
	}
}

func nSlots(n int) string {
	if n == 1 {
		return "1 slot"
	}
	return fmt.Sprintf("%d slots", n)
}
