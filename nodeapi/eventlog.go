package nodeapi

import (
	"context"
	"sync"

	"github.com/mariposa-sh/mariposa/supervisor"
)

// EventLog keeps the node's last supervisor events in a bounded ring and
// hands new ones to followers. Add never blocks: a follower that falls
// behind loses events and is told how many.
type EventLog struct {
	mu sync.Mutex
	// ring grows by append up to max, then is written over in turn: a
	// node that has had few events holds few (a full ring of 1,000 is
	// 144 KB).
	ring   []supervisor.Event
	max    int
	next   int // where the next event goes once the ring is full
	full   bool
	seq    uint64 // events added, ever
	follow map[*EventFollower]struct{}
}

// DefaultEvents is how many events an EventLog keeps.
const DefaultEvents = 1000

// followerBuffer is how many events a follower may lag behind.
const followerBuffer = 256

// NewEventLog keeps the last n events (DefaultEvents if n <= 0).
func NewEventLog(n int) *EventLog {
	if n <= 0 {
		n = DefaultEvents
	}
	return &EventLog{max: n, follow: map[*EventFollower]struct{}{}}
}

// Add records e: pass it to supervisor.Options.Events.
func (l *EventLog) Add(e supervisor.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.full {
		l.ring = append(l.ring, e)
		l.full = len(l.ring) == l.max
	} else {
		l.ring[l.next] = e
		l.next = (l.next + 1) % len(l.ring)
	}
	l.seq++
	for f := range l.follow {
		select {
		case f.c <- e:
		default:
			f.dropped++
		}
	}
}

// Last returns the last n events, oldest first (every one kept if n < 0).
func (l *EventLog) Last(n int) []supervisor.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastLocked(n)
}

func (l *EventLog) lastLocked(n int) []supervisor.Event {
	size := len(l.ring)
	if n < 0 || n > size {
		n = size
	}
	out := make([]supervisor.Event, 0, n)
	for i := size - n; i < size; i++ {
		idx := i
		if l.full {
			idx = (l.next + i) % len(l.ring)
		}
		out = append(out, l.ring[idx])
	}
	return out
}

// EventFollower receives the events added after it was made.
type EventFollower struct {
	l       *EventLog
	c       chan supervisor.Event
	dropped int64 // guarded by l.mu
	stop    func() bool
	once    sync.Once
}

// Follow returns the last n events and a follower of the next ones, in
// one step: no event is missed or seen twice between them. It ends when
// ctx does (its channel closes); Close it when done.
func (l *EventLog) Follow(ctx context.Context, n int) ([]supervisor.Event, *EventFollower) {
	f := &EventFollower{l: l, c: make(chan supervisor.Event, followerBuffer)}
	l.mu.Lock()
	backlog := l.lastLocked(n)
	l.follow[f] = struct{}{}
	l.mu.Unlock()
	f.stop = context.AfterFunc(ctx, f.end)
	return backlog, f
}

// C delivers the events; it closes when the follower ends.
func (f *EventFollower) C() <-chan supervisor.Event { return f.c }

// Dropped is how many events were lost so far because the follower fell
// behind.
func (f *EventFollower) Dropped() int64 {
	f.l.mu.Lock()
	defer f.l.mu.Unlock()
	return f.dropped
}

// TakeDropped returns the events lost since the last call, and resets.
func (f *EventFollower) TakeDropped() int64 {
	f.l.mu.Lock()
	defer f.l.mu.Unlock()
	d := f.dropped
	f.dropped = 0
	return d
}

// Close ends the follower. Safe to call twice.
func (f *EventFollower) Close() {
	f.stop()
	f.end()
}

func (f *EventFollower) end() {
	f.once.Do(func() {
		f.l.mu.Lock()
		delete(f.l.follow, f)
		close(f.c)
		f.l.mu.Unlock()
	})
}

// Followers is how many followers are attached (tests).
func (l *EventLog) Followers() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.follow)
}
