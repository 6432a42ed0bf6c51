package command

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/hashicorp/consul/api"
)

// consulErrText says what went wrong talking to Consul, for every command
// that does: a request that did not reach the agent names the address
// tried and where it came from (-consul-addr, CONSUL_HTTP_ADDR or the
// default) instead of Go's `Get "http://127.0.0.1:8500/v1/kv/...": dial
// tcp ...`; any other error is said as it is.
func consulErrText(err error) string {
	if err == nil {
		return ""
	}
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err.Error()
	}
	addr := ue.URL
	if u, perr := url.Parse(ue.URL); perr == nil && u.Host != "" {
		addr = u.Host
	}
	why := ue.Err.Error()
	var op *net.OpError
	if errors.As(ue.Err, &op) && op.Err != nil {
		why = op.Err.Error() // "connect: connection refused", without "dial tcp ADDR: "
	}
	if ue.Timeout() {
		why = "no answer in time (" + why + ")"
	}
	return fmt.Sprintf("cannot reach Consul's HTTP API at %s (%s): %s", addr, consulAddrSource(addr), why)
}

// consulAddrSource says where the address came from, and how to give
// another.
func consulAddrSource(addr string) string {
	env := os.Getenv(api.HTTPAddrEnvName)
	switch {
	case env != "" && strings.Contains(env, addr):
		return api.HTTPAddrEnvName + "=" + env + "; -consul-addr gives another"
	case env == "" && addr == defaultConsulAddr:
		return "the default: is a Consul agent running here? -consul-addr or " + api.HTTPAddrEnvName + " gives another address"
	case env == "":
		return "from -consul-addr; " + api.HTTPAddrEnvName + " is not set"
	}
	return "from -consul-addr; " + api.HTTPAddrEnvName + " is " + env
}
