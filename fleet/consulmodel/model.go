package consulmodel

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// Limits Consul enforces that the fleet relies on.
const (
	// MaxTxnOps is the most operations one transaction may hold (the
	// agent's txn_max_req_len default allows 128 KV operations).
	MaxTxnOps = 128
	// MaxLockDelay caps a session's lock delay, as Consul does.
	MaxLockDelay = 60 * time.Second
	// ttlMultiplier: Consul's leader arms a session's timer at 2 x TTL.
	ttlMultiplier = 2
)

// ErrNoLeader is what every write and consistent read answers while the
// cluster has no leader (Consul's structs.ErrNoLeader text).
var ErrNoLeader = errors.New("No cluster leader")

// Entry is one KV entry, as Consul's state store keeps it.
type Entry struct {
	Key         string
	Value       []byte
	Flags       uint64
	Session     string
	CreateIndex uint64
	ModifyIndex uint64
	LockIndex   uint64
}

// Pair returns the entry as the api client returns it.
func (e *Entry) Pair() *api.KVPair {
	return &api.KVPair{Key: e.Key, Value: bytes.Clone(e.Value), Flags: e.Flags, Session: e.Session,
		CreateIndex: e.CreateIndex, ModifyIndex: e.ModifyIndex, LockIndex: e.LockIndex}
}

func (e *Entry) clone() *Entry {
	c := *e
	return &c
}

// equal is Consul's DirEntry.Equal: a set that changes none of these
// keeps the entry's ModifyIndex.
func (e *Entry) equal(o *Entry) bool {
	return e.LockIndex == o.LockIndex && e.Key == o.Key && e.Flags == o.Flags &&
		bytes.Equal(e.Value, o.Value) && e.Session == o.Session
}

// Commit is one Raft write that changed the KV store or the catalog: its
// index and what it changed, in key order.
type Commit struct {
	Index    uint64
	Keys     []string // KV keys set or deleted
	Services []string // catalog services whose health answer changed
}

// Stats counts what a real cluster would pay.
type Stats struct {
	RaftWrites     uint64 // every entry in the Raft log, failed transactions included
	Txns           uint64 // KV transactions answered (reads included)
	FailedTxns     uint64 // transactions refused (lock delay, a failed check, ...)
	LockDelayFails uint64 // lock operations refused for a lock delay
	Invalidations  uint64 // sessions invalidated (destroy, TTL, check)
}

// Store is the model of one Consul cluster's state as its leader sees it.
type Store struct {
	index   uint64 // the last Raft index used
	kvIndex uint64 // the KV and tombstone tables' index
	kv      map[string]*Entry
	keys    []string // sorted keys of kv
	tomb    map[string]uint64

	lockDelay map[string]time.Time

	sessions    map[string]*Session
	nextSession uint64
	sessIndex   uint64

	catalog catalog

	leader  bool
	commits []Commit
	stats   Stats
}

// New returns an empty store with a leader.
func New() *Store {
	return &Store{
		kv:        map[string]*Entry{},
		tomb:      map[string]uint64{},
		lockDelay: map[string]time.Time{},
		sessions:  map[string]*Session{},
		catalog:   newCatalog(),
		leader:    true,
		index:     1, // Consul's first entries are its own bootstrap
	}
}

// Index is the last Raft index used.
func (s *Store) Index() uint64 { return s.index }

// Stats returns the counters so far.
func (s *Store) Stats() Stats { return s.stats }

// TakeCommits returns the writes since the last call, oldest first.
func (s *Store) TakeCommits() []Commit {
	c := s.commits
	s.commits = nil
	return c
}

// HasLeader says whether writes and consistent reads are served.
func (s *Store) HasLeader() bool { return s.leader }

// LoseLeader starts an election: until ElectLeader nothing is written,
// no session is invalidated, and only stale reads are answered.
func (s *Store) LoseLeader() { s.leader = false }

