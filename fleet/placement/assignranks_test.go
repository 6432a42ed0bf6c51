package placement

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/schema"
)

// HRW by its definition: FNV-1a of "unit\x00slot\x00node", then splitmix64's
// finaliser.
func hrwByDefinition(unit string, slot int, node string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(unit + "\x00" + strconv.Itoa(slot) + "\x00" + node))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

func TestHRWMatchesDefinition(t *testing.T) {
	for _, unit := range []string{"", "api", "u042"} {
		for _, slot := range []int{0, 7, 10, 12345} {
			for _, node := range []string{"", "n0001", "a-very-long-node-name.example.com"} {
				if got, want := HRW(unit, slot, node), hrwByDefinition(unit, slot, node); got != want {
					t.Errorf("HRW(%q, %d, %q) = %x, want %x", unit, slot, node, got, want)
				}
			}
		}
	}
}

// AssignRanks gives exactly Assign's ranks, on its path by positions (the
// plain shape: duplicate and unsorted names, holders unknown or above
// the count, max_per_node above 1 so that anti-affinity and load make
// scores differ) and on Assign's own (constraints, penalties, a node not
// live).
func TestAssignRanksMatchesAssign(t *testing.T) {
	plainN := 0
	rng := rand.New(rand.NewPCG(3, 4))
	now := time.Unix(1000, 0)
	for trial := range 400 {
		n := 1 + rng.IntN(40)
		count := rng.IntN(30)
		p := &schema.Placement{Count: count, MaxPerNode: 1 + rng.IntN(3)}
		u := Unit{Name: fmt.Sprintf("u%d", trial%7), Placement: p}
		var v View
		for i := range n {
			name := fmt.Sprintf("n%03d", i)
			if trial%4 == 1 {
				name = fmt.Sprintf("n%03d", rng.IntN(n+3)) // unsorted, repeated
			}
			v.Nodes = append(v.Nodes, NodeInfo{Name: name, Fleet: true, Live: true, Eligible: true})
		}
		v.Holders = map[int]string{}
		for k := range count + 3 {
			switch rng.IntN(4) {
			case 0:
				v.Holders[k] = fmt.Sprintf("n%03d", rng.IntN(n+5))
			case 1:
				v.Holders[k] = ""
			}
		}
		var free []int
		for k := -1; k < count+2; k++ {
			if v.Holders[k] == "" || rng.IntN(5) == 0 {
				free = append(free, k)
			}
		}
		rng.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
		switch trial % 8 {
		case 3:
			p.Constraints = []*schema.Constraint{{Attribute: "node.name", Operator: "!=", Value: "n001"}}
		case 5:
			v.Penalties = map[string]time.Time{"n002": now.Add(time.Minute)}
		case 7:
			v.Nodes[0].Live = false
		}
		if plainShape(u, v, now) {
			plainN++
		}
		got := AssignRanks(u, free, v, now)
		want := placesOf(Assign(u, free, v, now), v.Nodes)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("trial %d (plain %v): AssignRanks\n%v\nAssign\n%v", trial, plainShape(u, v, now), got, want)
		}
	}
	if plainN < 100 {
		t.Errorf("only %d of 400 trials took the path by positions", plainN)
	}
}
