package command

import (
	"flag"
	"net"
	"net/url"
	"os"
	"path/filepath"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/internal/volume"
)

const volumeFlagsHelp = `  -volume-dir=PATH   With -cluster: where the volumes of the slots this node
                     holds live (<PATH>/<unit>/<k>/<volume>), and the
                     snapshots it hands off when a slot moves. Default:
                     $STATE_DIRECTORY/volumes under systemd, else
                     /var/lib/mariposa/volumes as root, else
                     ~/.local/state/mariposa/volumes.`

// volumeFlags is run's -volume-dir.
type volumeFlags struct{ dir string }

func (v *volumeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&v.dir, "volume-dir", defaultVolumeDir(), "")
}

// defaultVolumeDir is a directory that outlives a reboot: never /run.
func defaultVolumeDir() string {
	if d := os.Getenv("STATE_DIRECTORY"); d != "" {
		return filepath.Join(filepath.SplitList(d)[0], "volumes")
	}
	if os.Geteuid() == 0 {
		return "/var/lib/mariposa/volumes"
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "mariposa", "volumes")
	}
	return filepath.Join(os.TempDir(), "mariposa-volumes")
}

// open opens the store; nil (with a warning) when it cannot be: this node
// then claims no slot with volumes.
func (v *volumeFlags) open(log hclog.Logger) *volume.Store {
	s, err := volume.Open(v.dir, log.Named("volume"))
	if err != nil {
		log.Warn("no volume store: this node runs no slot with volumes", "dir", v.dir, "error", err)
		return nil
	}
	return s
}

// handoffURL is the URL other nodes fetch this node's snapshots from: the
// HTTP API's bound address, with the agent's advertised address in place of
// an unspecified host (0.0.0.0). "" when the API is off.
func handoffURL(client *api.Client, bound string) string {
	if bound == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(bound)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if self, err := client.Agent().Self(); err == nil {
			if m, ok := self["Member"]; ok {
				if a, ok := m["Addr"].(string); ok && a != "" {
					host = a
				}
			}
		}
	}
	return (&url.URL{Scheme: "http", Host: net.JoinHostPort(host, port)}).String()
}
