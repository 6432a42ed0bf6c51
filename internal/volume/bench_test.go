package volume

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// BenchmarkHandoff measures a planned handoff of a 100 MB and a 1 GB volume
// against a plain local copy of the same directory, in the same run:
//
//   - handoff: the old holder's Snapshot (its hashing pass over the stopped
//     directory) + Restore by the new holder over a real loopback HTTP
//     server (httptest, 127.0.0.1): the stream from the directory, the
//     hashing, the unpack into a new directory and the swap; no hooks;
//   - cp -a: `cp -a <src> <dst>` run with os/exec (GNU cp: on Linux it
//     copies file contents in the kernel with copy_file_range).
//
// For 100 MB, 5 rounds (MARIPOSA_BENCH_ROUNDS) alternate a handoff and a
// cp -a, and the line gives the medians (the machine is shared: single
// runs vary by 3x); the 1 GB one runs once. Both read a source that is in
// the page cache (it was just written, and flushed to the disk before the
// first measurement: nothing is dropped from the page cache), both write
// into the page cache, neither fsyncs: the ratio compares the throughputs
// (cp's time / the handoff's). A second line gives the alternative design,
// a snapshot file written while hashing (SnapshotFile) and served from the
// file, for doc.go's figures. A third gives the durable figures: the
// handoff with the Store's default flush (syncfs), against cp -a followed
// by `sync -f` on the destination; the filesystem is flushed beforehand so
// that neither pays for the other's writeback.
//
// The volume: 1 MiB files (90 % of the bytes) and small files of 1 to 16
// KiB (10 %), interleaved in name order as in a database's directory, 100
// to a directory, random contents, generated once per size. The 1 GB case
// runs only with MARIPOSA_BENCH_BIG=1 or when -bench names it (e.g.
// -bench 'Handoff/1GB'), so `make bench` (-bench .) runs the 100 MB one.
// `go test` runs no benchmark.
func BenchmarkHandoff(b *testing.B) {
	var (
		mu   sync.Mutex
		gens = map[int64]string{}
	)
	source := func(b *testing.B, size int64) string {
		mu.Lock()
		defer mu.Unlock()
		if d, ok := gens[size]; ok {
			return d
		}
		d := filepath.Join(tempDirOf(b), "old")
		start := time.Now()
		n := generateVolume(b, filepath.Join(d, "u", "0", "data"), size)
		b.Logf("generated %d files, %d MB in %s", n, size/1e6, time.Since(start).Round(time.Millisecond))
		gens[size] = d
		return d
	}
	for _, tc := range []struct {
		name string
		size int64
	}{{"100MB", 100e6}, {"1GB", 1e9}} {
		b.Run(tc.name, func(b *testing.B) {
			if tc.size >= 1e9 && os.Getenv("MARIPOSA_BENCH_BIG") != "1" && !strings.Contains(benchFlag(), "1GB") {
				b.Skip("the 1 GB volume runs with MARIPOSA_BENCH_BIG=1 or -bench 'Handoff/1GB'")
			}
			root := source(b, tc.size)
			for range b.N {
				benchHandoffOnce(b, root, tc.name, tc.size)
			}
		})
	}
}

// tempDirOf is a directory that lasts as long as the benchmark binary's
// run (b.TempDir of a sub-benchmark is removed after each of its rounds).
var (
	benchTmpOnce sync.Once
	benchTmp     string
)

func tempDirOf(b *testing.B) string {
	benchTmpOnce.Do(func() {
		d, err := os.MkdirTemp("", "mariposa-volume-bench-")
		if err != nil {
			b.Fatal(err)
		}
		benchTmp = d
	})
	d, err := os.MkdirTemp(benchTmp, "")
	if err != nil {
		b.Fatal(err)
	}
	return d
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if benchTmp != "" {
		_ = os.RemoveAll(benchTmp)
	}
	os.Exit(code)
}

func benchFlag() string {
	if f := flag.Lookup("test.bench"); f != nil {
		return f.Value.String()
	}
	return ""
}

