package executor

import (
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// countTxns counts the transactions a client sends.
type countTxns struct {
	n    atomic.Int64
	next http.RoundTripper
}

func (c *countTxns) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut && r.URL.Path == "/v1/txn" {
		c.n.Add(1)
	}
	return c.next.RoundTrip(r)
}

// markLost on a real agent: the first writer writes the lost slot's key
// back naming its holder, without a session; a backup writer sends no
// transaction when the key exists (written by the first, or claimed
// since: a refused transaction is a Raft entry all the same), and writes
// it when it does not.
func TestMarkLostBackupReadsFirst(t *testing.T) {
	consultest.SkipShort(t, "a Consul agent in -short mode")
	a := consultest.NewDev(t)
	count := &countTxns{next: http.DefaultTransport}
	c, err := api.NewClient(&api.Config{Address: a.HTTPAddr(), HttpClient: &http.Client{Transport: count}})
	if err != nil {
		t.Fatal(err)
	}
	e := New(Config{Client: c, Node: "n1", Detect: -1})
	defer e.stop()
	holder := func(id agent.SlotID) (string, uint64) {
		t.Helper()
		p, _, err := c.KV().Get(id.Key(), nil)
		if err != nil || p == nil {
			t.Fatalf("%s: %v %v", id.Key(), p, err)
		}
		var v cluster.SlotValue
		if err := json.Unmarshal(p.Value, &v); err != nil || p.Session != "" {
			t.Fatalf("%s: %s session %q: %v", id.Key(), p.Value, p.Session, err)
		}
		return v.Node, p.ModifyIndex
	}

	first := agent.SlotID{Unit: "api", K: 0}
	e.markLost(agent.MarkLost{Slot: first, Node: "x"})
	node, idx := holder(first)
	if node != "x" || count.n.Load() != 1 {
		t.Fatalf("first writer: key names %q, %d transactions", node, count.n.Load())
	}
	e.markLost(agent.MarkLost{Slot: first, Node: "x", Backup: true})
	if _, again := holder(first); again != idx || count.n.Load() != 1 {
		t.Fatalf("backup writer on a written key: index %d -> %d, %d transactions (want 1)", idx, again, count.n.Load())
	}

	// The first writer gone too: the backup writes it.
	second := agent.SlotID{Unit: "api", K: 1}
	e.markLost(agent.MarkLost{Slot: second, Node: "y", Backup: true})
	if node, _ := holder(second); node != "y" || count.n.Load() != 2 {
		t.Fatalf("backup writer on a missing key: key names %q, %d transactions (want 2)", node, count.n.Load())
	}
}
