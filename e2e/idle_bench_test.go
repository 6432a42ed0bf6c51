package e2e

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// countingProxy forwards to the agent and counts requests.
type countingProxy struct {
	addr string
	n    atomic.Int64

	mu    sync.Mutex
	paths map[string]int64 // "GET /v1/agent/check/update" -> requests
}

// byPath returns the requests per method and path since the last call.
func (p *countingProxy) byPath() map[string]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.paths
	p.paths = map[string]int64{}
	return out
}

func newCountingProxy(b testing.TB, target string) *countingProxy {
	p := &countingProxy{paths: map[string]int64{}}
	p.addr = consultest.AgentProxy(b, target, func(rp *httputil.ReverseProxy, w http.ResponseWriter, r *http.Request) {
		p.n.Add(1)
		key := r.Method + " " + pathClass(r.URL.Path)
		p.mu.Lock()
		p.paths[key]++
		p.mu.Unlock()
		rp.ServeHTTP(w, r)
	})
	return p
}

// pathClass is an API path without the names in it: the service, check
// or key after the endpoint's own words.
func pathClass(path string) string {
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	if len(parts) > 4 {
		parts = parts[:4]
	}
	return "/" + strings.Join(parts, "/")
}

// topPaths formats the busiest paths of m, per minute over wall.
func topPaths(m map[string]int64, wall time.Duration, most int) string {
	type pc struct {
		p string
		n int64
	}
	var all []pc
	for p, n := range m {
		all = append(all, pc{p, n})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n })
	var out []string
	for i, x := range all {
		if i == most {
			break
		}
		out = append(out, fmt.Sprintf("%s %.0f/min", x.p, float64(x.n)/wall.Minutes()))
	}
	return strings.Join(out, ", ")
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

// rssSplitMB is pid's resident memory in MB: anonymous (heap, stacks) and
// file-backed (the binary's pages, which count in RSS too).
func rssSplitMB(pid int) (anon, file float64) {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "RssAnon:":
			anon = kb / 1024
		case "RssFile:":
			file = kb / 1024
		}
	}
	return anon, file
}

// fileMappedMB is how much of the executable at path its loader maps from
// the file (the PT_LOAD segments' file sizes: code, read-only data, the
// function tables, initialised data), in MB: the ceiling of the binary's
// pages in RSS. Once a page of code runs, the kernel maps the cached pages
// around it too (64 KB, or a whole large folio), so a Go binary, whose
// packages' init code is spread over all of it, nears that ceiling.
func fileMappedMB(b *testing.B, path string) float64 {
	f, err := elf.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var n uint64
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			n += p.Filesz
		}
	}
	return float64(n) / (1 << 20)
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

// idleSettle is how long after its services pass an idle benchmark waits
// before it measures: mariposa settles 15 s after the registration (its
// start's memory released, its binary's start pages unmapped: see
// command/memory.go), and the figures are the idle node's, not its start's.
const idleSettle = 20 * time.Second

