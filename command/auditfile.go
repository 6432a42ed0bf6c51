package command

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/auditlog"
	"github.com/mariposa-sh/mariposa/internal/control"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// auditFlags are run's flags for the audit log: the node's local file of
// instance events, and how long the fleet keeps its records in Consul.
type auditFlags struct {
	file      string
	fileSet   bool
	retention time.Duration
}

const auditFlagsHelp = `  -audit-file=PATH   Append every instance event (started, exited,
                     restarting and why, unhealthy, rendered, signalled,
                     leader changes, slot lost, ...) to PATH as one line of
                     JSON, rotated at 10 MiB with 3 old files kept (default:
                     audit.jsonl in the control socket's directory;
                     -audit-file= turns it off). Never waits on the disk:
                     lines it cannot keep up with are dropped and counted.
  -audit-retention=168h
                     With -cluster: how long the fleet keeps its audit
                     records in Consul (read by "mariposa events"). The
                     first live supervisor by name deletes the days older
                     than this, hourly. 0 keeps them.`

func (a *auditFlags) register(fs *flag.FlagSet) {
	fs.Func("audit-file", "", func(s string) error { a.file, a.fileSet = s, true; return nil })
	fs.DurationVar(&a.retention, "audit-retention", cluster.DefaultAuditRetention, "")
}

// check validates the flags.
func (a *auditFlags) check() error {
	if a.retention < 0 {
		return fmt.Errorf("-audit-retention must be 0 (keep) or more, got %s", a.retention)
	}
	return nil
}

// path is the audit file: -audit-file, else audit.jsonl beside the control
// socket (one per supervisor, in the directory mariposa keeps 0700); ""
// when turned off.
func (a *auditFlags) path(controlSock string) string {
	if a.fileSet {
		return a.file
	}
	return filepath.Join(filepath.Dir(control.ResolvePath(controlSock)), "audit.jsonl")
}

// open starts the audit file's writer and returns the event consumer that
// feeds it and the close that flushes it; both do nothing when it is off.
func (a *auditFlags) open(controlSock string, log hclog.Logger) (func(supervisor.Event), func(), error) {
	p := a.path(controlSock)
	if p == "" {
		return func(supervisor.Event) {}, func() {}, nil
	}
	w, err := auditlog.Open(auditlog.Options{Path: p, Log: log.Named("audit")})
	if err != nil {
		return nil, nil, err
	}
	log.Debug("audit file", "path", p)
	// supervisor.Event carries no environment, template content or check
	// output beyond a reason: nothing secret goes to the file.
	return func(e supervisor.Event) { w.Write(e) }, func() { _ = w.Close() }, nil
}

// auditPruneEvery is how often a fleet member looks for audit days past
// retention (the first look is auditPruneFirst after it starts).
var (
	auditPruneEvery = time.Hour
	auditPruneFirst = 10 * time.Second
)

// pruneAudit deletes the fleet's audit days past retention, hourly, while
// this node is the first live supervisor by name (firstLive: the fleet's
// executor.Executor.FirstLive): one keys-only read an hour, and no write
// unless a day is old.
func pruneAudit(ctx context.Context, firstLive func() bool, client *api.Client, retention time.Duration, log hclog.Logger) {
	if retention <= 0 {
		return
	}
	t := time.NewTimer(auditPruneFirst)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if firstLive() {
			deleted, err := cluster.PruneAudit(ctx, client, time.Now(), retention)
			for _, d := range deleted {
				log.Info("deleted audit records past retention", "prefix", d, "retention", retention)
			}
			if err != nil && ctx.Err() == nil {
				log.Warn("could not delete audit records past retention; trying again in an hour", "error", err)
			}
		}
		t.Reset(auditPruneEvery)
	}
}
