package placement

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// The radix sort rank uses when every feasible node scores the same gives
// the order of the comparison (HRW descending, ties by position), ties
// and repeated bytes included.
func TestSortByHRWMatchesCompare(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var tmp []rankKey
	for trial := range 200 {
		n := rng.IntN(300)
		keys := make([]rankKey, n)
		for i := range keys {
			h := rng.Uint64()
			switch trial % 3 {
			case 1:
				h &= 0xff00ff // few bytes differ: passes skipped
			case 2:
				h = uint64(rng.IntN(4)) // many ties
			}
			keys[i] = rankKey{hrw: h, idx: int32(i), ok: true, total: 1}
		}
		want := slices.Clone(keys)
		slices.SortFunc(want, compareKeys)
		tmp = sortByHRW(keys, tmp)
		if !slices.Equal(keys, want) {
			t.Fatalf("trial %d (%d keys): radix order differs", trial, n)
		}
	}
}
