package command

import (
	"strings"

	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/version"
)

// VersionCommand prints the version.
type VersionCommand struct {
	UI cli.Ui
}

func (c *VersionCommand) Run(args []string) int {
	c.UI.Output(version.String())
	return 0
}

func (c *VersionCommand) Synopsis() string { return "Prints the mariposa version" }

func (c *VersionCommand) Help() string {
	return strings.TrimSpace(`
Usage: mariposa version

  Prints the mariposa version.
`)
}
