package command

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/cluster"
)

// followDeployment is deploy -wait: it prints the deployment's progress as
// it changes, with one blocking query on mariposa/ at a time, until spec n
// is successful (0), failed or superseded (2), or an error (1).
func followDeployment(ui cli.Ui, client *api.Client, name string, n uint64) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var index uint64
	last := ""
	for {
		d, progress, next, err := cluster.Watch(ctx, client, name, index)
		if err != nil {
			if ctx.Err() != nil {
				ui.Error("mariposa deploy: stopped following; the deployment goes on")
				return 1
			}
			ui.Warn("mariposa deploy: " + consulErrText(err) + "; retrying")
			select {
			case <-ctx.Done():
				return 1
			case <-time.After(time.Second):
			}
			continue
		}
		if next < index {
			next = 0 // the index went back (a new leader's snapshot): start over
		}
		index = next
		st, ok := stateOf(client, name, n, d)
		if !ok {
			ui.Error(fmt.Sprintf("mariposa deploy: deployment %s/%d has no state: is it written by an older mariposa?", name, n))
			return 1
		}
		if line := progressLine(st, d.Spec.N == n, progress); line != last {
			ui.Output(line)
			last = line
		}
		switch st.Status {
		case cluster.DeploySuccessful:
			ui.Output(fmt.Sprintf("Deployment %s/%d successful", name, n))
			return 0
		case cluster.DeployFailed:
			// A revert is the units' records going back to their stable
			// version, which the reason says ("reverted to web/2").
			ui.Error(fmt.Sprintf("Deployment %s/%d failed: %s", name, n, st.Reason))
			return 2
		case cluster.DeployCancelled:
			ui.Error(fmt.Sprintf("Deployment %s/%d cancelled: %s", name, n, st.Reason))
			return 2
		}
	}
}

// stateOf is spec n's state: d's when n is still desired, else read.
func stateOf(client *api.Client, name string, n uint64, d *cluster.Deployment) (cluster.DeployState, bool) {
	if d.State != nil && d.State.N == n {
		return cluster.Effective(*d.State, d.Spec, d.Records), true
	}
	st, err := cluster.ReadDeployState(client, name, n)
	if err != nil || st == nil {
		return cluster.DeployState{}, false
	}
	return *st, true
}

// progressLine: "running: web 2/4 healthy (canaries 1, waiting for promote)".
func progressLine(st cluster.DeployState, current bool, progress []cluster.UnitProgress) string {
	parts := []string{st.Status}
	if current {
		for _, p := range progress {
			s := fmt.Sprintf("%s %d/%d healthy", p.Unit, p.Healthy, p.Count)
			if p.Canaries > 0 && !st.Promoted {
				s += fmt.Sprintf(" (%s; waiting for promotion)", cluster.Canaries(p.Canaries))
			}
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, ": ")
}
