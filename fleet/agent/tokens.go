package agent

import (
	"sort"
	"time"
)

// Rollout tokens without a herd (issue 28).
//
// A unit's max_parallel tokens are keys a holder locks with its session
// before it takes its instance down for an update, and deletes once the
// instance is healthy at its target. When a token is given back, every
// holder still waiting sees it free in the same answer of the unit's
// watch. Had each of them asked for it (as api.Semaphore's contenders
// do), one would win and the others' transactions fail: a Raft entry each
// that changes nothing, measured at six per instance updated on a rollout
// of 30 over 10 nodes.
//
// So the holders take turns, the same on every node that has the same
// view: the slots that wait (their status says a version other than their
// target, no token held for them, a holder in the slots view) in the order
// of their number, the free tokens in theirs, the i-th waiting slot's turn
// is the i-th free token. A node asks only for its slots' turns. A turn
// nobody takes (its holder frozen, cut off, or not yet running) would
// leave its token free for good, so a token whose turn has stayed with
// the same slot for TokenGrace is open to every waiting slot (the old
// race, for that token only). A node's own slot that has no status yet is
// in its queue though not in the others': the collision that can cause
// is the race, bounded the same way.

// TokenGrace: how long a free token's turn may stay with one slot before
// any waiting slot may ask for it.
const TokenGrace = time.Second

// tokenTurns are a unit's turns as of one view, and how long each free
// token's turn has stayed with its slot.
type tokenTurns struct {
	index uint64
	seq   uint64      // deployState.seq when computed
	turn  map[int]int // slot k -> the free token t that is its turn
	owner map[int]int // token t -> the slot k whose turn it is (-1: none)
	since map[int]time.Time
}

// turnsOf is unit's turns at now for view v (computed once per look at
// the deployments, reconcileDeploy: a node's own holds change between
// two, on the same view).
func (a *Agent) turnsOf(unit string, v *DeployView, limit, count int, now time.Time) *tokenTurns {
	d := a.dep
	if d.turns == nil {
		d.turns = map[string]*tokenTurns{}
	}
	tt := d.turns[unit]
	if tt == nil {
		tt = &tokenTurns{since: map[int]time.Time{}, owner: map[int]int{}}
		d.turns[unit] = tt
	}
	if tt.index == v.Index && tt.seq == d.seq && tt.turn != nil {
		return tt
	}
	tt.index, tt.seq = v.Index, d.seq
	rec := v.Record
	tokenOf := map[int]bool{}
	for _, tok := range v.Tokens {
		tokenOf[tok.K] = true
	}
	slots := a.slots[unit]
	var waiting []int
	for k := range count {
		target := rec.Target(k)
		if target == "" || tokenOf[k] {
			continue
		}
		id := SlotID{unit, k}
		hd, mine := d.holds[id], a.held[id] != nil
		switch s, ok := v.Status[k]; {
		case mine && hd != nil && hd.retake:
			// Its own orphan claimed back while down for an update:
			// only this node knows it waits (its status says the target).
		case ok:
			if s.Version == target || s.Failed != "" {
				continue
			}
		case !mine || hd == nil || hd.version == target:
			// No status: only this node knows whether it waits (its own
			// hold).
			continue
		}
		if slots != nil && slots.Index > 0 && slots.holder(k) == "" {
			continue // vacant: claimed at its target
		}
		waiting = append(waiting, k)
	}
	var free []int
	for t := range limit {
		if _, held := v.Tokens[t]; !held {
			free = append(free, t)
		}
	}
	sort.Ints(waiting)
	tt.turn = make(map[int]int, len(free))
	owner := make(map[int]int, len(free))
	for i, t := range free {
		owner[t] = -1
		if i < len(waiting) {
			tt.turn[waiting[i]] = t
			owner[t] = waiting[i]
		}
	}
	// A token's grace counts from when its turn went to the slot it is
	// with now (or from when it was seen free with no slot's turn).
	for t, k := range owner {
		if old, ok := tt.owner[t]; !ok || old != k {
			tt.since[t] = now
		}
	}
	for t := range tt.since {
		if _, ok := owner[t]; !ok {
			delete(tt.since, t)
		}
	}
	tt.owner = owner
	return tt
}

