package agent

import (
	"slices"
	"testing"
)

// Rollout tokens are taken in turns (tokens.go): the holders waiting for
// one that see the same view ask only for their turn, so a token given
// back is asked for once, not by every waiter (issue 28: six failed
// transactions per instance on a rollout of 30 over 10 nodes). A turn
// left untaken opens its token to every waiter after TokenGrace.
//
// Mutation check: Faults.TokenHerd (every waiter asks for a free token)
// makes the first rows ask more than once.
func TestTokensTakeTurns(t *testing.T) {
	const count = 6
	d := running(2, "v1", "v2")
	d.Update.MaxParallel = 2
	view := func(idx uint64, tokens map[int]Token) DeployAnswer {
		st := map[int]Status{}
		for k := range count {
			st[k] = healthyAt("v1", uint64(40+k))
		}
		for _, tok := range tokens {
			// Down for its update: its status says the target.
			s := healthyAt("v2", uint64(40+tok.K))
			s.HealthyAt = nil
			st[tok.K] = s
		}
		return deployView(idx, d, st, tokens)
	}
	for _, tc := range []struct {
		name   string
		herd   bool
		tokens map[int]Token // held, by token
		askers []int         // the slots that ask at once
	}{
		{"two free tokens: the two lowest waiting slots", false, nil, []int{0, 1}},
		{"one free: the lowest waiting slot", false, map[int]Token{0: {"s-x", 0, 50}}, []int{1}},
		{"token 0 free, token 1 with slot 0: the lowest waiting", false, map[int]Token{1: {"s-x", 0, 50}}, []int{1}},
		{"none free: nobody", false, map[int]Token{0: {"s-x", 0, 50}, 1: {"s-y", 1, 51}}, nil},
		{"herd (mutation): every holder that waits as it knows", true, map[int]Token{0: {"s-x", 0, 50}}, []int{0, 1, 2, 3, 4, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var askers []int
			asked := map[int]int{} // token -> how many asked
			for k := range count {
				m := holder(t, count, k)
				m.a.cfg.Faults.TokenHerd = tc.herd
				if tk, ok := find[TakeToken](m.step(view(10, tc.tokens))); ok {
					askers = append(askers, k)
					asked[tk.T]++
				}
			}
			if !slices.Equal(askers, tc.askers) {
				t.Errorf("asked: slots %v, want %v", askers, tc.askers)
			}
			for tok, n := range asked {
				if n > 1 && !tc.herd {
					t.Errorf("token %d asked for %d times", tok, n)
				}
			}
		})
	}
}

// A turn nobody takes (its holder frozen or cut off) opens its token to
// every waiting slot after TokenGrace, and not before; a new view that
// gives the turn to another slot counts the grace again.
func TestTokenTurnLeftOpens(t *testing.T) {
	const count = 3
	d := running(2, "v1", "v2")
	st := map[int]Status{0: healthyAt("v1", 40), 1: healthyAt("v1", 41), 2: healthyAt("v1", 42)}
	m := holder(t, count, 2) // slot 0's turn; its holder never asks
	acts := m.step(deployView(10, d, st, nil))
	if _, ok := find[TakeToken](acts); ok {
		t.Fatalf("slot 2 asked on slot 0's turn: %v", acts)
	}
	w, ok := find[Wake](acts)
	if !ok || !w.At.Equal(m.now.Add(TokenGrace)) {
		t.Fatalf("no wake at the grace's end: %v", acts)
	}
	m.now = m.now.Add(TokenGrace / 2)
	// Slot 0 goes (its holder's session ended): slot 1's turn now, the
	// grace from now.
	delete(st, 0)
	if acts := m.step(deployView(11, d, st, nil)); len(all[TakeToken](acts)) > 0 {
		t.Fatalf("slot 2 asked on slot 1's turn: %v", acts)
	}
	m.now = m.now.Add(TokenGrace / 2)
	if acts := m.step(Tick{}); len(all[TakeToken](acts)) > 0 {
		t.Fatalf("asked before the grace of the new turn ended: %v", acts)
	}
	m.now = m.now.Add(TokenGrace / 2)
	if tk, ok := find[TakeToken](m.step(Tick{})); !ok || tk.Slot != (SlotID{"web", 2}) {
		t.Fatalf("the turn left untaken did not open: %+v %v", tk, ok)
	}
}
