// Package cgroup gives each supervised instance a control group of its own
// under one mariposa parent, so that nothing a service starts outlives its
// stop (systemd's KillMode=control-group), and applies its resource limits.
//
// It is a small layer over the cgroup file system rather than a library
// (containerd/cgroups/v3 was measured: 5.4 MB more in a static hello-world,
// through cilium/ebpf, godbus and logrus, for the few files used here; and it
// does not place a child with clone3's CLONE_INTO_CGROUP, which this does
// through syscall.SysProcAttr.CgroupFD).
//
// Tracking and killing use the cgroup2 hierarchy wherever one is mounted,
// also on hybrid hosts whose cgroup2 hierarchy has no controllers: a child
// is forked straight into its group (CLONE_INTO_CGROUP, no migration
// afterwards) and killed with cgroup.kill (Linux >= 5.14; else frozen,
// killed and thawed). Limits go to the cgroup2 controllers where they are
// enabled, else to the v1 hierarchies of memory, cpu/cpuacct and pids; a
// child is moved into those right after the fork together with whatever
// the tracking group already holds, until nothing new appears. Without any
// cgroup2 hierarchy the v1 freezer tracks and kills.
package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Resources are an instance's limits; zero fields are unset.
type Resources struct {
	CPU       int // millicores: 250 is a quarter of a core
	Memory    int // MiB: the reservation, and the limit unless MemoryMax is set
	MemoryMax int // MiB: the hard limit
	Pids      int
}

// Zero says no limit is set.
func (r Resources) Zero() bool { return r == Resources{} }

// Manager holds the parent groups of this mariposa.
type Manager struct {
	// unified is the parent in the cgroup2 hierarchy, "" without one.
	unified string
	// v2ctl lists the controllers enabled for the children of unified.
	v2ctl map[string]bool
	// v1 maps a v1 controller to its parent directory.
	v1 map[string]string
}

var v1Controllers = []string{"memory", "cpu", "cpuacct", "pids", "freezer"}

