package command

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/cluster/plan"
)

// PlanCommand shows what deploy would change, and changes nothing.
type PlanCommand struct {
	UI cli.Ui
}

func (c *PlanCommand) Synopsis() string { return "Shows what deploy would change in the fleet" }

func (c *PlanCommand) Help() string {
	return strings.TrimSpace(`
Usage: mariposa plan [options] PATH...

  Shows what "mariposa deploy" with the same files and options would
  change, and changes nothing. The files are validated and reified as
  deploy does (variables resolved, template sources read in), then
  compared with the deployment's desired spec in Consul, unit by unit:

    + api     the unit is added: its slots start
    - api     the unit is removed: its slots are released, instances stop
    ~ api     the unit changes: each attribute that differs, as
              api.command, api.env.MODE or api.check "http".interval
              (a group member's as web.app.command), its old and new
              value; then the slots added and removed, and which
              instances are replaced

  A changed service definition (anything but placement) replaces the
  instances in every slot that stays: plan says how the new spec's update
  block will do it (canaries first, waiting for a promotion or, with
  auto_promote, for their health; then batches of max_parallel; or all at
  once with max_parallel = 0). A change to placement only
  (count, constraint, affinity, spread, max_per_node, exclusive,
  stop_after, reschedule, update) replaces none.

  The same fit check as deploy's is made against the live supervisors;
  what deploy would refuse or warn about is a warning here.

  The exit status is 0 when the plan is shown, whether or not anything
  would change, and 1 when the files have errors, a service has no count,
  or Consul cannot be read.

Options:

  -json              Print the plan as JSON: the reified spec deploy would
                     write ("the plan of record", with its hash) and each
                     unit's change as data.

  -name=NAME         The deployment (default "default").
  -var NAME=VALUE    Set a variable; repeatable. MARIPOSA_VAR_NAME works too.

` + consulFlagsHelp + `
`)
}

func (c *PlanCommand) Run(args []string) int {
	vars := varFlags{}
	var (
		cf     consulFlags
		name   string
		asJSON bool
	)
	const errPfx = "mariposa plan: "
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cf.register(fs)
	fs.Var(vars, "var", "")
	fs.StringVar(&name, "name", "default", "")
	fs.BoolVar(&asJSON, "json", false, "")
	paths, ok := parsePaths(c.UI, fs, args, c.Help(), "mariposa plan: no service files given")
	if !ok {
		return 1
	}
	next, ok := reifyFiles(c.UI, name, paths, vars, errPfx)
	if !ok {
		return 1
	}
	client, err := cf.client()
	if err != nil {
		c.UI.Error(errPfx + consulErrText(err))
		return 1
	}
	cur, err := cluster.DesiredSpec(client, name)
	if err != nil {
		c.UI.Error(errPfx + consulErrText(err))
		return 1
	}
	fits, err := cluster.FitSpec(client, next)
	if err != nil {
		c.UI.Error(errPfx + consulErrText(err))
		return 1
	}
	p := plan.NewPlan(cur, next)
	var owned *cluster.OwnedError
	switch err := cluster.CheckOwners(client, next); {
	case errors.As(err, &owned):
		p.Warnings = append(p.Warnings, fmt.Sprintf("%s: deployment %s (spec %d) runs it, and a service's name is unique across deployments:\n  deploy refuses this plan",
			owned.Unit, owned.Owner, owned.N))
	case err != nil:
		c.UI.Error(errPfx + err.Error())
		return 1
	}
	for _, f := range fits {
		s := f.String()
		if s == "" {
			continue
		}
		if f.Unplaceable {
			s += "\n  deploy refuses this unit (unless -allow-unplaced)"
		}
		p.Warnings = append(p.Warnings, s)
	}
	if asJSON {
		b, err := json.MarshalIndent(p, "", "  ")
		if err != nil {
			c.UI.Error(errPfx + consulErrText(err))
			return 1
		}
		c.UI.Output(string(b))
	} else {
		c.UI.Output(strings.TrimRight(p.Text(), "\n"))
	}
	// On standard error in both forms: -json's output stays JSON.
	for _, w := range p.Warnings {
		c.UI.Warn("Warning: " + w)
	}
	return 0
}
