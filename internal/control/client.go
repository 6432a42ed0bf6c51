package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Client talks to a running `mariposa run`: to the control socket of this
// machine's (NewClient), or to a node's HTTP API (NewRemote), which serves
// the same requests behind Consul's ACLs.
type Client struct {
	path string // the socket; "" for a remote
	hc   *http.Client
	// A remote's API (http://host:port), node and token.
	base, node, token string
}

// NewClient returns a client of the socket at path ("" means
// ResolvePath("")). Nothing is dialled until a call.
func NewClient(path string) *Client {
	if path == "" {
		path = ResolvePath("")
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		DisableCompression: true,
	}
	return &Client{path: path, hc: &http.Client{Transport: tr}}
}

// NodeHeader says which node a remote request is for: the node's HTTP API
// refuses it (421) when it is another node's (nodeapi.NodeHeader).
const NodeHeader = "X-Mariposa-Node"

// NewRemote returns a client of node's HTTP API at base (http://host:port),
// sending token (if any) as X-Consul-Token. Every request names node, and
// a mariposa of another node refuses it.
func NewRemote(base, node, token string) *Client {
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		DisableCompression:  true,
	}
	return &Client{hc: &http.Client{Transport: tr}, base: strings.TrimRight(base, "/"), node: node, token: token}
}

// Path is the socket's path ("" for a remote).
func (c *Client) Path() string { return c.path }

// URL is a remote's API ("" for the socket).
func (c *Client) URL() string { return c.base }

// where names what the client talks to, in errors.
func (c *Client) where() string {
	if c.path != "" {
		return "control socket " + c.path
	}
	return fmt.Sprintf("node %s's mariposa at %s", c.node, c.base)
}

// UnreachableError says a node's HTTP API did not answer.
type UnreachableError struct {
	Node, URL string
	Err       error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach node %s's mariposa at %s: %v", e.Node, e.URL, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// NotRunningError says no mariposa answers on the socket.
type NotRunningError struct {
	Path string
	Err  error
}

func (e *NotRunningError) Error() string {
	if errors.Is(e.Err, syscall.EACCES) || errors.Is(e.Err, syscall.EPERM) {
		return fmt.Sprintf("cannot use the control socket at %s: permission denied; `mariposa run` runs as another user: run this as that user or as root", e.Path)
	}
	return fmt.Sprintf("no mariposa is running here (no control socket at %s); is `mariposa run` running as another user?", e.Path)
}

func (e *NotRunningError) Unwrap() error { return e.Err }

// APIError is an error answer of the server.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string { return e.Message }

// NotFound reports an unknown service (or endpoint).
func (e *APIError) NotFound() bool { return e.Status == http.StatusNotFound }

// do calls the API; service, when set, is the path's last segment, escaped.
func (c *Client) do(ctx context.Context, method, path, service string, q url.Values) (*http.Response, error) {
	base := "http://mariposa"
	if c.path == "" {
		base = c.base
	}
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("node %s's API %q: %w", c.node, base, err)
	}
	u.Path = strings.TrimRight(u.Path, "/") + path
	u.RawQuery = q.Encode()
	if service != "" {
		u.RawPath = u.Path + "/" + url.PathEscape(service)
		u.Path += "/" + service
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if c.path == "" {
		req.Header.Set(NodeHeader, c.node)
		if c.token != "" {
			req.Header.Set("X-Consul-Token", c.token)
		}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var op *net.OpError
		if c.path == "" {
			// The url.Error repeats the method and URL: the dial's own
			// error says what happened.
			if errors.As(err, &op) {
				err = op
			}
			return nil, &UnreachableError{Node: c.node, URL: c.base, Err: err}
		}
		if errors.As(err, &op) && op.Op == "dial" {
			return nil, &NotRunningError{Path: c.path, Err: err}
		}
		return nil, fmt.Errorf("control socket %s: %w", c.path, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var eb errorBody
		if json.Unmarshal(b, &eb) != nil || eb.Error == "" {
			eb.Error = fmt.Sprintf("%s answered %s", c.where(), resp.Status)
		}
		return nil, &APIError{Status: resp.StatusCode, Message: eb.Error}
	}
	return resp, nil
}

func (c *Client) act(ctx context.Context, action, service string) error {
	_, err := c.Operate(ctx, action, service)
	return err
}

// Operate asks for action ("restart" or "reset") on service and returns
// the instance it acted on (service, on an error): service itself, or the one slot of a unit the
// node holds when service names the unit ("api" -> "api/0").
func (c *Client) Operate(ctx context.Context, action, service string) (string, error) {
	resp, err := c.do(ctx, http.MethodPost, "/v1/"+action, service, nil)
	if err != nil {
		return service, err
	}
	defer resp.Body.Close()
	var r Response
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if json.Unmarshal(body, &r) != nil || r.Service == "" {
		return service, nil
	}
	return r.Service, nil
}

// Restart restarts the service's process now (or starts a failed or
// completed one).
func (c *Client) Restart(ctx context.Context, service string) error {
	return c.act(ctx, "restart", service)
}

// Reset clears a failed service's restart history and starts it again.
func (c *Client) Reset(ctx context.Context, service string) error {
	return c.act(ctx, "reset", service)
}

// Services lists the services of the node, sorted.
func (c *Client) Services(ctx context.Context) ([]string, error) {
	resp, err := c.do(ctx, http.MethodGet, "/v1/services", "", nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var names []string
	if err := json.NewDecoder(resp.Body).Decode(&names); err != nil {
		return nil, fmt.Errorf("%s: bad answer: %w", c.where(), err)
	}
	return names, nil
}

// LogsOptions selects what Logs returns.
type LogsOptions struct {
	N      int  // the newest N lines (0: none; < 0: DefaultLines)
	Follow bool // then every new line, until ctx ends or the service goes away
}

// Logs calls fn with each line of the service's output, oldest first, and
// with the follow stream's drop notices. It returns nil when the stream
// ends (ctx ending while following included), or fn's error.
func (c *Client) Logs(ctx context.Context, service string, o LogsOptions, fn func(LogEntry) error) error {
	q := url.Values{}
	if o.N >= 0 {
		q.Set("n", strconv.Itoa(o.N))
	}
	if o.Follow {
		q.Set("follow", "1")
	}
	resp, err := c.do(ctx, http.MethodGet, "/v1/logs", service, q)
	if err != nil {
		if o.Follow && errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e LogEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return fmt.Errorf("%s: bad log line: %w", c.where(), err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("%s: %w", c.where(), err)
	}
	return nil
}
