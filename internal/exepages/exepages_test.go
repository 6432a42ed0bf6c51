package exepages

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

const sample = `00400000-00d8c000 r-xp 00000000 fe:00 1234                               /usr/bin/mariposa
Size:               9776 kB
Rss:                8512 kB
Anonymous:             0 kB
00d8c000-01a39000 r--p 0098c000 fe:00 1234                               /usr/bin/mariposa
Size:              12980 kB
Rss:                9800 kB
Anonymous:             0 kB
01a39000-01a9c000 rw-p 01639000 fe:00 1234                               /usr/bin/mariposa
Size:                396 kB
Rss:                 220 kB
Anonymous:           120 kB
01a9c000-01ae0000 rw-p 00000000 00:00 0
Size:                272 kB
Rss:                  60 kB
Anonymous:            60 kB
7f0000000000-7f0000021000 r--p 00000000 fe:00 99                         /usr/lib/other file.so
Rss:                  12 kB
Anonymous:             0 kB
`

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, smaps, path string
		want              []Mapping
		droppable         []bool
	}{
		{
			name: "a static Go binary: code and read-only data droppable, data not", smaps: sample, path: "/usr/bin/mariposa",
			want: []Mapping{
				{Start: 0x400000, End: 0xd8c000, Perms: "r-xp", Rss: 8512},
				{Start: 0xd8c000, End: 0x1a39000, Perms: "r--p", Rss: 9800},
				{Start: 0x1a39000, End: 0x1a9c000, Perms: "rw-p", Rss: 220, Anonymous: 120},
			},
			droppable: []bool{true, true, false},
		},
		{
			name: "a path with a space; other files left out", smaps: sample, path: "/usr/lib/other file.so",
			want:      []Mapping{{Start: 0x7f0000000000, End: 0x7f0000021000, Perms: "r--p", Rss: 12}},
			droppable: []bool{true},
		},
		{
			name: "a relocated read-only page (position-independent build): not droppable",
			smaps: `55d0a0000000-55d0a0100000 r--p 00000000 fe:00 7 /opt/m (deleted)
Rss:                 400 kB
Anonymous:             4 kB
55d0a0100000-55d0a0900000 r-xp 00100000 fe:00 7 /opt/m (deleted)
Rss:                 800 kB
Anonymous:             0 kB
`, path: "/opt/m (deleted)",
			want: []Mapping{
				{Start: 0x55d0a0000000, End: 0x55d0a0100000, Perms: "r--p", Rss: 400, Anonymous: 4},
				{Start: 0x55d0a0100000, End: 0x55d0a0900000, Perms: "r-xp", Rss: 800},
			},
			droppable: []bool{false, true},
		},
		{
			name: "a written private copy in a mapping made writable later: not droppable",
			smaps: `00400000-00500000 rwxp 00000000 fe:00 7 /m
Rss:                 100 kB
Anonymous:             0 kB
`, path: "/m",
			want:      []Mapping{{Start: 0x400000, End: 0x500000, Perms: "rwxp", Rss: 100}},
			droppable: []bool{false},
		},
		{
			name: "lines it cannot read are skipped",
			smaps: `zz-00500000 r-xp 00000000 fe:00 7 /m
Rss:                 100 kB
00500000-00400000 r-xp 00000000 fe:00 7 /m
00600000-00700000 r-xp 00000000 fe:00 7 /m
Rss:                 x kB
Rss:                 -3 kB
Anonymous:
`, path: "/m",
			want:      []Mapping{{Start: 0x600000, End: 0x700000, Perms: "r-xp"}},
			droppable: []bool{true},
		},
		{name: "not mapped", smaps: sample, path: "/usr/bin/consul"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Parse([]byte(tc.smaps), tc.path)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("Parse:\n got %+v\nwant %+v", got, tc.want)
			}
			for i, m := range got {
				if m.Droppable() != tc.droppable[i] {
					t.Errorf("%+v: Droppable %v, want %v", m, m.Droppable(), tc.droppable[i])
				}
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(sample), "/usr/bin/mariposa")
	f.Add([]byte("1-2 r-xp 0 0 0 /m\nRss: 4 kB\n"), "/m")
	f.Fuzz(func(t *testing.T, smaps []byte, path string) {
		for _, m := range Parse(smaps, path) {
			if m.End <= m.Start || len(m.Perms) != 4 || m.Rss < 0 || m.Anonymous < 0 {
				t.Fatalf("Parse gave %+v", m)
			}
		}
	})
}

// written is in the test binary's writable data: its page is a private
// copy once written, the file's bytes before.
var written = [8192]byte{0: 1, 4096: 1}

// table is in the binary's read-only data.
var table = strings.Repeat("mariposa ", 1)

func resident(t *testing.T) (droppable, other int64) {
	t.Helper()
	ms, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 {
		t.Fatal("no mapping of the test binary in /proc/self/smaps")
	}
	for _, m := range ms {
		if m.Droppable() {
			droppable += m.Rss
		} else {
			other += m.Rss
		}
	}
	return droppable, other
}

// TestDrop drops the test binary's own pages: the resident pages of its
// code and read-only data go, the program runs on, and what it wrote to
// its data is still there (a mapping with written pages is never dropped:
// with Droppable true for it, written reads back the file's 1s, or the
// runtime's own data is lost first).
func TestDrop(t *testing.T) {
	written[0], written[4096] = 42, 43
	before, _ := resident(t)
	kb, err := Drop()
	if err != nil {
		t.Fatal(err)
	}
	// Reading smaps runs code, which maps pages again at once, whole
	// folios of the page cache (up to half of this small binary).
	after, _ := resident(t)
	t.Logf("resident before %d KB, dropped %d KB, resident after %d KB", before, kb, after)
	if kb < before*4/5 || after > before*4/5 {
		t.Fatalf("dropped %d KB of %d resident, %d KB resident after; want most of it gone", kb, before, after)
	}
	if written[0] != 42 || written[4096] != 43 {
		t.Fatalf("written data changed by the drop: %d %d, want 42 43", written[0], written[4096])
	}
	if table != "mariposa " || len(os.Args) == 0 {
		t.Fatal("read-only data changed by the drop")
	}
}