// BenchmarkIdleServices: the cost of supervising idle services: RSS and
// CPU of mariposa, and its Consul requests per minute, measured over 110s
// once every service is running and registered and the node has settled
// (idleSettle). The supervisor checks are
// refreshed every 10 minutes, so their share (one request per service per
// 10 minutes) is added to the measured rate rather than waited for. RSS is
// the mean of a sample every 5 s (a single sample is at the mercy of the
// garbage collector), split into anonymous memory and the binary's pages;
// 1 and 100 services are printed beside ContainerPilot's RSS (15 MB and
// 27 MB; goals: USS <= 6 MB, and RSS <= 27 MB with 100). Those two are constants from BENCHMARKS.md,
// measured elsewhere, not in this run, and the line says so. The 100 run
// adds the marginal cost of a service, (RSS 100 - RSS 1) / 99.
//
// 1000-starved runs the 1,000 beside two busy loops (`while :; do :; done`,
// one per core), as a node whose CPU other work takes: its figures are
// printed beside the quiet run's from the same run (goal: CPU within 2x
// and requests within 1.2x), with the busiest API paths of both.
//
// Memory as users compare it is printed on the next line: RSS, PSS and USS
// from smaps_rollup (see memFigures), means of the same samples; the 1
// run measures beside it, in the same window, an idle Go program (the e2e
// child, which links net/http and os/exec): the floor a Go supervisor
// starts from. With $MARIPOSA_CONTAINERPILOT_BIN, the 1 and 100 runs
// measure ContainerPilot beside it too, with as many idle jobs of the same
// child (startIdleContainerPilot), and print the ratios.
func BenchmarkIdleServices(b *testing.B) {
	var quiet struct {
		cpu, reqs float64
		paths     string
	}
	var one struct{ rss, anon float64 } // the 1-service run's, for the marginal cost
	mapped := fileMappedMB(b, mariposaBin)
	for _, name := range []string{"1", "100", "1000", "1000-starved"} {
		n, starved := 1000, name == "1000-starved"
		switch name {
		case "1":
			n = 1
		case "100":
			n = 100
		}
		b.Run(name, func(b *testing.B) {
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
				if starved {
					for range runtime.NumCPU() {
						busy := exec.Command("/bin/sh", "-c", "while :; do :; done")
						if err := busy.Start(); err != nil {
							b.Fatal(err)
						}
						b.Cleanup(func() { _ = busy.Process.Kill(); _ = busy.Wait() })
					}
				}
				time.Sleep(idleSettle) // the measuring window opens on an idle node
				pid := m.cmd.Process.Pid
				proxy.byPath()
				t0, c0, r0 := time.Now(), cpuTicks(pid), proxy.n.Load()
				const samples = 22 // 110 s
				var anon, file float64
				var mem, floorMem memFigures
				floorPID, cpPID := 0, 0
				var cpMem memFigures
				if n == 1 {
					floorPID = startIdleGo(b)
				}
				if n == 1 || n == 100 && !starved {
					cpPID = startIdleContainerPilot(b, agent.HTTPAddr(), n)
				}
				for tick := 1; tick <= samples; tick++ {
					time.Sleep(time.Until(t0.Add(time.Duration(tick) * 5 * time.Second)))
					a, f := rssSplitMB(pid)
					anon, file = anon+a/samples, file+f/samples
					mem.add(smapsMB(pid), 1.0/samples)
					if floorPID != 0 {
						floorMem.add(smapsMB(floorPID), 1.0/samples)
					}
					if cpPID != 0 {
						cpMem.add(smapsMB(cpPID), 1.0/samples)
					}
				}
				wall := time.Since(t0)
				cpu := float64(cpuTicks(pid)-c0) / 100 / wall.Seconds() * 100 // USER_HZ = 100
				reqs := float64(proxy.n.Load()-r0)/wall.Minutes() + float64(n)/10
				rss := anon + file
				paths := topPaths(proxy.byPath(), wall, 6)
				what := fmt.Sprintf("%d idle services", n)
				if n == 1 {
					what = "1 idle service"
				}
				if starved {
					what += " with both cores busy"
				}
				// Without $MARIPOSA_CONTAINERPILOT_BIN the anchors are
				// BENCHMARKS.md's figures, not measured here.
				anchor := ""
				switch {
				case cpPID != 0:
					anchor = "; ContainerPilot measured beside it below"
				case n == 1:
					anchor = "; anchor, not measured in this run: ContainerPilot 15 MB (BENCHMARKS.md, measured elsewhere)"
				case n == 100:
					anchor = "; anchor, not measured in this run: ContainerPilot 27 MB (BENCHMARKS.md, measured elsewhere); goal <= 27 MB"
				}
				fmt.Printf("%s: RSS %.1f MB (anonymous %.1f, the binary's pages %.1f of the %.1f it maps%s), CPU %.2f%% of a core, %.0f Consul requests/min (%s)\n",
					what, rss, anon, file, mapped, anchor, cpu, reqs, paths)
				floorLine := ""
				if floorPID != 0 {
					floorLine = "; beside it, same run, an idle Go program (the e2e child): " + floorMem.String()
				}
				goal := ""
				if n == 1 {
					goal = " (goal: USS <= 6 MB)"
				}
				fmt.Printf("  memory as users compare it: mariposa %s%s%s\n", mem, goal, floorLine)
				if cpPID != 0 {
					fmt.Printf("  beside it, same run: ContainerPilot with %d idle job(s) (not registered in Consul): %s; mariposa's ratio RSS %.2f, PSS %.2f, USS %.2f\n",
						n, cpMem, mem.rss/cpMem.rss, mem.pss/cpMem.pss, mem.uss/cpMem.uss)
					b.ReportMetric(mem.rss/cpMem.rss, "ratio-containerpilot-RSS")
				}
				if n <= 100 && !starved {
					// What of the binary an idle process uses: its
					// pages paged out, those resident again 30 s on.
					pids := []int{pid}
					if cpPID != 0 {
						pids = append(pids, cpPID)
					}
					used := pageOutBinaries(30*time.Second, pids...)
					line := fmt.Sprintf("  the binary's pages in use (paged out, resident again 30 s later): mariposa %s", mbOrUnknown(used[0]))
					if cpPID != 0 {
						line += ", ContainerPilot " + mbOrUnknown(used[1])
					}
					fmt.Println(line)
					if used[0] >= 0 {
						b.ReportMetric(used[0], "binary-in-use-MB")
					}
				}
				b.ReportMetric(mem.pss, "PSS-MB")
				b.ReportMetric(mem.uss, "USS-MB")
				switch {
				case n == 1:
					one.rss, one.anon = rss, anon
				case n == 100 && one.rss > 0:
					per, perAnon := (rss-one.rss)/99*1024, (anon-one.anon)/99*1024
					fmt.Printf("  marginal cost of an idle service: %.0f KB of RSS ((RSS 100 - RSS 1) / 99), %.0f KB of it anonymous\n", per, perAnon)
					b.ReportMetric(per, "KB/service")
				}
				b.ReportMetric(anon, "anon-MB")
				switch {
				case n == 1000 && !starved:
					quiet.cpu, quiet.reqs, quiet.paths = cpu, reqs, paths
				case starved && quiet.reqs > 0:
					fmt.Printf("  starved beside quiet: CPU %.2f%% beside %.2f%%: ratio %.2f (goal <= 2); requests/min %.0f beside %.0f: ratio %.2f (goal <= 1.2)\n",
						cpu, quiet.cpu, cpu/quiet.cpu, reqs, quiet.reqs, reqs/quiet.reqs)
					b.ReportMetric(cpu/quiet.cpu, "CPU-ratio")
					b.ReportMetric(reqs/quiet.reqs, "requests-ratio")
				}
				b.ReportMetric(rss, "RSS-MB")
				b.ReportMetric(cpu, "CPU-%")
				b.ReportMetric(reqs, "requests/min")
				b.ReportMetric(0, "ns/op")
				m.stop(b, syscall.SIGTERM, 2*time.Minute)
			}
		})
	}
}

