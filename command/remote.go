package command

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/control"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// nodeFlagHelp is the -node option of logs, restart and reset.
const nodeFlagHelp = `  -node=NODE            Reach NODE's mariposa instead, through its HTTP
                        API, found in Consul's catalog (the "mariposa"
                        service on NODE). Takes the Consul options below;
                        with Consul ACLs on, the token needs node:read on
                        NODE and service:read on "mariposa" to find it, and
                        PERM on SERVICE.`

// remoteNode is a node's mariposa as the catalog shows it: where its HTTP API
// answers, and whether that is a loopback address only the node reaches.
type remoteNode struct {
	name     string
	url      string
	loopback bool // the API listens on loopback, the node's address is not
}

// findNodeAPI finds node's mariposa in Consul's catalog: the HTTP API its
// own registration carries (meta http_api, else its address and port).
// With ACLs on, that takes node:read on the node and service:read on
// "mariposa" (the catalog hides what the token may not read).
func findNodeAPI(ctx context.Context, c *api.Client, node string) (remoteNode, error) {
	q := (&api.QueryOptions{Filter: fmt.Sprintf("Node == %q", node)}).WithContext(ctx)
	svcs, meta, err := c.Catalog().Service("mariposa", "", q)
	if err != nil && strings.Contains(err.Error(), "ACL not found") {
		return remoteNode{}, errors.New("the token is unknown to Consul (ACL not found): give one it knows with -token, -token-file or CONSUL_HTTP_TOKEN")
	}
	if err != nil {
		return remoteNode{}, fmt.Errorf("cannot read node %q's mariposa from Consul: %w", node, err)
	}
	if len(svcs) == 0 {
		// Consul hides what a token may not read, and says so only of
		// some answers: with ACLs on, the token may be why.
		acl := meta != nil && (meta.ResultsFilteredByACLs || meta.DefaultACLPolicy == "deny")
		const hint = ", or the token may not read it: finding a node's mariposa takes node:read on the node and service:read on \"mariposa\" (-token, -token-file or CONSUL_HTTP_TOKEN)"
		n, _, err := c.Catalog().Node(node, (&api.QueryOptions{}).WithContext(ctx))
		switch {
		case err != nil:
			return remoteNode{}, fmt.Errorf("cannot read node %q from Consul: %w", node, err)
		case (n == nil || n.Node == nil) && acl:
			return remoteNode{}, fmt.Errorf("no node %q in Consul's catalog%s", node, hint)
		case n == nil || n.Node == nil:
			return remoteNode{}, fmt.Errorf("no node %q in Consul's catalog%s", node, mariposaNodes(ctx, c))
		case acl:
			return remoteNode{}, fmt.Errorf("node %s runs no mariposa%s", node, hint)
		}
		return remoteNode{}, fmt.Errorf("node %s runs no mariposa (no \"mariposa\" service is registered there): is `mariposa run` running on it?", node)
	}
	self := svcs[0]
	for _, s := range svcs[1:] {
		if s.ServiceID < self.ServiceID {
			self = s
		}
	}
	host := self.ServiceAddress
	if host == "" {
		host = self.Address
	}
	rn := remoteNode{name: node}
	if u, err := url.Parse(self.ServiceMeta[supervisor.HTTPAPIMetaKey]); err == nil && u.Host != "" {
		// An API on every interface registers its listening address
		// (0.0.0.0:8585): the node's address is the one to dial.
		if ip := net.ParseIP(u.Hostname()); u.Hostname() == "" || (ip != nil && ip.IsUnspecified()) {
			u.Host = net.JoinHostPort(host, u.Port())
		}
		rn.url = u.String()
	} else if self.ServicePort > 0 && host != "" {
		rn.url = "http://" + net.JoinHostPort(host, strconv.Itoa(self.ServicePort))
	} else {
		return remoteNode{}, fmt.Errorf("node %s's mariposa runs with its HTTP API off (-http-addr off, or its default address %s was taken): "+
			"run it with -http-addr ADDR to reach it (-http-addr 0.0.0.0:8585 from other machines)", node, "127.0.0.1:8585")
	}
	if u, err := url.Parse(rn.url); err == nil {
		rn.loopback = isLoopback(u.Hostname()) && !isLoopback(self.Address)
	}
	return rn, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// mariposaNodes lists the nodes that run mariposa, for an unknown node's
// error ("" when none can be read).
func mariposaNodes(ctx context.Context, c *api.Client) string {
	svcs, _, err := c.Catalog().Service("mariposa", "", (&api.QueryOptions{}).WithContext(ctx))
	if err != nil || len(svcs) == 0 {
		return ""
	}
	var names []string
	for _, s := range svcs {
		names = append(names, s.Node)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	const most = 20
	more := ""
	if len(names) > most {
		more = fmt.Sprintf(" and %d more", len(names)-most)
		names = names[:most]
	}
	return fmt.Sprintf(" (mariposa runs on %s%s)", strings.Join(names, ", "), more)
}

// remoteErr says what went wrong reaching node's mariposa; perm is the
// permission the command needs on the service ("service:read").
func remoteErr(err error, rn remoteNode, perm, svc string) string {
	loopbackHint := fmt.Sprintf("; its HTTP API listens on loopback (%s), which only node %s itself reaches: "+
		"run mariposa there with -http-addr set to an address this machine reaches (0.0.0.0:8585 for every interface)", rn.url, rn.name)
	var ue *control.UnreachableError
	var ae *control.APIError
	switch {
	case errors.As(err, &ue):
		if rn.loopback {
			return err.Error() + loopbackHint
		}
		return err.Error() + "; is mariposa running there, and may this machine reach that address?"
	case errors.As(err, &ae):
		switch {
		case ae.Status == http.StatusUnauthorized:
			return fmt.Sprintf("node %s's mariposa needs a Consul ACL token (Consul's ACLs are on): give one with %s on %q (-token, -token-file or CONSUL_HTTP_TOKEN)", rn.name, perm, svc)
		case ae.Status == http.StatusForbidden && strings.Contains(ae.Message, "ACL not found"):
			return fmt.Sprintf("node %s's mariposa refused the token: Consul does not know it (ACL not found)", rn.name)
		case ae.Status == http.StatusForbidden && strings.Contains(ae.Message, perm):
			return fmt.Sprintf("node %s's mariposa refused: %s", rn.name, ae.Message)
		case ae.Status == http.StatusForbidden:
			return fmt.Sprintf("node %s's mariposa refused: %s (this needs %s on %q)", rn.name, ae.Message, perm, svc)
		case ae.Status == http.StatusMisdirectedRequest:
			msg := fmt.Sprintf("another mariposa than node %s's answered at %s", rn.name, rn.url)
			if rn.loopback {
				return msg + loopbackHint
			}
			return msg + "; the address in its registration leads elsewhere"
		case ae.Status == http.StatusNotFound && strings.Contains(ae.Message, "on this node"):
			return strings.Replace(ae.Message, "on this node", "on node "+rn.name, 1)
		case ae.Status == http.StatusNotFound:
			return fmt.Sprintf("node %s: %s", rn.name, ae.Message)
		}
		return fmt.Sprintf("node %s's mariposa: %s", rn.name, ae.Message)
	}
	return err.Error()
}
