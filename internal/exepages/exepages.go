package exepages

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Mapping is one mapping of a file in a process's smaps, in KB.
type Mapping struct {
	Start, End uintptr
	Perms      string // as smaps prints them: "r-xp"
	Rss        int64  // KB resident
	Anonymous  int64  // KB of private copies (written pages)
}

// Droppable reports whether m's resident pages are all the file's: a
// read-only mapping with no anonymous page.
func (m Mapping) Droppable() bool {
	return len(m.Perms) == 4 && m.Perms[1] != 'w' && m.Anonymous == 0
}

// Parse lists the mappings of the file path in smaps (the contents of
// /proc/<pid>/smaps). Lines it cannot read are skipped.
func Parse(smaps []byte, path string) []Mapping {
	var ms []Mapping
	cur := -1
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if m, name, ok := header(f); ok {
			cur = -1
			if name == path {
				ms = append(ms, m)
				cur = len(ms) - 1
			}
			continue
		}
		if cur < 0 || len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || kb < 0 {
			continue
		}
		switch f[0] {
		case "Rss:":
			ms[cur].Rss = kb
		case "Anonymous:":
			ms[cur].Anonymous = kb
		}
	}
	return ms
}

// header reads a mapping's first line: "start-end perms offset dev inode
// [path]". The path may hold spaces, and ends " (deleted)" once the file
// is replaced (an upgrade's new binary in place of the running one).
func header(f []string) (Mapping, string, bool) {
	if len(f) < 5 || len(f[1]) != 4 || strings.HasSuffix(f[0], ":") {
		return Mapping{}, "", false
	}
	lo, hi, ok := strings.Cut(f[0], "-")
	if !ok {
		return Mapping{}, "", false
	}
	s, err1 := strconv.ParseUint(lo, 16, 64)
	e, err2 := strconv.ParseUint(hi, 16, 64)
	if err1 != nil || err2 != nil || e <= s {
		return Mapping{}, "", false
	}
	return Mapping{Start: uintptr(s), End: uintptr(e), Perms: f[1]}, strings.Join(f[5:], " "), true
}

// Self lists the running binary's mappings.
func Self() ([]Mapping, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return nil, err
	}
	return Parse(b, exe), nil
}

// Drop unmaps the resident pages of the running binary's droppable
// mappings and returns how many KB were resident in them. The pages stay
// in the page cache: what runs next maps those it touches again.
func Drop() (int64, error) {
	ms, err := Self()
	if err != nil {
		return 0, err
	}
	var kb int64
	for _, m := range ms {
		if !m.Droppable() {
			continue
		}
		// The range is the process's own mapping of its binary, read from
		// smaps: the kernel checks it, nothing here dereferences it.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, m.Start, m.End-m.Start, unix.MADV_DONTNEED); errno != 0 {
			return kb, errno
		}
		kb += m.Rss
	}
	return kb, nil
}
