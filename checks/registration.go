// Package checks turns service definitions into Consul registrations, keeps
// them registered, reports the supervisor check, and watches check state with
// blocking queries.
package checks

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/schema"
)

const (
	// SupervisorCheckName is the check name every service gets.
	SupervisorCheckName = "mariposa"
	// ManagedByKey/ManagedByValue mark every registration mariposa owns.
	ManagedByKey   = "managed-by"
	ManagedByValue = "mariposa"
	// FleetMetaKey is the meta of mariposa's own service that says the
	// supervisor runs the fleet (mariposa run -cluster): FleetMetaValue.
	// Only such nodes are placement candidates; a plain mariposa run is
	// not counted as a fleet node.
	FleetMetaKey   = "fleet"
	FleetMetaValue = "true"
)

// ServiceID is the Consul service ID: the id attribute, else "<name>-<node>".
func ServiceID(svc *schema.Service, node string) string {
	if svc.ID != "" {
		return svc.ID
	}
	return svc.Name + "-" + node
}

// CheckID is "<service-id>:<check-name>".
func CheckID(serviceID, check string) string { return serviceID + ":" + check }

// SupervisorCheckID is "<service-id>:mariposa".
func SupervisorCheckID(serviceID string) string { return CheckID(serviceID, SupervisorCheckName) }

// ArgsCheckTTL is the TTL of the check through which an args check reports:
// long enough that a slow run does not expire it, short enough that a dead
// mariposa shows.
func ArgsCheckTTL(c *schema.Check) time.Duration { return 2*c.Interval + c.Timeout }

// RegOptions adjust a registration beyond the service file.
type RegOptions struct {
	// ID, if set, is the service ID (an instance in a count slot).
	ID string
	// SupervisorTTL is the TTL of the supervisor check.
	SupervisorTTL time.Duration
	// Status is the supervisor check's status at registration
	// (api.HealthPassing or api.HealthCritical).
	Status string
	// ExtraTags are added to the service's tags (e.g. the leader tag).
	ExtraTags []string
	// ExtraMeta is added to the service's meta (e.g. "leader").
	ExtraMeta map[string]string
	// NodeAddress is the node's address, which Consul gives a service
	// registered without one (MARIPOSA_ADDRESS then): a check whose target
	// is on the service (schema.Check.OnService) probes the service's
	// address, else this one.
	NodeAddress string
	// LivenessServiceID is mariposa's own service on this node; each
	// service gets an alias check of it, so the services of a supervisor
	// that died turn critical within its liveness TTL.
	LivenessServiceID string
}

// AliveCheckName is the name of the alias check on mariposa's liveness.
const AliveCheckName = "mariposa-alive"

// Registration builds the agent registration for svc on node: the service,
// its checks and the supervisor TTL check, so one call registers them all.
func Registration(svc *schema.Service, node string, o RegOptions) *api.AgentServiceRegistration {
	id := ServiceID(svc, node)
	if o.ID != "" {
		id = o.ID
	}
	meta := map[string]string{}
	for k, v := range svc.Meta {
		meta[k] = v
	}
	for k, v := range o.ExtraMeta {
		meta[k] = v
	}
	meta[ManagedByKey] = ManagedByValue
	if svc.Version != "" {
		meta["version"] = svc.Version
	}
	tags := append(append([]string{}, svc.Tags...), o.ExtraTags...)
	status := o.Status
	if status == "" {
		status = api.HealthCritical
	}
	reg := &api.AgentServiceRegistration{
		ID:      id,
		Name:    svc.Name,
		Tags:    tags,
		Port:    svc.Port,
		Address: svc.Address,
		Meta:    meta,
	}
	for _, c := range svc.Checks {
		reg.Checks = append(reg.Checks, agentCheck(id, c, Target(c, svc, o.NodeAddress)))
	}
	if o.LivenessServiceID != "" {
		reg.Checks = append(reg.Checks, &api.AgentServiceCheck{
			CheckID:      CheckID(id, AliveCheckName),
			Name:         "mariposa alive",
			Notes:        "Mirrors the health of the mariposa supervising this service.",
			AliasService: o.LivenessServiceID,
		})
	}
	// The supervisor check comes last: the registry reports through it.
	reg.Checks = append(reg.Checks, &api.AgentServiceCheck{
		CheckID: SupervisorCheckID(id),
		Name:    "mariposa supervisor",
		Notes:   "Set by mariposa: passing while the process runs, critical with the reason otherwise.",
		TTL:     o.SupervisorTTL.String(),
		Status:  status,
	})
	return reg
}

