package command

import (
	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/hashicorp/go-hclog"
)

// sdNotify sends state to systemd when mariposa runs under a unit of
// Type=notify (NOTIFY_SOCKET set); elsewhere it does nothing. A failure is
// logged: systemd then times the start out, which says more than mariposa
// could.
// It says whether it sent the state, and why it could not.
func sdNotify(log hclog.Logger, state string) (sent bool, err error) {
	sent, err = daemon.SdNotify(false, state)
	switch {
	case err != nil:
		log.Warn("could not notify systemd", "state", state, "error", err)
	case sent:
		log.Debug("notified systemd", "state", state)
	}
	return sent, err
}

// notifyReady sends READY=1 once registered closes (mariposa's own service
// and the first configuration's services are registered with the agent),
// unless stop closes first; it says whether it did.
func notifyReady(log hclog.Logger, registered, stop <-chan struct{}) bool {
	select {
	case <-registered:
		sdNotify(log, daemon.SdNotifyReady+"\nSTATUS=services registered; supervising")
		return true
	case <-stop:
		return false
	}
}

// notifyStopping tells systemd that mariposa is stopping its services.
func notifyStopping(log hclog.Logger) {
	sdNotify(log, daemon.SdNotifyStopping+"\nSTATUS=stopping the services")
}