// ElectLeader ends an election at now. The new leader re-arms every
// session's TTL timer from now (Consul's initializeSessionTimers) and,
// like any new leader, commits a no-op entry.
func (s *Store) ElectLeader(now time.Time) {
	if s.leader {
		return
	}
	s.leader = true
	s.raft()
	for _, se := range s.sessions {
		if se.TTL > 0 {
			se.deadline = now.Add(ttlMultiplier * se.TTL)
		}
	}
}

// raft uses the next Raft index.
func (s *Store) raft() uint64 {
	s.index++
	s.stats.RaftWrites++
	return s.index
}

// Get reads one key. index is the KV table's index (Consul's answer to a
// single-key read), the key's own change wakes a blocking Get.
func (s *Store) Get(key string, stale bool) (*Entry, uint64, error) {
	if !stale && !s.leader {
		return nil, 0, ErrNoLeader
	}
	idx := s.kvIndex
	if idx == 0 {
		idx = 1
	}
	if e, ok := s.kv[key]; ok {
		return e.clone(), idx, nil
	}
	return nil, idx, nil
}

// List reads every key under prefix, in key order, with the index a
// blocking query on the prefix would carry.
func (s *Store) List(prefix string, stale bool) ([]*Entry, uint64, error) {
	if !stale && !s.leader {
		return nil, 0, ErrNoLeader
	}
	var out []*Entry
	for _, k := range s.keysWithPrefix(prefix) {
		out = append(out, s.kv[k].clone())
	}
	return out, s.ListIndex(prefix), nil
}

// Keys lists the keys under prefix, in order, with the index a blocking
// query on the prefix carries (Consul's ?keys: KVSKeys computes the index
// as KVSList does). The fleet's watches use it where a key's name says all
// they need.
func (s *Store) Keys(prefix string, stale bool) ([]string, uint64, error) {
	if !stale && !s.leader {
		return nil, 0, ErrNoLeader
	}
	return s.keysWithPrefix(prefix), s.ListIndex(prefix), nil
}

// ListIndex is X-Consul-Index of a list of prefix: the highest index of
// its entries and tombstones, or the table's index when there are none.
func (s *Store) ListIndex(prefix string) uint64 {
	var idx uint64
	if prefix == "" {
		idx = s.kvIndex
	} else {
		for _, k := range s.keysWithPrefix(prefix) {
			idx = max(idx, s.kv[k].ModifyIndex)
		}
		for k, ti := range s.tomb {
			if strings.HasPrefix(k, prefix) {
				idx = max(idx, ti)
			}
		}
	}
	if idx == 0 {
		idx = s.kvIndex
	}
	if idx == 0 {
		idx = 1
	}
	return idx
}

func (s *Store) keysWithPrefix(prefix string) []string {
	i := sort.SearchStrings(s.keys, prefix)
	j := i
	for j < len(s.keys) && strings.HasPrefix(s.keys[j], prefix) {
		j++
	}
	return s.keys[i:j]
}

func (s *Store) insertKey(k string) {
	i := sort.SearchStrings(s.keys, k)
	if i < len(s.keys) && s.keys[i] == k {
		return
	}
	s.keys = append(s.keys, "")
	copy(s.keys[i+1:], s.keys[i:])
	s.keys[i] = k
}

func (s *Store) removeKey(k string) {
	i := sort.SearchStrings(s.keys, k)
	if i < len(s.keys) && s.keys[i] == k {
		s.keys = append(s.keys[:i], s.keys[i+1:]...)
	}
}

// LockDelayUntil is when a key's lock delay ends (zero: none).
func (s *Store) LockDelayUntil(key string) time.Time { return s.lockDelay[key] }

// tx is one write transaction: an overlay on the store, applied whole on
// success and dropped otherwise.
type tx struct {
	s       *Store
	idx     uint64
	kv      map[string]*Entry // nil value: deleted in this transaction
	tomb    map[string]uint64
	changed []string
	delays  map[string]time.Time
}

