package schema

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/agext/levenshtein"
	"github.com/hashicorp/hcl/v2"
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

// suggestName is suggest for argument and block names, which also accepts
// a name that is a clear prefix of a valid one, or that one is a prefix of
// ("depends" for "depends_on", "environment" for "env").
func suggestName(given string, valid []string) string {
	if s := suggest(given, valid); s != "" {
		return s
	}
	if len(given) < 3 {
		return ""
	}
	for _, v := range valid {
		if len(v) >= 3 && (strings.HasPrefix(v, given) || strings.HasPrefix(given, v)) {
			return v
		}
	}
	return ""
}

// unsupportedName extracts the name from HCL's "Unsupported argument" and
// "Unsupported block type" details.
var unsupportedName = regexp.MustCompile(`^(?:An argument named|Blocks of type) "([^"]*)" (?:is|are) not expected here\.$`)

// addSuggestions completes HCL's structural diagnostics with suggestName
// where HCL's own, stricter, suggestion found nothing.
func addSuggestions(diags hcl.Diagnostics, schema *hcl.BodySchema) {
	var valid []string
	for _, a := range schema.Attributes {
		valid = append(valid, a.Name)
	}
	for _, b := range schema.Blocks {
		valid = append(valid, b.Type)
	}
	for _, d := range diags {
		if d.Summary != "Unsupported argument" && d.Summary != "Unsupported block type" {
			continue
		}
		m := unsupportedName.FindStringSubmatch(d.Detail)
		if m == nil {
			continue
		}
		if s := suggestName(m[1], valid); s != "" {
			d.Detail += fmt.Sprintf(" Did you mean %q?", s)
		}
	}
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

// bodyContent is body.Content with the extra suggestions.
func bodyContent(body hcl.Body, schema *hcl.BodySchema) (*hcl.BodyContent, hcl.Diagnostics) {
	content, diags := body.Content(schema)
	addSuggestions(diags, schema)
	return content, diags
}
