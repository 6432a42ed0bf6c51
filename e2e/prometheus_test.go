package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// EnvPrometheus names the prometheus binary the tests run (promtool is
// beside it), as MARIPOSA_CONSUL_BIN names consul: make test sets it from
// tools/prometheus/build.sh. Unset, the build's cache is looked in.
const EnvPrometheus = "MARIPOSA_PROMETHEUS_BIN"

// prometheusBins returns the paths of prometheus and promtool: a missing
// build skips the test on a developer's machine and fails it in CI.
func prometheusBins(t *testing.T) (prom, promtool string) {
	t.Helper()
	prom = os.Getenv(EnvPrometheus)
	if prom == "" {
		b, err := os.ReadFile("../tools/prometheus/go.mod")
		if err != nil {
			t.Fatal(err)
		}
		var version string
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) >= 2 && f[0] == "require" {
				f = f[1:]
			}
			if len(f) >= 2 && f[0] == "github.com/prometheus/prometheus" {
				version = f[1]
			}
		}
		cache := os.Getenv("MARIPOSA_CACHE")
		if cache == "" {
			base := os.Getenv("XDG_CACHE_HOME")
			if base == "" {
				base = filepath.Join(os.Getenv("HOME"), ".cache")
			}
			cache = filepath.Join(base, "mariposa")
		}
		dir := filepath.Join(cache, fmt.Sprintf("prometheus-%s-%s-%s", version, runtime.GOOS, runtime.GOARCH))
		if _, err := os.Stat(filepath.Join(dir, ".built")); err == nil {
			prom = filepath.Join(dir, "prometheus")
		}
	}
	consultest.Require(t, prom != "", "no Prometheus: set "+EnvPrometheus+", or build it with tools/prometheus/build.sh (make prometheus; about 15 minutes once)")
	promtool = filepath.Join(filepath.Dir(prom), "promtool")
	for _, p := range []string{prom, promtool} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
	return prom, promtool
}

// operationsScrapeConfig is the yaml block of website/operations.md's
// "### Prometheus" section.
func operationsScrapeConfig(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../website/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	i := strings.Index(md, "\n### Prometheus\n")
	if i < 0 {
		t.Fatal("website/operations.md has no ### Prometheus section")
	}
	md = md[i:]
	if j := strings.Index(md[1:], "\n#"); j >= 0 {
		md = md[:j+1]
	}
	blocks := exampleBlocks(md, "yaml")
	if len(blocks) != 1 {
		t.Fatalf("the Prometheus section has %d yaml blocks, want 1", len(blocks))
	}
	return blocks[0]
}

// TestPrometheusScrapesAsDocumented: the scrape configuration of
// website/operations.md, word for word, passes `promtool check config`;
// run by a real Prometheus (built with Consul service discovery) against a
// real agent, with only the agent's address put in and a short scrape
// interval added, it finds a mariposa's node API through Consul and
// scrapes its /metrics: the target is up, with the node label the page's
// relabelling sets and the http_api meta under the label the page names,
// and a mariposa metric is queryable. `promtool check metrics` accepts
// what /metrics serves. With ACLs (default deny), the lines of the page's
// comments, uncommented, with tokens of exactly the policies they name, do
// the same.
func TestPrometheusScrapesAsDocumented(t *testing.T) {
	t.Parallel()
	prom, promtool := prometheusBins(t)
	doc := operationsScrapeConfig(t)
	dir := t.TempDir()

	// The page's configuration as written.
	asWritten := filepath.Join(dir, "as-written.yml")
	if err := os.WriteFile(asWritten, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "config", asWritten).CombinedOutput(); err != nil {
		t.Fatalf("promtool check config on website/operations.md's configuration: %v\n%s", err, out)
	}
	// The label the page says holds each node's URL.
	const metaLabel = "__meta_consul_service_metadata_" + supervisor.HTTPAPIMetaKey
	if !strings.Contains(readFile(t, "../website/operations.md"), "`"+metaLabel+"`") {
		t.Errorf("website/operations.md does not name %s", metaLabel)
	}

	t.Run("without ACLs", func(t *testing.T) {
		t.Parallel()
		scrapeAsDocumented(t, prom, promtool, doc, false)
	})
	t.Run("with ACLs", func(t *testing.T) {
		t.Parallel()
		scrapeAsDocumented(t, prom, promtool, doc, true)
	})
}

// ACL policies of the page's comments: Consul's service discovery reads
// the mariposa service and the nodes, and asks the agent its datacenter
// (agent:read; without it, nothing is discovered); the scrape needs
// agent:read.
const (
	promSDPolicy = `
service "mariposa" {
  policy = "read"
}
node_prefix "" {
  policy = "read"
}
agent_prefix "" {
  policy = "read"
}
`
	promScrapePolicy = `
agent_prefix "" {
  policy = "read"
}
`
)

