package volume

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// bytesTransport answers every request with data.
type bytesTransport []byte

func (b bytesTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Header: http.Header{},
		Body: io.NopCloser(bytes.NewReader(b)), ContentLength: int64(len(b)), Request: r}, nil
}

type fuzzEntry struct {
	typ          byte
	name, target string
	body         string
}

func tarOf(f testing.TB, es ...fuzzEntry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Typeflag: e.typ, Name: e.name, Linkname: e.target, Mode: 0o644, Size: int64(len(e.body)), ModTime: testTime}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			f.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				f.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		f.Fatal(err)
	}
	return buf.Bytes()
}

// FuzzRestore feeds arbitrary bytes, with their right checksum, to Restore
// (the tar reader path): it must never panic nor create anything outside
// its new directory, and leave nothing but a complete volume or nothing.
func FuzzRestore(f *testing.F) {
	canary := f.TempDir()
	for _, d := range fuzzSeeds(f, canary) {
		f.Add(d)
	}
	f.Fuzz(func(t *testing.T, data []byte) { fuzzRestore(t, canary, data) })
}

// fuzzSeeds: a real archive of a tree, its beginning, nothing, zeros, and
// archives that try to write out of the volume (to canary).
func fuzzSeeds(f testing.TB, canary string) [][]byte {
	s0 := &Store{Root: f.TempDir(), Log: hclog.NewNullLogger(), NoSync: true}
	f.Cleanup(func() { _ = removeAll(s0.Root) })
	d, _ := s0.Ensure("u", 0, "data")
	makeTree(f, d)
	var real bytes.Buffer
	a := &archiver{root: d, log: hclog.NewNullLogger(), buf: make([]byte, 4096), w: countWriter{w: &real}}
	if err := a.archive(context.Background()); err != nil {
		f.Fatal(err)
	}
	seeds := [][]byte{real.Bytes(), {}, make([]byte, 1024), real.Bytes()[:2000]}
	for _, es := range [][]fuzzEntry{
		{{typ: tar.TypeReg, name: "../evil", body: "x"}},
		{{typ: tar.TypeReg, name: "/abs/evil", body: "x"}},
		{{typ: tar.TypeReg, name: canary + "/evil", body: "x"}},
		{{typ: tar.TypeDir, name: "d/"}, {typ: tar.TypeReg, name: "d/../../evil", body: "x"}},
		{{typ: tar.TypeSymlink, name: "l", target: canary}, {typ: tar.TypeReg, name: "l/evil", body: "x"}},
		{{typ: tar.TypeSymlink, name: "l", target: "../../../.."}, {typ: tar.TypeReg, name: "l/evil", body: "x"}},
		{{typ: tar.TypeSymlink, name: "l", target: canary + "/evil"}, {typ: tar.TypeReg, name: "l", body: "x"}},
		{{typ: tar.TypeSymlink, name: "l", target: canary}, {typ: tar.TypeDir, name: "l/"}, {typ: tar.TypeReg, name: "l/x", body: "x"}},
		{{typ: tar.TypeReg, name: "a", body: "x"}, {typ: tar.TypeReg, name: "a", body: "y"}},
		{{typ: tar.TypeReg, name: "a", body: "x"}, {typ: tar.TypeLink, name: "b", target: "a"}},
		{{typ: tar.TypeReg, name: "a", body: "x"}, {typ: tar.TypeReg, name: "a/b", body: "y"}},
		{{typ: tar.TypeChar, name: "dev"}},
		{{typ: tar.TypeFifo, name: "fifo"}},
		{{typ: tar.TypeReg, name: "./a", body: "x"}},
		{{typ: tar.TypeReg, name: "a//b", body: "x"}},
		{{typ: tar.TypeReg, name: ".", body: "x"}},
		{{typ: tar.TypeDir, name: "./"}, {typ: tar.TypeDir, name: "./"}},
		{{typ: tar.TypeDir, name: "d/"}, {typ: tar.TypeReg, name: "d/f", body: strings.Repeat("x", 1000)}},
		{{typ: tar.TypeDir, name: "d/"}, {typ: tar.TypeReg, name: "d/big", body: strings.Repeat("y", 70<<10)}},
	} {
		seeds = append(seeds, tarOf(f, es...))
	}
	return seeds
}

