package cluster

import (
	"context"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// DefaultAuditRetention is how long the fleet keeps its audit records.
const DefaultAuditRetention = 7 * 24 * time.Hour

// AuditDay is the day prefix of records written at t: audit/<yyyy-mm-dd>/.
func AuditDay(t time.Time) string { return AuditPrefix + t.UTC().Format(time.DateOnly) + "/" }

// AuditDays lists the day prefixes under audit/ with one keys-only read
// (no values), oldest first (Consul sorts keys, and dates sort as days).
// A prefix that is not a date (written by hand) is left out.
func AuditDays(ctx context.Context, client *api.Client) ([]string, error) {
	keys, _, err := client.KV().Keys(AuditPrefix, "/", (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, err
	}
	var days []string
	for _, k := range keys {
		if _, ok := parseAuditDay(k); ok {
			days = append(days, k)
		}
	}
	return days, nil
}

// parseAuditDay reads audit/<yyyy-mm-dd>/ as the day's midnight UTC.
func parseAuditDay(prefix string) (time.Time, bool) {
	s, ok := strings.CutPrefix(prefix, AuditPrefix)
	if !ok {
		return time.Time{}, false
	}
	s, ok = strings.CutSuffix(s, "/")
	if !ok {
		return time.Time{}, false
	}
	d, err := time.Parse(time.DateOnly, s)
	if err != nil || d.Format(time.DateOnly) != s {
		return time.Time{}, false
	}
	return d, true
}

// PruneAudit deletes the audit days that ended more than retention before
// now, a whole day prefix at a time (one delete-tree each), and returns
// the prefixes it deleted. It costs one keys-only read and writes nothing
// when no day is that old. Deleting is idempotent: two nodes pruning at
// once delete the same days.
func PruneAudit(ctx context.Context, client *api.Client, now time.Time, retention time.Duration) ([]string, error) {
	if retention <= 0 {
		return nil, nil
	}
	days, err := AuditDays(ctx, client)
	if err != nil {
		return nil, err
	}
	cutoff := now.Add(-retention)
	var deleted []string
	for _, p := range days {
		d, _ := parseAuditDay(p)
		if d.Add(24 * time.Hour).After(cutoff) {
			continue // the day holds records younger than retention
		}
		if _, err := client.KV().DeleteTree(p, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
			return deleted, err
		}
		deleted = append(deleted, p)
	}
	return deleted, nil
}