// Open finds the hierarchies this process can manage and creates the
// parent groups named name in each, below this process's own group. An
// error says why instances get no groups (not root, nothing writable).
func Open(name string) (*Manager, error) {
	mounts, err := readMounts("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	own, err := readOwn("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	m := &Manager{v2ctl: map[string]bool{}, v1: map[string]string{}}
	var errs []error
	if mp, ok := mounts["unified"]; ok {
		if err := m.openUnified(mp, own[""], name); err != nil {
			errs = append(errs, err)
		}
	}
	for _, c := range v1Controllers {
		mp, ok := mounts[c]
		if !ok {
			continue
		}
		dir := filepath.Join(mp.dir, strings.TrimPrefix(own[c], mp.root), name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		m.v1[c] = dir
	}
	if m.unified == "" && m.v1["freezer"] == "" {
		if len(errs) == 0 {
			errs = append(errs, errors.New("no cgroup2 hierarchy and no v1 freezer mounted"))
		}
		return nil, fmt.Errorf("no control group to track instances in: %w", errors.Join(errs...))
	}
	return m, nil
}

// openUnified creates the parent in the cgroup2 hierarchy and enables the
// controllers that limits need on the way to it. A non-root group that
// holds processes cannot pass controllers down (no internal processes), so
// where enabling one is refused as busy, mariposa moves itself into a leaf
// of its own group, "supervisor", and tries again: what systemd's
// Delegate=yes asks of a delegated service, and what a container's
// namespace root needs.
func (m *Manager) openUnified(mp mount, ownPath, name string) error {
	base := filepath.Join(mp.dir, strings.TrimPrefix(ownPath, mp.root))
	if filepath.Base(base) == "supervisor" && filepath.Clean(ownPath) != "/" {
		base = filepath.Dir(base) // a restarted mariposa already in its leaf
	}
	parent := filepath.Join(base, name)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	avail := fields(readString(filepath.Join(base, "cgroup.controllers")))
	moved := false
	for _, c := range []string{"cpu", "memory", "pids"} {
		if !avail[c] {
			continue
		}
		err := os.WriteFile(filepath.Join(base, "cgroup.subtree_control"), []byte("+"+c), 0)
		if errors.Is(err, syscall.EBUSY) && !moved {
			moved = true
			sup := filepath.Join(base, "supervisor")
			if os.MkdirAll(sup, 0o755) == nil &&
				os.WriteFile(filepath.Join(sup, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0) == nil {
				err = os.WriteFile(filepath.Join(base, "cgroup.subtree_control"), []byte("+"+c), 0)
			}
		}
		if err == nil && os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+"+c), 0) == nil {
			m.v2ctl[c] = true
		}
	}
	m.unified = parent
	return nil
}

// Describe says which hierarchies are used, for the start's log.
func (m *Manager) Describe() string {
	var parts []string
	if m.unified != "" {
		s := "cgroup2 " + m.unified
		if len(m.v2ctl) > 0 {
			s += " (controllers: " + strings.Join(sortedKeys(m.v2ctl), ",") + ")"
		}
		parts = append(parts, s)
	}
	if len(m.v1) > 0 {
		parts = append(parts, "v1 "+strings.Join(sortedKeys(m.v1), ","))
	}
	return strings.Join(parts, "; ")
}

// Group is one instance's control group, kept across its restarts.
type Group struct {
	m    *Manager
	name string
	v2   string // the tracking group in cgroup2, "" without
	fd   int    // v2 opened O_PATH-like for CLONE_INTO_CGROUP, -1 without
	// events is v2's cgroup.events, kept open once Empty read it (-1).
	events int
	// place lists the v1 groups a child joins after its fork: the
	// controllers its limits need, and the freezer without cgroup2.
	place []string
	// memory is the group whose counters tell an OOM kill ("" none), and
	// memV2 says it is a cgroup2 group.
	memory string
	memV2  bool
	cpu    string // the group whose usage is read ("" none)
	cpuV2  bool
	res    Resources
	// stale: the cgroup2 group was killed through cgroup.kill, or found
	// from before; it is made anew once empty (see renew).
	stale bool
}

// Group creates (or finds, after a restart of mariposa) the group of the
// instance id and applies r.
func (m *Manager) Group(id string, r Resources) (*Group, error) {
	name := strings.NewReplacer("/", "_", "\x00", "_").Replace(id)
	if name == "." || name == ".." || name == "" {
		name = "_" + name
	}
	g := &Group{m: m, name: name, fd: -1, events: -1, res: r}
	if m.unified != "" {
		g.v2 = filepath.Join(m.unified, name)
		if err := os.Mkdir(g.v2, 0o755); os.IsExist(err) {
			g.stale = true
		} else if err != nil {
			return nil, err
		}
		fd, err := syscall.Open(g.v2, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		g.fd = fd
	} else {
		dir := filepath.Join(m.v1["freezer"], name)
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			return nil, err
		}
		g.place = append(g.place, dir)
	}
	if err := g.apply(r); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// v1dir creates the group's directory in controller c's v1 hierarchy.
func (g *Group) v1dir(c string) (string, error) {
	p := g.m.v1[c]
	if p == "" {
		return "", fmt.Errorf("no %s controller: neither in cgroup2 nor mounted as v1", c)
	}
	dir := filepath.Join(p, g.name)
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return "", err
	}
	g.place = append(g.place, dir)
	return dir, nil
}

const mib = 1 << 20

func (g *Group) apply(r Resources) error {
	limit, soft := r.Memory, 0
	if r.MemoryMax > 0 {
		limit, soft = r.MemoryMax, r.Memory
	}
	var errs []error
	set := func(dir, file, val string) {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(val), 0); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", file, err))
		}
	}
	if limit > 0 {
		if g.m.v2ctl["memory"] {
			set(g.v2, "memory.max", strconv.FormatInt(int64(limit)*mib, 10))
			// The limit holds swap too: a leak is killed, not swapped.
			if _, err := os.Stat(filepath.Join(g.v2, "memory.swap.max")); err == nil {
				set(g.v2, "memory.swap.max", "0")
			}
			if soft > 0 {
				set(g.v2, "memory.low", strconv.FormatInt(int64(soft)*mib, 10))
			}
			g.memory, g.memV2 = g.v2, true
		} else if dir, err := g.v1dir("memory"); err != nil {
			errs = append(errs, err)
		} else {
			// The limit holds swap too (memory+swap = memory). memsw may
			// never be below the memory limit: raised first, lowered last.
			bytes := strconv.FormatInt(int64(limit)*mib, 10)
			memsw := filepath.Join(dir, "memory.memsw.limit_in_bytes")
			_, err := os.Stat(memsw)
			hasSwap := err == nil
			if hasSwap {
				_ = os.WriteFile(memsw, []byte(bytes), 0)
			}
			set(dir, "memory.limit_in_bytes", bytes)
			if hasSwap {
				set(dir, "memory.memsw.limit_in_bytes", bytes)
			}
			if soft > 0 {
				set(dir, "memory.soft_limit_in_bytes", strconv.FormatInt(int64(soft)*mib, 10))
			}
			g.memory = dir
		}
	}
	if r.CPU > 0 {
		const period = 100000
		quota := strconv.Itoa(r.CPU * period / 1000)
		if g.m.v2ctl["cpu"] {
			set(g.v2, "cpu.max", quota+" "+strconv.Itoa(period))
			g.cpu, g.cpuV2 = g.v2, true
		} else if dir, err := g.v1dir("cpu"); err != nil {
			errs = append(errs, err)
		} else {
			set(dir, "cpu.cfs_period_us", strconv.Itoa(period))
			set(dir, "cpu.cfs_quota_us", quota)
			if acct, err := g.v1dir("cpuacct"); err == nil {
				g.cpu = acct
			} else if _, err := os.Stat(filepath.Join(dir, "cpuacct.usage")); err == nil {
				g.cpu = dir // cpu,cpuacct mounted together
			}
		}
	}
	if r.Pids > 0 {
		if g.m.v2ctl["pids"] {
			set(g.v2, "pids.max", strconv.Itoa(r.Pids))
		} else if dir, err := g.v1dir("pids"); err != nil {
			errs = append(errs, err)
		} else {
			set(dir, "pids.max", strconv.Itoa(r.Pids))
		}
	}
	g.place = dedupe(g.place)
	return errors.Join(errs...)
}

