// Package schema decodes mariposa service files (HCL) into plain Go types and
// validates them. Nothing from HCL leaks past this package: the supervisor,
// checks and render packages consume only the types in this file.
package schema

import (
	"os"
	"syscall"
	"time"
)

// Config is one loaded configuration: every service of every file and
// directory named on the command line.
type Config struct {
	// Services in load order (file order, then block order); group members
	// are included with Group set.
	Services []*Service
	// Groups in load order.
	Groups []*Group
	// Files are the absolute paths of every file read, in load order.
	Files []string
}

// Service returns the named service, or nil.
func (c *Config) Service(name string) *Service {
	for _, s := range c.Services {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// Group is a set of co-located services that start and stop together.
type Group struct {
	Name     string
	Services []string
}

// Service is one `service` block with every default applied.
type Service struct {
	Name string
	// ID overrides the Consul service ID; empty means "<name>-<node>".
	ID string
	// Group is the enclosing group's name, or empty.
	Group string

	Command []string
	// Dir is the working directory, absolute (relative paths resolve against
	// the directory of the file that declared the service). Empty: inherit.
	Dir     string
	Env     map[string]string
	Port    int
	Address string
	Tags    []string
	Meta    map[string]string
	Version string

	Checks    []*Check
	Restart   Restart
	Depends   []*Dependency
	Templates []*Template
	Leader    *Leader // nil: no leader election
	Stop      Stop

	// SourceFile is the absolute path of the file that declared the service;
	// SourceDir its directory. Relative template sources resolve against it.
	SourceFile string
	SourceDir  string
}

// CheckKind is what a check probes.
type CheckKind string

const (
	CheckHTTP CheckKind = "http"
	CheckTCP  CheckKind = "tcp"
	CheckGRPC CheckKind = "grpc"
	CheckArgs CheckKind = "args" // run by mariposa, reported to Consul through a TTL check
	CheckTTL  CheckKind = "ttl"  // the application heartbeats
)

// Check is one `check` block.
type Check struct {
	Name string
	Kind CheckKind
	// Target is the URL (http), host:port (tcp) or host:port[/service] (grpc).
	Target string
	// Args is the argv of an args check.
	Args []string
	// TTL is set for ttl checks only.
	TTL time.Duration
	// Interval and Timeout apply to http, tcp, grpc and args checks.
	// Defaults: 10s and 5s.
	Interval time.Duration
	Timeout  time.Duration

	SuccessBeforePassing    int
	FailuresBeforeCritical  int
	DeregisterCriticalAfter time.Duration // 0: never
}

// RestartPolicy says which exits restart the process.
type RestartPolicy string

const (
	RestartAlways    RestartPolicy = "always"
	RestartOnFailure RestartPolicy = "on-failure"
	RestartNever     RestartPolicy = "never"
)

// Restart is the `restart` block. Defaults: on-failure, on_unhealthy true if
// the service has any check, grace 10s, unhealthy_for 0, 10 attempts in 5m,
// delay 1s doubling to max_delay 1m, on_exhausted "fail".
type Restart struct {
	Policy       RestartPolicy
	OnUnhealthy  bool
	Grace        time.Duration
	UnhealthyFor time.Duration
	Attempts     int // 0: unlimited
	Window       time.Duration
	Delay        time.Duration
	MaxDelay     time.Duration
	OnExhausted  string // "fail" ("reschedule" is reserved for the cluster phase)
}

// Dependency is one `depends_on` block.
type Dependency struct {
	// Name is the block label.
	Name    string
	Service string // default: the label
	Tag     string
	// Registered: at least this many instances in the catalog, any health.
	// Passing: at least this many passing. If neither is set, Passing is 1.
	Registered int
	Passing    int
	Timeout    time.Duration // 0: wait forever
	OnLost     string        // ignore (default) | restart | stop
	// EnvPrefix prefixes the child's variables (<P>_ADDR, _ADDRS, _HOST,
	// _PORT); default: the label upper-cased, non-alphanumerics as "_".
	EnvPrefix string
}

// Template is one `template` block.
type Template struct {
	// Source is an absolute path; exactly one of Source and Contents is set.
	Source   string
	Contents string
	// Destination is absolute (relative ones resolve against the service's
	// Dir, or the source file's directory when Dir is empty).
	Destination string
	Perms       os.FileMode // default 0644
	ChangeMode  string      // restart (default) | signal | command | noop
	Signal      syscall.Signal
	Command     []string
	WaitMin     time.Duration
	WaitMax     time.Duration
	Env         bool
}

// Leader is the `leader` block.
type Leader struct {
	Mode        string // standby (default) | tag
	Tag         string // default "leader"
	FollowerTag string // default "follower"
	Key         string // default "mariposa/leader/<service>"
	SessionTTL  time.Duration
	LockDelay   time.Duration
	ChangeMode  string // tag mode: restart (default) | signal | noop
	Signal      syscall.Signal
}

// Stop is the `stop` block. Defaults: SIGTERM, 10s timeout, no drain.
type Stop struct {
	Signal  syscall.Signal
	Timeout time.Duration
	Drain   time.Duration
}