// generateVolume writes about size bytes into dir and returns the number
// of files: in name order, a 1 MiB file, then 12 files of 1 to 16 KiB, and
// so on (about 90 % of the bytes in 1 MiB files), 100 files to a directory.
func generateVolume(b testing.TB, dir string, size int64) int {
	rng := rand.New(rand.NewPCG(1, 2))
	src := rand.NewChaCha8([32]byte{1})
	buf := make([]byte, 1<<20)
	var written int64
	files := 0
	for written < size {
		sub := filepath.Join(dir, fmt.Sprintf("d%03d", files/100))
		if files%100 == 0 {
			if err := os.MkdirAll(sub, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		n := int64(1 << 20)
		if files%13 != 0 {
			n = int64(1+rng.IntN(16)) << 10
		}
		n = min(n, size-written)
		_, _ = src.Read(buf[:n])
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%05d", files)), buf[:n], 0o644); err != nil {
			b.Fatal(err)
		}
		written += n
		files++
	}
	return files
}

func syncfs(b *testing.B, dir string) {
	if out, err := exec.Command("sync", "-f", dir).CombinedOutput(); err != nil {
		b.Fatalf("sync -f: %v: %s", err, out)
	}
}

func benchHandoffOnce(b *testing.B, oldRoot, name string, size int64) {
	ctx := context.Background()
	log := hclog.NewNullLogger()
	old := &Store{Root: oldRoot, Log: log, NoSync: true}
	srv := httptest.NewServer(old.Handler(allowAll))
	defer srv.Close()
	work := tempDirOf(b)
	defer os.RemoveAll(work)
	src := old.Dir("u", 0, "data")
	syncfs(b, src)

	handoff := func(nosync bool) (snap, restore time.Duration) {
		nw := &Store{Root: filepath.Join(work, "new"), Log: log, NoSync: nosync}
		defer os.RemoveAll(nw.Root)
		t0 := time.Now()
		m, err := old.Snapshot(ctx, "u", 0, "data", nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := nw.Restore(ctx, "u", 0, "data", Source{URL: SnapshotURL(srv.URL, "u", 0, "data", m.SHA256), SHA256: m.SHA256, Size: m.Size}, nil, nil, 0); err != nil {
			b.Fatal(err)
		}
		return t1.Sub(t0), time.Since(t1)
	}
	cp := func(sync bool) time.Duration {
		dst := filepath.Join(work, "cp")
		defer os.RemoveAll(dst)
		t0 := time.Now()
		if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
			b.Fatalf("cp -a: %v: %s", err, out)
		}
		if sync {
			syncfs(b, dst)
		}
		return time.Since(t0)
	}
	// The alternative: a snapshot file written while hashing, served from
	// the file (sendfile), restored the same way.
	viaFile := func() (snap, restore time.Duration) {
		nw := &Store{Root: filepath.Join(work, "new"), Log: log, NoSync: true}
		defer os.RemoveAll(nw.Root)
		defer os.Remove(old.fileTarPath("u", 0, "data"))
		t0 := time.Now()
		m, err := old.SnapshotFile(ctx, "u", 0, "data", nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		// The directory's record names the same bytes: without it the
		// handler serves the file.
		_ = os.Remove(old.dirMetaPath("u", 0, "data"))
		t1 := time.Now()
		if _, err := nw.Restore(ctx, "u", 0, "data", Source{URL: SnapshotURL(srv.URL, "u", 0, "data", m.SHA256), SHA256: m.SHA256, Size: m.Size}, nil, nil, 0); err != nil {
			b.Fatal(err)
		}
		return t1.Sub(t0), time.Since(t1)
	}

	// Rounds alternate a handoff and a copy, so that both see the same
	// machine; the figures are the medians.
	rounds := 1
	if size < 1e9 {
		rounds = 5
		if n, err := strconv.Atoi(os.Getenv("MARIPOSA_BENCH_ROUNDS")); err == nil && n > 0 {
			rounds = n
		}
	}
	var snaps, restores, totals, cps, ratios []float64
	b.ResetTimer()
	for range rounds {
		b.StartTimer()
		snap, restore := handoff(true)
		b.StopTimer()
		c := cp(false)
		t := (snap + restore).Seconds()
		snaps, restores, totals = append(snaps, snap.Seconds()), append(restores, restore.Seconds()), append(totals, t)
		cps, ratios = append(cps, c.Seconds()), append(ratios, c.Seconds()/t)
	}
	fsnap, frestore := viaFile()
	syncfs(b, work)
	dsnap, drestore := handoff(false)
	syncfs(b, work)
	cpSync := cp(true)

	total, ratio := median(totals), median(ratios)
	mbs := float64(size) / 1e6 / total
	label := strings.Replace(strings.Replace(name, "MB", " MB", 1), "GB", " GB", 1)
	fmt.Printf("volume handoff %s: %.2f s (%.0f MB/s: snapshot %.2f s, transfer+unpack %.2f s); cp -a %.2f s (%.0f MB/s); throughput ratio %.2f (goal >= 0.5)%s\n",
		label, total, mbs, median(snaps), median(restores), median(cps), float64(size)/1e6/median(cps), ratio, roundsNote(ratios))
	fmt.Printf("volume handoff %s with a snapshot file instead: %.2f s (snapshot file %.2f s, transfer+unpack %.2f s)\n",
		label, (fsnap + frestore).Seconds(), fsnap.Seconds(), frestore.Seconds())
	dtotal := dsnap + drestore
	fmt.Printf("volume handoff %s, durable: %.2f s with fsync (snapshot %.2f s, transfer+unpack+fsync %.2f s); cp -a + sync -f %.2f s; ratio %.2f\n",
		label, dtotal.Seconds(), dsnap.Seconds(), drestore.Seconds(), cpSync.Seconds(), cpSync.Seconds()/dtotal.Seconds())
	b.ReportMetric(ratio, "ratio")
	b.ReportMetric(total, "handoff-s")
	b.ReportMetric(median(cps), "cp-s")
	b.ReportMetric(mbs, "MB/s")
	b.ReportMetric(cpSync.Seconds()/dtotal.Seconds(), "durable-ratio")
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func roundsNote(ratios []float64) string {
	if len(ratios) < 2 {
		return ""
	}
	parts := make([]string, len(ratios))
	for i, r := range ratios {
		parts[i] = fmt.Sprintf("%.2f", r)
	}
	return fmt.Sprintf("; medians of %d rounds, ratios %s", len(ratios), strings.Join(parts, " "))
}
