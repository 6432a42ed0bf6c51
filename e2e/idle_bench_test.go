package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// countingProxy forwards to the agent and counts requests.
type countingProxy struct {
	addr string
	n    atomic.Int64
	srv  *http.Server
}

func newCountingProxy(b testing.TB, target string) *countingProxy {
	u, _ := url.Parse("http://" + target)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	p := &countingProxy{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	p.addr = l.Addr().String()
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.n.Add(1)
		rp.ServeHTTP(w, r)
	})}
	go p.srv.Serve(l)
	b.Cleanup(func() { p.srv.Close() })
	return p
}

// cpuTicks is utime+stime of pid in clock ticks.
func cpuTicks(pid int) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ut + st
}

func rssMB(pid int) float64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			kb, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// BenchmarkIdleServices: the cost of supervising many idle services: RSS
// and CPU of mariposa, and its Consul requests per minute, measured over
// 110s once every service is running and registered. The supervisor checks
// are refreshed every 10 minutes, so their share (one request per service
// per 10 minutes) is added to the measured rate rather than waited for.
func BenchmarkIdleServices(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			agent := consultest.NewDev(b, consultest.Options{ExtraConfig: map[string]any{
				"limits": map[string]any{"http_max_conns_per_client": 1000},
			}})
			c := agent.Client(b)
			proxy := newCountingProxy(b, agent.HTTPAddr())
			var sb strings.Builder
			for i := 0; i < n; i++ {
				fmt.Fprintf(&sb, "service \"idle-%d\" {\n  command = [%q]\n  env     = { STAMP_SLEEP_MS = \"-1\" }\n}\n", i, stampBin)
			}
			hcl := writeHCL(b, sb.String())
			for i := 0; i < b.N; i++ {
				// Every request goes through the counting proxy.
				m := startMariposaAt(b, proxy.addr, hcl)
				waitFor(b, 5*time.Minute, "every service passing", func() (bool, string) {
					hc, _, err := c.Health().State(api.HealthPassing, &api.QueryOptions{Filter: `CheckID matches ":mariposa$"`})
					return err == nil && len(hc) >= n+1, fmt.Sprint(len(hc), err)
				})
				time.Sleep(5 * time.Second) // settle
				pid := m.cmd.Process.Pid
				t0, c0, r0 := time.Now(), cpuTicks(pid), proxy.n.Load()
				time.Sleep(110 * time.Second)
				wall := time.Since(t0)
				cpu := float64(cpuTicks(pid)-c0) / 100 / wall.Seconds() * 100 // USER_HZ = 100
				reqs := float64(proxy.n.Load()-r0)/wall.Minutes() + float64(n)/10
				rss := rssMB(pid)
				fmt.Printf("%d idle services: RSS %.1f MB, CPU %.2f%% of a core, %.0f Consul requests/min\n", n, rss, cpu, reqs)
				b.ReportMetric(rss, "RSS-MB")
				b.ReportMetric(cpu, "CPU-%")
				b.ReportMetric(reqs, "requests/min")
				b.ReportMetric(0, "ns/op")
				m.stop(b, syscall.SIGTERM, 2*time.Minute)
			}
		})
	}
}

// startMariposaAt runs mariposa against a Consul address (a proxy).
func startMariposaAt(b testing.TB, addr string, args ...string) *mariposa {
	return startMariposa(b, &consultest.Agent{Ports: consultest.Ports{HTTP: portOf(addr)}}, nil, append([]string{"-log-level", "warn"}, args...)...)
}

func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}
