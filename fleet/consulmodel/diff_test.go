package consulmodel

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// The differential test: the same random programs of KV, session and
// transaction operations (the verbs the fleet uses) run against the model
// and a real Consul agent, and every outcome is compared: success, the
// failing operations and their messages, every returned entry's value,
// flags, session and lock index, and its Create/Modify indexes through an
// order-preserving map between the two systems' Raft indexes (a real
// agent writes entries of its own between ours, so only order and
// equality compare). A list answer's X-Consul-Index is compared the same
// way, which checks the blocking-query semantics of prefixes and
// tombstones.

// system is one side of the comparison.
type system interface {
	txn(ops api.KVTxnOps) (ok bool, res []*api.KVPair, errs api.TxnErrors, err error)
	list(prefix string) ([]*api.KVPair, uint64, error)
	keys(prefix string) ([]string, uint64, error)
	get(key string) (*api.KVPair, uint64, error)
	createSession(delay time.Duration, behavior string) (string, error)
	destroySession(id string) error
	acquire(key, value, session string) (bool, error)
	release(key, value, session string) (bool, error)
	cas(key, value string, index uint64) (bool, error)
	put(key, value string) error
}

type realSystem struct{ c *api.Client }

func (r realSystem) txn(ops api.KVTxnOps) (bool, []*api.KVPair, api.TxnErrors, error) {
	ok, resp, _, err := r.c.KV().Txn(ops, nil)
	if err != nil {
		return false, nil, nil, err
	}
	return ok, resp.Results, resp.Errors, nil
}
func (r realSystem) list(prefix string) ([]*api.KVPair, uint64, error) {
	ps, meta, err := r.c.KV().List(prefix, nil)
	if err != nil {
		return nil, 0, err
	}
	return ps, meta.LastIndex, nil
}
func (r realSystem) keys(prefix string) ([]string, uint64, error) {
	ks, meta, err := r.c.KV().Keys(prefix, "", nil)
	if err != nil {
		return nil, 0, err
	}
	return ks, meta.LastIndex, nil
}
func (r realSystem) get(key string) (*api.KVPair, uint64, error) {
	p, meta, err := r.c.KV().Get(key, nil)
	if err != nil {
		return nil, 0, err
	}
	return p, meta.LastIndex, nil
}
func (r realSystem) createSession(delay time.Duration, behavior string) (string, error) {
	id, _, err := r.c.Session().Create(&api.SessionEntry{LockDelay: delay, Behavior: behavior}, nil)
	return id, err
}
func (r realSystem) destroySession(id string) error {
	_, err := r.c.Session().Destroy(id, nil)
	return err
}
func (r realSystem) acquire(key, value, session string) (bool, error) {
	ok, _, err := r.c.KV().Acquire(&api.KVPair{Key: key, Value: []byte(value), Session: session}, nil)
	return ok, err
}
func (r realSystem) release(key, value, session string) (bool, error) {
	ok, _, err := r.c.KV().Release(&api.KVPair{Key: key, Value: []byte(value), Session: session}, nil)
	return ok, err
}
func (r realSystem) cas(key, value string, index uint64) (bool, error) {
	ok, _, err := r.c.KV().CAS(&api.KVPair{Key: key, Value: []byte(value), ModifyIndex: index}, nil)
	return ok, err
}
func (r realSystem) put(key, value string) error {
	_, err := r.c.KV().Put(&api.KVPair{Key: key, Value: []byte(value)}, nil)
	return err
}

// modelSystem runs the model on the wall clock, so that lock delays
// (60 s or Consul's default 15 s here, far longer than a program) agree.
type modelSystem struct{ s *Store }

func (m modelSystem) txn(ops api.KVTxnOps) (bool, []*api.KVPair, api.TxnErrors, error) {
	r, err := m.s.KVTxn(time.Now(), ops)
	return r.OK, r.Results, r.Errors, err
}
func (m modelSystem) list(prefix string) ([]*api.KVPair, uint64, error) {
	es, idx, err := m.s.List(prefix, false)
	var ps []*api.KVPair
	for _, e := range es {
		ps = append(ps, e.Pair())
	}
	return ps, idx, err
}
func (m modelSystem) keys(prefix string) ([]string, uint64, error) {
	return m.s.Keys(prefix, false)
}
func (m modelSystem) get(key string) (*api.KVPair, uint64, error) {
	e, idx, err := m.s.Get(key, false)
	if e == nil {
		return nil, idx, err
	}
	return e.Pair(), idx, err
}
func (m modelSystem) createSession(delay time.Duration, behavior string) (string, error) {
	return m.s.CreateSession(time.Now(), SessionSpec{Node: "n", LockDelay: delay, Behavior: behavior})
}
func (m modelSystem) destroySession(id string) error { return m.s.DestroySession(time.Now(), id) }
func (m modelSystem) acquire(key, value, session string) (bool, error) {
	return m.s.Acquire(time.Now(), key, []byte(value), session)
}
func (m modelSystem) release(key, value, session string) (bool, error) {
	return m.s.Release(time.Now(), key, []byte(value), session)
}
func (m modelSystem) cas(key, value string, index uint64) (bool, error) {
	return m.s.CAS(time.Now(), key, []byte(value), 0, index)
}
func (m modelSystem) put(key, value string) error {
	_, err := m.s.Put(time.Now(), key, []byte(value), 0)
	return err
}

