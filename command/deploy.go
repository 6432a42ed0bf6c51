package command

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/user"
	"slices"
	"strings"
	"time"

	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/render"
	"github.com/mariposa-sh/mariposa/schema"
)

// DeployCommand writes a reified spec to Consul for the fleet to run.
type DeployCommand struct {
	UI cli.Ui
}

func (c *DeployCommand) Synopsis() string { return "Deploys services to the fleet through Consul" }

func (c *DeployCommand) Help() string {
	return strings.TrimSpace(`
Usage: mariposa deploy [options] PATH...

  Validates the files, then writes what they declare to Consul as the next
  spec of a deployment, for every "mariposa run -cluster" to run: each
  service with a count (or group with a count) runs in that many slots
  across the fleet, where its constraints allow. The spec is reified:
  variables resolved, template sources read into the spec, so nodes need
  none of the files. Deploying the same files again changes nothing.

  Two deploys at once cannot both win: the desired spec moves with a
  check-and-set, and the loser is told to try again. A deployment still
  rolling out is not superseded without -force.

  Each unit moves to the new spec under its update block: a few
  instances at a time, each healthy for min_healthy_time before the next
  moves; with canary = N, N instances first, then the rest once
  promoted (mariposa deploy promote, or auto_promote). The deployment is
  successful when every instance is healthy at the spec, and failed when
  one is not healthy within healthy_deadline, a slot fails for good, or
  no instance became healthy for progress_deadline; auto_revert then
  deploys the last successful spec again, with the same update block and
  no canaries.

  Before writing, each unit is checked against the live supervisors that
  run the fleet (mariposa run -cluster; others never take a slot): one
  that no live node can run (every node fails a constraint on its own
  attributes) is an error that names each node and the constraint it
  fails, and nothing is deployed; so is a deploy when no node runs the
  fleet at all; one whose count the feasible nodes cannot hold at its
  max_per_node is a warning with the numbers. A service that another
  deployment runs is refused, naming it, and so are files that declare no
  service: "mariposa deploy stop NAME" stops a deployment.

Options:

  -allow-unplaced    Deploy even a unit no live node can run now, or when
                     no node runs the fleet, to wait for nodes that
                     qualify.

  -force             Supersede the deployment's spec still rolling out
                     (its state becomes cancelled).

  -name=NAME         The deployment (default "default"). Each deployment
                     holds its own services; a service name must be unique
                     across deployments.
  -var NAME=VALUE    Set a variable; repeatable. MARIPOSA_VAR_NAME works too.

  -wait              Follow the deployment until it ends: exit 0 when it is
                     successful, 2 when it failed or was superseded (and
                     say what it reverted to), 1 on an error.

` + consulFlagsHelp + `
`)
}

