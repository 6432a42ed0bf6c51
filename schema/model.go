// Package schema decodes mariposa service files (HCL) into plain Go types and
// validates them. Nothing from HCL leaks past this package: the supervisor,
// checks and render packages consume only the types in this file.
package schema

import (
	"os"
	"strings"
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
	// Placement is set when the group has a count: the group is then a
	// cluster unit (a pod) whose members share one slot and move as one.
	// Every member's Service.Placement points to this same value.
	Placement *Placement
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

	// User and UserGroup are who the process, its args checks and its
	// volume hooks run as (names or numeric ids; "" is mariposa's own).
	User      string `json:",omitempty"`
	UserGroup string `json:",omitempty"`
	// NoNewPrivs: the process and its children cannot gain privileges
	// (setuid binaries, file capabilities): PR_SET_NO_NEW_PRIVS. Default:
	// on when user or group is set.
	NoNewPrivs bool `json:",omitempty"`

	// Resources limit the instance's control group; nil: none.
	Resources *Resources `json:",omitempty"`
	// Limits are the process's rlimits; nil: mariposa's own.
	Limits *Limits `json:",omitempty"`
	// Umask is the process's file mode creation mask; nil: mariposa's.
	Umask *os.FileMode `json:",omitempty"`

	Checks    []*Check
	Restart   Restart
	Depends   []*Dependency
	Templates []*Template
	Leader    *Leader // nil: no leader election
	Stop      Stop

	// Placement is set for a cluster service (one with a count, or a
	// member of a group with a count): it runs in count slots across the
	// fleet. nil: every node whose files declare it runs it.
	Placement *Placement

	// SourceFile is the absolute path of the file that declared the service;
	// SourceDir its directory. Relative template sources resolve against it.
	SourceFile string
	SourceDir  string
}

// Resources is a `resources` block: what the instance's control group
// allows it (zero: unset).
type Resources struct {
	CPU       int `json:",omitempty"` // millicores: 1000 is one core
	Memory    int `json:",omitempty"` // MiB: the reservation, and the limit unless MemoryMax
	MemoryMax int `json:",omitempty"` // MiB: the hard limit
	Pids      int `json:",omitempty"` // processes and threads
}