// side is one system with what the program knows of it: the IDs of its
// sessions by symbol.
type side struct {
	sys      system
	sessions []string
}

// indexMap relates the model's Raft indexes to the real agent's: equal to
// equal, and in the same order.
type indexMap struct {
	m2r map[uint64]uint64
	r2m map[uint64]uint64
}

func (im *indexMap) relate(m, r uint64) error {
	if m == 0 || r == 0 {
		if m != r {
			return fmt.Errorf("index: model %d, real %d", m, r)
		}
		return nil
	}
	if got, ok := im.m2r[m]; ok {
		if got != r {
			return fmt.Errorf("model index %d is real %d, now %d", m, got, r)
		}
		return nil
	}
	if got, ok := im.r2m[r]; ok {
		return fmt.Errorf("real index %d is model %d, now %d", r, got, m)
	}
	for mm, rr := range im.m2r {
		if (mm < m) != (rr < r) {
			return fmt.Errorf("order: model %d<->%d, real %d<->%d", mm, m, rr, r)
		}
	}
	im.m2r[m], im.r2m[r] = r, m
	return nil
}

var (
	uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	numRE  = regexp.MustCompile(`\d+`)
)

type program struct {
	live  []int // symbols of the sessions not destroyed
	rng   *rand.Rand
	sides [2]*side // model, real
	im    indexMap
	t     *testing.T
	step  int
	seed  uint64
}

// Keys and prefixes under a root of the seed's own: a real agent keeps
// the lock delays of earlier seeds.
var (
	diffKeys     = []string{"p/a", "p/b", "p/c/d", "q/a", "q/b"}
	diffPrefixes = []string{"p/", "p/c/", "q/", "r/", ""}
)

func (p *program) key(k string) string { return fmt.Sprintf("s%d/%s", p.seed, k) }

func (p *program) fail(format string, args ...any) {
	p.t.Helper()
	p.t.Fatalf("seed %d step %d: %s", p.seed, p.step, fmt.Sprintf(format, args...))
}

// sessionName turns IDs back into symbols (s0, s1, ...) for comparison.
func (p *program) normalize(sd *side, s string) string {
	for i, id := range sd.sessions {
		if id != "" {
			s = strings.ReplaceAll(s, id, fmt.Sprintf("s%d", i))
		}
	}
	return s
}

func (p *program) comparePairs(what string, a, b []*api.KVPair) {
	p.t.Helper()
	if len(a) != len(b) {
		p.fail("%s: model %d entries %v, real %d %v", what, len(a), keysOf(a), len(b), keysOf(b))
	}
	for i := range a {
		x, y := a[i], b[i]
		xs, ys := p.normalize(p.sides[0], x.Session), p.normalize(p.sides[1], y.Session)
		if x.Key != y.Key || string(x.Value) != string(y.Value) || x.Flags != y.Flags || xs != ys || x.LockIndex != y.LockIndex {
			p.fail("%s: entry %d: model %+v (session %s), real %+v (session %s)", what, i, *x, xs, *y, ys)
		}
		if err := p.im.relate(x.CreateIndex, y.CreateIndex); err != nil {
			p.fail("%s: %s CreateIndex: %v", what, x.Key, err)
		}
		if err := p.im.relate(x.ModifyIndex, y.ModifyIndex); err != nil {
			p.fail("%s: %s ModifyIndex: %v", what, x.Key, err)
		}
	}
}

func keysOf(ps []*api.KVPair) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Key)
	}
	return out
}

