package command

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/internal/control"
)

// RestartCommand restarts one service of the mariposa running on this node.
type RestartCommand struct {
	UI cli.Ui
}

func (c *RestartCommand) Synopsis() string { return "Restarts a service of the local mariposa now" }

func (c *RestartCommand) Help() string {
	return strings.TrimSpace(`
Usage: mariposa restart [options] SERVICE

  Asks the "mariposa run" of this node, through its control socket, to
  restart SERVICE's process now, outside its restart policy (stop signal,
  timeout, then start again). A failed or completed service is started.

Options:

` + controlSocketHelp + `
`)
}

// controlSocketHelp is the -control-socket option of every command that
// talks to the control socket (run's help says the same).
const controlSocketHelp = `  -control-socket=PATH  The control socket of "mariposa run" (default
                        $MARIPOSA_CONTROL_SOCKET, else
                        /run/mariposa/mariposa.sock as root, else
                        $XDG_RUNTIME_DIR/mariposa/mariposa.sock).`

// controlArgs parses the flags of a control command that takes one SERVICE,
// and returns the client and the service; ok is false after an error has
// been shown.
func controlArgs(ui cli.Ui, name, help string, fs *flag.FlagSet, args []string) (*control.Client, string, bool) {
	var sock string
	fs.SetOutput(io.Discard)
	fs.StringVar(&sock, "control-socket", "", "")
	// Flags may follow SERVICE too (mariposa logs web -f).
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			ui.Error(fmt.Sprintf("mariposa %s: %v\n\n%s", name, err, help))
			return nil, "", false
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) != 1 || pos[0] == "" {
		ui.Error(fmt.Sprintf("mariposa %s: needs exactly one SERVICE\n\n%s", name, help))
		return nil, "", false
	}
	return control.NewClient(control.ResolvePath(sock)), pos[0], true
}

func (c *RestartCommand) Run(args []string) int {
	client, svc, ok := controlArgs(c.UI, "restart", c.Help(), flag.NewFlagSet("restart", flag.ContinueOnError), args)
	if !ok {
		return 1
	}
	if err := client.Restart(context.Background(), svc); err != nil {
		c.UI.Error("mariposa restart: " + err.Error())
		return 1
	}
	c.UI.Output(fmt.Sprintf("%s: restarting", svc))
	return 0
}
