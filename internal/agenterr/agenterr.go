package agenterr

import (
	"errors"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"
)

// RetryLocal is how soon a watch asks again after a Local error.
const RetryLocal = 50 * time.Millisecond

// noServers is the body of the agent's 500 when it knows no server.
const noServers = "No known Consul servers"

// Local reports whether err came from the local agent alone (or from no
// agent): connection refused, or "No known Consul servers".
func Local(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var se api.StatusError
	if errors.As(err, &se) {
		return strings.Contains(se.Body, noServers)
	}
	return strings.Contains(err.Error(), noServers)
}
