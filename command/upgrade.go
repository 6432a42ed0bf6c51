package command

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/mitchellh/cli"
	"golang.org/x/sys/unix"

	"github.com/mariposa-sh/mariposa/fleet/executor"
	"github.com/mariposa-sh/mariposa/internal/control"
	"github.com/mariposa-sh/mariposa/internal/proc"
	"github.com/mariposa-sh/mariposa/supervisor"
	"github.com/mariposa-sh/mariposa/version"
)

// UpgradeCommand upgrades the node's mariposa in place.
type UpgradeCommand struct {
	UI cli.Ui
}

func (c *UpgradeCommand) Synopsis() string {
	return "Hands the node over to the mariposa binary now installed, without restarting its services"
}

func (c *UpgradeCommand) Help() string {
	return strings.TrimSpace(`
Usage: mariposa upgrade [options]

  Asks the "mariposa run" of this node, through its control socket, to
  re-execute the binary now at its path (the one a package upgrade just
  replaced) in place: same PID, every child running on with the same PID
  and its output flowing, registrations and checks left in Consul, leader
  terms held by the same sessions. See website/upgrade.md.

  The new binary is first run as "upgrade-preflight": one that cannot run
  here (corrupt, another architecture) or does not read the state this
  mariposa hands over is refused, and this mariposa goes on. Exits 0 once
  the node answers from the new build, 1 when the upgrade was refused or
  failed (the old build goes on).

Options:

  -timeout=60s       How long to wait for the new build to answer.

` + controlSocketHelp + `
`)
}

