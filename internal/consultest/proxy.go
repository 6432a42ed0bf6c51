package consultest

import (
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"testing"
)

// AgentProxy serves, on a loopback port, a front for the agent's HTTP API
// at target: serve sees each request with the reverse proxy that forwards
// it (streaming, for blocking queries), and decides what to count, hold or
// do first; opts adjust the reverse proxy before it serves. Returns the
// front's address; it closes with the test.
func AgentProxy(t testing.TB, target string, serve func(rp *httputil.ReverseProxy, w http.ResponseWriter, r *http.Request), opts ...func(*httputil.ReverseProxy)) string {
	t.Helper()
	u, _ := url.Parse("http://" + target)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	for _, o := range opts {
		o(rp)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { serve(rp, w, r) })}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}
