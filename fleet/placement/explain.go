package placement

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Explain prints, for `mariposa why`, how the nodes rank for slot of unit
// (ranked as Rank or Assign returned it): per node its rank, total score and
// components ("-" where a component does not apply), and its verdict: "ok"
// or why it cannot take the slot (which constraint failed, or "needs 256
// MiB memory, 120 MiB free").
//
//	api/2: 2 of 3 nodes feasible
//	RANK  NODE  TOTAL   AFFINITY  SPREAD  ANTI-AFF  PENALTY  STICKY  LOAD    CAPACITY  VERDICT
//	0     web1  0.333   1.000     -       0.000     -        -       0.000   -         ok
//	1     web3  -0.167  0.000     -       0.000     -        -       -0.500  -         ok
//	-     web2                                                                         node.meta.zone = "z3" fails != "z3" (a.hcl:4:3)
func Explain(unit string, slot int, ranked []Ranked) string {
	var b strings.Builder
	feasible := 0
	for _, r := range ranked {
		if r.Verdict.OK {
			feasible++
		}
	}
	fmt.Fprintf(&b, "%s/%d: %d of %d nodes feasible\n", unit, slot, feasible, len(ranked))
	if len(ranked) == 0 {
		return b.String()
	}
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "RANK\tNODE\tTOTAL\tAFFINITY\tSPREAD\tANTI-AFF\tPENALTY\tSTICKY\tLOAD\tCAPACITY\tVERDICT")
	for _, r := range ranked {
		if !r.Verdict.OK {
			fmt.Fprintf(w, "-\t%s\t\t\t\t\t\t\t\t\t%s\n", r.Node, oneLine(r.Verdict.Reason))
			continue
		}
		s := r.Score
		col := func(c Components, v float64) string {
			if !s.Applied.Has(c) {
				return "-"
			}
			return num(v)
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\tok\n", r.Rank, r.Node,
			num(s.Total),
			col(CompAffinity, s.Affinity), col(CompSpread, s.Spread), col(CompAntiAffinity, s.AntiAffinity),
			col(CompPenalty, s.Penalty), col(CompStickiness, s.Stickiness), col(CompLoad, s.Load), col(CompCapacity, s.Capacity))
	}
	w.Flush()
	return b.String()
}

// num prints 3 decimals, and 0.000 rather than -0.000.
func num(v float64) string {
	s := strconv.FormatFloat(v, 'f', 3, 64)
	if s == "-0.000" {
		return "0.000"
	}
	return s
}

// oneLine keeps a reason (which may quote user text) on its row.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
