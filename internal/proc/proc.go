// Package proc starts and signals child processes the way a supervisor must:
// each child leads its own process group, gets SIGKILL if mariposa dies
// (PR_SET_PDEATHSIG; see startOne for why any thread may fork), and its
// output is forwarded line by line without ever blocking it.
package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Spec describes a process to start.
type Spec struct {
	Argv []string
	Dir  string
	Env  []string
	// Output receives the child's stdout and stderr lines; nil discards.
	Output *Sink
	// Name tags the lines in Output.
	Name string
	// Tap, when set, sees every line as it is read, before Output (which
	// may drop lines); it must not block.
	Tap func(Line)
	// Group, when set, is the control group the child starts in.
	Group Group
	// Cred, when set, is who the child runs as.
	Cred *Credential
	// Umask, when HasUmask, is the child's umask; else it has mariposa's.
	Umask    int
	HasUmask bool
	// NoNewPrivs sets PR_SET_NO_NEW_PRIVS in the child: neither it nor what
	// it runs gains privileges through setuid binaries or file caps.
	NoNewPrivs bool
	// Rlimits are set on the child right after its fork.
	Rlimits []Rlimit
}

// Rlimit is one resource limit, soft and hard alike.
type Rlimit struct {
	Resource int
	Value    uint64
}

func rlimitName(r int) string {
	switch r {
	case RlimitNOFile:
		return "nofile"
	case RlimitNProc:
		return "nproc"
	case RlimitCore:
		return "core"
	}
	return fmt.Sprintf("rlimit %d", r)
}

// Credential is a user, group and supplementary groups to run as.
type Credential struct {
	Uid, Gid uint32
	Groups   []uint32
}

// Group is a control group a child is started in: forked straight into the
// directory FD names (CLONE_INTO_CGROUP) where it is not -1, and handed to
// Place right after the fork, before Start returns (Place moves it into the
// hierarchies a fork cannot target). A Place error kills the child: nothing
// runs outside the limits it was given.
type Group interface {
	FD() int
	Place(pid int) error
}

// Exit is how a process ended.
type Exit struct {
	Code   int            // exit status; -1 when killed by a signal
	Signal syscall.Signal // the signal that killed it, or 0
	Err    error          // a wait error, rare
	At     time.Time
	// OOMKilled: the kernel's OOM killer killed a process of the child's
	// control group while it ran (its memory limit), as the group's own
	// counters tell; set by the supervisor.
	OOMKilled bool
}

// Success reports a clean exit 0.
func (e Exit) Success() bool { return e.Err == nil && e.Signal == 0 && e.Code == 0 && !e.OOMKilled }

func (e Exit) String() string {
	if e.OOMKilled {
		base := e
		base.OOMKilled = false
		return "oom-killed (" + base.String() + ")"
	}
	switch {
	case e.Err != nil:
		return "wait error: " + e.Err.Error()
	case e.Signal != 0:
		return "killed by " + SignalName(e.Signal)
	default:
		return fmt.Sprintf("exit %d", e.Code)
	}
}

// Process is a started child.
type Process struct {
	Pid     int
	Started time.Time

	done    chan struct{}
	exit    Exit
	outDone chan struct{}

	// The descriptors an upgrade hands over (handoff_linux.go): the pidfd
	// the poller follows (-1: none), the read ends of stdout and stderr
	// (-1 once at EOF, or when goroutines read them).
	pidfd        int
	outFD, errFD atomic.Int32

	// onExit records the exit once reaped (and lets go of the os.Process).
	onExit func(syscall.WaitStatus, error)
	// The main thread's following of the exit (arm_linux.go): the state,
	// the successor to start, and once done, what it started.
	arm     atomic.Int32
	succ    *Successor
	next    *Process
	nextErr error
	fired   bool
}

// OutputDone is closed when both output streams reached EOF: every writer
// (the child and anything that inherited its stdout/stderr) has gone.
func (p *Process) OutputDone() <-chan struct{} { return p.outDone }

// Done is closed when the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exit is valid after Done is closed.
func (p *Process) Exit() Exit { <-p.done; return p.exit }

