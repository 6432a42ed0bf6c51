package metrics

import (
	"strings"
	"time"

	"github.com/mariposa-sh/mariposa/supervisor"
)

// instTrack is what the event consumer remembers of one instance between
// its events: when it went down and why, since when it waits.
type instTrack struct {
	cause        string    // what ended the last process: exit, start-failed, unhealthy, ...
	downAt       time.Time // the unplanned end a start ends
	unhealthyAt  time.Time // the unhealthy decision a start ends
	waitingSince time.Time // the wait a start ends
}

// Restart reasons (mariposa_restarts_total's reason label).
const (
	ReasonExit        = "exit"
	ReasonOOMKilled   = "oom-killed" // the exit of a process whose control group the OOM killer hit
	ReasonStartFailed = "start-failed"
	ReasonUnhealthy   = "unhealthy"
	ReasonTemplate    = "template"
	ReasonDependency  = "dependency"
	ReasonLeader      = "leader"
	ReasonOperator    = "operator"
	ReasonOther       = "other"
)

// Event takes one supervisor event: pass it to supervisor.Options.Events
// beside the log. It never blocks.
func (m *Metrics) Event(e supervisor.Event) {
	m.events.WithLabelValues(e.Service, string(e.Kind)).Inc()
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.insts[e.ServiceID]
	if t == nil {
		if e.Kind == supervisor.EventStoppedForGood {
			return
		}
		t = &instTrack{}
		m.insts[e.ServiceID] = t
	}
	switch e.Kind {
	case supervisor.EventExited:
		t.cause = ReasonExit
		if strings.HasPrefix(e.Reason, "oom-killed") {
			t.cause = ReasonOOMKilled
		}
		if t.downAt.IsZero() {
			t.downAt = e.Time
		}
	case supervisor.EventStartFailed:
		t.cause = ReasonStartFailed
		if t.downAt.IsZero() {
			t.downAt = e.Time
		}
	case supervisor.EventUnhealthy:
		t.cause = ReasonUnhealthy
		t.unhealthyAt = e.Time
	case supervisor.EventDependencyLost:
		t.cause = ReasonDependency
	case supervisor.EventRestarting:
		m.restarts.WithLabelValues(e.Service, restartReason(e.Reason, t.cause)).Inc()
	case supervisor.EventOperator:
		// A restart of a process that was not running (a running one's
		// restart is an EventRestarting).
		if e.Reason == "restart" {
			m.restarts.WithLabelValues(e.Service, ReasonOperator).Inc()
		}
	case supervisor.EventWaiting:
		if t.waitingSince.IsZero() {
			t.waitingSince = e.Time
			m.depWaits.WithLabelValues(e.Service).Inc()
		}
	case supervisor.EventStarted:
		if !t.downAt.IsZero() {
			m.restartDelay.WithLabelValues(e.Service).Observe(seconds(e.Time.Sub(t.downAt)))
		}
		if !t.unhealthyAt.IsZero() {
			m.unhealthyWait.WithLabelValues(e.Service).Observe(seconds(e.Time.Sub(t.unhealthyAt)))
		}
		if !t.waitingSince.IsZero() {
			m.depWaitTime.WithLabelValues(e.Service).Observe(seconds(e.Time.Sub(t.waitingSince)))
		}
		*t = instTrack{}
	case supervisor.EventFailed, supervisor.EventCompleted, supervisor.EventStopping:
		// No start follows by itself: an operator's start later is not
		// the end of this restart's delay.
		*t = instTrack{}
	case supervisor.EventStoppedForGood:
		delete(m.insts, e.ServiceID)
		// m.resigned stays: a shutdown's leader-lost may follow.
	case supervisor.EventLeaderAcquired:
		delete(m.resigned, e.ServiceID)
		m.leaderTerms.WithLabelValues(e.Service).Inc()
	case supervisor.EventLeaderLost:
		t.cause = ReasonLeader
		// A resignation ends its term too: the instance stops contending,
		// the term ends and decide emits leader-lost after leader-resigned.
		// That term's failover was counted as resigned.
		if m.resigned[e.ServiceID] {
			delete(m.resigned, e.ServiceID)
			break
		}
		m.leaderLosses.WithLabelValues(e.Service, "lost").Inc()
	case supervisor.EventLeaderResigned:
		m.resigned[e.ServiceID] = true
		m.leaderLosses.WithLabelValues(e.Service, "resigned").Inc()
	}
}

// restartReason names a restart's reason for the label, from its event's
// reason and the cause of the end before it. A restart by the restart
// policy reads "restarting ... after exit 1, attempt 2": its cause is the
// event before (exit, start-failed, unhealthy). The others name their own.
func restartReason(reason, cause string) string {
	switch {
	case strings.HasPrefix(reason, "restarting "):
		if cause != "" {
			return cause
		}
		return ReasonOther
	case strings.HasPrefix(reason, "template "):
		return ReasonTemplate
	case strings.HasPrefix(reason, "dependency "):
		return ReasonDependency
	case strings.Contains(reason, "operator"):
		return ReasonOperator
	case strings.Contains(reason, "leader"):
		return ReasonLeader
	case cause != "":
		return cause
	}
	return ReasonOther
}

func seconds(d time.Duration) float64 {
	if d < 0 {
		return 0
	}
	return d.Seconds()
}
