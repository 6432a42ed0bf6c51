package lease

import (
	"context"
	"errors"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// TestClaimAndReleaseWith: a claim locks a key and writes its record in one
// transaction built from the value it read; a key changed between the read
// and the transaction is read again; another session's claim fails with
// ErrKeyHeld; ReleaseWith leaves a value and writes its record with the
// unlock; a claim that refuses writes nothing.
func TestClaimAndReleaseWith(t *testing.T) {
	c := dev(t)
	l1 := New(Config{Client: c, Checks: []string{consultest.StartLiveness(t, c, "n1").CheckID}, Log: consultest.Logger(t, "n1")})
	t.Cleanup(l1.Close)
	ctx := context.Background()
	kv := c.KV()
	const key = "mariposa/slots/api/0"
	set := func(k, v string) *api.TxnOp {
		return &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: k, Value: []byte(v)}}
	}

	// A refusing claim writes nothing.
	errNo := errors.New("slot failed")
	if _, err := l1.TryAcquire(ctx, Hold{Key: key, Claim: func(*api.KVPair) ([]byte, api.TxnOps, error) {
		return nil, nil, errNo
	}}); !errors.Is(err, errNo) {
		t.Fatalf("refused claim: %v", err)
	}
	if p, _, _ := kv.Get(key, nil); p != nil {
		t.Fatalf("a refused claim wrote %q", p.Value)
	}

	// The first read sees the value "old"; before the transaction another
	// writer changes it: the check fails, and the claim is built again
	// from the new value.
	if _, err := kv.Put(&api.KVPair{Key: key, Value: []byte("old")}, nil); err != nil {
		t.Fatal(err)
	}
	var seen []string
	term, err := l1.TryAcquire(ctx, Hold{Key: key, Claim: func(cur *api.KVPair) ([]byte, api.TxnOps, error) {
		seen = append(seen, string(cur.Value))
		if len(seen) == 1 {
			if _, err := kv.Put(&api.KVPair{Key: key, Value: []byte("newer")}, nil); err != nil {
				t.Error(err)
			}
		}
		return []byte("claimed after " + string(cur.Value)), api.TxnOps{set("mariposa/audit/1", "claim")}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[1] != "newer" {
		t.Fatalf("claim built from %q; want a second build from the changed value", seen)
	}
	p, _, _ := kv.Get(key, nil)
	if p == nil || p.Session != term.Session || string(p.Value) != "claimed after newer" || term.Index != p.ModifyIndex {
		t.Fatalf("key after claim: %+v (term %+v)", p, term)
	}
	if a, _, _ := kv.Get("mariposa/audit/1", nil); a == nil || string(a.Value) != "claim" {
		t.Fatal("the claim's record is missing")
	}

	// Another node's try fails at once.
	l2 := New(Config{Client: c, Checks: []string{consultest.StartLiveness(t, c, "n2").CheckID}, Log: consultest.Logger(t, "n2")})
	t.Cleanup(l2.Close)
	if _, err := l2.TryAcquire(ctx, Hold{Key: key, Claim: func(*api.KVPair) ([]byte, api.TxnOps, error) {
		return []byte("mine"), nil, nil
	}}); !errors.Is(err, ErrKeyHeld) {
		t.Fatalf("claim of a held key: %v", err)
	}

	// Release with a final value and a record, in one transaction.
	if err := term.ReleaseWith([]byte("released"), api.TxnOps{set("mariposa/audit/2", "release")}); err != nil {
		t.Fatal(err)
	}
	p, _, _ = kv.Get(key, nil)
	if p == nil || p.Session != "" || string(p.Value) != "released" {
		t.Fatalf("key after release: %+v", p)
	}
	if a, _, _ := kv.Get("mariposa/audit/2", nil); a == nil || string(a.Value) != "release" {
		t.Fatal("the release's record is missing")
	}
	// Released: no lock delay, the other node claims at once.
	t2, err := l2.TryAcquire(ctx, Hold{Key: key, Claim: func(cur *api.KVPair) ([]byte, api.TxnOps, error) {
		return []byte("n2 after " + string(cur.Value)), nil, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	_ = t2.Release()
}

// Term.Fenced applies its ops only while the term holds the key as
// acquired, and never writes the key itself: the fencing token (Index)
// stays the key's ModifyIndex for the whole hold.
func TestTermFenced(t *testing.T) {
	c := dev(t)
	l := New(Config{Client: c, Checks: []string{consultest.StartLiveness(t, c, "n1").CheckID}, Log: consultest.Logger(t, "n1")})
	t.Cleanup(l.Close)
	ctx := context.Background()
	kv := c.KV()
	const key = "mariposa/slots/web/0"
	term, err := l.TryAcquire(ctx, Hold{Key: key, Value: []byte("claimed")})
	if err != nil {
		t.Fatal(err)
	}
	status := func(v string) api.TxnOps {
		return api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVSet, Key: key + "/status", Value: []byte(v)}}}
	}
	for _, v := range []string{"starting", "healthy"} {
		if err := term.Fenced(ctx, status(v)); err != nil {
			t.Fatal(err)
		}
	}
	p, _, _ := kv.Get(key, nil)
	if st, _, _ := kv.Get(key+"/status", nil); p == nil || string(p.Value) != "claimed" || p.ModifyIndex != term.Index ||
		p.Session != term.Session || st == nil || string(st.Value) != "healthy" {
		t.Fatalf("after Fenced: key %+v (term index %d), status %+v", p, term.Index, st)
	}
	// The child's own fenced write, with the token it was given, still
	// passes.
	if ok, _, _, err := c.Txn().Txn(api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: key, Index: term.Index}},
		{KV: &api.KVTxnOp{Verb: api.KVCheckSession, Key: key, Session: term.Session}},
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: "app/data", Value: []byte("x")}},
	}, nil); err != nil || !ok {
		t.Fatalf("the child's fenced write after two Fenced: ok %v, %v", ok, err)
	}
	if err := term.Release(); err != nil {
		t.Fatal(err)
	}
	if err := term.Fenced(ctx, status("stale")); err == nil {
		t.Fatal("Fenced after Release succeeded")
	}
	// The same session takes the key again: the earlier term's Fenced
	// fails (check-index), the new one's passes.
	term2, err := l.TryAcquire(ctx, Hold{Key: key, Value: []byte("again")})
	if err != nil {
		t.Fatal(err)
	}
	if term2.Session != term.Session {
		t.Fatalf("a new session: %s, was %s", term2.Session, term.Session)
	}
	term.released.Store(false) // as a goroutine of the old term that has not seen its end
	term.mu.Lock()
	term.err = nil
	term.mu.Unlock()
	if err := term.Fenced(ctx, status("stale")); err == nil {
		t.Fatal("the earlier term's Fenced succeeded under the same session")
	}
	if err := term2.Fenced(ctx, status("again")); err != nil {
		t.Fatal(err)
	}
	other, _, _ := c.Session().Create(&api.SessionEntry{Behavior: "release", TTL: "30s"}, nil)
	if _, err := kv.Delete(key, nil); err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := kv.Acquire(&api.KVPair{Key: key, Value: []byte("theirs"), Session: other}, nil); !ok {
		t.Fatal("the other session could not take the key")
	}
	if err := term2.Fenced(ctx, status("stale")); err == nil {
		t.Fatal("Fenced on a key another session holds succeeded")
	}
	if st, _, _ := kv.Get(key+"/status", nil); string(st.Value) != "again" {
		t.Fatalf("a failed Fenced wrote %q", st.Value)
	}
}
