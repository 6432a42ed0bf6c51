package cluster

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
)

// AuditEvent is one cluster decision, written in the same transaction as
// the decision itself (CLUSTER.md section 7): never a decision without its
// record, nor a record without the decision.
type AuditEvent struct {
	At        time.Time `json:"at"`
	Node      string    `json:"node"`
	Actor     string    `json:"actor,omitempty"` // an operator; empty for mariposa's own decisions
	Service   string    `json:"service,omitempty"`
	Slot      string    `json:"slot,omitempty"`
	Action    string    `json:"action"` // claim | release | reschedule | fail | reset | deploy | stop | purge | storm-brake | resume
	From      string    `json:"from,omitempty"`
	To        string    `json:"to,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	TermIndex uint64    `json:"term_index,omitempty"`
}

var auditSeq atomic.Uint64

// AuditKey is audit/<yyyy-mm-dd>/<unixnano>-<node>-<seq>: one key per
// event, a day per prefix, so retention deletes whole days.
func AuditKey(at time.Time, node string) string {
	at = at.UTC()
	return fmt.Sprintf("%s%s/%020d-%s-%d", AuditPrefix, at.Format("2006-01-02"), at.UnixNano(), node, auditSeq.Add(1))
}

// AuditOp is the transaction op that records e.
func AuditOp(e AuditEvent) *api.TxnOp {
	b, _ := json.Marshal(e)
	return &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: AuditKey(e.At, e.Node), Value: b}}
}
