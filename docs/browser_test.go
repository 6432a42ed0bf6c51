package docs

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// chromium finds Debian's chromium (or a Chrome) for the browser test.
func chromium() (string, error) {
	var err error
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "chrome"} {
		var p string
		if p, err = exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", err
}

// buildSite runs Hugo on docs/site into a fresh directory, as make docs does.
func buildSite(t *testing.T) string {
	t.Helper()
	hugo, err := exec.LookPath("hugo")
	consultest.Require(t, err == nil, "hugo not installed (Debian: hugo)")
	out := t.TempDir()
	cmd := exec.Command(hugo, "--source", "site", "--destination", out, "--panicOnWarning", "--quiet")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hugo: %v\n%s", err, b)
	}
	return out
}

// serve serves dir on a loopback port, as make docs-serve would.
func serve(t *testing.T, dir string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(dir))}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// pageInfo is what the browser saw on one page.
type pageInfo struct {
	Title  string   `json:"title"`
	Links  []string `json:"links"`  // every a[href], resolved
	IDs    []string `json:"ids"`    // every element id
	Images []string `json:"images"` // img srcs that did not load
	Main   int      `json:"main"`   // characters of text in main
}

const pageScript = `(() => ({
  title: document.title,
  links: Array.from(document.querySelectorAll("a[href]"), a => a.href),
  ids: Array.from(document.querySelectorAll("[id]"), e => e.id),
  images: Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src),
  main: (document.querySelector("main") || {innerText: ""}).innerText.length,
}))()`

