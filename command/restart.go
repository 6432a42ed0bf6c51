package command

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/internal/control"
)

// RestartCommand restarts one service of a node's mariposa.
type RestartCommand struct {
	UI cli.Ui
}

func (c *RestartCommand) Synopsis() string { return "Restarts a service of a node's mariposa now" }

func (c *RestartCommand) Help() string {
	return strings.TrimSpace(`
Usage: mariposa restart [options] SERVICE

  Asks the "mariposa run" of this node, through its control socket, to
  restart SERVICE's process now, outside its restart policy (stop signal,
  timeout, then start again). A failed or completed service is started.
  With -node, asks NODE's mariposa, through its HTTP API. Either way the
  restart is in the node's audit file and events, with who asked.
` + serviceArgHelp + `

Options:

` + controlSocketHelp + `
` + strings.ReplaceAll(nodeFlagHelp, "PERM", "service:write") + `

` + consulFlagsHelp + `
`)
}

// serviceArgHelp says what SERVICE may name, for restart, reset and logs.
const serviceArgHelp = `
  SERVICE is a service of the node's files, an instance in a fleet slot
  the node holds (api/0), or a unit's name when the node holds exactly
  one slot of it (api for api/0). An unknown name is answered with the
  node's instances.`

// controlSocketHelp is the -control-socket option of every command that
// talks to the control socket (run's help says the same).
const controlSocketHelp = `  -control-socket=PATH  The control socket of "mariposa run" (default
                        $MARIPOSA_CONTROL_SOCKET, else
                        /run/mariposa/mariposa.sock as root, else
                        $XDG_RUNTIME_DIR/mariposa/mariposa.sock).`

// opArgs are the options of a command that acts on one service of a
// node's mariposa: the local one through its control socket, or NODE's
// through its HTTP API.
type opArgs struct {
	sock, node string
	cf         consulFlags
	// perm is what the command needs of a token on the service.
	perm string
	// rn is the node's mariposa once found (-node).
	rn remoteNode
}

// controlArgs parses the flags of a control command that takes one SERVICE,
// and returns its options and the service; ok is false after an error has
// been shown.
func controlArgs(ui cli.Ui, name, help string, fs *flag.FlagSet, args []string) (*opArgs, string, bool) {
	o := &opArgs{perm: "service:write"}
	if name == "logs" {
		o.perm = "service:read"
	}
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.sock, "control-socket", "", "")
	fs.StringVar(&o.node, "node", "", "")
	o.cf.register(fs)
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
	if o.node != "" && o.sock != "" {
		ui.Error(fmt.Sprintf("mariposa %s: give -node or -control-socket, not both", name))
		return nil, "", false
	}
	return o, pos[0], true
}

// client is the local control socket's client, or with -node the client of
// NODE's HTTP API, found in Consul's catalog.
func (o *opArgs) client(ctx context.Context) (*control.Client, error) {
	if o.node == "" {
		return control.NewClient(control.ResolvePath(o.sock)), nil
	}
	cfg, err := o.cf.config()
	if err != nil {
		return nil, err
	}
	cc, err := api.NewClient(cfg) // reads -token-file into cfg.Token
	if err != nil {
		return nil, err
	}
	if o.rn, err = findNodeAPI(ctx, cc, o.node); err != nil {
		return nil, err
	}
	return control.NewRemote(o.rn.url, o.node, cfg.Token), nil
}

// errText says what went wrong acting on svc, with what to do about it.
func (o *opArgs) errText(err error, svc string) string {
	if o.node == "" {
		return err.Error()
	}
	if o.rn.url == "" {
		return consulErrText(err) // finding the node through Consul
	}
	return remoteErr(err, o.rn, o.perm, svc)
}

// on is " on node NODE" with -node, for the output.
func (o *opArgs) on() string {
	if o.node == "" {
		return ""
	}
	return " on node " + o.node
}

// remoteTimeout bounds a request to a node's API that is not a stream.
const remoteTimeout = 30 * time.Second

// opContext is the context of a restart or reset.
func (o *opArgs) opContext() (context.Context, context.CancelFunc) {
	if o.node == "" {
		return context.Background(), func() {}
	}
	return context.WithTimeout(context.Background(), remoteTimeout)
}

func (c *RestartCommand) Run(args []string) int {
	o, svc, ok := controlArgs(c.UI, "restart", c.Help(), flag.NewFlagSet("restart", flag.ContinueOnError), args)
	if !ok {
		return 1
	}
	ctx, cancel := o.opContext()
	defer cancel()
	client, err := o.client(ctx)
	if err == nil {
		svc, err = client.Operate(ctx, "restart", svc)
	}
	if err != nil {
		c.UI.Error("mariposa restart: " + o.errText(err, svc))
		return 1
	}
	c.UI.Output(fmt.Sprintf("%s%s: restarting", svc, o.on()))
	return 0
}
