package executor

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
)

// The connection budget. Consul allows a client address
// limits.http_max_conns_per_client (200) connections at once, and a
// blocking query holds one for as long as it waits; each request of a
// non-pooled client is a connection of its own. So the executor bounds
// both:
//
//   - Its units' watches are grouped in at most Config.Buckets buckets
//     (DefaultBuckets): the units, sorted by name, cut in runs of
//     neighbours, each run watched through the longest prefix its names
//     share (with up to Buckets units, each unit is its own bucket and
//     its exact prefix: what a unit's watches were before). A bucket holds
//     three blocking queries: the units' index (?keys under
//     IndexPrefix's parent and the run's prefix), their vacancy keys and
//     their deployments. An answer is split per unit, and a unit hears
//     only what changed for it (its key names, its vacancy key's index,
//     its deployment keys' indexes): a bucket's answer is one consistent
//     read at its index, so a unit's view at the bucket's index is its
//     state then. The index is asked at the earliest pace the loop gives
//     any of the bucket's units (agent.IdlePace for an idle one).
//   - Its other requests (claims, releases, transactions, session calls,
//     the queue) wait for one of Config.MaxRequests (DefaultMaxRequests)
//     places: a burst of a hundred claims is sixteen connections at a
//     time, not a hundred. Confirmations are not held back (the watchdog
//     waits for them; at most maxInflight at once, each a transaction per
//     128 slots), nor the session's renewal and watch.
//
// A node then holds at most 3 x Buckets + MaxRequests + 5 connections
// (members, failing, control/, the session's watch and renewal) and the
// confirmations: 3 x 16 + 16 + 5 + 3 = 72 with the defaults, whatever its
// number of units. The price: a unit sharing a bucket hears the other
// units' answers' bytes (a bucket's answer carries all its units' keys):
// with U units in B buckets, an answer is about U/B units' worth instead
// of one, and only while more than B units run on the node.

// Defaults of the connection budget.
const (
	DefaultBuckets     = 16
	DefaultMaxRequests = 16
)

// bucket watches the index, vacancy keys and deployments of some units.
type bucket struct {
	units  []string // sorted
	prefix string   // their names' common prefix; exact when one unit
	cancel context.CancelFunc
	ask    *bucketPace
}

// bucketPace carries the loop's word on when each unit's index may be
// asked; the bucket asks at the earliest.
type bucketPace struct {
	mu   sync.Mutex
	want map[string]time.Time // unit -> not before; zero: waiting for the loop
	pace map[string]time.Duration
	wake chan struct{}
}

func newBucketPace(units []string) *bucketPace {
	p := &bucketPace{want: map[string]time.Time{}, pace: map[string]time.Duration{}, wake: make(chan struct{}, 1)}
	for _, u := range units {
		p.pace[u] = agent.IdlePace
	}
	return p
}