func (s *Store) begin(idx uint64) *tx {
	return &tx{s: s, idx: idx, kv: map[string]*Entry{}, tomb: map[string]uint64{}, delays: map[string]time.Time{}}
}

func (t *tx) get(key string) *Entry {
	if e, ok := t.kv[key]; ok {
		return e
	}
	return t.s.kv[key]
}

func (t *tx) touch(key string) {
	for _, k := range t.changed {
		if k == key {
			return
		}
	}
	t.changed = append(t.changed, key)
}

// set is Consul's kvsSetTxn: CreateIndex kept, the session kept unless
// updateSession, ModifyIndex kept when nothing changed.
func (t *tx) set(e *Entry, updateSession bool) {
	existing := t.get(e.Key)
	if existing != nil {
		e.CreateIndex = existing.CreateIndex
	} else {
		e.CreateIndex = t.idx
	}
	if !updateSession {
		if existing != nil {
			e.Session = existing.Session
		} else {
			e.Session = ""
		}
	}
	if existing != nil && existing.equal(e) {
		e.ModifyIndex = existing.ModifyIndex
		return
	}
	e.ModifyIndex = t.idx
	t.kv[e.Key] = e
	t.touch(e.Key)
}

func (t *tx) del(key string) {
	if t.get(key) == nil {
		return
	}
	t.kv[key] = nil
	t.tomb[key] = t.idx
	t.touch(key)
}

