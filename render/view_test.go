package render

import (
	"testing"
	"time"
)

// The bucket lets a burst through at once, then one query per gap, and
// refills while the view is quiet.
func TestQueryBucket(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := queryBucket{tokens: queryBurst, at: t0}
	for i := 0; i < queryBurst; i++ {
		if w := b.take(t0); w != 0 {
			t.Fatalf("query %d of the burst waits %s", i+1, w)
		}
	}
	if w := b.take(t0); w != minQueryGap {
		t.Fatalf("after the burst: wait %s, want %s", w, minQueryGap)
	}
	if w := b.take(t0.Add(minQueryGap)); w != 0 {
		t.Fatalf("a gap later: wait %s", w)
	}
	// A quiet minute refills the bucket, but only up to the burst.
	now := t0.Add(time.Minute)
	for i := 0; i < queryBurst; i++ {
		if w := b.take(now); w != 0 {
			t.Fatalf("after a quiet spell, query %d waits %s", i+1, w)
		}
	}
	if w := b.take(now); w == 0 {
		t.Fatal("the bucket held more than its burst")
	}
}