// The site in a real browser: every page of website/ is reached from the
// home page by following links, loads without a console error or an
// exception, has its images, and every link to the site and every anchor
// lands; the search finds pages; screenshots of the home page, a
// reference page and a diagram page are written for review.
func TestSiteInBrowser(t *testing.T) {
	consultest.SkipShort(t, "builds the site and drives Chromium")
	chrome, err := chromium()
	consultest.Require(t, err == nil, "chromium not installed (Debian: chromium)")
	site := buildSite(t)
	base := serve(t, site)
	shots := os.Getenv("MARIPOSA_SCREENSHOTS")
	if shots == "" {
		shots = filepath.Join("..", "build", "screenshots")
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.NoSandbox, // root in CI
		chromedp.WindowSize(1400, 900),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	// The first Run starts the browser, for as long as bctx: no timeout on
	// it; the rest runs under one.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatal(err)
	}
	ctx, cancelT := context.WithTimeout(bctx, 3*time.Minute)
	defer cancelT()

	// Console errors, exceptions and failed loads, by the page they came from.
	var (
		mu       sync.Mutex
		current  string
		problems []string
	)
	err = chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range ev.Args {
					args = append(args, strings.TrimSpace(string(a.Value)+" "+a.Description))
				}
				problems = append(problems, fmt.Sprintf("%s: console.%s: %s", current, ev.Type, strings.Join(args, " ")))
			}
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			what := d.Text
			if d.Exception != nil {
				what += " " + d.Exception.Description
			}
			problems = append(problems, fmt.Sprintf("%s: exception at %s:%d: %s", current, d.URL, d.LineNumber+1, what))
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == cdplog.EntryLevelError {
				problems = append(problems, fmt.Sprintf("%s: %s: %s %s", current, ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}

	visit := func(u string) pageInfo {
		t.Helper()
		mu.Lock()
		current = strings.TrimPrefix(u, base)
		mu.Unlock()
		if err := chromedp.Do(ctx, chromedp.Navigate(u), chromedp.WaitVisible(chromedp.CSS("main article"))); err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		// Images load after the text: wait for them to finish, loaded or not.
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`Array.from(document.images).every(i => i.complete)`, chromedp.WithPollingTimeout(15*time.Second))); err != nil {
			t.Errorf("%s: images still loading: %v", u, err)
		}
		info, err := chromedp.Run(ctx, chromedp.Evaluate[pageInfo](pageScript))
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		return info
	}

	start := time.Now()
	// Crawl the site from the home page, as a reader clicking around would.
	seen := map[string]pageInfo{}
	queue := []string{"/"}
	type link struct{ from, to string }
	var links []link
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if _, ok := seen[p]; ok {
			continue
		}
		info := visit(base + p)
		seen[p] = info
		if info.Main < 20 {
			t.Errorf("%s: main has no text", p)
		}
		for _, img := range info.Images {
			t.Errorf("%s: image %s did not load", p, img)
		}
		for _, l := range info.Links {
			u, err := url.Parse(l)
			if err != nil {
				t.Errorf("%s: bad link %q", p, l)
				continue
			}
			if u.Scheme+"://"+u.Host != base {
				continue // another site: not ours to check offline
			}
			links = append(links, link{p, u.Path + fragment(u)})
			if strings.HasSuffix(u.Path, "/") && u.Path != "/search/" {
				queue = append(queue, u.Path)
			}
		}
	}
	crawl := time.Since(start)

	// Every page of website/ was reached.
	for _, p := range websitePages(t) {
		if _, ok := seen[pageURL(p)]; !ok {
			t.Errorf("website/%s (%s) is not reachable from the home page", p, pageURL(p))
		}
	}
	// Every link lands: on a page that exists, at an anchor that exists.
	for _, l := range links {
		target, frag, _ := strings.Cut(l.to, "#")
		info, ok := seen[target]
		if !ok {
			resp, err := http.Get(base + target)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("%s: broken link to %s (%v)", l.from, l.to, status(resp, err))
			}
			if resp != nil {
				resp.Body.Close()
			}
			continue
		}
		if frag != "" && !contains(info.IDs, frag) {
			t.Errorf("%s: link to %s: no anchor #%s there", l.from, l.to, frag)
		}
	}

	// Search: from the header's box, then typing into the search page.
	err = chromedp.Do(ctx,
		chromedp.Navigate(base+"/reference/leader/"),
		chromedp.WaitVisible(chromedp.CSS(`header input[name="q"]`)),
		chromedp.SendKeys(chromedp.CSS(`header input[name="q"]`), "lock_delay\n"),
		chromedp.WaitVisible(chromedp.CSS(`#search-results li a`)),
	)
	if err != nil {
		t.Fatalf("search from the header: %v", err)
	}
	results, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#search-results li a"), a => a.pathname)`))
	if err != nil {
		t.Fatalf("search from the header: %v", err)
	}
	if !contains(results, "/leadership/") || !contains(results, "/internals/leadership/") {
		t.Errorf("searching lock_delay finds %v, want the leadership pages among them", results)
	}
	_, err = chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { const i = document.getElementById("search-input"); i.value = ""; i.focus(); return true; })()`))
	if err == nil {
		_, err = chromedp.Run(ctx, chromedp.SendKeys(chromedp.CSS(`#search-input`), "sd_notify"))
	}
	if err == nil {
		_, err = chromedp.Run(ctx, chromedp.Poll[bool](`(() => { const a = document.querySelector("#search-results li a"); return !!a && a.pathname === "/systemd/"; })()`, chromedp.WithPollingTimeout(10*time.Second)))
	}
	status, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#search-status`)))
	if err != nil {
		t.Fatalf("typing in the search page: %v (status %q)", err, status)
	}
	if !strings.Contains(status, "sd_notify") {
		t.Errorf("search status = %q", status)
	}

	// Screenshots for review, each once its content (and its diagram) is there.
	for _, s := range []struct{ file, path, ready string }{
		{"home.png", "/", "main article ul"},
		{"reference-leader.png", "/reference/leader/", "main article table"},
		{"diagram-leadership-timeline.png", "/internals/leadership/", "main article img"},
		{"diagram-supervisor-states.png", "/internals/supervisor/", "main article img"},
	} {
		err := chromedp.Do(ctx, chromedp.Navigate(base+s.path), chromedp.WaitVisible(chromedp.CSS(s.ready)))
		if err == nil {
			_, err = chromedp.Run(ctx, chromedp.Poll[bool](`Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)`, chromedp.WithPollingTimeout(10*time.Second)))
		}
		var png []byte
		if err == nil {
			png, err = chromedp.Run(ctx, chromedp.CaptureScreenshot())
		}
		if err != nil {
			t.Fatalf("screenshot of %s: %v", s.path, err)
		}
		if len(png) < 10000 {
			t.Errorf("screenshot of %s is only %d bytes", s.path, len(png))
		}
		if err := os.WriteFile(filepath.Join(shots, s.file), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
	abs, _ := filepath.Abs(shots)
	t.Logf("%d pages, %d links checked in %s; screenshots in %s", len(seen), len(links), crawl.Round(time.Millisecond), abs)
}

func fragment(u *url.URL) string {
	if u.Fragment == "" {
		return ""
	}
	return "#" + u.Fragment
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func status(resp *http.Response, err error) string {
	if err != nil {
		return err.Error()
	}
	return resp.Status
}
