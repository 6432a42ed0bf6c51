package command

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/cluster"
)

// DeployHealthCommand marks an instance healthy for health_check = "manual".
type DeployHealthCommand struct {
	UI cli.Ui
}

func (c *DeployHealthCommand) Synopsis() string {
	return "Marks an instance healthy in a rollout with health_check = \"manual\""
}

func (c *DeployHealthCommand) Help() string {
	return strings.TrimSpace(`
Usage: mariposa deploy health [options] UNIT/K...

  Says that the instance in slot K of UNIT is healthy at the version it
  runs. With health_check = "manual" in a unit's update block, an updated
  instance counts as healthy only once it runs and an operator said so
  (then for min_healthy_time, as with the other modes), within
  healthy_deadline. The mark is for the version the slot runs now: an
  instance that moves on to another version needs a new one.

  The mark and its audit record are one transaction that fails if the slot
  changed since it was read.

Options:

` + consulFlagsHelp + `
`)
}

func (c *DeployHealthCommand) Run(args []string) int {
	var cf consulFlags
	fs := flag.NewFlagSet("deploy health", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cf.register(fs)
	if err := fs.Parse(args); err != nil {
		c.UI.Error("mariposa deploy health: " + consulErrText(err) + "\n\n" + c.Help())
		return 1
	}
	if fs.NArg() == 0 {
		c.UI.Error("mariposa deploy health: name a slot, e.g. web/2\n\n" + c.Help())
		return 1
	}
	client, err := cf.client()
	if err != nil {
		c.UI.Error("mariposa deploy health: " + consulErrText(err))
		return 1
	}
	code := 0
	for _, arg := range fs.Args() {
		unit, k, err := cluster.ParseSlot(arg)
		if err != nil {
			c.UI.Error("mariposa deploy health: " + consulErrText(err))
			code = 1
			continue
		}
		var version string
		err = retryNoLeader(func() (err error) { version, err = cluster.MarkHealthy(client, unit, k, actor()); return err })
		if err != nil {
			c.UI.Error("mariposa deploy health: " + consulErrText(err))
			code = 1
			continue
		}
		c.UI.Output(fmt.Sprintf("%s/%d marked healthy at version %s", unit, k, version))
	}
	return code
}
