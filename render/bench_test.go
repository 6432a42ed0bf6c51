//go:build linux

package render

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/hashicorp/consul/api"
	"golang.org/x/sys/unix"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/schema"
)

// Benchmarks of KV write -> rendered file, for mariposa and for
// consul-template in the same run against the same agent. Files are
// detected with inotify; each trial writes a new value and waits for the
// file to hold it. Trials alternate between the two tools and are spaced so
// both tools' 100ms query rate limits stay out of the measure.

const benchTrials = 60

// dirWatch reports the names of files closed after writing or renamed into a
// directory.
type dirWatch struct {
	fd    int
	names chan string
	stop  atomic.Bool
	done  chan struct{}
}

func watchDir(tb testing.TB, dir string) *dirWatch {
	tb.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE); err != nil {
		tb.Fatal(err)
	}
	w := &dirWatch{fd: fd, names: make(chan string, 4096), done: make(chan struct{})}
	go w.loop()
	tb.Cleanup(func() { w.stop.Store(true); <-w.done; unix.Close(fd) })
	return w
}

func (w *dirWatch) loop() {
	defer close(w.done)
	buf := make([]byte, 64<<10)
	fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}
	for !w.stop.Load() {
		if n, _ := unix.Poll(fds, 50); n <= 0 {
			continue
		}
		n, err := unix.Read(w.fd, buf)
		if err != nil || n <= 0 {
			continue
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			w.names <- string(bytes.TrimRight(name, "\x00"))
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

// waitContent waits until path holds want, woken by inotify.
func (w *dirWatch) waitContent(tb testing.TB, path, want string) {
	tb.Helper()
	base := filepath.Base(path)
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		if b, err := os.ReadFile(path); err == nil && string(b) == want {
			return
		}
		for {
			select {
			case n := <-w.names:
				if n != base {
					continue
				}
			case <-deadline.C:
				tb.Fatalf("%s never held %q", path, want)
			}
			break
		}
	}
}

// drain forgets past events.
func (w *dirWatch) drain() {
	for {
		select {
		case <-w.names:
		default:
			return
		}
	}
}

// tool is one renderer under test: n templates, template i reads key i and
// writes file i.
type tool struct {
	name  string
	dir   string
	watch *dirWatch
	keys  []string
	files []string
	lat   []time.Duration
}

func newTool(b *testing.B, name string, n int) *tool {
	return newToolIn(b, name, n, b.TempDir())
}

// newToolIn is newTool with its files in dir.
func newToolIn(b *testing.B, name string, n int, dir string) *tool {
	t := &tool{name: name, dir: dir, watch: watchDir(b, dir)}
	for i := range n {
		t.keys = append(t.keys, fmt.Sprintf("bench/%s/k%03d", name, i))
		t.files = append(t.files, filepath.Join(dir, fmt.Sprintf("f%03d.conf", i)))
	}
	return t
}

func (t *tool) text(i int) string { return `value={{ key "` + t.keys[i] + `" }}` }

// trial writes a new value to key i and times until file i holds it.
func (t *tool) trial(b *testing.B, c *api.Client, i int, seq int) {
	v := fmt.Sprintf("%s-%d", t.name, seq)
	t.watch.drain()
	start := time.Now()
	put(b, c, t.keys[i], v)
	t.watch.waitContent(b, t.files[i], "value="+v)
	t.lat = append(t.lat, time.Since(start))
}

// startOurs renders the tool's templates with a Manager until stop (or the
// benchmark's end).
func startOurs(b *testing.B, addr string, t *tool, opts ...Options) (stop func()) {
	m := NewManager(&api.Config{Address: addr}, testLogger(), opts...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	b.Cleanup(stop)
	svc := &schema.Service{Name: "bench", Dir: t.dir, SourceDir: t.dir}
	for i := range t.keys {
		svc.Templates = append(svc.Templates, &schema.Template{Contents: t.text(i), Destination: t.files[i], Perms: 0o644})
	}
	f := follow(m.Service(svc))
	f.until(b, "first render", func(s ServiceState) bool { return s.TemplatesReady })
	return stop
}

// benchConsulTemplate returns the consul-template binary the benchmarks
// measure beside mariposa, built into the cache when missing (as the tests'
// cross-check finds it); "" when it cannot be had.
func benchConsulTemplate(b *testing.B) string {
	bin, err := consulTemplateBinary(b, true)
	if err != nil {
		b.Logf("consul-template %s: %v: measuring mariposa only", consulTemplateVersion, err)
		return ""
	}
	return bin
}

// startConsulTemplate runs consul-template (bin) on the tool's templates
// until stop (or the benchmark's end); ok is false when it cannot start.
func startConsulTemplate(b *testing.B, bin, addr string, t *tool) (stop func(), ok bool) {
	if bin == "" {
		return func() {}, false
	}
	args := []string{"-consul-addr", addr, "-log-level", "err"}
	for i := range t.keys {
		in := filepath.Join(b.TempDir(), fmt.Sprintf("t%03d.tpl", i))
		mustWrite(b, in, t.text(i))
		args = append(args, "-template", in+":"+t.files[i])
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		cancel()
		b.Logf("cannot start consul-template: %v", err)
		return func() {}, false
	}
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); _ = cmd.Wait() }) }
	b.Cleanup(stop)
	for i := range t.files {
		t.watch.waitContent(b, t.files[i], "value=init")
	}
	return stop, true
}

