package render

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"time"

	dep "github.com/hashicorp/consul-template/dependency"
)

// minQueryGap rate-limits one view under sustained churn: one query per
// 100ms (consul-template's gap between updates), after a burst of
// queryBurst. A change after a quiet spell is fetched at once: that is when
// a dependent waits to start, and a fixed gap would add up to 100ms to it.
const (
	minQueryGap = 100 * time.Millisecond
	queryBurst  = 5
)

// queryBucket is a token bucket: a token per minQueryGap, queryBurst at most.
type queryBucket struct {
	tokens float64
	at     time.Time
}

// take spends a token, or says how long until one is there.
func (b *queryBucket) take(now time.Time) time.Duration {
	b.tokens = min(queryBurst, b.tokens+float64(now.Sub(b.at))/float64(minQueryGap))
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(minQueryGap))
}

// view runs the blocking query of one dependency, in the manner of
// consul-template's watch.View, with two differences: the index is reset
// after any error (a restarted agent starts its indexes over, and a query
// with the old, higher index would block for the whole wait), and an answer
// is delivered at once, the rate limit (a token bucket, so quiet views
// answer at once) delaying the next query instead.
type view struct {
	m    *Manager
	d    dep.Dependency
	stop chan struct{}
}

func (v *view) run() {
	var (
		index    uint64
		last     any
		received bool
		failures int
		bucket   = queryBucket{tokens: queryBurst, at: time.Now()}
	)
	opts := v.m.opts
	allowStale := opts.MaxStale > 0
	for {
		select {
		case <-v.stop:
			return
		default:
		}
		data, meta, err := v.d.Fetch(v.m.clients, &dep.QueryOptions{
			AllowStale: allowStale,
			WaitTime:   opts.BlockWait,
			WaitIndex:  index,
		})
		select {
		case <-v.stop:
			return // stopped while the query was in flight
		default:
		}
		if err == nil && meta == nil {
			err = errors.New("no response metadata")
		}
		if err != nil {
			if errors.Is(err, dep.ErrStopped) {
				return
			}
			failures++
			v.m.queryFailed(v.d, err, failures)
			index = 0
			d := min(50*time.Millisecond<<min(failures-1, 6), opts.MaxRetryDelay)
			d = d/2 + rand.N(d/2+1)
			if !v.sleep(d) {
				return
			}
			continue
		}
		if failures > 0 {
			v.m.queryRecovered(v.d, failures)
			failures = 0
		}
		if allowStale && meta.LastContact > opts.MaxStale {
			// Too stale: ask the leader once.
			allowStale = false
			continue
		}
		allowStale = opts.MaxStale > 0

		switch {
		case meta.LastIndex < index:
			// The index went backwards (restored snapshot, new agent).
			index = 0
		case meta.LastIndex == index:
			// The wait ran out with nothing new.
		default:
			index = meta.LastIndex
			switch {
			case received && reflect.DeepEqual(data, last):
				// A new index for the same data (another key of a
				// prefix, a check's output): nothing to tell.
			case data == nil && meta.BlockOnNil:
				// `key` on a missing key: keep waiting for it.
			default:
				last, received = data, true
				v.m.deliver(v, data)
			}
		}
		for {
			wait := bucket.take(time.Now())
			if wait == 0 {
				break
			}
			if !v.sleep(wait + rand.N(20*time.Millisecond)) {
				return
			}
		}
	}
}

// halt stops the view; an in-flight query still runs to its end.
func (v *view) halt() {
	close(v.stop)
	v.d.Stop()
}

// sleep waits d unless the view stops first.
func (v *view) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-v.stop:
		return false
	case <-t.C:
		return true
	}
}
