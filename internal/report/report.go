// Package report is the one encoding of an instance's state as data.
//
// The supervisor writes it into its supervisor check's output, below the
// human-readable line, so it reaches Consul with the status it belongs to
// (one write, never out of step with the check's health) and goes away with
// the registration. `mariposa status`, the node API and the tests read it
// back with Decode instead of parsing prose.
//
//	running (pid 4242); restarted 2 times, last after exit 1
//
//	mariposa-state: {"state":"running","pid":4242,"restarts":2,...}
package report

import (
	"encoding/json"
	"strings"
	"time"
)

// Prefix starts the line that carries the state in a check's output.
const Prefix = "mariposa-state: "

// Instance is what one instance is doing, as data.
type Instance struct {
	State    string    `json:"state"`                // starting | waiting | running | backoff | failed | completed | standby | stopping | stopped
	PID      int       `json:"pid,omitempty"`        // the running child's PID
	Restarts int       `json:"restarts"`             // restarts since mariposa started this instance
	Reason   string    `json:"reason"`               // the human line: why it is in this state
	Version  string    `json:"version,omitempty"`    // the service's version
	Role     string    `json:"role,omitempty"`       // leader | follower | "" (no election)
	Slot     string    `json:"slot,omitempty"`       // "<unit>/<k>" for an instance in a count slot
	Term     uint64    `json:"term_index,omitempty"` // the slot's fencing token
	Since    time.Time `json:"since"`                // when it entered this state
	Until    time.Time `json:"until,omitzero"`       // backoff: when the next start is due
	LastExit string    `json:"last_exit,omitempty"`  // how the last run ended ("exit 1", "killed by SIGKILL")
	Stderr   string    `json:"stderr,omitempty"`     // the child's last line on stderr, if any
	Volumes  string    `json:"volumes,omitempty"`    // how the slot's volumes were made ready (a restore: from where, how old)
}

// maxOutput bounds the whole check output (Consul keeps 4 KiB by default).
const maxOutput = 4000

// Encode renders the check output: Reason on the first line, then the state
// as one JSON line.
func Encode(i Instance) string {
	b, err := json.Marshal(i)
	if err != nil { // cannot happen for this type
		return i.Reason
	}
	if len(b)+len(Prefix)+len(i.Reason)+2 > maxOutput {
		// Keep the data whole; cut the free-text fields.
		i.Stderr = cut(i.Stderr, 512)
		i.Reason = cut(i.Reason, 1024)
		b, _ = json.Marshal(i)
	}
	return i.Reason + "\n\n" + Prefix + string(b)
}

// Decode reads the state back from a check output. ok is false when the
// output carries none (written by something else, or by an older mariposa):
// the caller falls back to the output as a reason. Any input is safe.
func Decode(output string) (i Instance, ok bool) {
	at := strings.LastIndex(output, Prefix)
	if at < 0 || (at > 0 && output[at-1] != '\n') {
		return Instance{}, false
	}
	line := output[at+len(Prefix):]
	if nl := strings.IndexByte(line, '\n'); nl >= 0 {
		line = line[:nl]
	}
	if err := json.Unmarshal([]byte(line), &i); err != nil || i.State == "" {
		return Instance{}, false
	}
	return i, true
}

// Human is the human-readable part of an output (the whole output when it
// carries no state).
func Human(output string) string {
	if at := strings.LastIndex(output, "\n\n"+Prefix); at >= 0 {
		return output[:at]
	}
	return output
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 { // do not split a UTF-8 sequence
		n--
	}
	return s[:n] + "…"
}
