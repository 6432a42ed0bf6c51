package cluster

import (
	"context"
	"encoding/json"
	"reflect"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/supervisor"
)

// PauseTarget is what FollowPauses acts on: the node's supervisor.
type PauseTarget interface {
	SetPause(supervisor.PauseFunc)
	Snapshots() []supervisor.Snapshot
}

// FollowPauses makes a mariposa that runs without -cluster follow the
// fleet's pauses as a fleet node does (mariposa pause -scope all, of the
// whole fleet or -group of one of its services): its automatic restarts
// wait for the resume, and what it holds back is in its queue
// (nodes/<node>/intents), where mariposa queue drop finds it. Pauses of
// scope placement or deploy hold nothing here: such a node claims no slot
// and takes no deploy. It returns when ctx ends.
func FollowPauses(ctx context.Context, client *api.Client, node string, r PauseTarget, log hclog.Logger) {
	var (
		index    uint64
		failures int
		pauses   map[string]PauseRecord
		drops    map[string]Drop
		first    = true
		written  []byte
		since    = map[string]time.Time{}
		reported = map[string]bool{}
	)
	report := func(key, msg string, err error) {
		if !reported[key] {
			reported[key] = true
			log.Warn(msg, "key", key, "error", err)
		}
	}
	for ctx.Err() == nil {
		// While paused, the queue is refreshed every second: a child held
		// back after an exit shows there without a change under control/.
		wait := 5 * time.Minute
		if len(pauses) > 0 || written != nil {
			wait = time.Second
		}
		pairs, meta, err := client.KV().List(ControlPrefix, (&api.QueryOptions{WaitIndex: index, WaitTime: wait}).WithContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			if failures == 1 || failures%20 == 0 {
				log.Warn("cannot read the fleet's pauses from Consul; retrying", "error", err)
			}
			select {
			case <-time.After(min(100*time.Millisecond<<min(failures, 6), 5*time.Second)):
			case <-ctx.Done():
			}
			index = 0
			continue
		}
		failures = 0
		if meta.LastIndex < index {
			index = 0
		} else {
			index = meta.LastIndex
		}
		p, d := parsePauses(pairs, report)
		if first || !reflect.DeepEqual(p, pauses) || !reflect.DeepEqual(d, drops) {
			first = false
			pauses, drops = p, d
			r.SetPause(pauseFuncOf(pauses, drops, node))
		}
		if len(pauses) == 0 && written == nil {
			continue
		}
		list := localIntents(node, r.Snapshots(), drops, since, time.Now())
		b, _ := json.Marshal(list)
		if len(list) == 0 {
			b = nil
		}
		if string(b) == string(written) {
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if b == nil {
			_, err = client.KV().Delete(IntentsKey(node), (&api.WriteOptions{}).WithContext(wctx))
		} else {
			_, err = client.KV().Put(&api.KVPair{Key: IntentsKey(node), Value: b}, (&api.WriteOptions{}).WithContext(wctx))
		}
		cancel()
		if err != nil {
			log.Warn("could not publish the node's queue", "error", err)
			continue
		}
		written = b
	}
}

// localIntents lists the restarts a node outside the fleet holds back;
// since keeps each one's first sighting (updated in place).
func localIntents(node string, snaps []supervisor.Snapshot, drops map[string]Drop, since map[string]time.Time, now time.Time) []Intent {
	var out []Intent
	seen := map[string]bool{}
	for _, sn := range snaps {
		if sn.Held == "" {
			continue
		}
		// An instance in a slot (a fleet node, which follows the pauses
		// this way) is named "<service>@<unit>/<k>", so that pauseFuncOf
		// finds its drop.
		target := sn.Service
		if sn.Slot != "" {
			target = sn.Service + "@" + sn.Slot
		}
		in := Intent{Node: node, Kind: "restart", Target: target, Detail: sn.Held}
		in.ID = intentID(node, in.Kind, in.Target)
		if _, ok := since[in.ID]; !ok {
			since[in.ID] = now
		}
		in.Since = since[in.ID]
		if d, ok := drops[in.ID]; ok {
			in.Dropped = d.By
		}
		seen[in.ID] = true
		out = append(out, in)
	}
	for id := range since {
		if !seen[id] {
			delete(since, id)
		}
	}
	return out
}