func (c *DeployCommand) Run(args []string) int {
	vars := varFlags{}
	var (
		cf            consulFlags
		name          string
		allowUnplaced bool
		force, wait   bool
	)
	fs := flag.NewFlagSet("deploy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cf.register(fs)
	fs.Var(vars, "var", "")
	fs.StringVar(&name, "name", "default", "")
	fs.BoolVar(&allowUnplaced, "allow-unplaced", false, "")
	fs.BoolVar(&force, "force", false, "")
	fs.BoolVar(&wait, "wait", false, "")
	paths, ok := parsePaths(c.UI, fs, args, c.Help(), "mariposa deploy: no service files given")
	if !ok {
		return 1
	}
	spec, ok := reifyFiles(c.UI, name, paths, vars, "mariposa deploy: ")
	if !ok {
		return 1
	}
	client, err := cf.client()
	if err != nil {
		c.UI.Error("mariposa deploy: " + consulErrText(err))
		return 1
	}
	// A service another deployment runs: refused before anything else.
	if err := retryNoLeader(func() error { return cluster.CheckOwners(client, spec) }); err != nil {
		c.UI.Error("mariposa deploy: " + err.Error())
		return 1
	}
	var fits []placement.Fit
	err = retryNoLeader(func() (err error) { fits, err = cluster.FitSpec(client, spec); return err })
	if err != nil {
		c.UI.Error("mariposa deploy: " + consulErrText(err))
		return 1
	}
	if noFleet(fits) {
		addr := "the Consul agent"
		if cc, err := cf.config(); err == nil && cc.Address != "" {
			addr = cc.Address
		}
		msg := "no node runs the fleet: no live \"mariposa run -cluster\" is registered with Consul (at " + addr + ")" +
			" (a mariposa run without -cluster never takes a slot), so nothing of this deployment would run"
		if !allowUnplaced {
			c.UI.Error("mariposa deploy: " + msg + ".\nNothing was deployed. Start mariposa run -cluster on the nodes first, or deploy with -allow-unplaced to wait for them.")
			return 1
		}
		c.UI.Warn("Warning: " + msg + " until one starts (-allow-unplaced)")
	}
	var unplaceable []string
	for _, f := range fits {
		switch {
		case f.Unplaceable && !allowUnplaced:
			unplaceable = append(unplaceable, f.String())
		case f.String() != "":
			c.UI.Warn("Warning: " + f.String())
		}
	}
	if len(unplaceable) > 0 {
		c.UI.Error("mariposa deploy: " + strings.Join(unplaceable, "\n") +
			"\nNothing was deployed. Fix the constraints or the resources, or deploy with -allow-unplaced to wait for nodes that qualify.")
		return 1
	}
	var res cluster.DeployResult
	err = retryNoLeader(func() (err error) {
		res, err = cluster.Deploy(client, spec, cluster.DeployOptions{By: actor(), Force: force})
		return err
	})
	if err != nil {
		c.UI.Error("mariposa deploy: " + consulErrText(err))
		return 1
	}
	if res.Unchanged {
		c.UI.Output(fmt.Sprintf("Deployment %s: no change (spec %d, %s is already desired)", name, res.N, spec.Hash))
		return 0
	}
	var units []string
	for _, u := range spec.Units() {
		units = append(units, fmt.Sprintf("%s (count %d)", u.Unit.Name, u.Unit.Placement.Count))
	}
	c.UI.Output(fmt.Sprintf("Deployment %s: spec %d (%s) is desired: %s", name, res.N, spec.Hash, strings.Join(units, ", ")))
	if res.Superseded > 0 {
		c.UI.Output(fmt.Sprintf("Deployment %s/%d, still rolling out, is cancelled (-force)", name, res.Superseded))
	}
	for _, u := range slices.Sorted(maps.Keys(res.Canaries)) {
		c.UI.Output(fmt.Sprintf("%s: %s first; then mariposa deploy promote %s%s", u, cluster.Canaries(res.Canaries[u]), name,
			map[bool]string{true: " (or auto_promote)"}[autoPromotes(spec, u)]))
	}
	if !wait {
		return 0
	}
	return followDeployment(c.UI, client, name, res.N)
}

func autoPromotes(spec *cluster.Spec, unit string) bool {
	for _, u := range spec.Units() {
		if u.Unit.Name == unit {
			return u.Unit.Placement.Update.AutoPromote
		}
	}
	return false
}

// actor names who acts, for the record: user@host.
func actor() string {
	host, _ := os.Hostname()
	if u, err := user.Current(); err == nil {
		return u.Username + "@" + host
	}
	return host
}

// reifyFiles loads the service files of a deployment and reifies them, as
// deploy and plan do: diagnostics printed (warnings go on), false on an
// error, reported with pfx.
func reifyFiles(ui cli.Ui, name string, paths []string, vars varFlags, pfx string) (*cluster.Spec, bool) {
	cfg, diags := schema.Load(paths, schema.LoadOptions{Vars: vars, CheckTemplate: render.CheckTemplate})
	if diags.Len() > 0 {
		var b strings.Builder
		_ = diags.WriteText(&b, 100, false)
		if diags.HasErrors() {
			ui.Error(strings.TrimRight(b.String(), "\n"))
			return nil, false
		}
		ui.Warn(strings.TrimRight(b.String(), "\n"))
	}
	spec, err := cluster.Reify(name, cfg)
	if err != nil {
		ui.Error(pfx + consulErrText(err))
		return nil, false
	}
	if len(spec.Units()) == 0 {
		ui.Error(pfx + strings.Join(paths, ", ") + " declare no service: nothing to deploy, and nothing was changed " +
			"(to stop deployment " + name + " and its instances: mariposa deploy stop " + name + ")")
		return nil, false
	}
	return spec, true
}

// noLeaderWait is how long deploy retries while Consul has no leader (an
// election, or a server that lost its peers for a moment after a network
// heal). The write is a check-and-set on the spec's hash, so a retry after
// a write that did land says "no change".
var noLeaderWait = 10 * time.Second

// retryNoLeader runs f until it succeeds, fails for another reason, or
// noLeaderWait has passed.
func retryNoLeader(f func() error) error {
	deadline := time.Now().Add(noLeaderWait)
	for delay := 250 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
		err := f()
		if err == nil || !noLeader(err) || time.Now().Add(delay).After(deadline) {
			return err
		}
		time.Sleep(delay)
	}
}

// noLeader: Consul answered that it has no leader right now.
func noLeader(err error) bool {
	s := err.Error()
	return strings.Contains(s, "No cluster leader") || strings.Contains(s, "leader not found") ||
		strings.Contains(s, "rpc error making call: EOF")
}

// noFleet: the spec has units and no live node runs the fleet to run them.
func noFleet(fits []placement.Fit) bool {
	for _, f := range fits {
		if f.Live > 0 {
			return false
		}
	}
	return len(fits) > 0
}
