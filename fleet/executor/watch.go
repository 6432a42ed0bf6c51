package executor

import (
	"context"
	"sort"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/agenterr"
)

// blockWait is how long a blocking query waits at the server.
const blockWait = 5 * time.Minute

// unitWatch is the loop's side of a unit's watches (pool.go: they are its
// bucket's): when its index may be asked, and whether its deployment was
// heard.
type unitWatch struct {
	unit  string
	index *bucketPace
	// deployed: the deployment watch has answered; until then the index's
	// answer waits in early (a slot claimed before the record is known
	// would start at no version, then update in place).
	deployed bool
	early    *indexAns
	// prevWait: a Sticky unit's previous holders are being read
	// (place.go); its index's answer waits in early as well.
	prevWait bool
}

// ask: the unit's index may be asked at at (the loop's word; the latest
// wins).
func (w *unitWatch) ask(at time.Time) { w.index.set(w.unit, at) }

// watchMembers follows the service's catalog entries: the fleet's nodes.
func (e *Executor) watchMembers() {
	answered := false
	e.watch(e.ctx, "members", func(q *api.QueryOptions) (uint64, func(), error) {
		ss, meta, err := e.cfg.Client.Catalog().Service(e.cfg.Service, "", q)
		if err != nil {
			return 0, nil, err
		}
		ans := membersOf(ss, meta.LastIndex)
		if e.cfg.Faults.MembersStale && answered {
			return meta.LastIndex, func() {}, nil
		}
		answered = true
		return meta.LastIndex, func() { e.inbox.post(ans) }, nil
	})
}

// membersOf is a members answer from the catalog's entries of the
// service at index.
func membersOf(ss []*api.CatalogService, index uint64) membersAns {
	names := make([]string, 0, len(ss))
	for _, s := range ss {
		names = append(names, s.Node)
	}
	return membersAns{nodes: uniqueSorted(names), info: nodeInfos(ss), index: index}
}

// failingFilter has Consul answer only the instances not passing: a
// steady fleet's answer is empty.
const failingFilter = `"critical" in Checks.Status or "warning" in Checks.Status`

// watchFailing follows the health of the service's instances that are not
// passing (their node's checks or their own).
func (e *Executor) watchFailing() {
	e.watch(e.ctx, "failing", func(q *api.QueryOptions) (uint64, func(), error) {
		q.Filter = failingFilter
		es, meta, err := e.cfg.Client.Health().Service(e.cfg.Service, "", false, q)
		if err != nil {
			return 0, nil, err
		}
		names := make([]string, 0, len(es))
		for _, se := range es {
			if se.Node != nil {
				names = append(names, se.Node.Node)
			}
		}
		return meta.LastIndex, func() { e.inbox.post(failingAns{nodes: uniqueSorted(names)}) }, nil
	})
}

// watch runs a blocking query until ctx ends: query is called with the
// last index and returns the new one and what posts its answer, which
// runs when the index moved (the first answer included). It asks again
// at once when the wait ran out, no sooner than watchEvery after an
// answer, a second after an error (agenterr.RetryLocal after the local
// agent's own). The first answer after an error is
// preceded by watchResumed (agent.WatchResumed).
func (e *Executor) watch(ctx context.Context, name string, query func(q *api.QueryOptions) (uint64, func(), error)) {
	var idx uint64
	broken := false // the last query failed
	for ctx.Err() == nil {
		start := time.Now()
		got, post, err := query((&api.QueryOptions{WaitIndex: idx, WaitTime: blockWait}).WithContext(ctx))
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			e.log.Debug("watch failed", "watch", name, "error", err)
			broken = true
			if agenterr.Local(err) {
				// The local agent's own refusal (starting, not joined):
				// free for the servers, and the view must catch up at once.
				sleep(ctx, agenterr.RetryLocal)
				continue
			}
			sleep(ctx, time.Second)
			continue
		}
		if broken {
			// Before the answer: it may follow skipped states.
			broken = false
			e.inbox.post(watchResumed{watch: name})
		}
		got = advance(idx, got)
		if got == idx && idx != 0 {
			sleep(ctx, watchEvery-time.Since(start))
			continue
		}
		idx = got
		post()
		sleep(ctx, watchEvery-time.Since(start))
	}
}

func uniqueSorted(s []string) []string {
	sort.Strings(s)
	out := make([]string, 0, len(s))
	for _, v := range s {
		if len(out) == 0 || v != out[len(out)-1] {
			out = append(out, v)
		}
	}
	return out
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
