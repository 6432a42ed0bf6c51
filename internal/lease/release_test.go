package lease

import (
	"context"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// TestReleaseWith: ReleaseWith leaves a value in the key and writes its
// record in the transaction that unlocks it; another node then acquires
// the key.
func TestReleaseWith(t *testing.T) {
	c := dev(t)
	l1 := New(Config{Client: c, Checks: []string{consultest.StartLiveness(t, c, "n1").CheckID}, Log: consultest.Logger(t, "n1")})
	t.Cleanup(l1.Close)
	ctx := context.Background()
	kv := c.KV()
	const key = "mariposa/leader/api"
	term, err := l1.Acquire(ctx, Hold{Key: key, Value: []byte("n1")})
	if err != nil {
		t.Fatal(err)
	}
	p, _, _ := kv.Get(key, nil)
	if p == nil || p.Session != term.Session || string(p.Value) != "n1" || term.Index != p.ModifyIndex {
		t.Fatalf("key after acquire: %+v (term %+v)", p, term)
	}
	record := api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVSet, Key: "mariposa/audit/1", Value: []byte("release")}}}
	if err := term.ReleaseWith([]byte("released"), record); err != nil {
		t.Fatal(err)
	}
	p, _, _ = kv.Get(key, nil)
	if p == nil || p.Session != "" || string(p.Value) != "released" {
		t.Fatalf("key after release: %+v", p)
	}
	if a, _, _ := kv.Get("mariposa/audit/1", nil); a == nil || string(a.Value) != "release" {
		t.Fatal("the release's record is missing")
	}
	l2 := New(Config{Client: c, Checks: []string{consultest.StartLiveness(t, c, "n2").CheckID}, Log: consultest.Logger(t, "n2")})
	t.Cleanup(l2.Close)
	t2, err := l2.Acquire(ctx, Hold{Key: key, Value: []byte("n2")})
	if err != nil {
		t.Fatal(err)
	}
	_ = t2.Release()
}