func quantile(ds []time.Duration, q float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// benchKV runs trials for mariposa and consul-template rendering n templates
// of one key each, one key changing per trial.
func benchKV(b *testing.B, n int) {
	// Each distinct key holds one blocking query, i.e. one connection;
	// the agent's default of 200 connections per client address is too few
	// for two tools with 100 templates each.
	a := consultest.NewDev(b, consultest.Options{ExtraConfig: map[string]any{
		"limits": map[string]any{"http_max_conns_per_client": 1000},
	}})
	c := a.Client(b)
	ours, theirs := newTool(b, "ours", n), newTool(b, "ct", n)
	for _, t := range []*tool{ours, theirs} {
		for _, k := range t.keys {
			put(b, c, k, "init")
		}
	}
	startOurs(b, a.HTTPAddr(), ours)
	_, haveCT := startConsulTemplate(b, benchConsulTemplate(b), a.HTTPAddr(), theirs)
	b.ResetTimer()
	for range b.N {
		ours.lat, theirs.lat = nil, nil
		for seq := range benchTrials {
			i := (seq * 37) % n // spread the changed key over the templates
			pause()
			ours.trial(b, c, i, seq)
			if haveCT {
				pause()
				theirs.trial(b, c, i, seq)
			}
		}
	}
	b.StopTimer()
	op50, op99 := quantile(ours.lat, 0.5), quantile(ours.lat, 0.99)
	b.ReportMetric(ms(op50), "p50-ms")
	b.ReportMetric(ms(op99), "p99-ms")
	line := fmt.Sprintf("KV write -> rendered file, %d template(s), 1 key changes: mariposa p50 %.2f ms p99 %.2f ms (min %.2f, p90 %.2f, max %.2f; %d trials)",
		n, ms(op50), ms(op99), ms(quantile(ours.lat, 0)), ms(quantile(ours.lat, 0.9)), ms(quantile(ours.lat, 1)), len(ours.lat))
	if haveCT {
		tp50, tp99 := quantile(theirs.lat, 0.5), quantile(theirs.lat, 0.99)
		b.ReportMetric(ms(tp50), "ct-p50-ms")
		b.ReportMetric(ms(tp99), "ct-p99-ms")
		b.ReportMetric(float64(op50)/float64(tp50), "ratio-p50")
		b.ReportMetric(float64(op99)/float64(tp99), "ratio-p99")
		line += fmt.Sprintf("; consul-template %s p50 %.2f ms p99 %.2f ms (min %.2f, p90 %.2f, max %.2f); ratio ours/consul-template p50 %.2f p99 %.2f",
			consulTemplateVersion, ms(tp50), ms(tp99), ms(quantile(theirs.lat, 0)), ms(quantile(theirs.lat, 0.9)), ms(quantile(theirs.lat, 1)),
			float64(op50)/float64(tp50), float64(op99)/float64(tp99))
	}
	b.Log(line)
	fmt.Println(line)
}

// pause lets the views settle into their next blocking query, past the
// rate limit window, so each trial measures one change.
func pause() { time.Sleep(150 * time.Millisecond) }

// BenchmarkKVWriteToFile: KV write -> rendered file, 1 template.
func BenchmarkKVWriteToFile(b *testing.B) { benchKV(b, 1) }

// BenchmarkKVWriteToFile100: KV write -> file, 100 templates, 1 key changes.
func BenchmarkKVWriteToFile100(b *testing.B) { benchKV(b, 100) }

// trialAll writes a new value to every key and times until every file holds
// its value.
func (t *tool) trialAll(b *testing.B, c *api.Client, seq int) {
	t.watch.drain()
	start := time.Now()
	// Two transactions (at most 64 operations each), as a deploy tool would.
	for lo := 0; lo < len(t.keys); lo += 50 {
		var ops api.KVTxnOps
		for i := lo; i < min(lo+50, len(t.keys)); i++ {
			ops = append(ops, &api.KVTxnOp{Verb: api.KVSet, Key: t.keys[i], Value: []byte(fmt.Sprintf("%s-%d-%d", t.name, seq, i))})
		}
		if ok, resp, _, err := c.KV().Txn(ops, nil); err != nil || !ok {
			b.Fatalf("txn: %v %v", err, resp)
		}
	}
	for i := range t.files {
		t.watch.waitContent(b, t.files[i], fmt.Sprintf("value=%s-%d-%d", t.name, seq, i))
	}
	t.lat = append(t.lat, time.Since(start))
}

func summary(ds []time.Duration) string {
	return fmt.Sprintf("min %.1f, p50 %.1f, p90 %.1f, max %.1f ms", ms(quantile(ds, 0)), ms(quantile(ds, 0.5)), ms(quantile(ds, 0.9)), ms(quantile(ds, 1)))
}

// BenchmarkKVWriteAll100: 100 keys change -> last of 100 files written,
// with the files on disk (the test's temporary directory) and in memory
// (/dev/shm), for both tools.
//
// On disk the figure depends on the filesystem as much as on the tools:
// every atomic write creates an inode and frees the one it replaces, and
// ext4 without a journal (this project's CI machines) will not reuse an
// inode freed in the last 5 s (300 s while its table block is dirty), so
// each create scans past all those inodes (recently_deleted in ext4's
// ialloc.c): after a few hundred writes a create costs about a
// millisecond of kernel CPU, for both tools, and more the more the run
// has written before. In memory the figure is the tools' own: Consul's
// answers, the renders and the writes.
func BenchmarkKVWriteAll100(b *testing.B) {
	b.Run("disk", func(b *testing.B) { benchWriteAll(b, "") })
	b.Run("memory", func(b *testing.B) {
		if _, err := os.Stat("/dev/shm"); err != nil {
			b.Skip("no /dev/shm")
		}
		benchWriteAll(b, "/dev/shm")
	})
}

// benchWriteAll runs BenchmarkKVWriteAll100 with the tools' files in a new
// directory under parent ("": the test's temporary directory).
func benchWriteAll(b *testing.B, parent string) {
	const n, trials = 100, 20
	a := consultest.NewDev(b, consultest.Options{ExtraConfig: map[string]any{
		"limits": map[string]any{"http_max_conns_per_client": 1000},
	}})
	c := a.Client(b)
	dir := func() string {
		if parent == "" {
			return b.TempDir()
		}
		d, err := os.MkdirTemp(parent, "mariposa-bench-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(d) })
		return d
	}
	ours, theirs := newToolIn(b, "ours", n, dir()), newToolIn(b, "ct", n, dir())
	for _, t := range []*tool{ours, theirs} {
		for _, k := range t.keys {
			put(b, c, k, "init")
		}
	}
	startOurs(b, a.HTTPAddr(), ours)
	_, haveCT := startConsulTemplate(b, benchConsulTemplate(b), a.HTTPAddr(), theirs)
	b.ResetTimer()
	for range b.N {
		ours.lat, theirs.lat = nil, nil
		for seq := range trials {
			time.Sleep(300 * time.Millisecond)
			ours.trialAll(b, c, seq)
			if haveCT {
				time.Sleep(300 * time.Millisecond)
				theirs.trialAll(b, c, seq)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(ms(quantile(ours.lat, 0.5)), "p50-ms")
	line := fmt.Sprintf("100 keys change -> last of 100 files (%s, %s): mariposa %s (%d trials)", map[bool]string{true: "on disk", false: "in memory"}[parent == ""], fsName(ours.dir), summary(ours.lat), len(ours.lat))
	if haveCT {
		b.ReportMetric(ms(quantile(theirs.lat, 0.5)), "ct-p50-ms")
		r := float64(quantile(ours.lat, 0.5)) / float64(quantile(theirs.lat, 0.5))
		b.ReportMetric(r, "ratio-p50")
		line += fmt.Sprintf("; consul-template %s %s; ratio p50 %.2f", consulTemplateVersion, summary(theirs.lat), r)
	}
	b.Log(line)
	fmt.Println(line)
}

// fsName names the filesystem dir is on.
func fsName(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "filesystem unknown"
	}
	switch st.Type {
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs"
	}
	return fmt.Sprintf("filesystem 0x%x", st.Type)
}

// BenchmarkFirstRender100: start -> all 100 files rendered (data in place).
func BenchmarkFirstRender100(b *testing.B) {
	const n, trials = 100, 10
	// Stopped managers' in-flight queries end only with their wait (10s
	// here): allow for them.
	a := consultest.NewDev(b, consultest.Options{ExtraConfig: map[string]any{
		"limits": map[string]any{"http_max_conns_per_client": 5000},
	}})
	c := a.Client(b)
	keys := newTool(b, "first", n)
	for _, k := range keys.keys {
		put(b, c, k, "init")
	}
	var ours, theirs []time.Duration
	ctBin := benchConsulTemplate(b)
	haveCT := ctBin != ""
	b.ResetTimer()
	for range b.N {
		for range trials {
			// Fresh managers each time: nothing cached.
			o := newTool(b, "first", n)
			start := time.Now()
			stop := startOurs(b, a.HTTPAddr(), o, Options{BlockWait: 10 * time.Second})
			ours = append(ours, time.Since(start))
			stop()
			if haveCT {
				t := newTool(b, "first", n)
				start = time.Now()
				stop, _ := startConsulTemplate(b, ctBin, a.HTTPAddr(), t)
				theirs = append(theirs, time.Since(start))
				stop()
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(ms(quantile(ours, 0.5)), "p50-ms")
	line := fmt.Sprintf("first render of 100 templates: mariposa %s (%d trials)", summary(ours), len(ours))
	if haveCT {
		b.ReportMetric(ms(quantile(theirs, 0.5)), "ct-p50-ms")
		r := float64(quantile(ours, 0.5)) / float64(quantile(theirs, 0.5))
		b.ReportMetric(r, "ratio-p50")
		line += fmt.Sprintf("; consul-template %s %s (includes its process start); ratio p50 %.2f", consulTemplateVersion, summary(theirs), r)
	}
	b.Log(line)
	fmt.Println(line)
}
