package supervisor

import (
	"net"
	"net/url"
	"strconv"

	"github.com/hashicorp/consul/api"
)

// HTTPAPIMetaKey is the meta key of mariposa's own service that holds the
// node's HTTP API as a URL ("http://127.0.0.1:8585"); Prometheus' consul_sd
// shows it as __meta_consul_service_metadata_http_api.
const HTTPAPIMetaKey = "http_api"

// withHTTPAPI makes mariposa's own registration carry the node's HTTP API
// at addr (host:port; "" when it is off): its port as the service's port,
// its host as the service's address unless it listens on every interface
// (then the node's address is the one to use, as Consul does for a service
// without one), and its URL in meta, so tools and Prometheus' consul_sd
// find every node's API through Consul.
func withHTTPAPI(addr string, reg *api.AgentServiceRegistration) *api.AgentServiceRegistration {
	if addr == "" {
		return reg
	}
	host, p, err := net.SplitHostPort(addr)
	port, perr := strconv.Atoi(p)
	if err != nil || perr != nil || port <= 0 {
		return reg
	}
	reg.Port = port
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		reg.Address = host
	}
	if reg.Meta == nil {
		reg.Meta = map[string]string{}
	}
	reg.Meta[HTTPAPIMetaKey] = (&url.URL{Scheme: "http", Host: addr}).String()
	return reg
}
