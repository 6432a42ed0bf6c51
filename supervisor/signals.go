package supervisor

import (
	"context"
	"os"
	"syscall"

	"github.com/mariposa-sh/mariposa/schema"
)

// SignalOptions say how RunWithSignals reacts to the process's signals.
type SignalOptions struct {
	// Signals delivers SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2.
	Signals <-chan os.Signal
	// Load reads the configuration again for SIGHUP; nil means the files
	// have errors and the running configuration stays (Load reports them).
	Load func() *schema.Config
	// Applied, if set, sees what each reload did.
	Applied func(ApplyResult)
	// Stopping, if set, is called once when a graceful stop begins.
	Stopping func()
}

// RunWithSignals runs r until it stops. SIGINT or SIGTERM stops it
// gracefully and a second one kills every process group at once; SIGHUP
// applies Load's configuration (one reload at a time, off the signal loop,
// since stopping a changed service can take its stop timeout); SIGUSR1 and
// SIGUSR2 are forwarded to the children.
func (r *Runner) RunWithSignals(o SignalOptions) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	reloadc := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-reloadc:
			}
			r.log.Info("SIGHUP: reloading")
			cfg := o.Load()
			if cfg == nil {
				continue
			}
			res, err := r.Apply(ctx, cfg)
			if err != nil {
				r.log.Warn("reload interrupted", "error", err)
			}
			if o.Applied != nil {
				o.Applied(res)
			}
		}
	}()

	stopping := false
	proceed := make(chan struct{})
	begun := false
	beginStop := func() {
		if begun {
			return
		}
		begun = true
		if o.Stopping != nil {
			o.Stopping()
		}
		cancel()
	}
	for {
		select {
		case err := <-done:
			return err
		case <-proceed:
			beginStop()
		case s := <-o.Signals:
			switch s {
			case syscall.SIGINT, syscall.SIGTERM:
				if stopping {
					r.log.Warn("second signal: killing every process now", "signal", s)
					r.Kill()
					beginStop()
					continue
				}
				stopping = true
				r.log.Info("stopping; send the signal again to kill at once", "signal", s)
				if r.slotsAwaitingAdoption() {
					// Just after an upgrade in place: the fleet has not
					// taken back every slot handed over yet. Stopping now
					// would release none of them (no handoff: their data
					// would not follow); the stop begins once it has, or
					// the handed-over processes were given up.
					r.log.Info("stopping once the fleet has taken back the slots the upgrade handed over")
					go func() {
						r.awaitAdoption(ctx)
						select {
						case proceed <- struct{}{}:
						case <-ctx.Done():
						}
					}()
					continue
				}
				beginStop()
			case syscall.SIGHUP:
				if stopping {
					continue
				}
				select {
				case reloadc <- struct{}{}:
				default: // a reload is pending already; it will read the files anew
				}
			case syscall.SIGUSR1, syscall.SIGUSR2:
				r.Signal(s.(syscall.Signal))
			}
		}
	}
}
