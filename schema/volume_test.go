package schema

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// defaultVolume is a Volume named name with every default applied.
func defaultVolume(name string) Volume {
	return Volume{
		Name:           name,
		Path:           name,
		Handoff:        HandoffNone,
		Interval:       5 * time.Minute,
		RestoreTimeout: 10 * time.Minute,
		OnMissing:      OnMissingLatest,
	}
}

// TestVolumeDecoded decodes one volume block per case, inside an exclusive
// service with count = 1, and compares every field but Pos.
func TestVolumeDecoded(t *testing.T) {
	with := func(name string, f func(v *Volume)) Volume {
		v := defaultVolume(name)
		f(&v)
		return v
	}
	tests := []struct {
		name  string
		block string
		want  Volume
	}{
		{"defaults", `volume "data" {}`, defaultVolume("data")},
		{"dashes and digits", `volume "pg-16_data" {}`, defaultVolume("pg-16_data")},
		{"path", `volume "data" {
    path = "redis.v2"
  }`, with("data", func(v *Volume) { v.Path = "redis.v2" })},
		{"sticky", `volume "data" {
    handoff = "sticky"
  }`, with("data", func(v *Volume) { v.Handoff = HandoffSticky })},
		{"explicit none", `volume "data" {
    handoff  = "none"
    replicas = 0
  }`, defaultVolume("data")},
		{"snapshot defaults", `volume "data" {
    handoff = "snapshot"
  }`, with("data", func(v *Volume) { v.Handoff = HandoffSnapshot })},
		{"every field", `volume "data" {
    path            = "db"
    handoff         = "snapshot"
    snapshot        = ["sqlite3", "app.db", ".backup snapshot.db"]
    restore         = ["mv", "snapshot.db", "app.db"]
    replicas        = 2
    interval        = "1m30s"
    restore_timeout = "1h"
    on_missing      = "fail"
  }`, Volume{
			Name:           "data",
			Path:           "db",
			Handoff:        HandoffSnapshot,
			Snapshot:       []string{"sqlite3", "app.db", ".backup snapshot.db"},
			Restore:        []string{"mv", "snapshot.db", "app.db"},
			Replicas:       2,
			Interval:       90 * time.Second,
			RestoreTimeout: time.Hour,
			OnMissing:      OnMissingFail,
		}},
		{"on_missing empty", `volume "cache" {
    handoff    = "snapshot"
    on_missing = "empty"
  }`, with("cache", func(v *Volume) { v.Handoff, v.OnMissing = HandoffSnapshot, OnMissingEmpty })},
		{"on_missing latest, replicas from a variable", `volume "data" {
    handoff    = "snapshot"
    replicas   = var.copies
    on_missing = "latest"
  }`, with("data", func(v *Volume) { v.Handoff, v.Replicas = HandoffSnapshot, 3 })},
		{"numbers and strings convert", `volume "data" {
    path     = 7
    handoff  = "snapshot"
    replicas = "1"
  }`, with("data", func(v *Volume) { v.Path, v.Handoff, v.Replicas = "7", HandoffSnapshot, 1 })},
		{"null is unset", `volume "data" {
    path    = null
    handoff = null
  }`, defaultVolume("data")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "variable \"copies\" {\n  default = 3\n}\n\nservice \"s\" {\n  command   = [\"s\"]\n  count     = 1\n  exclusive = true\n\n  " + tt.block + "\n}\n"
			cfg, diags := loadSrc(t, t.TempDir(), src, LoadOptions{Environ: []string{}})
			if cfg == nil || diags.Len() > 0 {
				t.Fatalf("diagnostics:\n%s", diags.Error())
			}
			vols := cfg.Service("s").Placement.Volumes
			if len(vols) != 1 {
				t.Fatalf("%d volumes", len(vols))
			}
			got := *vols[0]
			if !strings.HasSuffix(got.Pos, "main.hcl:10:3") {
				t.Errorf("Pos = %q", got.Pos)
			}
			got.Pos = ""
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestVolumeFixture checks testdata/valid/volumes.hcl: several volumes of
// a service in order, and a group's volumes on the Placement every member
// shares.
func TestVolumeFixture(t *testing.T) {
	const file = "testdata/valid/volumes.hcl"
	cfg := mustLoad(t, LoadOptions{}, file)
	cache := cfg.Service("cache").Placement
	if cache == nil || len(cache.Volumes) != 2 {
		t.Fatalf("cache placement %s", dumpPlacement(cache))
	}
	want := Volume{
		Name:           "data",
		Path:           "redis-data",
		Handoff:        HandoffSnapshot,
		Snapshot:       []string{"/srv/cache/bin/dump", "--to", "dump.rdb"},
		Restore:        []string{"/srv/cache/bin/load", "dump.rdb"},
		Replicas:       2,
		Interval:       time.Minute,
		RestoreTimeout: 30 * time.Minute,
		OnMissing:      OnMissingFail,
		Pos:            file + ":8:3",
	}
	if !reflect.DeepEqual(*cache.Volumes[0], want) {
		t.Errorf("data = %+v\nwant   %+v", *cache.Volumes[0], want)
	}
	scratch := defaultVolume("scratch-space")
	scratch.Pos = file + ":19:3"
	if !reflect.DeepEqual(*cache.Volumes[1], scratch) {
		t.Errorf("scratch-space = %+v", *cache.Volumes[1])
	}
	if got := cache.Volumes[1].EnvName(); got != "MARIPOSA_VOLUME_SCRATCH_SPACE" {
		t.Errorf("EnvName = %q", got)
	}
	if cache.Reschedule.NodeLostAfter != time.Minute || !cache.Exclusive {
		t.Errorf("cache placement %s", dumpPlacement(cache))
	}

	var g *Group
	for _, x := range cfg.Groups {
		if x.Name == "wiki" {
			g = x
		}
	}
	if g == nil || g.Placement == nil || len(g.Placement.Volumes) != 1 {
		t.Fatalf("group wiki: %+v", g)
	}
	pages := defaultVolume("pages")
	pages.Handoff, pages.Pos = HandoffSticky, file+":30:3"
	if !reflect.DeepEqual(*g.Placement.Volumes[0], pages) {
		t.Errorf("pages = %+v", *g.Placement.Volumes[0])
	}
	for _, m := range []string{"wiki", "wiki-indexer"} {
		if cfg.Service(m).Placement != g.Placement {
			t.Errorf("%s does not share the group's Placement, and its volumes", m)
		}
	}
}

func TestVolumeEnvName(t *testing.T) {
	for name, want := range map[string]string{
		"data":       "MARIPOSA_VOLUME_DATA",
		"Data":       "MARIPOSA_VOLUME_DATA",
		"pg-16_wal":  "MARIPOSA_VOLUME_PG_16_WAL",
		"0":          "MARIPOSA_VOLUME_0",
		"-x-":        "MARIPOSA_VOLUME__X_",
		"web__cache": "MARIPOSA_VOLUME_WEB__CACHE",
	} {
		if got := VolumeEnvName(name); got != want {
			t.Errorf("VolumeEnvName(%q) = %q, want %q", name, got, want)
		}
		if !envName.MatchString(VolumeEnvName(name)) {
			t.Errorf("VolumeEnvName(%q) is not an environment variable name", name)
		}
	}
}

// TestVolumeJSON: a Placement without volumes encodes as before volumes
// existed, so the hashes of deployed specs do not change.
func TestVolumeJSON(t *testing.T) {
	b, err := json.Marshal(defaultPlacement())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "Volume") {
		t.Errorf("a Placement without volumes encodes them: %s", b)
	}
	p := defaultPlacement()
	v := defaultVolume("data")
	p.Volumes = []*Volume{&v}
	b, _ = json.Marshal(p)
	var back Placement
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(&back, p) {
		t.Errorf("round trip: %+v, %v", back, err)
	}
}

// TestVolumeDetails checks what the volume diagnostics say and where,
// beyond their summaries (which testdata/invalid/volume.hcl checks).
func TestVolumeDetails(t *testing.T) {
	tests := []struct {
		body string // inside service "s" { command = ["s"] count = 1 ... } from line 4
		want string // in the diagnostics' text, which starts with file:line:col
	}{
		{`volume "data" {
    handoff = "snapshto"
  }`, `main.hcl:5:15: Invalid handoff; "snapshto" is not valid for "handoff"; use "none", "sticky" or "snapshot". Did you mean "snapshot"?`},
		{`volume "data" {
    handoff = "stiky"
  }`, `Did you mean "sticky"?`},
		{`volume "data" {
    handoff    = "snapshot"
    on_missing = "emtpy"
  }`, `main.hcl:6:18: Invalid on_missing; "emtpy" is not valid for "on_missing"; use "latest", "empty" or "fail". Did you mean "empty"?`},
		{`volume "data" {
    handof = "sticky"
  }`, `Did you mean "handoff"?`},
		{`volume "data" {
    restore_timout = "1m"
  }`, `Did you mean "restore_timeout"?`},
		{`volumes "data" {}`, `Did you mean "volume"?`},
		{`volume "data" {
    path = "a/./b"
  }`, `main.hcl:5:12: Invalid volume path; path is the name of the volume's directory in the slot's directory, which mariposa owns, copies and moves: a volume is one directory of the slot, so path is a single name, without "/", and "a/./b" is not. Write one name such as "a-b".`},
		{`volume "data" {
    path = "x/.."
  }`, `and "x/.." is not. Write one name.`},
		{`volume "data" {
    path = "/srv/data"
  }`, `it is relative, and "/srv/data" is absolute. Write a name such as "data".`},
		{`volume "data" {
    path = ".copies"
  }`, `".copies" starts with ".", and those names are mariposa's own (the slot's snapshots and received copies).`},
		{`volume "data" {
    path = "a.restore-7"
  }`, `"a.restore-7" ends in ".aside" or contains ".restore-", the names mariposa gives a volume's directory while it restores one.`},
		{`volume "data" {
    path = "a:b"
  }`, `"a:b" has characters other than letters, digits, "-", "_" and ".".`},
		{`volume "data" {
    path = "` + strings.Repeat("x", 201) + `"
  }`, `it is at most 200 bytes long, and has 201.`},
		{`volume "a" {}
  volume "b" {
    path = "a"
  }`, `main.hcl:6:12: Duplicate volume path; Volume "b" has the same path, "a", as volume "a" at `},
		{`volume "web-cache" {}
  volume "Web_Cache" {}`, `main.hcl:5:10: Duplicate volume variable; Volume "Web_Cache" would give the instance the same variable, MARIPOSA_VOLUME_WEB_CACHE, as volume "web-cache" at `},
		{`volume "data" {}
  volume "data" {}`, `main.hcl:5:10: Duplicate volume; service "s" already has a volume "data" at `},
		{`volume "` + strings.Repeat("x", 64) + `" {}`, `use at most 63 letters, digits, underscores or dashes`},
		{`volume "data" {
    handoff = "snapshot"
  }`, `main.hcl:5:15: Snapshot handoff without exclusive; handoff = "snapshot" moves volume "data" with its slot`},
		{`volume "data" {
    handoff = "snapshot"
  }`, `With exclusive = false (the default), a cut-off node would keep writing while the next holder restores an older copy, and one of the two would be lost. Add exclusive = true to service "s", or use handoff = "sticky"`},
		{`exclusive = false
  volume "data" {
    handoff = "snapshot"
  }`, `With exclusive = false, a cut-off node`},
		{`volume "data" {
    replicas = 1
  }`, `main.hcl:5:5: replicas without snapshot handoff; replicas only applies when volume "data" moves with its slot, with handoff = "snapshot"; handoff is "none", the default, so no copy of the data is ever pushed to other nodes. Set handoff = "snapshot", or remove replicas.`},
		{`volume "data" {
    handoff  = "sticky"
    snapshot = ["dump"]
  }`, `handoff is "sticky", so no copy of the data is ever taken.`},
		{`exclusive = true
  volume "data" {
    handoff  = "snapshot"
    replicas = 10001
  }`, `replicas is how many other nodes receive a periodic copy of volume "data", from 0 (the default: none) to 10000; got 10001.`},
		{`exclusive = true
  volume "data" {
    handoff  = "snapshot"
    interval = "0s"
  }`, `it must be more than zero (the default is "5m").`},
		{`exclusive = true
  volume "data" {
    handoff         = "snapshot"
    restore_timeout = "0s"
  }`, `it must be more than zero (the default is "10m").`},
		{`exclusive = true
  volume "data" {
    handoff  = "snapshot"
    snapshot = ["", "x"]
  }`, `The snapshot command of volume "data" needs a program to run`},
		{`exclusive = true
  volume "data" {
    handoff = "snapshot"
    restore = "load"
  }`, `Inappropriate value for attribute "restore": list of strings required.`},
	}
	for _, tt := range tests {
		src := "service \"s\" {\n  command = [\"s\"]\n  count   = 1\n  " + tt.body + "\n}\n"
		_, diags := loadSrc(t, t.TempDir(), src, LoadOptions{Environ: []string{}})
		if !diags.HasErrors() {
			t.Errorf("%s: no error", tt.body)
			continue
		}
		if !strings.Contains(diags.Error(), tt.want) {
			t.Errorf("%s: diagnostics lack %q:\n%s", tt.body, tt.want, diags.Error())
		}
	}

	// Without count: one error, at the first volume, and none of the
	// volumes is lost on the way.
	_, diags := loadSrc(t, t.TempDir(), `service "s" {
  command = ["s"]

  volume "a" {}
  volume "b" {
    handoff = "nope"
  }
}
`, LoadOptions{Environ: []string{}})
	got := summaries(diags)
	if want := []string{"Volume without count", "Invalid handoff"}; !reflect.DeepEqual(got, want) {
		t.Errorf("summaries %q, want %q", got, want)
	}
	if all := diags.All(); len(all) == 0 || all[0].Range.Start.Line != 4 ||
		!strings.Contains(all[0].Detail, `Add count = N to service "s" (count = 1 for a single instance)`) {
		t.Errorf("diagnostics %+v", all)
	}

	// A member's volume belongs on its group.
	_, diags = loadSrc(t, t.TempDir(), `group "g" {
  count = 1

  service "s" {
    command = ["s"]

    volume "data" {}
  }
}
`, LoadOptions{Environ: []string{}})
	if !strings.Contains(diags.Error(), `main.hcl:7:5: Volume on a group member; Service "s" is a member of group "g", whose services share the group's slots: a volume belongs to the slot. Declare volume "data" on group "g" instead`) {
		t.Errorf("diagnostics:\n%s", diags.Error())
	}

	// An exclusive argument that is invalid is reported, and only once.
	_, diags = loadSrc(t, t.TempDir(), `service "s" {
  command   = ["s"]
  count     = 1
  exclusive = "maybe"

  volume "data" {
    handoff = "snapshot"
  }
}
`, LoadOptions{Environ: []string{}})
	if got := summaries(diags); len(got) != 1 || got[0] == "Snapshot handoff without exclusive" {
		t.Errorf("summaries %q", got)
	}
}

func TestVolumeWarnings(t *testing.T) {
	for _, tt := range []struct {
		body string
		want []string
	}{
		{`handoff  = "snapshot"
    interval = "1m"`, []string{"interval not used"}},
		{`handoff  = "snapshot"
    replicas = 0
    interval = "1m"`, []string{"interval not used"}},
		{`handoff  = "snapshot"
    replicas = 1
    interval = "1m"`, nil},
		{`handoff = "snapshot"`, nil},
	} {
		src := "service \"s\" {\n  command   = [\"s\"]\n  count     = 1\n  exclusive = true\n\n  volume \"data\" {\n    " + tt.body + "\n  }\n}\n"
		cfg, diags := loadSrc(t, t.TempDir(), src, LoadOptions{Environ: []string{}})
		if cfg == nil {
			t.Errorf("%q: %s", tt.body, diags.Error())
			continue
		}
		var got []string
		for _, d := range diags.All() {
			got = append(got, d.Summary)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%q: warnings %q, want %q", tt.body, got, tt.want)
		}
	}
}
