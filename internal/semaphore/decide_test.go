package semaphore

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/hashicorp/consul/api"
)

// kvs builds the prefix "p" from a .lock (limit, holders; limit 0: no
// .lock) and contenders "session:create:flags" (session "-" for a key
// whose session was invalidated: its name is key "dead").
func kvs(limit int, holders []string, conts ...cont) api.KVPairs {
	var out api.KVPairs
	if limit > 0 {
		hs := map[string]bool{}
		for _, h := range holders {
			hs[h] = true
		}
		b, _ := json.Marshal(Lock{Limit: limit, Holders: hs})
		out = append(out, &api.KVPair{Key: "p/.lock", Value: b, Flags: api.SemaphoreFlagValue, ModifyIndex: 7})
	}
	for _, c := range conts {
		name := c.s
		if c.slot != "" {
			name += "/" + c.slot
		}
		p := &api.KVPair{Key: "p/" + name, Session: c.s, CreateIndex: c.create, ModifyIndex: c.create + c.touched, Flags: c.flags}
		if c.dead {
			p.Session = ""
		}
		out = append(out, p)
	}
	return out
}

type cont struct {
	s       string
	create  uint64
	touched uint64 // ModifyIndex - CreateIndex
	flags   uint64
	dead    bool
	slot    string // the key is p/<s>/<slot> (one per slot); "": p/<s>
}

// slot names c's key <session>/<slot>, as a node names one per slot.
func slot(c cont, k string) cont { c.slot = k; return c }

func w(s string, create uint64) cont { return cont{s: s, create: create, flags: FlagWaiting} }
func h(s string, create uint64) cont {
	return cont{s: s, create: create, touched: 1, flags: FlagHolding}
}
func old(s string, create uint64) cont {
	return cont{s: s, create: create, flags: api.SemaphoreFlagValue}
}
func dead(s string, create uint64) cont {
	return cont{s: s, create: create, flags: FlagHolding, dead: true}
}