func (c *UpgradeCommand) Run(args []string) int {
	fs := flag.NewFlagSet("upgrade", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var sock string
	var timeout time.Duration
	fs.StringVar(&sock, "control-socket", "", "")
	fs.DurationVar(&timeout, "timeout", 60*time.Second, "")
	if err := fs.Parse(args); err != nil {
		c.UI.Error("mariposa upgrade: " + err.Error() + "\n\n" + c.Help())
		return 1
	}
	if fs.NArg() > 0 {
		c.UI.Error("mariposa upgrade: takes no arguments\n\n" + c.Help())
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cl := control.NewClient(sock)
	began := time.Now()
	res, err := cl.Upgrade(ctx)
	if err != nil {
		c.UI.Error("mariposa upgrade: " + err.Error())
		return 1
	}
	for {
		v, err := cl.Version(ctx)
		switch {
		case err == nil && v.PID == res.PID && upgradeDone(res, v):
			c.UI.Output(fmt.Sprintf("upgraded in place: %s -> %s (pid %d, %s)", res.From, res.To, res.PID,
				time.Since(began).Round(time.Millisecond)))
			return 0
		case err == nil && v.UpgradeError != "" && (v.Image == res.Image || res.Image == "" && v.Version == res.From):
			c.UI.Error("mariposa upgrade: failed, " + res.From + " goes on: " + v.UpgradeError)
			return 1
		case err == nil && v.PID != res.PID:
			c.UI.Error(fmt.Sprintf("mariposa upgrade: the control socket is answered by another process (pid %d, %s): the upgrade of pid %d failed past the exec; see its log", v.PID, v.Version, res.PID))
			return 1
		}
		select {
		case <-ctx.Done():
			c.UI.Error(fmt.Sprintf("mariposa upgrade: no answer from %s within %s", res.To, timeout))
			return 1
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// upgradeDone: another process image answers after an upgrade whose
// answer was res. Builds that name their image are told apart by it, so
// an upgrade to the same version ends too; with a build that does not
// (an older one, on either side), by the version.
func upgradeDone(res control.UpgradeResult, v control.VersionInfo) bool {
	if res.Image != "" && v.Image != "" {
		return v.Image != res.Image
	}
	return v.Version == res.To && v.Version != res.From
}

// The state an upgrade in place hands to the next image: a JSON document
// in a memfd whose descriptor the environment names. Its version is
// checked before the exec (upgrade-preflight) and after it: a binary
// refuses a state it does not know, never misreads it.
const (
	upgradeStateEnv     = "MARIPOSA_UPGRADE_STATE"
	upgradeStateFormat  = "mariposa-upgrade-state"
	upgradeStateVersion = 1
)

// upgradeState is version 1 of the state (website/upgrade.md lists it).
type upgradeState struct {
	Format  string               `json:"format"`  // upgradeStateFormat
	Version int                  `json:"version"` // upgradeStateVersion
	From    string               `json:"from"`    // the build that wrote it
	Runner  *supervisor.Handover `json:"runner"`
	// Fleet is the fleet's step machine's part: its session and holds;
	// absent without -cluster (and from an older build whose fleet
	// engine held its slots under the runner's sessions).
	Fleet *executor.Handover `json:"fleet,omitempty"`
}

// preflightAnswer is what "mariposa upgrade-preflight" prints.
type preflightAnswer struct {
	Version       string `json:"version"`
	StateVersions []int  `json:"state_versions"`
}

// UpgradePreflight is the hidden "mariposa upgrade-preflight -state-version
// N": the running mariposa asks the binary it is about to exec whether it
// runs here and reads state version N.
func UpgradePreflight(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("upgrade-preflight", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	n := fs.Int("state-version", 0, "")
	if err := fs.Parse(args); err != nil {
		fmt.Fprintln(stderr, "mariposa upgrade-preflight:", err)
		return 1
	}
	_ = json.NewEncoder(stdout).Encode(preflightAnswer{Version: version.String(), StateVersions: []int{upgradeStateVersion}})
	if *n != upgradeStateVersion {
		fmt.Fprintf(stderr, "mariposa upgrade-preflight: %s reads upgrade state version %d, not %d\n", version.String(), upgradeStateVersion, *n)
		return 1
	}
	return 0
}

// preflight runs exe as upgrade-preflight and returns its version.
func preflight(exe string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "upgrade-preflight", "-state-version", strconv.Itoa(upgradeStateVersion))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := proc.Run(cmd) // as PID 1 too (the reaper)
	var a preflightAnswer
	jerr := json.Unmarshal(out.Bytes(), &a)
	switch {
	case ctx.Err() != nil:
		return "", fmt.Errorf("%s did not answer upgrade-preflight within 10s", exe)
	case err != nil && errb.Len() > 0:
		return "", fmt.Errorf("%s refused: %s", exe, strings.TrimSpace(lastLine(errb.String())))
	case err != nil:
		return "", fmt.Errorf("%s cannot run here: %w", exe, err)
	case jerr != nil || a.Version == "":
		return "", fmt.Errorf("%s is not a mariposa that upgrades in place (its upgrade-preflight answer: %q)", exe, strings.TrimSpace(lastLine(out.String())))
	}
	return a.Version, nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// takeUpgradeState reads the state the previous image handed over, if
// any, and removes its variable from the environment (children never see
// it).
func takeUpgradeState() (*upgradeState, error) {
	v, ok := os.LookupEnv(upgradeStateEnv)
	if !ok {
		return nil, nil
	}
	os.Unsetenv(upgradeStateEnv)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s=%q is not a descriptor", upgradeStateEnv, v)
	}
	f := os.NewFile(uintptr(fd), "upgrade-state")
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the upgrade state: %w", err)
	}
	return decodeUpgradeState(b)
}

// decodeUpgradeState refuses a state of another format or version.
func decodeUpgradeState(b []byte) (*upgradeState, error) {
	var head struct {
		Format  string `json:"format"`
		Version int    `json:"version"`
		From    string `json:"from"`
	}
	if err := json.Unmarshal(b, &head); err != nil || head.Format != upgradeStateFormat {
		return nil, errors.New("the upgrade state handed over is not a mariposa upgrade state")
	}
	if head.Version != upgradeStateVersion {
		return nil, fmt.Errorf("the upgrade state handed over by %s is version %d; %s reads version %d only", head.From, head.Version, version.String(), upgradeStateVersion)
	}
	var st upgradeState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("the upgrade state handed over: %w", err)
	}
	if st.Runner == nil {
		return nil, errors.New("the upgrade state handed over has no runner state")
	}
	return &st, nil
}

// nodeUpgrader upgrades the running mariposa in place.
type nodeUpgrader struct {
	r    *supervisor.Runner
	sink *proc.Sink
	log  hclog.Logger
	// dev: run -dev started a Consul agent of its own, a child the
	// upgrade does not hand over.
	dev  bool
	busy chan struct{} // one upgrade at a time
	// fleet: run -cluster's fleet member (its step machine hands over).
	fleet *fleetMember
}

func (u *nodeUpgrader) PrepareUpgrade(by string) (control.UpgradeResult, func(), error) {
	var res control.UpgradeResult
	if u.dev {
		return res, nil, errors.New("this mariposa runs its own dev Consul agent (run -dev), which an upgrade in place would stop: restart it instead")
	}
	select {
	case u.busy <- struct{}{}:
	default:
		return res, nil, errors.New("an upgrade is already under way")
	}
	release := func() { <-u.busy }
	// Just after an upgrade in place (or the start), this image may still
	// be taking over: its previous image's strays are killed before it is
	// ready (the preflight's child would be one), and the fleet then takes
	// back the slots handed over (Runner.Handover waits for that).
	select {
	case <-u.r.Ready():
	case <-time.After(10 * time.Second):
		release()
		return res, nil, errors.New("mariposa is still starting: try again")
	}
	exe, err := os.Executable()
	if err != nil {
		release()
		return res, nil, fmt.Errorf("cannot find mariposa's binary: %w", err)
	}
	to, err := preflight(exe)
	if err != nil {
		release()
		return res, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, thaw, err := u.r.Handover(ctx)
	if err != nil {
		release()
		return res, nil, err
	}
	var fh *executor.Handover
	if u.fleet != nil {
		var fthaw func()
		if fh, fthaw, err = u.fleet.fleetHandover(ctx, h); err != nil {
			thaw()
			release()
			return res, nil, err
		}
		rthaw := thaw
		thaw = func() { fthaw(); rthaw() }
	}
	fail := func(err error) error { thaw(); release(); return err }
	b, err := json.Marshal(upgradeState{Format: upgradeStateFormat, Version: upgradeStateVersion, From: version.String(), Runner: h, Fleet: fh})
	if err != nil {
		return res, nil, fail(err)
	}
	fd, err := stateFile(b)
	if err != nil {
		return res, nil, fail(err)
	}
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, upgradeStateEnv+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, upgradeStateEnv+"="+strconv.Itoa(fd))
	res = control.UpgradeResult{From: version.String(), To: to, PID: os.Getpid(), Path: exe}
	fds := h.Fds()
	commit := func() {
		u.log.Info("handing the node over", "to", to, "children", len(fds), "by", by)
		if u.sink != nil {
			u.sink.Flush(time.Second)
		}
		err := proc.Exec(exe, os.Args, env, func() error { return proc.KeepOpen(fds) })
		// Still here: the exec failed, the old image goes on.
		for _, fd := range fds {
			_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
		}
		unix.Close(fd)
		thaw()
		release()
		err = fmt.Errorf("exec %s: %w", exe, err)
		control.SetUpgradeError(err)
		u.log.Error("upgrade failed; this mariposa goes on", "error", err)
	}
	return res, commit, nil
}
