package main

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const modulePath = "github.com/mariposa-sh/mariposa"

// layer orders the packages: a package may import only packages of a lower
// layer; within a layer, only the leaves (internal/*) and the fleet's parts
// import each other. Imports point down, never back up (DEVELOPERS.md,
// "Layout").
//
//	90 main, tools (mangen reads the commands' help)
//	80 command
//	70 adapters over the supervisor and the fleet: nodeapi, metrics, coord
//	65 fleet/sim/cmd/sim (make sim)
//	60 fleet/sim (the simulator drives the agent over the model)
//	55 cluster/plan (what deploying a spec would change: mariposa plan)
//	50 the fleet: cluster (the KV layout, its codecs, the CLI's reads and
//	   writes), fleet/agent, fleet/consulmodel, fleet/executor (the agent
//	   run against Consul); never imported by the supervisor
//	45 fleet/placement (pure placement: imports schema alone, never the KV
//	   layout)
//	40 supervisor
//	30 checks, render
//	20 schema
//	 0 leaves: internal/*, version, docs
func layer(pkg string) int {
	switch {
	case pkg == "", strings.HasPrefix(pkg, "tools/"):
		return 90
	case pkg == "command":
		return 80
	case pkg == "nodeapi", pkg == "metrics", pkg == "coord":
		return 70
	case pkg == "cluster/plan":
		return 55
	case strings.HasPrefix(pkg, "fleet/sim/cmd/"):
		return 65
	case pkg == "fleet/sim":
		return 60
	case pkg == "fleet/placement":
		return 45
	case pkg == "cluster", strings.HasPrefix(pkg, "fleet/"):
		return 50
	case pkg == "supervisor":
		return 40
	case pkg == "checks", pkg == "render":
		return 30
	case pkg == "schema":
		return 20
	case strings.HasPrefix(pkg, "internal/"), pkg == "version", pkg == "docs":
		return 0
	}
	return -1
}

// TestImportsPointDown reads the imports of every non-test Go file of the
// module and fails on one that points up or sideways across layers: a
// leaf in internal/ that imports the supervisor, the supervisor importing
// the fleet, an adapter imported from below.
func TestImportsPointDown(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "testdata", "node_modules", "bin", "e2e", "website":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(path))
		if pkg == "." {
			pkg = ""
		}
		from := layer(pkg)
		if from < 0 {
			t.Errorf("%s: package %q has no layer: add it to layer() in layout_test.go", path, pkg)
			return nil
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p != modulePath && !strings.HasPrefix(p, modulePath+"/") {
				continue
			}
			to := strings.TrimPrefix(strings.TrimPrefix(p, modulePath), "/")
			checked++
			tl := layer(to)
			if tl < 0 {
				t.Errorf("%s imports %q, which has no layer", path, to)
				continue
			}
			// Within a layer only the leaves and the fleet's own parts
			// may import each other (internal/leader uses internal/lease;
			// the agent uses cluster's codecs).
			if tl > from || (tl == from && from != 0 && from != 50) {
				t.Errorf("%s (layer %d) imports %s (layer %d): imports point down", path, from, to, tl)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("only %d imports of the module's own packages read: the walk is broken", checked)
	}
}

func TestLayerOfEveryRule(t *testing.T) {
	for pkg, want := range map[string]int{
		"internal/proc": 0, "schema": 20, "render": 30, "supervisor": 40, "cluster": 50, "cluster/plan": 55, "fleet/agent": 50, "fleet/executor": 50, "fleet/placement": 45,
		"fleet/sim": 60, "fleet/sim/cmd/sim": 65, "nodeapi": 70, "command": 80, "": 90, "tools/mangen": 90, "somethingnew": -1,
	} {
		if got := layer(pkg); got != want {
			t.Errorf("layer(%q) = %d, want %d", pkg, got, want)
		}
	}
}
