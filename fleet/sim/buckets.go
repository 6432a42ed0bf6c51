package sim

import "time"

// The executor's connection budget (fleet/executor/pool.go) groups a
// node's units in at most Config.Buckets buckets: one blocking query per
// bucket for the units' indexes (and one for their vacancy keys, one for
// their deployments), whose answer carries every unit of the bucket. With
// Config.Buckets set and more units than buckets, the simulator charges
// each answer of a unit's index as its bucket's answer: the bytes of all
// the bucket's units' indexes, once per node and bucket per watchEvery
// (answers of the bucket's units closer together are one answer); and a
// release's vacancy answer as the bucket's vacancy keys. The deliveries
// stay per unit, so the charge is pessimistic: two units of a bucket
// heard at the idle pace a little apart are charged two answers.

// bucketOf is unit ui's bucket and its units (the executor's cut: the
// units in name order, in runs of neighbours); ok false: a bucket per
// unit.
func (s *Sim) bucketOf(ui int) (b, lo, hi int, ok bool) {
	n, u := s.cfg.Buckets, len(s.units)
	if n <= 0 || u <= n {
		return 0, 0, 0, false
	}
	// The units are named in order (u000, u001, ...): run i is
	// [i*u/n, (i+1)*u/n).
	for i := range n {
		lo, hi := i*u/n, (i+1)*u/n
		if ui >= lo && ui < hi {
			return i, lo, hi, true
		}
	}
	return 0, 0, 0, false
}

// indexCharge is what an answer of unit ui's index to n costs, as the
// executor's watches serve it.
func (s *Sim) indexCharge(n *node, ui int, c *cachedSlots) uint64 {
	b, lo, hi, ok := s.bucketOf(ui)
	if !ok {
		return c.bytes
	}
	if n.bucketAt == nil {
		n.bucketAt = make([]time.Duration, s.cfg.Buckets)
		for i := range n.bucketAt {
			n.bucketAt[i] = -time.Hour
		}
	}
	if s.now-n.bucketAt[b] < watchEvery {
		return 0 // within the bucket's answer already charged
	}
	n.bucketAt[b] = s.now
	var bytes uint64
	for i := lo; i < hi; i++ {
		bytes += s.slotsView(i).bytes
	}
	return bytes
}

// vacancyCharge is a release's vacancy answer to one node.
func (s *Sim) vacancyCharge(ui int) uint64 {
	if _, lo, hi, ok := s.bucketOf(ui); ok {
		return uint64(hi-lo) * vacancyBytes
	}
	return vacancyBytes
}
