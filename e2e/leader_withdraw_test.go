package e2e

import (
	"fmt"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// A leader stopped gracefully hands its lock on as soon as its process is
// gone, without waiting for its agent's deregistration: the transaction
// that releases the lock withdraws the registration from the catalog too.
// Here the old leader's agent is made slow for that service once the stop
// begins: a proxy in front of it keeps its deregistration and its check
// updates until the end of the test (a check update would have the agent
// sync the service it still has back into the catalog). So the catalog
// shows what the release alone did: the new leader is running and
// registered, and the old one is no longer listed. Without the withdrawal
// in the release, both would be listed.
func TestLeaderReleaseWithdrawsRegistration(t *testing.T) {
	t.Parallel()
	cl := consultest.NewCluster(t, 1, 2)
	c := cl.Servers[0].Client(t)
	a, b := cl.Clients[0], cl.Clients[1]
	hold := make(chan struct{})
	var held atomic.Int32
	var armed atomic.Bool
	proxy := holdingProxy(t, a.HTTPAddr(), slowFor("lead-", &armed), hold, &held)
	hcl := writeHCL(t, fmt.Sprintf(`
service "lead" {
  command = [%q]
  leader {
    key = "mariposa/leader/withdraw"
  }
}
`, childBin))
	ma := startMariposa(t, a, nil, "-consul-addr", proxy, hcl)
	defer close(hold)
	waitFor(t, 30*time.Second, "the first mariposa leading", func() (bool, string) {
		es := serviceEntries(c, "lead")
		return len(es) == 1 && es[0].Node.Node == a.Name, fmt.Sprint(len(es))
	})
	startMariposa(t, b, nil, hcl)
	waitFor(t, 10*time.Second, "the second mariposa contending", func() (bool, string) {
		ss, _, err := b.Client(t).Session().Node(b.Name, nil)
		return err == nil && len(ss) > 0, fmt.Sprint(len(ss), err)
	})

	answers := watchEntries(t, c, "lead")
	armed.Store(true)
	_ = ma.cmd.Process.Signal(syscall.SIGTERM)
	// Every answer of a blocking query from before the stop: the agent
	// still has the old leader's service (its deregistration is held), so
	// its anti-entropy writes it back at its next full sync, and a young
	// agent does one or two in its first seconds, when this test stops
	// mariposa (a read after the new leader's registration listed both,
	// 1 CI run in many). What the release alone did is an answer, after
	// the old leader was listed, that does not list it.
	waitFor(t, 10*time.Second, "the new leader registered and the old one withdrawn while its deregistration is held", func() (bool, string) {
		seen := answers()
		listed, withdrawn, newLeader := false, false, false
		for _, an := range seen {
			switch {
			case an.lists(a.Name):
				listed = true
			case listed:
				withdrawn = true
			}
			newLeader = newLeader || an.lists(b.Name)
		}
		return withdrawn && newLeader && held.Load() > 0, fmt.Sprintf("answers (index: entries): %v; held deregistrations %d", seen, held.Load())
	})
}

// holdingProxy forwards to target, except that the requests match picks
// wait until hold is closed (counted in held). A failing test prints the
// writes it saw (when each arrived and was answered, held or not): what
// reached the agent around the release (CI's
// TestACLLeaderReleaseWithdraws once found the service synced back 3 ms
// after the release withdrew it).
func holdingProxy(t testing.TB, target string, match func(*http.Request) bool, hold <-chan struct{}, held *atomic.Int32) string {
	var mu sync.Mutex
	var seen []string
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			defer mu.Unlock()
			t.Logf("the proxy's writes:\n%s", strings.Join(seen, "\n"))
		}
	})
	return consultest.AgentProxy(t, target, func(rp *httputil.ReverseProxy, w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		hold1 := match(r)
		if hold1 {
			held.Add(1)
			<-hold
		}
		rp.ServeHTTP(w, r)
		if r.Method != http.MethodGet {
			mu.Lock()
			seen = append(seen, fmt.Sprintf("%s %s %s answered %s held %v", at.Format("15:04:05.000"), r.Method, r.URL.Path, time.Now().Format("15:04:05.000"), hold1))
			mu.Unlock()
		}
	})
}

// slowFor picks, once armed, the agent writes about the services whose IDs
// start with prefix: their deregistration and their checks' updates.
func slowFor(prefix string, armed *atomic.Bool) func(*http.Request) bool {
	return func(r *http.Request) bool {
		return armed.Load() && r.Method == http.MethodPut &&
			(strings.HasPrefix(r.URL.Path, "/v1/agent/service/deregister/"+prefix) ||
				strings.HasPrefix(r.URL.Path, "/v1/agent/check/update/"+prefix))
	}
}