// Target is the target the agent probes for c, a check of svc: c.Target,
// with the host (and port) filled in from the service's registered address
// and port when the check leaves them out: "/health" on a service of port
// 8080 registered without an address on a node at 10.0.0.5 is
// "http://10.0.0.5:8080/health"; tcp ":9000" is "10.0.0.5:9000", tcp ""
// "10.0.0.5:8080". The address is the one the child gets as
// MARIPOSA_ADDRESS.
func Target(c *schema.Check, svc *schema.Service, nodeAddr string) string {
	if !c.OnService() {
		return c.Target
	}
	host := svc.Address
	if host == "" {
		host = nodeAddr
	}
	if host == "" {
		host = "127.0.0.1"
	}
	port := strconv.Itoa(svc.Port)
	switch {
	case c.Kind == schema.CheckHTTP:
		return "http://" + net.JoinHostPort(host, port) + c.Target
	case c.Target == "":
		return net.JoinHostPort(host, port)
	default:
		return net.JoinHostPort(host, strings.TrimPrefix(c.Target, ":"))
	}
}

func agentCheck(serviceID string, c *schema.Check, target string) *api.AgentServiceCheck {
	ac := &api.AgentServiceCheck{
		CheckID:                CheckID(serviceID, c.Name),
		Name:                   c.Name,
		SuccessBeforePassing:   c.SuccessBeforePassing,
		FailuresBeforeCritical: c.FailuresBeforeCritical,
	}
	if c.DeregisterCriticalAfter > 0 {
		ac.DeregisterCriticalServiceAfter = c.DeregisterCriticalAfter.String()
	}
	dur := func(d time.Duration) string {
		if d <= 0 {
			return ""
		}
		return d.String()
	}
	switch c.Kind {
	case schema.CheckHTTP:
		ac.HTTP, ac.Interval, ac.Timeout = target, dur(c.Interval), dur(c.Timeout)
	case schema.CheckTCP:
		ac.TCP, ac.Interval, ac.Timeout = target, dur(c.Interval), dur(c.Timeout)
	case schema.CheckGRPC:
		ac.GRPC, ac.Interval, ac.Timeout = c.Target, dur(c.Interval), dur(c.Timeout)
	case schema.CheckTTL:
		ac.TTL = dur(c.TTL)
	case schema.CheckArgs:
		// mariposa runs the command and reports through TTL, so the agent
		// needs no enable_script_checks.
		ac.TTL = dur(ArgsCheckTTL(c))
		ac.Notes = argsNotes(c)
	}
	return ac
}

// SupervisorServiceID is the ID of mariposa's own service on node: its
// liveness check is <id>:mariposa, and sessions are bound to it.
func SupervisorServiceID(node string) string { return "mariposa-" + node }

// SecondSupervisorServiceID is the ID of the own service of a mariposa run
// with -allow-second-supervisor: mariposa-<node>-<pid>-<nonce>, so that two
// supervisors on one node never share (and never deregister) one
// registration or the check their sessions are bound to. The nonce (a few
// random hex digits per run) keeps two containers whose mariposa is PID 1
// apart.
func SecondSupervisorServiceID(node string, pid int, nonce string) string {
	return "mariposa-" + node + "-" + strconv.Itoa(pid) + "-" + nonce
}

// argsNotes describes an args check for the UI. Every reader of the catalog
// sees Notes, so the arguments (a password, a token) stay out: the check's
// name and the program's base name only.
func argsNotes(c *schema.Check) string {
	prog := "a command"
	if len(c.Args) > 0 && c.Args[0] != "" {
		prog = filepath.Base(c.Args[0])
	}
	return fmt.Sprintf("Run by mariposa: %s (args check %q, every %s); arguments not shown.", prog, c.Name, c.Interval)
}