// index returns the symbolic index op's kind names, on one side.
func (p *program) index(sd *side, key, kind string) uint64 {
	switch kind {
	case "zero":
		return 0
	case "bogus":
		return 1 << 40
	}
	e, _, err := sd.sys.get(key)
	if err != nil {
		p.fail("get %s: %v", key, err)
	}
	if e == nil {
		return 0
	}
	if kind == "stale" {
		return e.ModifyIndex - 1
	}
	return e.ModifyIndex
}

func (p *program) session(sd *side, i int) string {
	if i < len(sd.sessions) {
		return sd.sessions[i]
	}
	return "00000000-0000-4000-8000-ffffffffffff" // never created
}

// randomOp draws one KV operation, symbolically: indexes and sessions are
// resolved on each side.
type symOp struct {
	verb    api.KVOp
	key     string
	value   string
	idxKind string
	sess    int
}

func (p *program) randomOp() symOp {
	verbs := []api.KVOp{api.KVSet, api.KVCAS, api.KVLock, api.KVUnlock, api.KVGet, api.KVGetOrEmpty,
		api.KVGetTree, api.KVDelete, api.KVDeleteCAS, api.KVCheckIndex, api.KVCheckSession, api.KVCheckNotExists}
	o := symOp{
		verb:    verbs[p.rng.IntN(len(verbs))],
		key:     p.key(diffKeys[p.rng.IntN(len(diffKeys))]),
		idxKind: []string{"cur", "cur", "stale", "zero", "bogus"}[p.rng.IntN(5)],
		sess:    p.rng.IntN(len(p.sides[0].sessions) + 1),
	}
	// Mostly a live session, so that locks are taken and held.
	if len(p.live) > 0 && p.rng.IntN(10) < 7 {
		o.sess = p.live[p.rng.IntN(len(p.live))]
	}
	if o.verb == api.KVGetTree {
		o.key = p.key(diffPrefixes[p.rng.IntN(len(diffPrefixes))])
	}
	// Values repeat so that a set can change nothing.
	o.value = []string{"", "x", "y"}[p.rng.IntN(3)]
	return o
}

func (p *program) resolve(sd *side, ops []symOp) api.KVTxnOps {
	var out api.KVTxnOps
	for _, o := range ops {
		op := &api.KVTxnOp{Verb: o.verb, Key: o.key}
		switch o.verb {
		case api.KVSet, api.KVCAS, api.KVLock, api.KVUnlock:
			op.Value = []byte(o.value)
		}
		switch o.verb {
		case api.KVCAS, api.KVDeleteCAS, api.KVCheckIndex:
			op.Index = p.index(sd, o.key, o.idxKind)
		}
		switch o.verb {
		case api.KVLock, api.KVUnlock, api.KVCheckSession:
			op.Session = p.session(sd, o.sess)
			if o.sess == len(sd.sessions) && o.verb == api.KVCheckSession {
				op.Session = "" // check that the key is not held
			}
		}
		out = append(out, op)
	}
	return out
}

