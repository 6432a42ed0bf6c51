package agenterr

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/hashicorp/consul/api"
)

func TestLocal(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"no servers", api.StatusError{Code: 500, Body: "No known Consul servers"}, true},
		{"no servers wrapped", fmt.Errorf("listing: %w", api.StatusError{Code: 500, Body: "No known Consul servers"}), true},
		{"no servers as text", errors.New("Unexpected response code: 500 (No known Consul servers)"), true},
		{"connection refused", fmt.Errorf("Get \"http://127.0.0.1:8500/v1/kv/x\": %w", refused), true},
		{"no leader", api.StatusError{Code: 500, Body: "No cluster leader"}, false},
		{"rate limited", api.StatusError{Code: 429, Body: "rate limit exceeded"}, false},
		{"timeout", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, false},
	} {
		if got := Local(c.err); got != c.want {
			t.Errorf("%s: Local(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// A real refused connection, as the api client reports it.
func TestLocalRefusedByTheClient(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c, err := api.NewClient(&api.Config{Address: addr})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = c.KV().Get("x", nil)
	if err == nil || !Local(err) {
		t.Fatalf("a refused connection (%v) is not Local", err)
	}
}
