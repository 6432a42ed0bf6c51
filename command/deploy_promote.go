package command

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/cluster"
)

// DeployPromoteCommand ends a deployment's canary phase.
type DeployPromoteCommand struct {
	UI cli.Ui
}

func (c *DeployPromoteCommand) Synopsis() string { return "Promotes a deployment's canaries" }

func (c *DeployPromoteCommand) Help() string {
	return strings.TrimSpace(`
Usage: mariposa deploy promote [options] NAME

  Ends the canary phase of deployment NAME: a unit whose update block says
  canary = N moves only N instances (slots 0 to N-1) to a new spec, and
  waits. Once they look right, promote lets the other instances move too,
  max_parallel at a time. auto_promote does it as soon as every canary is
  healthy for min_healthy_time.

  The promotion and its audit record are one transaction, checked against
  the deployment's state: promoting a deployment that is not running, or
  has no canary phase to end, is an error and changes nothing.

Options:

` + consulFlagsHelp + `
`)
}

func (c *DeployPromoteCommand) Run(args []string) int {
	var cf consulFlags
	fs := flag.NewFlagSet("deploy promote", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cf.register(fs)
	if err := fs.Parse(args); err != nil {
		c.UI.Error("mariposa deploy promote: " + consulErrText(err) + "\n\n" + c.Help())
		return 1
	}
	if fs.NArg() != 1 {
		c.UI.Error("mariposa deploy promote: name one deployment\n\n" + c.Help())
		return 1
	}
	client, err := cf.client()
	if err != nil {
		c.UI.Error("mariposa deploy promote: " + consulErrText(err))
		return 1
	}
	name := fs.Arg(0)
	var n uint64
	err = retryNoLeader(func() (err error) { n, err = cluster.Promote(client, name, actor()); return err })
	if err != nil {
		c.UI.Error("mariposa deploy promote: " + consulErrText(err))
		return 1
	}
	c.UI.Output(fmt.Sprintf("Deployment %s/%d promoted: the other instances move to it now", name, n))
	return 0
}