// BenchmarkIdleOverhead: what the node's HTTP API, its metrics and the
// audit file cost a mariposa supervising 1,000 idle services, and whether
// an idle node writes events. Two runs on one agent, one after the other,
// both members of the fleet (-cluster: the KV audit log is the fleet's):
//
//   - off: -http-addr off -audit-file= (no API, no audit file; the
//     metrics' counters, which cannot be turned off, are kept but never
//     served);
//   - on: -http-addr 127.0.0.1:0 with /metrics read every 15 s during the
//     measurement, as Prometheus would scrape it (and once before it), and
//     -audit-file in the run's directory.
//
// Measured over 110 s once every service is running and registered (as
// BenchmarkIdleServices does): mariposa's RSS (the mean of a sample every
// 5 s: a single sample is at the mercy of the garbage collector) and CPU,
// its Consul requests per minute, the audit file's lines and the KV audit
// records (mariposa/audit/) written per minute. Printed beside the off
// run's figures, with the ratio on/off (goal: under 1.10) and the events
// written when idle (goal: 0); the on run's CPU is also split into the
// scrapes' (mariposa's CPU while it answers each, to the tick) and the
// rest.
func BenchmarkIdleOverhead(b *testing.B) {
	const n = 1000
	var sb strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&sb, "service \"idle-%d\" {\n  command = [%q]\n  env     = { STAMP_SLEEP_MS = \"-1\" }\n}\n", i, stampBin)
	}
	hcl := writeHCL(b, sb.String())
	// One agent for both runs, stopped with the benchmark.
	agent := consultest.NewDev(b, consultest.Options{ExtraConfig: map[string]any{
		"limits": map[string]any{"http_max_conns_per_client": 1000},
	}})
	proxy := newCountingProxy(b, agent.HTTPAddr())
	var off *idleFigures
	for _, on := range []bool{false, true} {
		name := fmt.Sprintf("%d-off", n)
		if on {
			name = fmt.Sprintf("%d-on", n)
		}
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				f := measureIdle(b, agent, proxy, n, on, hcl)
				what, lines := "API and audit file off", "no audit file"
				if on {
					what = fmt.Sprintf("API on, /metrics (%.0f KiB) read every 15s, audit file on", f.scrapeKiB)
					lines = fmt.Sprintf("%.1f audit-file lines/min", f.fileLines)
				}
				fmt.Printf("%d idle services, -cluster, %s: RSS %.1f MB (PSS %.1f, USS %.1f), CPU %.2f%% of a core, %.0f Consul requests/min; events written when idle: %s, %.1f KV audit records/min (goal 0)\n",
					n, what, f.rss, f.mem.pss, f.mem.uss, f.cpu, f.reqs, lines, f.kvRecords)
				b.ReportMetric(f.rss, "RSS-MB")
				b.ReportMetric(f.cpu, "CPU-%")
				b.ReportMetric(f.reqs, "requests/min")
				if on {
					b.ReportMetric(f.fileLines, "audit-lines/min")
				}
				b.ReportMetric(f.kvRecords, "KV-audit/min")
				b.ReportMetric(0, "ns/op")
				if !on {
					off = &f
					continue
				}
				if off == nil {
					fmt.Printf("  (no off run to compare with: run BenchmarkIdleOverhead/%d-off too)\n", n)
					continue
				}
				rssRatio, cpuRatio := f.rss/off.rss, f.cpu/off.cpu
				idle := f.cpu - f.scrapeCPU
				fmt.Printf("  on beside off: RSS %.1f MB beside %.1f MB: ratio %.3f; CPU %.2f%% beside %.2f%%: ratio %.3f (goal: under 1.10 each); of it the scrapes %.2f%% (%.0f ms each), the rest %.2f%%: ratio %.3f\n",
					f.rss, off.rss, rssRatio, f.cpu, off.cpu, cpuRatio, f.scrapeCPU, f.scrapeMS, idle, idle/off.cpu)
				b.ReportMetric(f.scrapeMS, "ms/scrape")
				b.ReportMetric(rssRatio, "RSS-ratio")
				b.ReportMetric(cpuRatio, "CPU-ratio")
			}
		})
	}
}