func (t *tx) list(prefix string) []*Entry {
	keys := map[string]bool{}
	for _, k := range t.s.keysWithPrefix(prefix) {
		keys[k] = true
	}
	for k := range t.kv {
		if strings.HasPrefix(k, prefix) {
			keys[k] = true
		}
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	var out []*Entry
	for _, k := range sorted {
		if e := t.get(k); e != nil {
			out = append(out, e)
		}
	}
	return out
}

// commit applies the overlay to the store.
func (t *tx) commit() {
	s := t.s
	sort.Strings(t.changed)
	for _, k := range t.changed {
		e := t.kv[k]
		if e == nil {
			delete(s.kv, k)
			s.removeKey(k)
			s.tomb[k] = t.tomb[k]
		} else {
			if _, ok := s.kv[k]; !ok {
				s.insertKey(k)
			}
			s.kv[k] = e
		}
	}
	for k, until := range t.delays {
		s.lockDelay[k] = until
	}
	if len(t.changed) > 0 {
		s.kvIndex = t.idx
		s.commits = append(s.commits, Commit{Index: t.idx, Keys: t.changed})
	}
}

// TxnResult is a transaction's answer, as api.KV().Txn returns it.
type TxnResult struct {
	OK      bool
	Results []*api.KVPair
	Errors  api.TxnErrors
	// Index is the Raft index the transaction used (0: none: refused
	// before the write was proposed, or a read-only transaction).
	Index uint64
}

// KVTxn runs ops at now, all or nothing, as Consul's Txn endpoint does.
func (s *Store) KVTxn(now time.Time, ops api.KVTxnOps) (TxnResult, error) {
	if len(ops) > MaxTxnOps {
		return TxnResult{}, fmt.Errorf("Transaction contains too many operations (%d > %d)", len(ops), MaxTxnOps)
	}
	if !s.leader {
		return TxnResult{}, ErrNoLeader
	}
	s.stats.Txns++
	// The leader's pre-apply checks: a lock during a key's lock delay is
	// refused before anything is proposed.
	var errs api.TxnErrors
	for i, op := range ops {
		if op.Key == "" {
			errs = append(errs, &api.TxnError{OpIndex: i, What: "Must provide key"})
			continue
		}
		if op.Verb == api.KVLock {
			if until, ok := s.lockDelay[op.Key]; ok && until.After(now) {
				s.stats.LockDelayFails++
				errs = append(errs, &api.TxnError{OpIndex: i, What: fmt.Sprintf("failed to lock key %q due to lock delay", op.Key)})
			}
		}
	}
	if len(errs) > 0 {
		s.stats.FailedTxns++
		return TxnResult{Errors: errs}, nil
	}
	readOnly := true
	for _, op := range ops {
		switch op.Verb {
		case api.KVGet, api.KVGetOrEmpty, api.KVGetTree, api.KVCheckIndex, api.KVCheckSession, api.KVCheckNotExists:
		default:
			readOnly = false
		}
	}
	var t *tx
	if readOnly {
		t = s.begin(0)
	} else {
		t = s.begin(s.raft())
	}
	var results []*api.KVPair
	for i, op := range ops {
		res, err := t.apply(op)
		results = append(results, res...)
		if err != nil {
			errs = append(errs, &api.TxnError{OpIndex: i, What: err.Error()})
		}
	}
	if len(errs) > 0 {
		s.stats.FailedTxns++
		return TxnResult{Errors: errs, Index: t.idx}, nil
	}
	t.commit()
	return TxnResult{OK: true, Results: results, Index: t.idx}, nil
}

// apply is Consul's txnKVS for one operation.
func (t *tx) apply(op *api.KVTxnOp) ([]*api.KVPair, error) {
	var entry *Entry
	var err error
	switch op.Verb {
	case api.KVSet:
		entry = &Entry{Key: op.Key, Value: bytes.Clone(op.Value), Flags: op.Flags}
		t.set(entry, false)
	case api.KVDelete:
		t.del(op.Key)
	case api.KVDeleteCAS:
		e := t.get(op.Key)
		switch {
		case e == nil:
			// Consul: a missing key counts as deleted.
		case e.ModifyIndex != op.Index:
			err = fmt.Errorf("failed to delete key %q, index is stale", op.Key)
		default:
			t.del(op.Key)
		}
	case api.KVCAS:
		e := t.get(op.Key)
		if (op.Index == 0 && e != nil) || (op.Index != 0 && (e == nil || e.ModifyIndex != op.Index)) {
			err = fmt.Errorf("failed to set key %q, index is stale", op.Key)
			break
		}
		entry = &Entry{Key: op.Key, Value: bytes.Clone(op.Value), Flags: op.Flags}
		t.set(entry, false)
	case api.KVLock:
		entry, err = t.lock(op)
	case api.KVUnlock:
		entry, err = t.unlock(op)
	case api.KVGet:
		if e := t.get(op.Key); e != nil {
			return []*api.KVPair{e.Pair()}, nil
		}
		err = fmt.Errorf("key %q doesn't exist", op.Key)
	case api.KVGetOrEmpty:
		if e := t.get(op.Key); e != nil {
			return []*api.KVPair{e.Pair()}, nil
		}
		return []*api.KVPair{{Key: op.Key, Flags: op.Flags, Session: op.Session, ModifyIndex: op.Index}}, nil
	case api.KVGetTree:
		var out []*api.KVPair
		for _, e := range t.list(op.Key) {
			out = append(out, e.Pair())
		}
		return out, nil
	case api.KVCheckSession:
		e := t.get(op.Key)
		switch {
		case e == nil:
			err = fmt.Errorf("failed to check session, key %q doesn't exist", op.Key)
		case e.Session != op.Session:
			err = fmt.Errorf("failed session check for key %q, current session %q != %q", op.Key, e.Session, op.Session)
		default:
			entry = e
		}
	case api.KVCheckIndex:
		e := t.get(op.Key)
		switch {
		case e == nil:
			err = fmt.Errorf("failed to check index, key %q doesn't exist", op.Key)
		case e.ModifyIndex != op.Index:
			err = fmt.Errorf("failed index check for key %q, current modify index %d != %d", op.Key, e.ModifyIndex, op.Index)
		default:
			entry = e
		}
	case api.KVCheckNotExists:
		if t.get(op.Key) != nil {
			err = fmt.Errorf("key %q exists", op.Key)
		}
	default:
		err = fmt.Errorf("unknown KV verb %q", op.Verb)
	}
	if err != nil {
		return nil, err
	}
	if entry != nil {
		// Writes and checks answer with the entry, its value blanked.
		p := entry.Pair()
		p.Value = nil
		return []*api.KVPair{p}, nil
	}
	return nil, nil
}

// lock is Consul's kvsLockTxn.
func (t *tx) lock(op *api.KVTxnOp) (*Entry, error) {
	if op.Session == "" {
		return nil, fmt.Errorf("missing session")
	}
	if _, ok := t.s.sessions[op.Session]; !ok {
		return nil, fmt.Errorf("invalid session %#v", op.Session)
	}
	e := &Entry{Key: op.Key, Value: bytes.Clone(op.Value), Flags: op.Flags, Session: op.Session}
	if existing := t.get(op.Key); existing != nil {
		switch existing.Session {
		case op.Session:
			e.LockIndex = existing.LockIndex
		case "":
			e.LockIndex = existing.LockIndex + 1
		default:
			return nil, fmt.Errorf("failed to lock key %q, lock is already held", op.Key)
		}
	} else {
		e.LockIndex = 1
	}
	t.set(e, true)
	return e, nil
}

// unlock is Consul's kvsUnlockTxn.
func (t *tx) unlock(op *api.KVTxnOp) (*Entry, error) {
	if op.Session == "" {
		return nil, fmt.Errorf("missing session")
	}
	existing := t.get(op.Key)
	if existing == nil || existing.Session != op.Session {
		return nil, fmt.Errorf("failed to unlock key %q, lock isn't held, or is held by another session", op.Key)
	}
	e := &Entry{Key: op.Key, Value: bytes.Clone(op.Value), Flags: op.Flags, LockIndex: existing.LockIndex}
	t.set(e, true)
	return e, nil
}

// single runs one operation as the KV endpoint does (one Raft write,
// true or false, no per-operation error for a refused lock or CAS).
func (s *Store) single(now time.Time, op *api.KVTxnOp) (bool, uint64, error) {
	r, err := s.KVTxn(now, api.KVTxnOps{op})
	if err != nil {
		return false, 0, err
	}
	return r.OK, r.Index, nil
}

// Put is PUT /v1/kv/<key>.
func (s *Store) Put(now time.Time, key string, value []byte, flags uint64) (uint64, error) {
	_, idx, err := s.single(now, &api.KVTxnOp{Verb: api.KVSet, Key: key, Value: value, Flags: flags})
	return idx, err
}

// CAS is PUT /v1/kv/<key>?cas=<index>.
func (s *Store) CAS(now time.Time, key string, value []byte, flags, index uint64) (bool, error) {
	ok, _, err := s.single(now, &api.KVTxnOp{Verb: api.KVCAS, Key: key, Value: value, Flags: flags, Index: index})
	return ok, err
}

// Acquire is PUT /v1/kv/<key>?acquire=<session>.
func (s *Store) Acquire(now time.Time, key string, value []byte, session string) (bool, error) {
	ok, _, err := s.single(now, &api.KVTxnOp{Verb: api.KVLock, Key: key, Value: value, Session: session})
	return ok, err
}

// Release is PUT /v1/kv/<key>?release=<session>.
func (s *Store) Release(now time.Time, key string, value []byte, session string) (bool, error) {
	ok, _, err := s.single(now, &api.KVTxnOp{Verb: api.KVUnlock, Key: key, Value: value, Session: session})
	return ok, err
}

// Delete is DELETE /v1/kv/<key>.
func (s *Store) Delete(now time.Time, key string) error {
	_, _, err := s.single(now, &api.KVTxnOp{Verb: api.KVDelete, Key: key})
	return err
}

// DeleteCAS is DELETE /v1/kv/<key>?cas=<index>.
func (s *Store) DeleteCAS(now time.Time, key string, index uint64) (bool, error) {
	ok, _, err := s.single(now, &api.KVTxnOp{Verb: api.KVDeleteCAS, Key: key, Index: index})
	return ok, err
}
