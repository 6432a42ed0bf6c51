package supervisor_test

import (
	"testing"

	"github.com/mariposa-sh/mariposa/metrics"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// TestLeaderFailoverMetricsFromDecide feeds mariposa's metrics the events
// decide really emits for a term's two ends, in decide's order: one term
// that ends is one failover, with the reason of its end (issue 25: a
// resignation was counted twice, as resigned and as lost, because decide
// emits leader-lost after leader-resigned when the resigned term ends).
func TestLeaderFailoverMetricsFromDecide(t *testing.T) {
	seqs := supervisor.LeaderTermEvents(t)
	for _, tc := range []struct {
		name     string
		resigned float64
		lost     float64
	}{
		{"resigned", 1, 0},
		{"lost", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := metrics.New(metrics.Sources{})
			var kinds []supervisor.EventKind
			for _, e := range seqs[tc.name] {
				kinds = append(kinds, e.Kind)
				m.Event(e)
			}
			got := failovers(t, m)
			if got["resigned"] != tc.resigned || got["lost"] != tc.lost || got["terms"] != 1 {
				t.Fatalf("after %v: terms %v, failovers resigned %v lost %v; want 1, %v, %v",
					kinds, got["terms"], got["resigned"], got["lost"], tc.resigned, tc.lost)
			}
		})
	}
}

// failovers reads mariposa_leader_failovers_total by reason, and
// mariposa_leader_terms_total as "terms", from the registry.
func failovers(t *testing.T, m *metrics.Metrics) map[string]float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			switch mf.GetName() {
			case "mariposa_leader_terms_total":
				out["terms"] += s.GetCounter().GetValue()
			case "mariposa_leader_failovers_total":
				for _, l := range s.GetLabel() {
					if l.GetName() == "reason" {
						out[l.GetValue()] += s.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return out
}
