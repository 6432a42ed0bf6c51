package supervisor

import (
	"time"

	"github.com/hashicorp/go-hclog"
)

// EventKind names what happened to an instance.
type EventKind string

const (
	EventStarted        EventKind = "started"
	EventStartFailed    EventKind = "start-failed"
	EventExited         EventKind = "exited"
	EventRestarting     EventKind = "restarting"
	EventFailed         EventKind = "failed"
	EventCompleted      EventKind = "completed"
	EventWaiting        EventKind = "waiting"
	EventUnhealthy      EventKind = "unhealthy"
	EventRendered       EventKind = "rendered"
	EventSignalled      EventKind = "signalled"
	EventDependencyLost EventKind = "dependency-lost"
	EventStandby        EventKind = "standby"
	EventLeaderAcquired EventKind = "leader-acquired"
	EventLeaderLost     EventKind = "leader-lost"
	EventLeaderResigned EventKind = "leader-resigned"
	EventOperator       EventKind = "operator"
	EventStopping       EventKind = "stopping"
	EventStopped        EventKind = "stopped"          // a process stopped by mariposa has exited
	EventStoppedForGood EventKind = "instance-stopped" // the instance is gone (shutdown, reload, removal)
	EventSlotLost       EventKind = "slot-lost"        // the count slot's hold ended: the process stops
	EventReloadWaiting  EventKind = "reload-waiting"   // a coordinated template changed: waiting for a reload token
	EventReloadGranted  EventKind = "reload-granted"   // the reload token came: restarting or signalling
	EventReloadReleased EventKind = "reload-released"  // the reload token was given back
	EventPaused         EventKind = "paused"           // an automatic restart waits for the resume
	EventResumed        EventKind = "resumed"          // the resume: the restart held back happens
	EventAdopted        EventKind = "adopted"          // a process the previous image ran, taken over by an upgrade in place
)

// Event is one thing that happened to an instance, as data: the seam for
// every consumer of what the supervisor does (the log today; JSON lines,
// the KV audit log and metrics next).
type Event struct {
	Time      time.Time `json:"time"`
	Node      string    `json:"node,omitempty"`
	Service   string    `json:"service"`
	ServiceID string    `json:"service_id"`
	Slot      string    `json:"slot,omitempty"` // "<unit>/<k>" for an instance in a count slot
	Kind      EventKind `json:"kind"`
	PID       int       `json:"pid,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	// Actor is who asked, on the events of an operator's request (mariposa
	// restart and reset): "socket uid=U pid=P" through the control socket,
	// "http accessor=ID remote=ADDR" through the node's HTTP API (without
	// accessor when Consul has no ACLs). Never a token.
	Actor string `json:"actor,omitempty"`
}

// LogEvents writes events to an hclog logger, one line each, at a level
// that fits the kind.
func LogEvents(log hclog.Logger) func(Event) {
	return func(e Event) {
		args := []any{"service_id", e.ServiceID}
		if e.PID != 0 {
			args = append(args, "pid", e.PID)
		}
		if e.Reason != "" {
			args = append(args, "reason", e.Reason)
		}
		if e.Actor != "" {
			args = append(args, "by", e.Actor)
		}
		l := log.Named(e.Service)
		switch e.Kind {
		case EventFailed, EventStartFailed:
			l.Error(string(e.Kind), args...)
		case EventExited, EventUnhealthy, EventLeaderLost, EventSlotLost, EventLeaderResigned, EventDependencyLost:
			l.Warn(string(e.Kind), args...)
		default:
			l.Info(string(e.Kind), args...)
		}
	}
}