// Limits is a `limits` block: rlimits, soft and hard alike (nil: unset).
type Limits struct {
	NOFile *uint64 `json:",omitempty"`
	NProc  *uint64 `json:",omitempty"`
	Core   *uint64 `json:",omitempty"`
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

// OnService says whether the check's target leaves out the host (and for a
// path-only http check or an empty tcp one the port): the service's
// registered address and port fill them in.
func (c *Check) OnService() bool {
	switch c.Kind {
	case CheckHTTP:
		return strings.HasPrefix(c.Target, "/")
	case CheckTCP:
		return c.Target == "" || strings.HasPrefix(c.Target, ":")
	}
	return false
}

// Check is one `check` block.
type Check struct {
	Name string
	Kind CheckKind
	// Target is the URL (http), host:port (tcp) or host:port[/service]
	// (grpc). An http path ("/health"), a tcp ":port" and an empty tcp
	// target are on the service's own registered address (and port):
	// OnService says so, and checks.Target makes the target the agent gets.
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
	OnExhausted  string // "fail", or "reschedule" (cluster services only)
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
	// User and Group own the rendered file (names or numeric ids); by
	// default the service's user and group, "" keeps the file's owner.
	User       string `json:",omitempty"`
	Group      string `json:",omitempty"`
	ChangeMode string // restart (default) | signal | command | noop
	Signal     syscall.Signal
	Command    []string
	WaitMin    time.Duration
	WaitMax    time.Duration
	Env        bool
	// Coordinate, when set, paces the restarts or signals a change of this
	// template causes across every instance of the service (or of its
	// unit): a few at a time, under Consul semaphore tokens. nil: each
	// instance acts at once. Omitted from JSON when nil, so specs and their
	// hashes stay as they were without it.
	Coordinate *Coordinate `json:",omitempty"`
}

// Coordinate is a template's `coordinate` block.
type Coordinate struct {
	// MaxParallel is how many instances act on one change at once: hold a
	// token between the restart (or signal) and the moment they are running
	// again with their checks passing. At least 1 (the default).
	MaxParallel int
}

// DefaultCoordinateMaxParallel is coordinate's max_parallel when unset.
const DefaultCoordinateMaxParallel = 1

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

// Placement is where and how many instances of a cluster unit (a service
// with a count, or a group with one) run: CLUSTER.md sections 1, 3 and 4.
// Names and defaults follow Nomad's where they fit.
type Placement struct {
	// Count is the number of slots, 0..Count-1, at most 10000. 0 is
	// allowed (scaled to nothing; validation warns).
	Count       int
	Constraints []*Constraint // hard: a node that fails one never runs it
	Affinities  []*Affinity   // soft preferences
	Spreads     []*Spread
	// MaxPerNode bounds the slots of this unit on one node (default 1:
	// distinct hosts).
	MaxPerNode int
	// Exclusive: at most Count children while supervisors can act (slots
	// confirmed, a holder cut off from Consul kills its child). false
	// (default): at least Count, and a holder cut off keeps running.
	Exclusive bool
	// SchedulerAlgorithm is how the unit's slots pick among the nodes with room
	// for them (scheduler_algorithm): AlgorithmBinpack ("", the default)
	// prefers the node that is fullest after the placement, AlgorithmSpread
	// the emptiest. Omitted from JSON when default, so specs and their
	// hashes stay as they were without it.
	SchedulerAlgorithm string `json:",omitempty"`
	// StopAfter (non-exclusive only; 0 = never): a holder cut off from
	// Consul stops its child after this long, and claimants wait as long
	// before taking over a slot lost by invalidation.
	StopAfter  time.Duration
	Reschedule Reschedule
	Update     Update
	// Volumes are the unit's volume blocks (website/stateful.md): data
	// owned by the slot, not the node. A group's volumes are on the
	// group's Placement, which every member shares, so every member's
	// instance sees them. Omitted from JSON when empty, so specs and their
	// hashes stay as they were without them.
	Volumes []*Volume `json:",omitempty"`
}

// Scheduler algorithms (Placement.SchedulerAlgorithm).
const (
	AlgorithmBinpack = "binpack"
	AlgorithmSpread  = "spread"
)

// Volume is one `volume "name"` block of a cluster unit: a directory that
// belongs to the unit's slot. On the node holding slot k it is
// <volume directory>/<unit>/<k>/<Path>, and every instance of the slot
// gets its absolute path in the environment variable EnvName()
// (MARIPOSA_VOLUME_DATA for "data"). The fleet readies and hands off a
// slot's volumes (cluster/volumes.go, website/stateful.md).
type Volume struct {
	// Name is the label: letters, digits, underscores and dashes; unique
	// in the unit, also once upper-cased with dashes as underscores.
	Name string
	// Path is the name of the volume's directory in the slot's directory:
	// one name (no "/") of letters, digits, "-", "_" and ".", not starting
	// with "." (the store's own entries), at most 200 bytes, unique in the
	// unit. Default: Name.
	Path string
	// Handoff is what happens to the data when the slot moves:
	// HandoffNone (default: the directory is the node's, a moved instance
	// starts empty), HandoffSticky (the slot prefers the node that held it
	// last) or HandoffSnapshot (the data moves with the slot; the unit is
	// then exclusive).
	Handoff string
	// Snapshot and Restore are commands (argv), HandoffSnapshot only. nil:
	// the directory is copied as it is, and restored as copied.
	Snapshot []string
	Restore  []string
	// Replicas is how many other nodes receive a periodic copy (default 0;
	// more only with HandoffSnapshot), every Interval (default 5m).
	Replicas int
	Interval time.Duration
	// RestoreTimeout bounds a restore (default 10m); longer is a start
	// failure.
	RestoreTimeout time.Duration
	// OnMissing is what a new holder does when the old one is lost and
	// could not hand the data off: OnMissingLatest (default: restore the
	// newest copy), OnMissingEmpty or OnMissingFail.
	OnMissing string
	// Pos is "file:line:col" of the block (the file as named to Load).
	Pos string
}

// EnvName is the environment variable that gives an instance the
// volume's absolute path: MARIPOSA_VOLUME_ and the name upper-cased, with
// dashes as underscores.
func (v *Volume) EnvName() string { return VolumeEnvName(v.Name) }

// VolumeEnvName is Volume.EnvName for a volume named name.
func VolumeEnvName(name string) string {
	return VolumeEnvPrefix + strings.ReplaceAll(strings.ToUpper(name), "-", "_")
}

// VolumeEnvPrefix starts the environment variable of each volume.
const VolumeEnvPrefix = "MARIPOSA_VOLUME_"

// Handoffs of a Volume.
const (
	HandoffNone     = "none"
	HandoffSticky   = "sticky"
	HandoffSnapshot = "snapshot"
)

// What a Volume's new holder does when no handoff reached it.
const (
	OnMissingLatest = "latest"
	OnMissingEmpty  = "empty"
	OnMissingFail   = "fail"
)

// Volume defaults.
const (
	DefaultVolumeInterval       = 5 * time.Minute
	DefaultVolumeRestoreTimeout = 10 * time.Minute
)

// Constraint operators. "=" is accepted and normalised to "==".
const (
	OpEqual       = "=="
	OpNotEqual    = "!="
	OpRegexp      = "regexp"
	OpVersion     = "version"      // Value is a version constraint: ">= 1.2, < 2"
	OpSetContains = "set_contains" // Value is a comma-separated list; all must be in the attribute's list
	OpIsSet       = "is_set"       // no Value
	OpIsNotSet    = "is_not_set"   // no Value
	OpPrefer      = "==~"          // affinity only
	OpAvoid       = "!=~"          // affinity only
)

// Constraint is one `constraint` block: a hard rule on a node attribute.
//
// Attribute is one of node.name, node.datacenter, node.meta.<key>,
// mariposa.version, or service.<name>. service.<name> is set on a node
// where at least one instance of that service is registered in Consul (its
// value is how many, in decimal); with ==, ==~, != or !=~ and no value it
// means "runs on the node" (or, negated, "does not"): co-location and
// anti-co-location with other services.
type Constraint struct {
	Attribute string
	Operator  string // one of the Op* above but OpPrefer and OpAvoid; default OpEqual
	Value     string
	// Pos is "file:line:col" of the block (the file as named to Load), for
	// runtime explanations.
	Pos string
}

// Affinity is one `affinity` block: a soft preference with a weight.
type Affinity struct {
	Attribute string
	Operator  string // OpPrefer (default) | OpAvoid, or a constraint operator (== and the rest) counted as a preference
	Value     string
	Weight    int // 1..100, default 50
	Pos       string
}

// Spread is one `spread` block: spread instances over the values of an
// attribute, evenly or per Targets.
type Spread struct {
	Attribute string
	Weight    int // 1..100, default 50
	Targets   []SpreadTarget
	Pos       string
}

// SpreadTarget is one `target` block of a spread.
type SpreadTarget struct {
	Value   string
	Percent int
}

// Reschedule is the `reschedule` block: what happens to a slot whose
// instance exhausted its restarts (restart.on_exhausted = "reschedule") on
// a node. Nomad's names; defaults fit small fleets.
type Reschedule struct {
	Attempts      int           // within Interval; ignored when Unlimited
	Interval      time.Duration // window for Attempts
	Unlimited     bool          // default true, but false when attempts is set without it
	Delay         time.Duration // default 5s
	DelayFunction string        // constant | exponential (default) | fibonacci
	MaxDelay      time.Duration // default 5m
	// Penalty is how long a node the instance failed on scores lower
	// (default 30m).
	Penalty time.Duration
	// NodeLostAfter holds a slot lost with its node this long for the node
	// to come back (a reboot) before others claim it (default 0).
	NodeLostAfter time.Duration
}

// Delay functions of Reschedule.
const (
	DelayConstant    = "constant"
	DelayExponential = "exponential"
	DelayFibonacci   = "fibonacci"
)

// Update is the `update` block: how a new spec of a cluster unit replaces
// its instances (CLUSTER.md section 5). Nomad's names and defaults.
//
// The fleet acts on MaxParallel, MinHealthyTime, HealthyDeadline and
// HealthCheck (cluster/rollout.go); canaries, promotion, auto_revert and
// progress_deadline are not built yet.
type Update struct {
	// MaxParallel is how many instances update at once (default 1). 0
	// replaces every instance at once, without a rolling update (Nomad's
	// forced update): the other fields are then not used.
	MaxParallel int
	// HealthCheck is what makes an updated instance healthy: UpdateChecks
	// (default: its checks and the supervisor check passing), UpdateRunning
	// (running, checks ignored) or UpdateManual (an operator says so).
	HealthCheck string
	// MinHealthyTime is how long an updated instance must stay healthy to
	// count as healthy (default 10s); a restart resets it.
	MinHealthyTime time.Duration
	// HealthyDeadline is how long an updated instance has to become
	// healthy (default 5m); always more than MinHealthyTime.
	HealthyDeadline time.Duration
	// ProgressDeadline fails the deployment when no instance becomes
	// healthy for this long (default 10m); more than HealthyDeadline, or 0:
	// no deadline, the first unhealthy instance fails the deployment.
	ProgressDeadline time.Duration
	// Canary instances update first, and the rest wait for a promotion
	// (default 0: no canaries). At most Count of them exist.
	Canary int
	// AutoPromote promotes once every canary is healthy (needs Canary > 0).
	AutoPromote bool
	// AutoRevert deploys the last successful spec again when a deployment
	// fails.
	AutoRevert bool
}

// Health checks of Update.
const (
	UpdateChecks  = "checks"
	UpdateRunning = "running"
	UpdateManual  = "manual"
)

// Update defaults (Nomad's).
const (
	DefaultUpdateMaxParallel      = 1
	DefaultUpdateMinHealthyTime   = 10 * time.Second
	DefaultUpdateHealthyDeadline  = 5 * time.Minute
	DefaultUpdateProgressDeadline = 10 * time.Minute
)

// Reschedule defaults.
const (
	DefaultRescheduleDelay    = 5 * time.Second
	DefaultRescheduleMaxDelay = 5 * time.Minute
	DefaultReschedulePenalty  = 30 * time.Minute
	DefaultAffinityWeight     = 50
	DefaultSpreadWeight       = 50
	DefaultMaxPerNode         = 1
)