// SignalMain sends sig to the child itself, not its group: a reload signal
// for the service, which a wrapper script passes on as it sees fit.
func (p *Process) SignalMain(sig syscall.Signal) error {
	err := syscall.Kill(p.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// Signal sends sig to the child's whole process group.
func (p *Process) Signal(sig syscall.Signal) error {
	err := syscall.Kill(-p.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// Stop sends sig to the group, waits up to timeout for the child to exit,
// then SIGKILLs the group. Leftover group members (grandchildren that ignored
// sig) are killed in any case, so nothing outlives the stop.
func (p *Process) Stop(sig syscall.Signal, timeout time.Duration) Exit {
	_ = p.Signal(sig)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
	}
	_ = p.Signal(syscall.SIGKILL)
	return p.Exit()
}

type startReq struct {
	cmd *exec.Cmd
	// exited is called with the wait status; reaper says the reaper will
	// call it (it is active), otherwise the caller waits.
	exited func(syscall.WaitStatus, error)
	reaper bool
}

// startOne forks and execs r's command on the calling goroutine's thread:
// the main thread when mariposa serves forks there (ServeForks), the
// caller's otherwise (tests, and programs that do not).
//
// Linux sends a child its parent-death signal when the *thread* that forked
// it exits, not the process, and an execve ends every thread but the one
// that calls it: mariposa's upgrade in place re-execs from the main thread,
// so that is where every child must be forked (mainthread_linux.go). Go
// ends a thread otherwise only when a goroutine exits while locked to it
// (runtime.LockOSThread without the unlock); nothing linked into mariposa
// does (TestNothingLockedEndsAThread reads every package of the binary).
func startOne(r *startReq) error {
	rp := activeReaper()
	if rp == nil {
		return r.cmd.Start()
	}
	// Hold the reaper across fork and registration so it cannot reap the
	// child before its status has somewhere to go.
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if err := r.cmd.Start(); err != nil {
		return err
	}
	rp.register(r.cmd.Process.Pid, r.exited)
	r.reaper = true
	return nil
}

// Start starts the process described by spec.
func Start(spec Spec) (*Process, error) { return start(spec, false) }

// start starts spec; here: on the calling thread, the main thread serving
// an armed exit, which holds forkGate for reading already.
func start(spec Spec, here bool) (*Process, error) {
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, &StartError{Err: errors.New("empty command"), Permanent: true}
	}
	if err := preflight(spec); err != nil {
		return nil, err
	}
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Dir = spec.Dir
	cmd.Env = spec.Env
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	// PidFD: wait through the poller (see followExit) or the netpoller (see
	// waitPid).
	pidfd := -1
	cmd.SysProcAttr = sysProcAttr(&pidfd)
	if spec.Group != nil {
		intoCgroup(cmd.SysProcAttr, spec.Group.FD())
	}
	if c := spec.Cred; c != nil {
		// Groups nil sets none: only the ones given, never mariposa's.
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: c.Uid, Gid: c.Gid, Groups: c.Groups}
	}
	// Our own pipes instead of exec's copying goroutines: the readers below
	// never block the child, whatever the log sink does.
	outR, outW, err := newPipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := newPipe()
	if err != nil {
		syscall.Close(outR)
		outW.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	// stdin is /dev/null, opened once rather than at every start.
	if null := devNull(); null != nil {
		cmd.Stdin = null
	}
	p := &Process{done: make(chan struct{}), outDone: make(chan struct{}), pidfd: -1}
	p.onExit = func(ws syscall.WaitStatus, err error) {
		_ = cmd.Process.Release()
		p.exited(ws, err)
	}
	p.outFD.Store(-1)
	p.errFD.Store(-1)
	// An upgrade's freeze waits for a start under way to be registered.
	if !here {
		forkGate.RLock()
		defer forkGate.RUnlock()
	}
	req := &startReq{cmd: cmd, exited: p.exited}
	// no_new_privs: through the trampoline (mainthread_linux.go), which
	// sets it in the child.
	var trampR, trampW *os.File
	if spec.NoNewPrivs && cmd.Err == nil {
		var path string
		var argv []string
		path, argv, trampR, trampW, err = trampoline(cmd.Path, cmd.Args)
		if err != nil {
			syscall.Close(outR)
			syscall.Close(errR)
			outW.Close()
			errW.Close()
			return nil, &StartError{Err: err}
		}
		cmd.Path, cmd.Args, cmd.ExtraFiles = path, argv, []*os.File{trampW}
	}
	umask := -1
	if spec.HasUmask {
		umask = spec.Umask
	}
	switch {
	case here:
		err = forkMain(req, umask)
	case onMain():
		err = startMain(req, umask)
	case spec.HasUmask:
		err = startSpecial(req, umask)
	default:
		err = startOne(req)
	}
	outW.Close()
	errW.Close()
	if trampW != nil {
		trampW.Close()
	}
	if err != nil {
		syscall.Close(outR)
		syscall.Close(errR)
		if trampR != nil {
			trampR.Close()
		}
		return nil, classify(spec, err)
	}
	p.Pid, p.Started = cmd.Process.Pid, time.Now()
	var placeErr error
	if trampR != nil {
		if terr := trampolineResult(trampR); terr != nil {
			placeErr = classify(spec, terr)
		}
	}
	if len(spec.Rlimits) > 0 && placeErr == nil {
		placeErr = setRlimits(p.Pid, spec.Rlimits)
	}
	if spec.Group != nil && placeErr == nil {
		if placeErr = spec.Group.Place(p.Pid); placeErr != nil {
			placeErr = fmt.Errorf("placing the process in its control group: %w", placeErr)
		}
	}
	if placeErr != nil {
		_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	}
	// One goroutine follows every child's output and exit (the poller);
	// where it cannot, goroutines of this child's own do.
	p.outFD.Store(int32(outR))
	p.errFD.Store(int32(errR))
	if !followOutput(spec.Output, spec.Name, spec.Tap, outR, errR, &p.outFD, &p.errFD, func() { close(p.outDone) }) {
		p.outFD.Store(-1)
		p.errFD.Store(-1)
		var fw sync.WaitGroup
		fw.Add(2)
		go func() {
			defer fw.Done()
			spec.Output.forward(spec.Name, "stdout", os.NewFile(uintptr(outR), "|0"), spec.Tap)
		}()
		go func() {
			defer fw.Done()
			spec.Output.forward(spec.Name, "stderr", os.NewFile(uintptr(errR), "|0"), spec.Tap)
		}()
		go func() { fw.Wait(); close(p.outDone) }()
	}
	switch {
	case req.reaper:
		// The reaper calls p.exited.
		if pidfd >= 0 {
			syscall.Close(pidfd)
		}
	case pidfd >= 0 && followExit(p.Pid, pidfd, &p.arm, p.onExit):
		p.pidfd = pidfd
	default:
		go func() { p.exited(waitPid(cmd.Process, pidfd)) }()
	}
	if placeErr != nil {
		<-p.done
		var se *StartError
		if errors.As(placeErr, &se) {
			return nil, se
		}
		return nil, &StartError{Err: placeErr}
	}
	return p, nil
}

var (
	nullOnce sync.Once
	nullFile *os.File
)

// devNull is /dev/null open for reading, for every child's stdin (nil:
// it cannot be opened; exec.Cmd opens it then).
func devNull() *os.File {
	nullOnce.Do(func() { nullFile, _ = os.Open(os.DevNull) })
	return nullFile
}

// exited records how the process ended and closes Done.
func (p *Process) exited(ws syscall.WaitStatus, err error) {
	p.exit = exitFrom(ws, err)
	close(p.done)
}

// waitPid waits for the child to exit and reaps it, from a goroutine of its
// own: where the poller cannot follow the pidfd. The pidfd is polled through
// Go's netpoller, so a waiting child costs a parked goroutine rather than an
// OS thread blocked in waitid (os.Process.Wait): a thousand services would
// otherwise hold a thousand threads. Without pidfds, os.Process.Wait it is.
func waitPid(pr *os.Process, pidfd int) (syscall.WaitStatus, error) {
	if pidfd >= 0 {
		ws, polled, err := waitPidfd(pr.Pid, pidfd)
		if polled {
			_ = pr.Release()
			return ws, err
		}
	}
	ps, err := pr.Wait()
	if err != nil {
		return 0, err
	}
	ws, _ := ps.Sys().(syscall.WaitStatus)
	return ws, nil
}

func exitFrom(ws syscall.WaitStatus, err error) Exit {
	e := Exit{At: time.Now(), Err: err}
	if err != nil {
		e.Code = -1
		return e
	}
	if ws.Signaled() {
		e.Code, e.Signal = -1, ws.Signal()
	} else {
		e.Code = ws.ExitStatus()
	}
	return e
}
