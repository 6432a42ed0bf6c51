package command

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
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

  A slot no other node can take (every other node down, draining, or
  failing the unit's constraints) is not given up: it stays on NODE,
  running, and the drain says so; it moves once a node can take it. At the
  deadline it stays, unless -force gives it up (the service then runs
  below its count).

  The drain is mariposa/control/drain/<node>, written with its audit
  record; every node follows it with the watch it already holds.

Options:

  -deadline=DURATION   Give up what is left after this long (default 5m).
  -force               At the deadline, give up the slots no other node
                       can take too.
  -undo                Let NODE take slots again.
  -wait                Wait until NODE holds no slot (exit 0), printing
                       each slot as it moves; exit 1 at the deadline if
                       NODE still holds slots.

` + consulFlagsHelp + `
`)
}

func (c *DrainCommand) Run(args []string) int {
	var cf consulFlags
	var undo, wait, force bool
	var deadline time.Duration
	fs := flag.NewFlagSet("drain", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cf.register(fs)
	fs.BoolVar(&undo, "undo", false, "")
	fs.BoolVar(&wait, "wait", false, "")
	fs.BoolVar(&force, "force", false, "")
	fs.DurationVar(&deadline, "deadline", 5*time.Minute, "")
	if err := fs.Parse(args); err != nil {
		c.UI.Error("mariposa drain: " + consulErrText(err) + "\n\n" + c.Help())
		return 1
	}
	if fs.NArg() != 1 {
		c.UI.Error("mariposa drain: name one node\n\n" + c.Help())
		return 1
	}
	node := fs.Arg(0)
	client, err := cf.client()
	if err != nil {
		c.UI.Error("mariposa drain: " + consulErrText(err))
		return 1
	}
	if undo {
		var was bool
		err = retryNoLeader(func() (err error) { was, err = cluster.UndoDrain(client, node, actor()); return err })
		switch {
		case err != nil:
			c.UI.Error("mariposa drain: " + consulErrText(err))
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
		c.UI.Error("mariposa drain: " + consulErrText(err))
		return 1
	}
	var r cluster.DrainRecord
	err = retryNoLeader(func() (err error) { r, err = cluster.StartDrain(client, node, deadline, force, actor()); return err })
	if err != nil {
		c.UI.Error("mariposa drain: " + consulErrText(err))
		return 1
	}
	c.UI.Output(fmt.Sprintf("Node %s is draining %s (deadline %s).", node, nSlots(len(held)), r.Deadline.Format(time.RFC3339)))
	told := map[string]bool{}
	stuck := func() map[string]string {
		st, err := cluster.ReadState(client)
		if err != nil {
			return nil
		}
		out := st.Stuck(node, time.Now())
		for _, id := range slices.Sorted(maps.Keys(out)) {
			if !told[id] {
				told[id] = true
				c.UI.Warn(fmt.Sprintf("  %s cannot move: no other node can take it (%s); its instance keeps running on %s", id, out[id], node))
			}
		}
		return out
	}
	left := stuck()
	if !wait {
		if len(left) > 0 {
			c.UI.Warn(stuckNote(force))
		}
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var index uint64
	departed := map[string]bool{} // left NODE, not yet held elsewhere
	for {
		until := time.Until(r.Deadline) + time.Second
		now, next, err := cluster.HeldBy(client, node, (&api.QueryOptions{WaitIndex: index, WaitTime: min(30*time.Second, max(until, time.Second))}).WithContext(ctx))
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
				departed[id] = true
			}
		}
		held = now
		if len(departed) > 0 {
			if st, err := cluster.ReadState(client); err == nil {
				for _, id := range slices.Sorted(maps.Keys(departed)) {
					if to := holderOf(st, id); to != "" && to != node {
						c.UI.Output("  " + id + " moved to " + to)
						delete(departed, id)
					}
				}
			}
		}
		left = stuck()
		if len(held) == 0 && len(departed) == 0 {
			c.UI.Output(fmt.Sprintf("Node %s holds no slot.", node))
			return 0
		}
		if time.Now().After(r.Deadline) {
			allStuck := true
			for _, id := range held {
				if _, ok := left[id]; !ok {
					allStuck = false
				}
			}
			switch {
			case len(held) > 0 && ((allStuck && !force) || until < -30*time.Second):
				c.UI.Error(fmt.Sprintf("mariposa drain: past the deadline, node %s still holds %s: no other node can take them; their instances keep running there (mariposa drain -force gives them up)",
					node, strings.Join(held, ", ")))
				return 1
			case len(held) == 0 && until < -10*time.Second:
				c.UI.Error(fmt.Sprintf("mariposa drain: %s left node %s and no other node holds them: their units run below their count",
					strings.Join(slices.Sorted(maps.Keys(departed)), ", "), node))
				return 1
			}
		}
		if next < index {
			next = 0
		}
		index = next
	}
}

// stuckNote says what becomes of the slots that cannot move.
func stuckNote(force bool) string {
	if force {
		return "They move when a node can take them; at the deadline they are given up (-force), and their units run below their count."
	}
	return "They move when a node can take them; at the deadline they stay here, running (-force gives them up)."
}

// holderOf is the node holding slot id ("unit/k") in st, "" when free.
func holderOf(st *cluster.State, id string) string {
	i := strings.LastIndexByte(id, '/')
	if i < 0 {
		return ""
	}
	k, err := strconv.Atoi(id[i+1:])
	if err != nil {
		return ""
	}
	s, ok := st.Slots[id[:i]][k]
	if !ok || s.Session == "" {
		return ""
	}
	return s.Value.Node
}

func nSlots(n int) string {
	if n == 1 {
		return "1 slot"
	}
	return fmt.Sprintf("%d slots", n)
}