func fuzzRestore(t *testing.T, canary string, data []byte) {
	base := t.TempDir()
	s := &Store{Root: filepath.Join(base, "root"), Log: hclog.NewNullLogger(), NoSync: true}
	t.Cleanup(func() { _ = removeAll(s.Root) })
	sum := sha256.Sum256(data)
	src := Source{URL: "http://fuzz.invalid/v1/volumes/u/0/data", SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data)),
		Client: &http.Client{Transport: bytesTransport(data)}}
	_, err := s.Restore(context.Background(), "u", 0, "data", src, nil, nil, 10*time.Second)
	live := s.Dir("u", 0, "data")
	if ents, _ := os.ReadDir(canary); len(ents) != 0 {
		t.Fatalf("written outside the store: %v", ents)
	}
	if ents, _ := os.ReadDir(base); len(ents) != 1 {
		t.Fatalf("written next to the store: %v", ents)
	}
	_ = filepath.WalkDir(s.Root, func(p string, d fs.DirEntry, werr error) error {
		switch {
		case p == s.Root || p == filepath.Join(s.Root, "u") || p == filepath.Join(s.Root, "u", "0"):
		case err == nil && (p == live || strings.HasPrefix(p, live+string(filepath.Separator))):
		default:
			t.Fatalf("Restore (error %v) left %s", err, p)
		}
		return nil
	})
}

func TestUnpackRefuses(t *testing.T) {
	outside := t.TempDir()
	for _, tc := range []struct {
		name    string
		entries []fuzzEntry
		err     string // "" when accepted
	}{
		{"a parent path", []fuzzEntry{{typ: tar.TypeReg, name: "../evil", body: "x"}}, "a path out of the volume"},
		{"an absolute path", []fuzzEntry{{typ: tar.TypeReg, name: outside + "/evil", body: "x"}}, "an absolute path"},
		{"dot-dot inside", []fuzzEntry{{typ: tar.TypeDir, name: "d/"}, {typ: tar.TypeReg, name: "d/../../evil", body: "x"}}, "not a clean relative path"},
		{"through a symlink out", []fuzzEntry{{typ: tar.TypeSymlink, name: "l", target: outside}, {typ: tar.TypeReg, name: "l/evil", body: "x"}}, `its parent "l" is not a directory`},
		{"through a symlink up", []fuzzEntry{{typ: tar.TypeSymlink, name: "l", target: "../.."}, {typ: tar.TypeDir, name: "l/d/"}}, `its parent "l" is not a directory`},
		{"over a symlink", []fuzzEntry{{typ: tar.TypeSymlink, name: "l", target: outside + "/evil"}, {typ: tar.TypeReg, name: "l", body: "x"}}, "twice in the archive"},
		{"a parent not in the archive", []fuzzEntry{{typ: tar.TypeReg, name: "d/f", body: "x"}}, `its parent "d" is not in the archive before it`},
		{"a file as a parent", []fuzzEntry{{typ: tar.TypeReg, name: "a", body: "x"}, {typ: tar.TypeReg, name: "a/b", body: "y"}}, `its parent "a" is not a directory`},
		{"a hard link", []fuzzEntry{{typ: tar.TypeReg, name: "a", body: "x"}, {typ: tar.TypeLink, name: "b", target: "a"}}, "only regular files, directories and symlinks"},
		{"a device", []fuzzEntry{{typ: tar.TypeChar, name: "dev"}}, "only regular files, directories and symlinks"},
		{"a dot-slash name", []fuzzEntry{{typ: tar.TypeReg, name: "./a", body: "x"}}, "not a clean relative path"},
		{"a file as the root", []fuzzEntry{{typ: tar.TypeReg, name: ".", body: "x"}}, "must be a directory"},
		{"the root twice", []fuzzEntry{{typ: tar.TypeDir, name: "./"}, {typ: tar.TypeDir, name: "./"}}, "twice in the archive"},
		{"a symlink without a target", []fuzzEntry{{typ: tar.TypeSymlink, name: "l"}}, "without a valid target"},
		{"symlinks in and out, not followed", []fuzzEntry{{typ: tar.TypeSymlink, name: "l", target: outside}, {typ: tar.TypeDir, name: "d/"}, {typ: tar.TypeReg, name: "d/f", body: "x"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "new")
			if err := os.Mkdir(root, 0o700); err != nil {
				t.Fatal(err)
			}
			u := &unpacker{root: root}
			err := u.run(context.Background(), newReaderSource(bytes.NewReader(tarOf(t, tc.entries...))))
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
			} else if err == nil || !isArchive(err) || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("unpack: %v, want an invalid archive: %q", err, tc.err)
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Fatalf("written outside: %v", ents)
			}
		})
	}
}