// scrapeAsDocumented runs the page's configuration doc against an agent
// and a mariposa of its own, with the ACL lines of its comments put in
// when acl, and checks what Prometheus scraped.
func scrapeAsDocumented(t *testing.T, prom, promtool, doc string, acl bool) {
	const metaLabel = "__meta_consul_service_metadata_" + supervisor.HTTPAPIMetaKey
	dir := t.TempDir()
	agent := consultest.NewDev(t, consultest.Options{ACL: acl})
	root := agent.Client(t)
	var env []string
	if acl {
		env = []string{"CONSUL_HTTP_TOKEN=" + consultest.ManagementToken}
	}
	apiPort := freePort(t)
	hcl := writeHCL(t, fmt.Sprintf("service \"idle\" {\n  command = [%q]\n}\n", childBin))
	startMariposa(t, agent, env, "-http-addr", fmt.Sprintf("0.0.0.0:%d", apiPort), hcl)
	waitRunning(t, root, "idle", agent.Name)

	// The same configuration, pointed at this agent, scraping every second.
	edit := func(cfg, from, to string) string {
		t.Helper()
		if strings.Count(cfg, from) != 1 {
			t.Fatalf("the page's configuration does not have %q once:\n%s", from, doc)
		}
		return strings.Replace(cfg, from, to, 1)
	}
	cfg := edit(doc, "server: 127.0.0.1:8500", "server: "+agent.HTTPAddr())
	var scrapeToken string
	if acl {
		// The comments' lines, uncommented, with tokens of the policies
		// they name.
		token := func(name, rules string) string {
			pol, _, err := root.ACL().PolicyCreate(&api.ACLPolicy{Name: name, Rules: rules}, nil)
			if err != nil {
				t.Fatal(err)
			}
			tok, _, err := root.ACL().TokenCreate(&api.ACLToken{Description: name, Policies: []*api.ACLTokenPolicyLink{{ID: pol.ID}}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			return tok.SecretID
		}
		scrapeToken = token("prometheus-scrape", promScrapePolicy)
		tokenFile := filepath.Join(dir, "mariposa.token")
		if err := os.WriteFile(tokenFile, []byte(scrapeToken+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg = edit(cfg, "# token: ...", "token: "+token("prometheus-sd", promSDPolicy))
		cfg = edit(cfg, "    # authorization:\n", "    authorization:\n")
		cfg = edit(cfg, "    #   credentials_file: /etc/prometheus/mariposa.token\n", "      credentials_file: "+tokenFile+"\n")
	}
	cfg = "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n" + cfg
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	promAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	var out lockedBuffer
	cmd := exec.Command(prom, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr, "--log.level=info")
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus output:\n%s", out.String())
		}
	})

	// Discovered through Consul and scraped: up, with the page's labels,
	// and the URL mariposa registered under the label the page names.
	own, _, err := root.Agent().Service("mariposa-"+agent.Name, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantURL := own.Meta[supervisor.HTTPAPIMetaKey]
	if wantURL == "" {
		t.Fatalf("mariposa's registration has no meta %s: %v", supervisor.HTTPAPIMetaKey, own.Meta)
	}
	waitFor(t, 90*time.Second, "prometheus scraping mariposa", func() (bool, string) {
		var r struct {
			Data struct {
				ActiveTargets []struct {
					DiscoveredLabels map[string]string `json:"discoveredLabels"`
					Labels           map[string]string `json:"labels"`
					ScrapeURL        string            `json:"scrapeUrl"`
					Health           string            `json:"health"`
					LastError        string            `json:"lastError"`
				} `json:"activeTargets"`
			} `json:"data"`
		}
		if err := promGet(promAddr, "/api/v1/targets", &r); err != nil {
			return false, err.Error()
		}
		for _, tg := range r.Data.ActiveTargets {
			if tg.Labels["job"] != "mariposa" {
				continue
			}
			switch {
			case tg.Health != "up":
				return false, fmt.Sprintf("target %s: %s %s", tg.ScrapeURL, tg.Health, tg.LastError)
			case tg.Labels["node"] != agent.Name:
				return false, fmt.Sprintf("target labels %v, want node=%s", tg.Labels, agent.Name)
			case tg.DiscoveredLabels[metaLabel] != wantURL:
				return false, fmt.Sprintf("discovered %s = %q, want %q", metaLabel, tg.DiscoveredLabels[metaLabel], wantURL)
			case tg.ScrapeURL != fmt.Sprintf("http://127.0.0.1:%d/metrics", apiPort):
				return false, "scrape URL " + tg.ScrapeURL
			}
			return true, ""
		}
		return false, fmt.Sprintf("%d active targets, none of job mariposa", len(r.Data.ActiveTargets))
	})
	waitFor(t, 60*time.Second, "a mariposa metric queryable", func() (bool, string) {
		var r struct {
			Data struct {
				Result []struct {
					Metric map[string]string `json:"metric"`
				} `json:"result"`
			} `json:"data"`
		}
		q := `mariposa_instances{job="mariposa",service="idle",state="running"}`
		if err := promGet(promAddr, "/api/v1/query?query="+url.QueryEscape(q), &r); err != nil {
			return false, err.Error()
		}
		if len(r.Data.Result) != 1 || r.Data.Result[0].Metric["node"] != agent.Name {
			return false, fmt.Sprintf("%s: %+v", q, r.Data.Result)
		}
		return true, ""
	})

	// promtool's own checks of the exposition mariposa serves.
	req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/metrics", apiPort), nil)
	if scrapeToken != "" {
		req.Header.Set("Authorization", "Bearer "+scrapeToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	check := exec.Command(promtool, "check", "metrics")
	check.Stdin = bytes.NewReader(body)
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics on mariposa's /metrics: %v\n%s", err, out)
	}
}

// promGet GETs path of the Prometheus at addr and decodes its JSON answer.
func promGet(addr, path string, v any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %s %s", path, resp.Status, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