// tokenFor is the token slot id asks for at now: its turn, or a token
// whose turn has stayed with another slot for TokenGrace (the first from
// its own number on, so that such askers spread); -1: none now (at is
// told when one opens). mine: the tokens this node is taking or holds.
func (a *Agent) tokenFor(id SlotID, v *DeployView, limit int, mine map[int]bool, now time.Time, at func(time.Time)) int {
	if a.cfg.Faults.TokenHerd {
		return freeToken(v, limit, id.K, mine)
	}
	count := 0
	if u, ok := a.units[id.Unit]; ok {
		count = u.Count
	}
	if v.Record != nil && v.Record.Count > count {
		count = v.Record.Count
	}
	count = max(count, id.K+1)
	tt := a.turnsOf(id.Unit, v, limit, count, now)
	if t, ok := tt.turn[id.K]; ok && !mine[t] {
		return t
	}
	var open time.Time
	for i := range limit {
		t := (id.K + i) % limit
		since, free := tt.since[t]
		if !free || mine[t] || tt.owner[t] == id.K {
			continue
		}
		due := since.Add(TokenGrace)
		if !now.Before(due) {
			return t
		}
		if open.IsZero() || due.Before(open) {
			open = due
		}
	}
	if !open.IsZero() {
		at(open)
	}
	return -1
}

// Loose tokens: a token this node's session holds for a slot it does not
// hold any more. A hold that ends gives its token back at once, but that
// return can fail (a Consul election: the simulator's seed 64, where the
// watchdog ended two holds in the middle of their updates) and the hold
// is gone, so nothing asked again: the token stayed locked by a live
// session and the deployment waited for it forever. So every view that
// shows such a token has it given back (delete-cas on the take the view
// shows), one return at a time, until a view no longer shows it or the
// return of that very take was answered.

type looseKey struct {
	unit string
	t    int
}

type looseToken struct {
	inflight bool   // a return on its way
	index    uint64 // the view index of the last return sent
	gone     uint64 // the take whose return was answered deleted
}

func (d *deployState) looseOf(unit string, t int) *looseToken {
	if d.loose == nil {
		d.loose = map[looseKey]*looseToken{}
	}
	k := looseKey{unit, t}
	l := d.loose[k]
	if l == nil {
		l = &looseToken{}
		d.loose[k] = l
	}
	return l
}

// looseSent notes a return of token t sent as slot id's hold ended.
func (d *deployState) looseSent(id SlotID, t int) {
	l := d.looseOf(id.Unit, t)
	l.inflight = true
	if v := d.views[id.Unit]; v != nil {
		l.index = v.Index
	}
}

// looseDone takes a return's answer.
func (d *deployState) looseDone(in ReturnDone) {
	l := d.loose[looseKey{in.Slot.Unit, in.T}]
	if l == nil {
		return
	}
	l.inflight = false
	if in.OK && in.Index > l.gone {
		l.gone = in.Index
	}
}

// returnLoose gives back the loose tokens the views show.
func (a *Agent) returnLoose(out []any) []any {
	d := a.dep
	if a.session == "" {
		return out
	}
	for i, unit := range d.units {
		v := d.list[i]
		for _, t := range sortedTokens(v.Tokens) {
			tok := v.Tokens[t]
			id := SlotID{unit, tok.K}
			if tok.Session != a.session {
				continue
			}
			if _, held := a.held[id]; held {
				continue // its hold's own (reconcileDeploy's strays)
			}
			l := d.looseOf(unit, t)
			if l.inflight || l.index >= v.Index || tok.Index <= l.gone {
				continue
			}
			l.inflight, l.index = true, v.Index
			out = append(out, ReturnToken{Slot: id, T: t, Session: a.session, Index: tok.Index})
		}
	}
	for k, l := range d.loose {
		if v := d.views[k.unit]; !l.inflight && (v == nil || v.Tokens[k.t].Session != a.session) {
			delete(d.loose, k) // no longer shown: forgotten
		}
	}
	return out
}
