package supervisor

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/internal/lease"
	"github.com/mariposa-sh/mariposa/internal/proc"
)

// CLOCK_MONOTONIC carries a moment from one image to the next: a moment
// written as nanoseconds comes back as the same moment.
func TestMonotonicNanos(t *testing.T) {
	for _, d := range []time.Duration{-3 * time.Second, 0, 250 * time.Millisecond} {
		at := time.Now().Add(d)
		back := fromMonotonicNanos(monotonicNanos(at))
		if diff := back.Sub(at); diff < -5*time.Millisecond || diff > 5*time.Millisecond {
			t.Errorf("%v: came back %v off", d, diff)
		}
	}
}

// A process handed over under a confirmed hold is confirmed by a read that
// ends by the hold's deadline, or not at all: the previous image's
// watchdog would have ended the hold then, and nothing watched it in the
// exec. A confirming read moves the deadline on by lock_delay/2 from its
// send time, for this image's own term to take over by.
func TestConfirmHold(t *testing.T) {
	const lockDelay = time.Second
	held := func(context.Context) (string, error) { return "s1", nil }
	for _, tc := range []struct {
		name      string
		confirmBy time.Duration // from now; 0: no confirmed hold
		read      func(context.Context) (string, error)
		ok        bool
		late      bool // why says the deadline ran out
		moved     bool // a.confirmBy set
	}{
		{name: "held, in time", confirmBy: 300 * time.Millisecond, read: held, ok: true, moved: true},
		{name: "held, but the deadline passed in the exec", confirmBy: -10 * time.Millisecond, read: held, late: true},
		{name: "another session holds it", confirmBy: 300 * time.Millisecond, read: func(context.Context) (string, error) { return "s2", nil }},
		{name: "free", confirmBy: 300 * time.Millisecond, read: func(context.Context) (string, error) { return "", nil }},
		{name: "Consul errs", confirmBy: 300 * time.Millisecond, read: func(context.Context) (string, error) { return "", errors.New("500") }},
		{name: "the read hangs past the deadline", confirmBy: 50 * time.Millisecond, late: true,
			read: func(ctx context.Context) (string, error) { <-ctx.Done(); return "", ctx.Err() }},
		{name: "no confirmed hold (a non-exclusive slot)", read: held, ok: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &InstanceHandoff{}
			if tc.confirmBy != 0 {
				a.ConfirmBy = monotonicNanos(time.Now().Add(tc.confirmBy))
			}
			start := time.Now()
			ok, why := confirmHold(context.Background(), a, tc.read, "s1", lockDelay)
			if ok != tc.ok || (why != "") != tc.late {
				t.Fatalf("ok %v, why %q; want ok %v, late %v", ok, why, tc.ok, tc.late)
			}
			if took := time.Since(start); took > time.Second {
				t.Errorf("took %v: the read outlived the hold's deadline", took)
			}
			if tc.moved {
				if d := a.confirmBy.Sub(start); d < lockDelay/2 || d > lockDelay/2+100*time.Millisecond {
					t.Errorf("confirmBy %v after the read, want lock_delay/2 after its send", d)
				}
			} else if !a.confirmBy.IsZero() {
				t.Errorf("confirmBy set to %v", a.confirmBy)
			}
		})
	}
}

// Just after an upgrade in place, a handed-over process of a count slot
// waits for the fleet to take its slot back; an upgrade asked meanwhile
// hands over only once it has (or the wait is given up): handed over
// before, the process would be in neither this runner's instances nor
// the fleet's holds, and the next image would kill it as a stray.
//
// Mutation-checked: without Handover's wait, it hands over at once and
// this fails.
func TestHandoverWaitsForAdoption(t *testing.T) {
	r := localRunner(t, cfgOf())
	r.leases = lease.NewManager(lease.Config{Client: r.opts.Client, Node: "n1", Log: hclog.NewNullLogger()})
	a := &InstanceHandoff{Key: "slot-0", Slot: "slot/0", Proc: &proc.Handoff{Pid: os.Getpid()}}
	r.opts.Adopt = &Handover{Instances: []InstanceHandoff{*a}}
	r.mu.Lock()
	r.pending, r.pendingSet = map[string]*InstanceHandoff{a.Key: a}, true
	r.mu.Unlock()
	// The fleet takes the slot back a little later.
	var taken atomic.Bool
	time.AfterFunc(300*time.Millisecond, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		taken.Store(true)
		delete(r.pending, a.Key)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, thaw, err := r.Handover(ctx)
	if err == nil {
		thaw()
	}
	if !taken.Load() {
		t.Fatalf("handed over (%v) before the fleet took back the slot the last upgrade handed over", err)
	}
}
