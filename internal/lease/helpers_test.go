package lease

import (
	"net/http"
	"net/http/httputil"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

func waitClosed(t testing.TB, ch <-chan struct{}, timeout time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(timeout):
		t.Fatalf("%s: not within %v", what, timeout)
	}
}

// dev starts a dev agent and returns a client of it.
func dev(t *testing.T) *api.Client {
	t.Helper()
	return consultest.NewDev(t).Client(t)
}

// abandon stops l's sessions' loops without releasing or destroying
// anything, as a SIGKILL would: the sessions live on in Consul until
// Consul invalidates them.
func (l *Lease) abandon() {
	for _, s := range l.liveSessions() {
		s.stop()
	}
}

// proxiedClient is a client of the agent at target through a front that
// hands each request to serve (consultest.AgentProxy).
func proxiedClient(t *testing.T, target string, serve func(rp *httputil.ReverseProxy, w http.ResponseWriter, r *http.Request)) *api.Client {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Address = consultest.AgentProxy(t, target, serve)
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