// idleFigures are what measureIdle saw.
type idleFigures struct {
	rss, cpu, reqs       float64 // MB (mean), % of a core, Consul requests/min
	fileLines, kvRecords float64 // per minute
	scrapeKiB            float64 // the size of /metrics (on)
	scrapeCPU            float64 // the scrapes' share of cpu, % of a core (on)
	scrapeMS             float64 // CPU time per scrape, ms (on)

	mem memFigures // RSS, PSS, USS (means of the samples rss is the mean of)
}

// measureIdle runs mariposa -cluster with n idle services (hcl) against
// agent through proxy, with the API, its scrapes and the audit file on or
// off, and measures it once every service passes.
func measureIdle(b *testing.B, agent *consultest.Agent, proxy *countingProxy, n int, on bool, hcl string) idleFigures {
	c := agent.Client(b)
	audit := filepath.Join(b.TempDir(), "audit.jsonl")
	args := []string{"-cluster", "-http-addr", "off", "-audit-file="}
	if on {
		args = []string{"-cluster", "-http-addr", "127.0.0.1:0", "-audit-file=" + audit}
	}
	m := startMariposaAt(b, proxy.addr, append(args, hcl)...)
	defer m.stop(b, syscall.SIGTERM, 2*time.Minute)
	waitFor(b, 5*time.Minute, "every service passing", func() (bool, string) {
		hc, _, err := c.Health().State(api.HealthPassing, &api.QueryOptions{Filter: `CheckID matches ":mariposa$"`})
		return err == nil && len(hc) >= n+1, fmt.Sprint(len(hc), err)
	})
	var f idleFigures
	scrape := func() {}
	if on {
		base := apiURL(b, c, agent.Name)
		scrape = func() {
			resp, err := http.Get(base + "/metrics")
			if err != nil {
				b.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("/metrics: %d %s", resp.StatusCode, body)
			}
			f.scrapeKiB = float64(len(body)) / 1024
		}
	}
	time.Sleep(idleSettle) // the measuring window opens on an idle node
	scrape()               // Prometheus has been scraping all along
	lines := func() int {
		bs, _ := os.ReadFile(audit)
		return bytes.Count(bs, []byte("\n"))
	}
	records := func() int {
		keys, _, err := c.KV().Keys(cluster.AuditPrefix, "", nil)
		if err != nil {
			b.Fatal(err)
		}
		return len(keys)
	}
	pid := m.cmd.Process.Pid
	l0, k0 := lines(), records()
	t0, c0, r0 := time.Now(), cpuTicks(pid), proxy.n.Load()
	var rss []float64
	var scrapes, scrapeTicks int64
	for tick := 1; tick <= 22; tick++ { // 110 s
		time.Sleep(time.Until(t0.Add(time.Duration(tick) * 5 * time.Second)))
		if on && tick%3 == 0 {
			// mariposa's CPU while it answers: the scrape's cost, give
			// or take a tick of its idle work.
			s0 := cpuTicks(pid)
			scrape()
			scrapeTicks += cpuTicks(pid) - s0
			scrapes++
		}
		rss = append(rss, rssMB(pid))
		f.mem.add(smapsMB(pid), 1.0/22)
	}
	wall := time.Since(t0)
	f.cpu = float64(cpuTicks(pid)-c0) / 100 / wall.Seconds() * 100 // USER_HZ = 100
	if scrapes > 0 {
		f.scrapeCPU = float64(scrapeTicks) / 100 / wall.Seconds() * 100
		f.scrapeMS = float64(scrapeTicks) * 10 / float64(scrapes)
	}
	// The supervisor checks' refresh, one per service per 10 minutes, as
	// BenchmarkIdleServices adds it.
	f.reqs = float64(proxy.n.Load()-r0)/wall.Minutes() + float64(n)/10
	f.fileLines = float64(lines()-l0) / wall.Minutes()
	f.kvRecords = float64(records()-k0) / wall.Minutes()
	for _, v := range rss {
		f.rss += v / float64(len(rss))
	}
	return f
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

func mbOrUnknown(mb float64) string {
	if mb < 0 {
		return "unknown (process_madvise refused)"
	}
	return fmt.Sprintf("%.1f MB", mb)
}