// FD is the cgroup2 directory to fork a child into (CLONE_INTO_CGROUP), or
// -1: then Place puts it in its group after the fork.
func (g *Group) FD() int { return g.fd }

// Place moves the child pid into the group's v1 hierarchies (those without
// CLONE_INTO_CGROUP), with whatever it forked meanwhile: the members of the
// tracking group, read until no new one appears (a process forks its
// children into its own group, so once every member moved nothing escapes).
func (g *Group) Place(pid int) error {
	if len(g.place) == 0 {
		if g.fd < 0 {
			return errors.New("group has no hierarchy")
		}
		return nil
	}
	moved := map[int]bool{}
	pending := []int{pid}
	for round := 0; len(pending) > 0 && round < 100; round++ {
		for _, p := range pending {
			moved[p] = true
			for _, dir := range g.place {
				err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(p)), 0)
				if err != nil && p == pid && !errors.Is(err, syscall.ESRCH) {
					return err
				}
			}
		}
		done := pending
		pending = nil
		if g.v2 == "" {
			// No tracking group to read what was forked before the move:
			// the moved processes' children, as /proc lists them (one
			// forked and orphaned within those microseconds escapes).
			for _, p := range done {
				for _, c := range children(p) {
					if !moved[c] {
						pending = append(pending, c)
					}
				}
			}
			continue
		}
		procs, _ := g.Procs()
		for _, p := range procs {
			if !moved[p] {
				pending = append(pending, p)
			}
		}
	}
	return nil
}

