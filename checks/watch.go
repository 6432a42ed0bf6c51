package checks

import (
	"context"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
)

// CatalogCheck is one check as the catalog reports it.
type CatalogCheck struct {
	CheckID     string
	Name        string
	Status      string
	Output      string
	ModifyIndex uint64
}

// NodeHealth is every check of this node's services, by service ID.
type NodeHealth struct {
	Index    uint64
	Services map[string][]CatalogCheck
	// Reset: this view follows a gap (failed queries, or an index that went
	// backwards: the agent or servers restarted), so earlier views say
	// nothing about how checks got to their current status.
	Reset bool
}

// Watcher follows the health of every service on one node with a single
// blocking query, however many services and checks there are.
type Watcher struct {
	Client *api.Client
	Node   string
	Log    hclog.Logger
	// OnChange gets each result that differs from the last one.
	OnChange func(NodeHealth)
	// OnReconnect runs when a query succeeds after one or more failures
	// (the agent may have restarted and lost registrations).
	OnReconnect func()
	// WaitTime bounds each blocking query; default 5m.
	WaitTime time.Duration
}

// Run watches until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	var index uint64
	var last map[string][]CatalogCheck
	failures := 0
	wait := w.WaitTime
	if wait == 0 {
		wait = 5 * time.Minute
	}
	for ctx.Err() == nil {
		q := (&api.QueryOptions{WaitIndex: index, WaitTime: wait}).WithContext(ctx)
		hcs, meta, err := w.Client.Health().Node(w.Node, q)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			// After a failure the agent may have restarted with a lower raft
			// index; a query at the old index would block for its whole
			// wait. Start over with one that answers at once.
			index = 0
			if failures == 1 || failures%60 == 0 {
				w.Log.Warn("health query failed; retrying", "error", err)
			}
			// Capped at 500ms so a returning agent is noticed quickly.
			d := min(25*time.Millisecond<<min(failures, 5), 500*time.Millisecond)
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
			continue
		}
		reset := failures > 0
		if failures > 0 && w.OnReconnect != nil {
			w.OnReconnect()
		}
		failures = 0
		// An index that goes backwards (a restarted dev agent) starts over.
		if meta.LastIndex < index {
			index, reset = 0, true
		} else {
			index = meta.LastIndex
		}
		cur := map[string][]CatalogCheck{}
		for _, hc := range hcs {
			if hc.ServiceID == "" {
				continue
			}
			cur[hc.ServiceID] = append(cur[hc.ServiceID], CatalogCheck{
				CheckID: hc.CheckID, Name: hc.Name, Status: hc.Status, Output: hc.Output, ModifyIndex: hc.ModifyIndex,
			})
		}
		if reset || !sameHealth(last, cur) {
			last = cur
			w.OnChange(NodeHealth{Index: index, Services: cur, Reset: reset})
		}
	}
}

func sameHealth(a, b map[string][]CatalogCheck) bool {
	if a == nil || len(a) != len(b) {
		return false
	}
	for id, as := range a {
		bs, ok := b[id]
		if !ok || len(as) != len(bs) {
			return false
		}
		for i := range as {
			if as[i] != bs[i] {
				return false
			}
		}
	}
	return true
}
