package schema

import (
	"fmt"
	"sort"

	"github.com/agext/levenshtein"
)

// suggest returns the valid name nearest to given, or "" when none is close
// enough to be a plausible typo (same threshold as HCL's own suggestions).
func suggest(given string, valid []string) string {
	best, bestDist := "", 3
	for _, v := range valid {
		if d := levenshtein.Distance(given, v, nil); d < bestDist {
			best, bestDist = v, d
		}
	}
	return best
}

// didYouMean renders a suggestion as a sentence to append to a detail, or "".
func didYouMean(given string, valid []string) string {
	if s := suggest(given, valid); s != "" {
		return fmt.Sprintf(" Did you mean %q?", s)
	}
	return ""
}

// quotedList renders names as `"a", "b" or "c"`.
func quotedList(names []string) string {
	s := ""
	for i, n := range names {
		switch {
		case i == 0:
		case i == len(names)-1:
			s += " or "
		default:
			s += ", "
		}
		s += fmt.Sprintf("%q", n)
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