// children lists the children of pid's threads.
func children(pid int) []int {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var out []int
	for _, t := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// tracking is the directory whose members are the instance's processes.
func (g *Group) tracking() string {
	if g.v2 != "" {
		return g.v2
	}
	return g.place[0] // the freezer
}

// Procs lists the processes in the group.
func (g *Group) Procs() ([]int, error) {
	b, err := readFile(filepath.Join(g.tracking(), "cgroup.procs"))
	if errors.Is(err, os.ErrNotExist) && g.v2 != "" {
		// Removed from under us (an operator's cleanup): empty, and made
		// anew before it is used again.
		g.stale = true
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids, nil
}

// Kill sends SIGKILL to every process in the group without a race against
// their forks: cgroup.kill, or the group frozen while it is killed.
func (g *Group) Kill() error {
	if g.v2 != "" {
		err := os.WriteFile(filepath.Join(g.v2, "cgroup.kill"), []byte("1"), 0)
		if err == nil {
			g.stale = true
		}
		if err == nil || !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return g.freezeKill(filepath.Join(g.v2, "cgroup.freeze"), "1", "0")
	}
	return g.freezeKill(filepath.Join(g.place[0], "freezer.state"), "FROZEN", "THAWED")
}

func (g *Group) freezeKill(file, freeze, thaw string) error {
	if err := os.WriteFile(file, []byte(freeze), 0); err != nil {
		return err
	}
	defer os.WriteFile(file, []byte(thaw), 0)
	pids, err := g.Procs()
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	return err
}

// Stale: the group must be made anew before a process is placed in it
// (it was killed, or removed from under mariposa); KillAll does that.
func (g *Group) Stale() bool { return g.stale }

// KillAll kills the group's processes and waits until it is empty or the
// timeout passes; it returns how many processes it found.
func (g *Group) KillAll(timeout time.Duration) (int, error) {
	pids, err := g.Procs()
	if err != nil || len(pids) == 0 {
		if err == nil && g.stale {
			err = g.renew()
		}
		return 0, err
	}
	if err := g.Kill(); err != nil {
		return len(pids), err
	}
	deadline := time.Now().Add(timeout)
	for wait := 100 * time.Microsecond; ; wait = min(2*wait, 10*time.Millisecond) {
		left, err := g.Procs()
		if err == nil && len(left) == 0 && g.stale {
			err = g.renew()
		}
		if err != nil || len(left) == 0 {
			return len(pids), err
		}
		if time.Now().After(deadline) {
			return len(pids), fmt.Errorf("%d processes left in the group after SIGKILL", len(left))
		}
		if g.v2 == "" {
			_ = g.Kill() // the freezer's list may have missed a fork
		}
		time.Sleep(wait)
	}
}

// renew makes the empty cgroup2 group anew. After a cgroup.kill, some
// kernels (6.18 here) kill every child later forked into that group with
// CLONE_INTO_CGROUP at birth (the group's kill sequence no longer matches
// the forking parent's), so a group once killed is not reused; one found
// from a previous mariposa may have been.
func (g *Group) renew() error {
	if g.v2 == "" {
		g.stale = false
		return nil
	}
	g.Close()
	// A process just killed can keep the group busy for a moment after
	// it has left cgroup.procs.
	for wait, deadline := time.Millisecond, time.Now().Add(2*time.Second); ; wait = min(2*wait, 50*time.Millisecond) {
		err := syscall.Rmdir(g.v2)
		if err == nil || err == syscall.ENOENT {
			break
		}
		if err != syscall.EBUSY || time.Now().After(deadline) {
			return fmt.Errorf("making the group anew: %w", err)
		}
		time.Sleep(wait)
	}
	if err := os.Mkdir(g.v2, 0o755); err != nil {
		return err
	}
	fd, err := syscall.Open(g.v2, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	g.fd, g.stale = fd, false
	return g.apply(g.res)
}

// OOMKills is how many processes the kernel's OOM killer killed in the
// group (0 without a memory limit).
func (g *Group) OOMKills() uint64 {
	switch {
	case g.memory == "":
		return 0
	case g.memV2:
		return keyed(filepath.Join(g.memory, "memory.events"), "oom_kill")
	default:
		return keyed(filepath.Join(g.memory, "memory.oom_control"), "oom_kill")
	}
}

// CPUUsage is the CPU time the group used, where its limits track it.
func (g *Group) CPUUsage() (time.Duration, bool) {
	switch {
	case g.cpu == "":
		return 0, false
	case g.cpuV2:
		return time.Duration(keyed(filepath.Join(g.cpu, "cpu.stat"), "usage_usec")) * time.Microsecond, true
	default:
		n, err := strconv.ParseUint(strings.TrimSpace(readString(filepath.Join(g.cpu, "cpuacct.usage"))), 10, 64)
		return time.Duration(n), err == nil
	}
}

// Dirs lists the group's directories (tracking first), for tests and logs.
func (g *Group) Dirs() []string {
	var d []string
	if g.v2 != "" {
		d = append(d, g.v2)
	}
	return dedupe(append(d, g.place...))
}

// Close releases the group's descriptors.
func (g *Group) Close() {
	if g.fd >= 0 {
		syscall.Close(g.fd)
		g.fd = -1
	}
	if g.events >= 0 {
		syscall.Close(g.events)
		g.events = -1
	}
}

// Empty reports whether no process is left in the group (nor below it),
// from cgroup2's cgroup.events ("populated 0"), read through a descriptor
// kept open: one pread, for the restart path, which asks at every exit
// (an open, read and close of cgroup.procs costs 20 times as much). ok is
// false where it cannot tell (no cgroup2 group, a stale one, a failed
// read): Procs can.
func (g *Group) Empty() (empty, ok bool) {
	if g.v2 == "" || g.fd < 0 || g.stale {
		return false, false
	}
	if g.events < 0 {
		fd, err := unix.Openat(g.fd, "cgroup.events", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return false, false
		}
		g.events = fd
	}
	var buf [128]byte
	n, err := unix.Pread(g.events, buf[:], 0)
	if err != nil {
		return false, false
	}
	for _, line := range strings.Split(string(buf[:n]), "\n") {
		switch line {
		case "populated 0":
			return true, true
		case "populated 1":
			return false, true
		}
	}
	return false, false
}

// Remove deletes the group's directories; it must be empty.
func (g *Group) Remove() error {
	g.Close()
	var errs []error
	for _, d := range g.Dirs() {
		if err := syscall.Rmdir(d); err != nil && err != syscall.ENOENT {
			errs = append(errs, fmt.Errorf("%s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

type mount struct{ dir, root string }

// readMounts maps each v1 controller, and "unified" for cgroup2, to the
// place it is mounted.
func readMounts(file string) (map[string]mount, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]mount{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent maj:min root mountpoint opts [optional...] - fstype source superopts
		line := sc.Text()
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) < 5 || len(b) < 3 {
			continue
		}
		m := mount{dir: unescape(a[4]), root: unescape(a[3])}
		switch b[0] {
		case "cgroup2":
			if _, dup := out["unified"]; !dup {
				out["unified"] = m
			}
		case "cgroup":
			for _, o := range strings.Split(b[2], ",") {
				if _, dup := out[o]; !dup && o != "rw" && o != "ro" {
					out[o] = m
				}
			}
		}
	}
	return out, sc.Err()
}

// readOwn maps each v1 controller, and "" for cgroup2, to this process's
// group in it.
func readOwn(file string) (map[string]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, nil
}

func unescape(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

func readString(file string) string {
	b, _ := readFile(file)
	return string(b)
}

// readFile reads a control group's file with open, read and close only.
// os.ReadFile also registers the file with the runtime's poller and
// stats it (five more system calls): a restart reads cgroup.procs and,
// with a memory limit, memory.events twice, between the child's exit and
// the next fork. Errors are *os.PathError, as os.ReadFile's.
func readFile(file string) ([]byte, error) {
	fd, err := syscall.Open(file, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: file, Err: err}
	}
	defer syscall.Close(fd)
	var out []byte
	buf := make([]byte, 512)
	for {
		n, err := syscall.Read(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: file, Err: err}
		}
		if n == 0 {
			return out, nil
		}
		out = append(out, buf[:n]...)
		if len(buf) < 64<<10 {
			buf = make([]byte, 2*len(buf))
		}
	}
}

func fields(s string) map[string]bool {
	m := map[string]bool{}
	for _, f := range strings.Fields(s) {
		m[f] = true
	}
	return m
}

// keyed reads "key value" lines and returns key's value.
func keyed(file, key string) uint64 {
	for _, line := range strings.Split(readString(file), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if ok && k == key {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	out := s[:0]
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Remove kills what is left in every instance group under the parent and
// removes them and the parent (tests; an operator's cleanup).
func (m *Manager) Remove() error {
	var errs []error
	dirs := []string{}
	if m.unified != "" {
		dirs = append(dirs, m.unified)
	}
	for _, c := range sortedKeys(m.v1) {
		dirs = append(dirs, m.v1[c])
	}
	for _, d := range dedupe(dirs) {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			g := &Group{m: m, fd: -1, events: -1}
			if d == m.unified {
				g.v2 = filepath.Join(d, e.Name())
			} else {
				g.place = []string{filepath.Join(d, e.Name())}
			}
			if d == m.unified || d == m.v1["freezer"] {
				_, _ = g.KillAll(5 * time.Second)
			}
			if err := syscall.Rmdir(filepath.Join(d, e.Name())); err != nil && err != syscall.ENOENT {
				errs = append(errs, err)
			}
		}
		if err := syscall.Rmdir(d); err != nil && err != syscall.ENOENT {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
