package leader

import (
	"context"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/lease"
)

// Term is one period of leadership: the elector's session holding the lock
// once. It is the lease's term (Key, Session, Index, LockIndex, Started,
// Lost, Expired, Err, Deadline); see internal/lease.
type Term struct {
	*lease.Term

	releaseOps api.TxnOps // ReleaseAlso's
}

// ReleaseAlso has the elector apply ops in the transaction that releases
// the lock after this term: they take effect exactly when the release does
// (a leader withdrawing its catalog registration in the same Raft write
// that lets the next leader in, say). Call it from onTerm, before it
// returns. An expired term's release is refused by Consul, and ops with it.
func (t *Term) ReleaseAlso(ops api.TxnOps) { t.releaseOps = ops }

func (t *Term) isExpired() bool {
	select {
	case <-t.Expired():
		return true
	default:
		return false
	}
}

// Holder is what Consul says about a lock key.
type Holder struct {
	Key       string
	Session   string // the holding session; "" when nobody holds the lock
	Node      string // the holding session's node, when known
	Value     []byte // written by the holder (or the last holder)
	Index     uint64 // the key's ModifyIndex
	LockIndex uint64
}

// Lookup reads who holds key, with a consistent read.
func Lookup(ctx context.Context, c *api.Client, key string) (Holder, error) {
	q := (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx)
	pair, _, err := c.KV().Get(key, q)
	if err != nil {
		return Holder{}, err
	}
	h := Holder{Key: key}
	if pair == nil {
		return h, nil
	}
	h.Session, h.Value, h.Index, h.LockIndex = pair.Session, pair.Value, pair.ModifyIndex, pair.LockIndex
	if h.Session != "" {
		se, _, err := c.Session().Info(h.Session, q)
		if err != nil {
			return h, err
		}
		if se != nil {
			h.Node = se.Node
		}
	}
	return h, nil
}