func (p *program) run(n int) {
	p.t.Helper()
	lastList := map[string][2]uint64{}
	for p.step = 0; p.step < n; p.step++ {
		switch k := p.rng.IntN(20); {
		case k < 2 && len(p.live) < 3:
			delay := []time.Duration{0, 60 * time.Second}[p.rng.IntN(2)]
			beh := []string{api.SessionBehaviorRelease, api.SessionBehaviorDelete}[p.rng.IntN(2)]
			for _, sd := range p.sides {
				id, err := sd.sys.createSession(delay, beh)
				if err != nil {
					p.fail("create session: %v", err)
				}
				sd.sessions = append(sd.sessions, id)
			}
			p.live = append(p.live, len(p.sides[0].sessions)-1)
		case k < 3 && len(p.live) > 0:
			j := p.rng.IntN(len(p.live))
			i := p.live[j]
			p.live = append(p.live[:j], p.live[j+1:]...)
			for _, sd := range p.sides {
				if err := sd.sys.destroySession(sd.sessions[i]); err != nil {
					p.fail("destroy session: %v", err)
				}
			}
		case k < 11:
			nops := 1 + p.rng.IntN(4)
			var ops []symOp
			for range nops {
				ops = append(ops, p.randomOp())
			}
			var ok [2]bool
			var res [2][]*api.KVPair
			var errs [2][]string
			for i, sd := range p.sides {
				o, r, e, err := sd.sys.txn(p.resolve(sd, ops))
				if err != nil {
					p.fail("txn: %v", err)
				}
				ok[i], res[i] = o, r
				for _, te := range e {
					msg := numRE.ReplaceAllString(uuidRE.ReplaceAllString(p.normalize(sd, te.What), "S"), "#")
					errs[i] = append(errs[i], fmt.Sprintf("%d: %s", te.OpIndex, msg))
				}
			}
			desc := fmt.Sprintf("txn %+v", ops)
			if ok[0] != ok[1] || strings.Join(errs[0], "; ") != strings.Join(errs[1], "; ") {
				p.fail("%s: model ok=%v %q, real ok=%v %q", desc, ok[0], errs[0], ok[1], errs[1])
			}
			p.comparePairs(desc, res[0], res[1])
		case k < 15:
			o := p.randomOp()
			var ok [2]bool
			for i, sd := range p.sides {
				var err error
				switch k {
				case 11:
					ok[i], err = sd.sys.acquire(o.key, o.value, p.session(sd, o.sess))
				case 12:
					ok[i], err = sd.sys.release(o.key, o.value, p.session(sd, o.sess))
				case 13:
					ok[i], err = sd.sys.cas(o.key, o.value, p.index(sd, o.key, o.idxKind))
				default:
					ok[i], err = true, sd.sys.put(o.key, o.value)
				}
				if err != nil {
					// Both must refuse alike: compare below.
					ok[i] = false
					if !strings.Contains(err.Error(), "invalid session") && !strings.Contains(err.Error(), "Missing session") {
						p.fail("op %d on %s: %v", k, o.key, err)
					}
				}
			}
			if ok[0] != ok[1] {
				p.fail("op %d on %s (%+v): model %v, real %v", k, o.key, o, ok[0], ok[1])
			}
		default:
			prefix := p.key(diffPrefixes[p.rng.IntN(len(diffPrefixes))])
			var ps [2][]*api.KVPair
			var ks [2][]string
			var idx [2]uint64
			// Half the time the keys only (?keys), as the fleet's
			// index watches read them.
			keysOnly := p.rng.IntN(2) == 0
			for i, sd := range p.sides {
				var err error
				if keysOnly {
					ks[i], idx[i], err = sd.sys.keys(prefix)
				} else {
					ps[i], idx[i], err = sd.sys.list(prefix)
				}
				if err != nil {
					p.fail("list %q: %v", prefix, err)
				}
			}
			if keysOnly {
				if strings.Join(ks[0], ",") != strings.Join(ks[1], ",") {
					p.fail("keys %q: model %q, real %q", prefix, ks[0], ks[1])
				}
			} else {
				p.comparePairs("list "+prefix, ps[0], ps[1])
			}
			// The list's index: related like any index, and it moves on
			// both sides or on neither since the last list of the prefix.
			if prev, ok := lastList[prefix]; ok && (prev[0] == idx[0]) != (prev[1] == idx[1]) {
				p.fail("list %q index: model %d -> %d, real %d -> %d", prefix, prev[0], idx[0], prev[1], idx[1])
			}
			if err := p.im.relate(idx[0], idx[1]); err != nil {
				p.fail("list %q index: %v", prefix, err)
			}
			lastList[prefix] = idx
		}
	}
	// The end state, whole.
	var all [2][]*api.KVPair
	for i, sd := range p.sides {
		all[i], _, _ = sd.sys.list(p.key(""))
		sort.Slice(all[i], func(a, b int) bool { return all[i][a].Key < all[i][b].Key })
	}
	p.comparePairs("end state", all[0], all[1])
}

func TestModelAgreesWithConsul(t *testing.T) {
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	self, err := c.Agent().NodeName()
	if err != nil {
		t.Fatal(err)
	}
	const seeds, steps = 16, 300
	for seed := uint64(1); seed <= seeds; seed++ {
		// A fresh model per seed; the agent's keys are wiped (its
		// sessions from earlier seeds are destroyed with them).
		if _, err := c.KV().DeleteTree("", nil); err != nil {
			t.Fatal(err)
		}
		ss, _, err := c.Session().List(nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range ss {
			if _, err := c.Session().Destroy(s.ID, nil); err != nil {
				t.Fatal(err)
			}
		}
		m := New()
		if err := m.RegisterNode("n", "127.0.0.1"); err != nil {
			t.Fatal(err)
		}
		_ = self
		p := &program{
			rng:   rand.New(rand.NewPCG(seed, 0x6d6f64656c)),
			sides: [2]*side{{sys: modelSystem{m}}, {sys: realSystem{c}}},
			im:    indexMap{m2r: map[uint64]uint64{}, r2m: map[uint64]uint64{}},
			t:     t,
			seed:  seed,
		}
		p.run(steps)
	}
}
