package executor

import (
	"context"
	"sort"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/fleet/agent"
)

// blockWait is how long a blocking query waits at the server.
const blockWait = 5 * time.Minute

// unitWatch is a unit's three watches: its index (paced by the loop), its
// vacancy key and its deployment (DeployPrefix: record, statuses, tokens).
type unitWatch struct {
	index  *paced
	cancel context.CancelFunc
	// deployed: the deployment watch has answered; until then the index's
	// answer waits in early (a slot claimed before the record is known
	// would start at no version, then update in place).
	deployed bool
	early    *indexAns
}

// paced carries the loop's word on when a watch may ask next: after each
// answer the loop says when (its pace), and a Refresh or a vacancy says
// now. The latest word wins.
type paced struct{ next chan time.Time }

// ask is called by the loop only (the one sender).
func (p *paced) ask(at time.Time) {
	select {
	case <-p.next:
	default:
	}
	p.next <- at
}

// watchUnits starts the watches of units new in the list and stops those
// of units gone from it. Called from the loop.
func (e *Executor) watchUnits(units []agent.Unit) {
	want := map[string]bool{}
	for _, u := range units {
		want[u.Name] = true
		if e.units[u.Name] != nil {
			continue
		}
		ctx, cancel := context.WithCancel(e.ctx)
		w := &unitWatch{index: &paced{next: make(chan time.Time, 1)}, cancel: cancel}
		e.units[u.Name] = w
		go e.watchIndex(ctx, u.Name, w.index)
		go e.watchVacancy(ctx, u.Name)
		go e.watchDeploy(ctx, u.Name)
	}
	for name, w := range e.units {
		if !want[name] {
			w.cancel()
			delete(e.units, name)
		}
	}
}

// watchIndex follows the unit's index (key names only) and posts each new
// answer; it asks again when the loop says (p), and never sooner than
// watchEvery after its last answer.
func (e *Executor) watchIndex(ctx context.Context, unit string, p *paced) {
	var (
		idx      uint64
		last, at time.Time
		broken   bool // the last query failed
	)
	for {
		for {
			wait := time.Until(later(at, last.Add(watchEvery)))
			if wait <= 0 {
				break
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case at = <-p.next:
			case <-t.C:
			}
			t.Stop()
		}
		keys, meta, err := e.cfg.Client.KV().Keys(agent.IndexPrefix(unit), "", (&api.QueryOptions{WaitIndex: idx, WaitTime: blockWait}).WithContext(ctx))
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			e.log.Debug("watch of a unit's index failed", "unit", unit, "error", err)
			broken = true
			sleep(ctx, time.Second)
			continue
		}
		if broken {
			// Before the answer: it may follow skipped states.
			broken = false
			e.inbox.post(watchResumed{watch: "index " + unit})
		}
		got := advance(idx, meta.LastIndex)
		if got == idx && idx != 0 {
			// The wait ran out, nothing changed (at once: a server that
			// does not block; not in a loop).
			sleep(ctx, watchEvery-meta.RequestTime)
			continue
		}
		idx, last = got, time.Now()
		// What the loop said before this answer is older than it.
		select {
		case <-p.next:
		default:
		}
		e.inbox.post(indexAns{unit: unit, view: agent.IndexView(unit, meta.LastIndex, keys)})
		select {
		case <-ctx.Done():
			return
		case at = <-p.next:
		}
	}
}

// watchVacancy follows the unit's vacancy key: a release moves it, and the
// loop then has the index asked at once.
func (e *Executor) watchVacancy(ctx context.Context, unit string) {
	first := true
	e.watch(ctx, "vacancy "+unit, func(q *api.QueryOptions) (uint64, func(), error) {
		_, meta, err := e.cfg.Client.KV().Get(agent.VacancyKey(unit), q)
		if err != nil {
			return 0, nil, err
		}
		return meta.LastIndex, func() {
			if !first {
				e.inbox.post(vacancyMoved{unit: unit})
			}
			first = false
		}, nil
	})
}

// watchMembers follows the service's catalog entries: the fleet's nodes.
func (e *Executor) watchMembers() {
	e.watch(e.ctx, "members", func(q *api.QueryOptions) (uint64, func(), error) {
		ss, meta, err := e.cfg.Client.Catalog().Service(e.cfg.Service, "", q)
		if err != nil {
			return 0, nil, err
		}
		names := make([]string, 0, len(ss))
		for _, s := range ss {
			names = append(names, s.Node)
		}
		return meta.LastIndex, func() { e.inbox.post(membersAns{nodes: uniqueSorted(names)}) }, nil
	})
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
// answer, a second after an error. The first answer after an error is
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