// view is what a table row checks of a Decision.
type view struct {
	Live, Held, Try bool
	Several         bool
	Position, Free  int
	Watch           string
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pairs   api.KVPairs
		session string
		stale   map[string]uint64
		want    view
	}{
		{"alone, no .lock yet: tries", kvs(0, nil, w("a", 10)), "a", nil,
			view{Live: true, Try: true, Free: 2}},
		{"first waiter, tokens all held: blocks on the prefix", kvs(2, []string{"x", "y"}, h("x", 5), h("y", 6), w("a", 10), w("b", 11)), "a", nil,
			view{Live: true, Position: 0, Free: 0}},
		{"second waiter: blocks on the first's key only", kvs(2, []string{"x", "y"}, h("x", 5), h("y", 6), w("a", 10), w("b", 11)), "b", nil,
			view{Live: true, Position: 1, Free: 0, Watch: "p/a"}},
		{"order is CreateIndex, not key name", kvs(2, []string{"x", "y"}, h("x", 5), h("y", 6), w("a", 12), w("b", 11)), "a", nil,
			view{Live: true, Position: 1, Free: 0, Watch: "p/b"}},
		{"one token back: only the first waiter tries", kvs(2, []string{"x"}, h("x", 5), w("a", 10), w("b", 11), w("c", 12)), "a", nil,
			view{Live: true, Try: true, Position: 0, Free: 1}},
		{"one token back: the second does not", kvs(2, []string{"x"}, h("x", 5), w("a", 10), w("b", 11), w("c", 12)), "b", nil,
			view{Live: true, Position: 1, Free: 1, Watch: "p/a"}},
		{"two tokens back: the second tries too", kvs(2, nil, w("a", 10), w("b", 11), w("c", 12)), "b", nil,
			view{Live: true, Try: true, Position: 1, Free: 2}},
		{"two tokens back: the third waits on the second", kvs(2, nil, w("a", 10), w("b", 11), w("c", 12)), "c", nil,
			view{Live: true, Position: 2, Free: 2, Watch: "p/b"}},
		{"a holder whose session ended is pruned: its token is free", kvs(1, []string{"x"}, dead("x", 5), w("a", 10)), "a", nil,
			view{Live: true, Try: true, Free: 1}},
		{"a holder with no contender key left is pruned", kvs(1, []string{"x"}, w("a", 10)), "a", nil,
			view{Live: true, Try: true, Free: 1}},
		{"a dead waiter ahead does not count", kvs(1, []string{"x"}, h("x", 5), cont{s: "d", create: 8, flags: FlagWaiting, dead: true}, w("a", 10)), "a", nil,
			view{Live: true, Position: 0}},
		{"holding already (a CAS whose answer was lost)", kvs(1, []string{"a"}, h("a", 10), w("b", 11)), "a", nil,
			view{Live: true, Held: true}},
		{"our key released by invalidation: not live", kvs(1, []string{"x"}, h("x", 5), cont{s: "a", create: 10, flags: FlagWaiting, dead: true}), "a", nil,
			view{Free: 0}},
		{"our key gone: not live", kvs(1, nil, w("b", 11)), "a", nil,
			view{Free: 1}},
		{"released (key deleted, .lock not changed), contending again: a waiter, not a holder", kvs(2, []string{"a", "x"}, h("x", 5), w("a", 10)), "a", nil,
			view{Live: true, Try: true, Free: 1}},
		{"behind a released holder contending again", kvs(2, []string{"a", "x"}, h("x", 5), w("a", 10), w("b", 11)), "b", nil,
			view{Live: true, Position: 1, Free: 1, Watch: "p/a"}},
		{"a released holder is not counted", kvs(2, []string{"a", "x"}, h("x", 5), w("b", 11)), "b", nil,
			view{Live: true, Try: true, Free: 1}},
		{"an older node's waiter ahead: block on the prefix", kvs(1, []string{"x"}, h("x", 5), old("o", 9), w("a", 10)), "a", nil,
			view{Live: true, Position: 1}},
		{"an older node's holder counts", kvs(2, []string{"o"}, old("o", 5), w("a", 10), w("b", 11)), "b", nil,
			view{Live: true, Position: 1, Free: 1, Watch: "p/a"}},
		{"a stale waiter ahead is skipped while unchanged", kvs(1, nil, w("s", 9), w("a", 10)), "a", map[string]uint64{"p/s": 9},
			view{Live: true, Try: true, Free: 1}},
		{"a stale waiter that changed since counts again", kvs(1, nil, cont{s: "s", create: 9, touched: 3, flags: FlagWaiting}, w("a", 10)), "a", map[string]uint64{"p/s": 9},
			view{Live: true, Position: 1, Free: 1, Watch: "p/s"}},
	} {
		limit := 1
		for _, p := range tc.pairs {
			if p.Key == "p/.lock" {
				var l Lock
				_ = json.Unmarshal(p.Value, &l)
				limit = l.Limit
			}
		}
		if tc.name == "alone, no .lock yet: tries" {
			limit = 2
		}
		d, err := Decide(tc.pairs, "p", tc.session, tc.session, limit, tc.stale)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		got := view{Live: d.Live, Held: d.Held, Try: d.Try, Position: d.Position, Free: d.Free, Watch: d.Watch}
		if !d.Live {
			got.Position = 0
		}
		if got != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

func TestDecideConflicts(t *testing.T) {
	if _, err := Decide(kvs(3, nil, w("a", 10)), "p", "a", "a", 2, nil); !errors.Is(err, ErrConflict) {
		t.Errorf("another limit: %v", err)
	}
	pairs := api.KVPairs{{Key: "p/.lock", Value: []byte("x"), Flags: 1}, {Key: "p/a", Session: "a", Flags: FlagWaiting}}
	if _, err := Decide(pairs, "p", "a", "a", 2, nil); !errors.Is(err, ErrConflict) {
		t.Errorf("not a semaphore's .lock: %v", err)
	}
}

// TestDecidePerSlot: contenders named <session>/<slot> (a node's slots)
// each hold a token of their own; .lock lists the session once.
func TestDecidePerSlot(t *testing.T) {
	for _, tc := range []struct {
		name          string
		pairs         api.KVPairs
		session, self string // self: the contender key's name
		want          view
	}{
		{"a node's second slot tries while its first holds", kvs(3, []string{"n"}, slot(h("n", 5), "1"), slot(w("n", 6), "2")), "n", "n/2",
			view{Live: true, Try: true, Free: 2, Several: true}},
		{"each slot's token counts: the fleet is full", kvs(3, []string{"n", "m"}, slot(h("n", 5), "1"), slot(h("n", 6), "2"), slot(h("m", 7), "1"), slot(w("n", 8), "3")), "n", "n/3",
			view{Live: true, Free: 0, Several: true}},
		{"a waiter behind a node's full slots waits on its predecessor", kvs(2, []string{"n"}, slot(h("n", 5), "1"), slot(h("n", 6), "2"), slot(w("m", 7), "1"), slot(w("n", 8), "3")), "n", "n/3",
			view{Live: true, Position: 1, Free: 0, Watch: "p/m/1", Several: true}},
		{"a slot's key released: that token is free, the node's other one is not", kvs(2, []string{"n"}, slot(h("n", 6), "2"), slot(w("m", 7), "1")), "m", "m/1",
			view{Live: true, Try: true, Free: 1}},
		{"holding, by its own key", kvs(2, []string{"n"}, slot(h("n", 5), "1"), slot(h("n", 6), "2")), "n", "n/2",
			view{Live: true, Held: true, Free: 0, Several: true}},
		{"another slot of the session holds, not this one", kvs(2, []string{"n"}, slot(h("n", 5), "1"), slot(w("n", 6), "2")), "n", "n/2",
			view{Live: true, Try: true, Free: 1, Several: true}},
		{"the session's keys die with it: every token back", kvs(2, []string{"n"}, slot(dead("n", 5), "1"), slot(dead("n", 6), "2"), slot(w("m", 7), "1"), slot(w("m", 8), "2")), "m", "m/2",
			view{Live: true, Try: true, Position: 1, Free: 2}},
		{"one token a session: .lock keeps the limit older nodes read", kvs(3, []string{"n"}, slot(h("n", 5), "1"), slot(w("m", 6), "1")), "m", "m/1",
			view{Live: true, Try: true, Free: 2}},
		{"a session already holding several: the next CAS says so too", kvs(4, []string{"n"}, slot(h("n", 5), "1"), slot(h("n", 6), "2"), slot(w("m", 7), "1")), "m", "m/1",
			view{Live: true, Try: true, Free: 2, Several: true}},
		{"an older node counts the session once; so do we for its key", kvs(2, []string{"o"}, old("o", 5), slot(w("n", 6), "1")), "n", "n/1",
			view{Live: true, Try: true, Free: 1}},
	} {
		limit := 0
		for _, p := range tc.pairs {
			if p.Key == "p/.lock" {
				var l Lock
				_ = json.Unmarshal(p.Value, &l)
				limit = l.Limit
			}
		}
		d, err := Decide(tc.pairs, "p", tc.self, tc.session, limit, nil)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		got := view{Live: d.Live, Held: d.Held, Try: d.Try, Position: d.Position, Free: d.Free, Watch: d.Watch, Several: d.Several}
		if got != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

// TestDecideSeveralLimit: a .lock whose Limit is -limit (sessions hold
// several tokens) is read as limit; another limit is still a conflict.
func TestDecideSeveralLimit(t *testing.T) {
	b, _ := json.Marshal(Lock{Limit: -2, Holders: map[string]bool{"n": true}})
	pairs := api.KVPairs{{Key: "p/.lock", Value: b, Flags: api.SemaphoreFlagValue},
		{Key: "p/n/1", Session: "n", Flags: FlagHolding, CreateIndex: 5}, {Key: "p/n/2", Session: "n", Flags: FlagHolding, CreateIndex: 6},
		{Key: "p/m/1", Session: "m", Flags: FlagWaiting, CreateIndex: 7}}
	d, err := Decide(pairs, "p", "m/1", "m", 2, nil)
	if err != nil || d.Free != 0 || d.Try {
		t.Errorf("limit -2 read as 2: %+v, %v", d, err)
	}
	if _, err := Decide(pairs, "p", "m/1", "m", 3, nil); !errors.Is(err, ErrConflict) {
		t.Errorf("limit -2, want 3: %v", err)
	}
}