// set is called by the loop: unit's index may be asked at at.
func (p *bucketPace) set(unit string, at time.Time) {
	p.mu.Lock()
	p.want[unit] = at
	if d := time.Until(at); d > 0 {
		p.pace[unit] = d
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// next is the earliest time a unit wants its index asked (ok false: none
// has said).
func (p *bucketPace) next() (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var at time.Time
	ok := false
	for _, t := range p.want {
		if !t.IsZero() && (!ok || t.Before(at)) {
			at, ok = t, true
		}
	}
	return at, ok
}

// answered: an answer was asked; the units it is posted for wait for the
// loop's word, the others ask again at their last pace.
func (p *bucketPace) answered(posted map[string]bool, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for u := range p.pace {
		if posted[u] {
			p.want[u] = time.Time{}
		} else {
			p.want[u] = now.Add(p.pace[u])
		}
	}
	select {
	case <-p.wake:
	default:
	}
}

// buckets cuts units (sorted) into at most n runs of neighbours.
func buckets(units []string, n int) [][]string {
	if n <= 0 {
		n = DefaultBuckets
	}
	if len(units) <= n {
		out := make([][]string, len(units))
		for i, u := range units {
			out[i] = []string{u}
		}
		return out
	}
	out := make([][]string, 0, n)
	for i := range n {
		lo, hi := i*len(units)/n, (i+1)*len(units)/n
		if hi > lo {
			out = append(out, units[lo:hi])
		}
	}
	return out
}

// commonPrefix of sorted names: the first's and the last's.
func commonPrefix(names []string) string {
	a, b := names[0], names[len(names)-1]
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return a[:i]
}

// under is the query prefix of a bucket below root ("mariposa/held/"):
// a unit's own prefix when alone, else the names' common prefix.
func (b *bucket) under(root string) string {
	if len(b.units) == 1 {
		return root + b.units[0] + "/"
	}
	return root + b.prefix
}

// watchUnits starts the watches of the units' buckets when the set of
// names changed (a count's change keeps them; so does a bucket whose units
// are the same), and stops the old ones. Called from the loop.
func (e *Executor) watchUnits(units []agent.Unit) {
	names := make([]string, 0, len(units))
	for _, u := range units {
		names = append(names, u.Name)
	}
	sort.Strings(names)
	names = slices.Compact(names)
	if slices.Equal(names, e.unitNames) && e.buckets != nil {
		return
	}
	e.unitNames = names
	// A bucket whose units are the same goes on; the others stop.
	kept := map[string]*bucket{}
	for _, b := range e.buckets {
		kept[strings.Join(b.units, "\x00")] = b
	}
	e.buckets = nil
	old := e.units
	e.units = map[string]*unitWatch{}
	for _, run := range buckets(names, e.cfg.Buckets) {
		if b := kept[strings.Join(run, "\x00")]; b != nil {
			delete(kept, strings.Join(run, "\x00"))
			e.buckets = append(e.buckets, b)
			for _, u := range run {
				e.units[u] = old[u]
			}
			continue
		}
		ctx, cancel := context.WithCancel(e.ctx)
		b := &bucket{units: run, prefix: commonPrefix(run), cancel: cancel, ask: newBucketPace(run)}
		e.buckets = append(e.buckets, b)
		for _, u := range run {
			w := &unitWatch{index: b.ask, unit: u}
			if o := old[u]; o != nil {
				// Its deployment was heard: the index need not wait.
				w.deployed = o.deployed
			}
			e.units[u] = w
		}
		go e.watchBucketIndex(ctx, b)
		go e.watchBucketVacancy(ctx, b)
		go e.watchBucketDeploy(ctx, b)
	}
	for _, b := range kept {
		b.cancel()
	}
}

// watchBucketIndex follows the bucket's units' index (key names only)
// and posts each unit's new answer when its names changed (every unit at
// the first answer); it asks when the loop says for one of them, never
// sooner than watchEvery after its last answer.
func (e *Executor) watchBucketIndex(ctx context.Context, b *bucket) {
	var (
		idx    uint64
		last   time.Time
		broken bool
		seen   = map[string][]string{}
		heard  = map[string]bool{}
	)
	prefix := b.under("mariposa/held/")
	for {
		for {
			at, ok := b.ask.next()
			if idx == 0 {
				at, ok = time.Time{}, true // the first answer at once
			}
			wait := time.Hour
			if ok {
				wait = time.Until(later(at, last.Add(watchEvery)))
			}
			if wait <= 0 {
				break
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-b.ask.wake:
			case <-t.C:
			}
			t.Stop()
		}
		keys, meta, err := e.cfg.Client.KV().Keys(prefix, "", (&api.QueryOptions{WaitIndex: idx, WaitTime: blockWait}).WithContext(ctx))
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			e.log.Debug("watch of a unit's index failed", "units", b.prefix, "error", err)
			broken = true
			sleep(ctx, time.Second)
			continue
		}
		if broken {
			// Before the answer: it may follow skipped states.
			broken = false
			e.inbox.post(watchResumed{watch: "index " + b.prefix})
		}
		got := advance(idx, meta.LastIndex)
		if got == idx && idx != 0 {
			// The wait ran out, nothing changed (at once: a server that
			// does not block; not in a loop).
			sleep(ctx, watchEvery-meta.RequestTime)
			continue
		}
		idx, last = got, time.Now()
		byUnit := map[string][]string{}
		for _, k := range keys {
			for _, u := range b.units {
				if strings.HasPrefix(k, agent.IndexPrefix(u)) {
					byUnit[u] = append(byUnit[u], k)
					break
				}
			}
		}
		posted := map[string]bool{}
		var answers []indexAns
		for _, u := range b.units {
			ks := byUnit[u]
			if heard[u] && slices.Equal(ks, seen[u]) {
				continue
			}
			heard[u], seen[u], posted[u] = true, ks, true
			answers = append(answers, indexAns{unit: u, view: agent.IndexView(u, meta.LastIndex, ks)})
		}
		// The posted units wait for the loop's word, which it gives as it
		// steps their answers: before they are posted, or the word given
		// first is erased and the unit's index is never asked again (an
		// idle node kept a view of a slot held by a lost node for good:
		// CI's TestTakeoverAudited).
		b.ask.answered(posted, last)
		if e.cfg.Faults.AnsweredLate && len(answers) > 0 {
			select {
			case <-b.ask.wake: // an older word's wake-up
			default:
			}
			for _, a := range answers {
				e.inbox.post(a)
			}
			t := time.NewTimer(time.Second)
			select {
			case <-b.ask.wake: // the loop's word for them
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
			b.ask.answered(posted, last)
			continue
		}
		for _, a := range answers {
			e.inbox.post(a)
		}
	}
}

// watchBucketVacancy follows the bucket's units' vacancy keys: one whose
// index moved makes the loop ask that unit's index at once.
func (e *Executor) watchBucketVacancy(ctx context.Context, b *bucket) {
	first := true
	seen := map[string]uint64{}
	e.watch(ctx, "vacancy "+b.prefix, func(q *api.QueryOptions) (uint64, func(), error) {
		var pairs api.KVPairs
		var meta *api.QueryMeta
		var err error
		if len(b.units) == 1 {
			var p *api.KVPair
			p, meta, err = e.cfg.Client.KV().Get(agent.VacancyKey(b.units[0]), q)
			if p != nil {
				pairs = api.KVPairs{p}
			}
		} else {
			pairs, meta, err = e.cfg.Client.KV().List(agent.VacancyPrefix+b.prefix, q)
		}
		if err != nil {
			return 0, nil, err
		}
		return meta.LastIndex, func() {
			var moved []string
			for _, p := range pairs {
				u := strings.TrimPrefix(p.Key, agent.VacancyPrefix)
				if !slices.Contains(b.units, u) || seen[u] == p.ModifyIndex {
					continue
				}
				seen[u] = p.ModifyIndex
				moved = append(moved, u)
			}
			if !first {
				for _, u := range moved {
					e.inbox.post(vacancyMoved{unit: u})
				}
			}
			first = false
		}, nil
	})
}

// watchBucketDeploy follows the bucket's units' deployment prefixes
// (record, statuses, tokens): each unit's agent.DeployAnswer when its keys
// changed (every unit at the first answer).
func (e *Executor) watchBucketDeploy(ctx context.Context, b *bucket) {
	seen := map[string][]agent.KV{}
	heard := map[string]bool{}
	prefix := agent.DeployPrefix(b.units[0])
	if len(b.units) > 1 {
		prefix = cluster.UnitsPrefix + b.prefix
	}
	e.watch(ctx, "deploy "+b.prefix, func(q *api.QueryOptions) (uint64, func(), error) {
		pairs, meta, err := e.cfg.Client.KV().List(prefix, q)
		if err != nil {
			return 0, nil, err
		}
		byUnit := map[string][]agent.KV{}
		for _, p := range pairs {
			for _, u := range b.units {
				if strings.HasPrefix(p.Key, agent.DeployPrefix(u)) {
					byUnit[u] = append(byUnit[u], agent.KV{Key: p.Key, Value: p.Value, Session: p.Session, ModifyIndex: p.ModifyIndex})
					break
				}
			}
		}
		return meta.LastIndex, func() {
			for _, u := range b.units {
				kvs := byUnit[u]
				if heard[u] && sameKVs(kvs, seen[u]) {
					continue
				}
				heard[u], seen[u] = true, kvs
				e.inbox.post(deployAns{unit: u, view: agent.ParseDeployView(u, meta.LastIndex, kvs)})
			}
		}, nil
	})
}

// sameKVs: the same keys at the same indexes, held by the same sessions.
func sameKVs(a, b []agent.KV) bool {
	return slices.EqualFunc(a, b, func(x, y agent.KV) bool {
		return x.Key == y.Key && x.ModifyIndex == y.ModifyIndex && x.Session == y.Session
	})
}

// requestSlot waits for one of the MaxRequests places (false: the
// executor ended first); the caller gives it back with doneRequest.
func (e *Executor) requestSlot() bool {
	select {
	case e.reqs <- struct{}{}:
		return true
	case <-e.ctx.Done():
		return false
	}
}

func (e *Executor) doneRequest() { <-e.reqs }
