//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// TestClusterWorkedExample runs the worked example of website/cluster.md
// ("## A worked example on one machine") as a user would, and checks that
// they see what the page shows:
//   - its sh block, word for word, starts four Consul agents and three
//     mariposas on their fixed ports (8500-8503, 8301) and addresses
//     (127.0.0.1-4), in namespaces of their own (below);
//   - its hcl block is api.hcl, and the commands of its text blocks ($ ...)
//     run as written, against the default Consul address (the server's,
//     127.0.0.1:8500): deploy prints its line, status its two tables;
//   - each mariposa has its own node API (`mariposa logs -node n2` works)
//     and its own audit file;
//   - kill -9 of n1's mariposa leaves slot 0 free, and `mariposa why api`
//     prints the page's last block.
//
// The namespaces: the shell that runs the sh block is the first process of
// a new network, mount and PID namespace (clone flags, so the test knows
// its PID). In the network namespace only lo exists, so the fixed ports
// cannot meet anything else on the machine; in the mount namespace /tmp is
// a directory of the test's own (the block's /tmp/n1, /tmp/n1.sock stay
// as written, and nothing of an earlier run is there), with consul and
// mariposa in /tmp/.bin first on PATH (bind mounts of the pinned consul
// and of the binary TestMain built: the host's /tmp is out of sight). Every
// later command enters all three with nsenter. Killing that first process
// makes the kernel kill every process of the PID namespace, which takes the
// network namespace with it: the cleanup leaves nothing behind, and neither
// does a crash of the test (the shell gets SIGKILL when the test dies).
func TestClusterWorkedExample(t *testing.T) {
	consultest.SkipShort(t, "the worked example starts four Consul agents and three mariposas")
	requireExampleNamespaces(t)
	consulBin := consultest.RequireBinary(t)
	ex := readWorkedExample(t, "../website/cluster.md")
	ns := startExample(t, consulBin, ex.sh, ex.hcl)

	// The page: "Once `consul catalog nodes -service mariposa` lists n1, n2
	// and n3 (a few seconds), deploy". A deploy before that fails: the
	// units are checked against the live supervisors.
	ns.waitNodes(t)

	// Deploy once, as the page does; its line is exact but for the hash.
	deploy, status, why := ex.steps[0], ex.steps[1], ex.steps[2]
	out, code := ns.run(t, deploy.cmd)
	if code != 0 {
		t.Fatalf("%s: exit %d\n%s", deploy.cmd, code, out)
	}
	if got, want := normalise(lines(out), nil), normalise(deploy.out, nil); !slices.Equal(got, want) {
		t.Fatalf("%s prints:\n%s\nthe page shows:\n%s", deploy.cmd, out, strings.Join(deploy.out, "\n"))
	}

	// The instances start and claim their slots: status shows the page's
	// rows once they have, but for SINCE and the pids.
	expectOutput(t, ns, status, 30*time.Second)

	// Each mariposa has its own node API and audit file (the sh block's
	// -http-addr and -audit-file): `logs -node n2` reaches n2's API (with
	// the default address only the first mariposa to bind had one, and the
	// command failed), and no supervisor writes the default audit.jsonl
	// beside the control sockets, in /tmp for all three.
	if out, code := ns.run(t, "mariposa logs -node n2 api/1"); code != 0 {
		t.Fatalf("mariposa logs -node n2 api/1: exit %d\n%s", code, out)
	}
	if out, code := ns.run(t, "test -s /tmp/n1.audit.jsonl && test -s /tmp/n2.audit.jsonl && test ! -e /tmp/audit.jsonl"); code != 0 {
		t.Fatalf("the audit files: exit %d %s; /tmp has:\n%s", code, out, func() string { o, _ := ns.run(t, "ls -a /tmp"); return o }())
	}

	// kill -9 the mariposa on n1: the one the sh block starts with
	// -control-socket /tmp/n1.sock.
	pid := ns.pidOf(t, []string{"mariposa", "run", "-cluster", "-control-socket", "/tmp/n1.sock",
		"-http-addr", "127.0.0.2:8585", "-audit-file", "/tmp/n1.audit.jsonl"})
	if out, code := ns.run(t, "kill -9 "+strconv.Itoa(pid)); code != 0 {
		t.Fatalf("kill -9 %d: exit %d: %s", pid, code, out)
	}
	// Liveness TTL (3 s), session invalidation, lock delay (1 s): the page's
	// block once slot 0 is free and n1 not live.
	expectOutput(t, ns, why, 30*time.Second)
}

// docStep is one command of a text block ("$ cmd") and the lines it
// prints.
type docStep struct {
	cmd string
	out []string
}

type workedExample struct {
	sh, hcl string
	steps   []docStep // deploy, status, why
}

// readWorkedExample extracts the section's fenced blocks: one sh, one hcl,
// and the text blocks' commands with their output.
func readWorkedExample(t *testing.T, path string) workedExample {
	t.Helper()
	ex := readExampleSection(t, path)
	var cmds []string
	for _, s := range ex.steps {
		cmds = append(cmds, s.cmd)
	}
	if want := []string{"mariposa deploy api.hcl", "mariposa status", "mariposa why api"}; !slices.Equal(cmds, want) {
		t.Fatalf("the worked example's text blocks run %q; this test knows %q (update it with the page)", cmds, want)
	}
	return ex
}

// readExampleSection extracts the blocks of path's section "## A worked
// example on one machine": one sh, one hcl, and the text blocks' commands
// with their output.
func readExampleSection(t *testing.T, path string) workedExample {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const title = "## A worked example on one machine\n"
	md := string(b)
	i := strings.Index(md, title)
	if i < 0 {
		t.Fatalf("%s has no section %q", path, strings.TrimSpace(title))
	}
	md = md[i+len(title):]
	if j := strings.Index(md, "\n## "); j >= 0 {
		md = md[:j+1]
	}
	shs, hcls, texts := exampleBlocks(md, "sh"), exampleBlocks(md, "hcl"), exampleBlocks(md, "text")
	if len(shs) != 1 || len(hcls) != 1 {
		t.Fatalf("the worked example has %d sh and %d hcl blocks, want one of each", len(shs), len(hcls))
	}
	ex := workedExample{sh: shs[0], hcl: hcls[0]}
	for _, text := range texts {
		for _, l := range lines(text) {
			if cmd, ok := strings.CutPrefix(l, "$ "); ok {
				ex.steps = append(ex.steps, docStep{cmd: cmd})
			} else if len(ex.steps) == 0 {
				t.Fatalf("a text block of the worked example starts with output, not a command: %q", l)
			} else {
				s := &ex.steps[len(ex.steps)-1]
				s.out = append(s.out, l)
			}
		}
	}
	return ex
}

// exampleBlocks returns the bodies of md's ``` blocks of lang, in order (as
// command/docs_test.go's fencedBlocks).
func exampleBlocks(md, lang string) []string {
	var bodies []string
	open := "```" + lang + "\n"
	for {
		i := strings.Index(md, open)
		if i < 0 {
			return bodies
		}
		md = md[i+len(open):]
		j := strings.Index(md, "```")
		if j < 0 {
			return bodies
		}
		bodies = append(bodies, md[:j])
		md = md[j+3:]
	}
}

// lines splits output into lines, without the trailing empty one.
func lines(s string) []string {
	return strings.Split(strings.TrimRight(s, "\n"), "\n")
}

// requireExampleNamespaces: root, the tools the namespaces and the example
// need (util-linux's nsenter and mount, iproute2's ip, python3 which the
// example serves with), and a kernel that lets us create the namespaces.
// Missing, the test is skipped on a developer's machine and fails in CI.
func requireExampleNamespaces(t *testing.T) {
	t.Helper()
	consultest.Require(t, os.Geteuid() == 0, "the worked example runs in network, mount and PID namespaces of its own: it needs root")
	var missing []string
	for _, tool := range []struct{ name, pkg string }{
		{"bash", "bash"}, {"sh", "dash"}, {"nsenter", "util-linux"}, {"mount", "mount"}, {"ip", "iproute2"},
		{"python3", "python3: the example serves with python3 -m http.server"},
	} {
		if _, err := exec.LookPath(tool.name); err != nil {
			missing = append(missing, fmt.Sprintf("%s (Debian package %s)", tool.name, tool.pkg))
		}
	}
	consultest.Require(t, len(missing) == 0, "the worked example needs "+strings.Join(missing, ", "))
	probe := exec.Command("true")
	probe.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID}
	err := probe.Run()
	consultest.Require(t, err == nil, fmt.Sprintf("the worked example cannot create network, mount and PID namespaces here: %v", err))
}

// exampleNS is the worked example's running shell and its namespaces.
type exampleNS struct {
	pid  int // the shell's, on the host; 1 inside
	work string
	env  []string
}

// startExample runs the sh block in new namespaces, with hcl as
// /tmp/.work/api.hcl and /tmp/.work the working directory of everything.
func startExample(t *testing.T, consulBin, sh, hcl string) *exampleNS {
	t.Helper()
	return startExampleAs(t, consulBin, sh, "api.hcl", hcl)
}

// startExampleAs is startExample with the hcl file named name.
func startExampleAs(t *testing.T, consulBin, sh, name, hcl string) *exampleNS {
	t.Helper()
	root := t.TempDir()
	tmp := filepath.Join(root, "tmp") // /tmp in the namespace
	for _, d := range []string{".bin", ".work"} {
		if err := os.MkdirAll(filepath.Join(tmp, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{".bin/consul", ".bin/mariposa"} {
		touch(t, filepath.Join(tmp, f)) // mount points
	}
	if err := os.WriteFile(filepath.Join(tmp, ".work", name), []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	// A user's environment: no Consul address or token, no mariposa
	// socket of the test's; PATH with consul and mariposa first.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CONSUL_") && !strings.HasPrefix(kv, "MARIPOSA_") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH=/tmp/.bin:"+os.Getenv("PATH"))
	// The shell, as PID 1: private mounts (nothing propagates to the host),
	// its own /proc, the test's /tmp, lo up; then the page's block, and
	// wait for what it started.
	script := `set -eu
mount --make-rprivate /
mount -t proc proc /proc
mount --bind "$EXAMPLE_CONSUL" "$EXAMPLE_TMP/.bin/consul"
mount --bind "$EXAMPLE_MARIPOSA" "$EXAMPLE_TMP/.bin/mariposa"
mount --rbind "$EXAMPLE_TMP" /tmp
unset EXAMPLE_CONSUL EXAMPLE_MARIPOSA EXAMPLE_TMP
ip link set lo up
cd /tmp/.work
set +eu
# website/cluster.md's worked example, word for word:
` + sh + `
wait
`
	logPath := filepath.Join(root, "example.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(slices.Clone(env), "EXAMPLE_CONSUL="+consulBin, "EXAMPLE_MARIPOSA="+mariposaBin, "EXAMPLE_TMP="+tmp)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID,
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the example's namespaces: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	netns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid))
	t.Cleanup(func() {
		// PID 1 gone, the kernel kills the rest of the namespace; Wait
		// returns once it is empty.
		_ = cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("the example's namespace did not end within 30s of killing its first process")
		}
		// Nothing is left in the network namespace, so it is gone.
		if left := inNamespace("net", netns); netns != "" && len(left) > 0 {
			t.Errorf("processes left in the example's network namespace %s: %v", netns, left)
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			ls := lines(string(b))
			if len(ls) > 200 {
				ls = ls[len(ls)-200:]
			}
			t.Logf("the example's output (last %d lines):\n%s", len(ls), strings.Join(ls, "\n"))
		}
	})
	ns := &exampleNS{pid: cmd.Process.Pid, work: "/tmp/.work", env: env}
	// Up once the shell has mounted /tmp (or died trying).
	waitFor(t, 10*time.Second, "the example's namespace", func() (bool, string) {
		select {
		case <-done:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("the example's shell exited: %s", b)
		default:
		}
		out, code := ns.run(t, "test -f "+name+" && ip -brief link show lo")
		return code == 0 && strings.Contains(out, "UP"), out
	})
	return ns
}

// waitNodes waits, as the worked examples tell the user to, until
// `consul catalog nodes -service mariposa` lists n1, n2 and n3.
func (ns *exampleNS) waitNodes(t *testing.T) {
	t.Helper()
	waitFor(t, 60*time.Second, "consul catalog nodes -service mariposa to list n1, n2 and n3", func() (bool, string) {
		out, code := ns.run(t, "consul catalog nodes -service mariposa")
		if code != 0 {
			return false, out
		}
		var nodes []string
		for _, l := range lines(out)[1:] {
			if f := strings.Fields(l); len(f) > 0 {
				nodes = append(nodes, f[0])
			}
		}
		return slices.Equal(nodes, []string{"n1", "n2", "n3"}), out
	})
}

// run runs a shell command line in the namespaces, in the working
// directory, and returns its output (stdout and stderr) and exit code.
func (ns *exampleNS) run(t *testing.T, line string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", "--target", strconv.Itoa(ns.pid), "--net", "--mount", "--pid", "--",
		"bash", "-c", "cd "+ns.work+" && "+line)
	cmd.Env = ns.env
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	case err != nil:
		t.Fatalf("nsenter %s: %v\n%s", line, err, out)
	}
	return string(out), 0
}

// pidOf returns the PID, inside the namespace, of its one process whose
// command line is argv: found from the host's /proc (the processes whose
// PID namespace is the shell's; the last NSpid is the PID inside), so that
// the kill, run inside, names the right one.
func (ns *exampleNS) pidOf(t *testing.T, argv []string) int {
	t.Helper()
	mine, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", ns.pid))
	if err != nil {
		t.Fatal(err)
	}
	var found []int
	for _, pid := range inNamespace("pid", mine) {
		dir := filepath.Join("/proc", strconv.Itoa(pid))
		b, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil || !slices.Equal(strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00"), argv) {
			continue
		}
		st, err := os.ReadFile(filepath.Join(dir, "status"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(st))
		for sc.Scan() {
			if f, ok := strings.CutPrefix(sc.Text(), "NSpid:"); ok {
				ids := strings.Fields(f)
				if n, err := strconv.Atoi(ids[len(ids)-1]); err == nil {
					found = append(found, n)
				}
			}
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one process %q in the example's namespace, found %v", argv, found)
	}
	return found[0]
}

// expectOutput waits until the step's command prints what the page shows,
// as normalise compares it.
func expectOutput(t *testing.T, ns *exampleNS, s docStep, timeout time.Duration) {
	t.Helper()
	want := normalise(s.out, nil)
	waitFor(t, timeout, fmt.Sprintf("%q to print the page's output:\n%s\n", s.cmd, strings.Join(s.out, "\n")), func() (bool, string) {
		out, code := ns.run(t, s.cmd)
		got := normalise(lines(out), s.out)
		if code != 0 || !slices.Equal(got, want) {
			return false, fmt.Sprintf("exit %d:\n%s\nas data:\n%s\nthe page, as data:\n%s",
				code, out, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		return true, ""
	})
}

var (
	// A spec hash, in full (24 hex digits) or as the page abbreviates it.
	hashRE = regexp.MustCompile(`\(([0-9a-f]{24}|[0-9a-f]+…)\)`)
	// An RFC 3339 time, as in "held by n2 since 2026-11-23T10:00:00Z".
	timeRE = regexp.MustCompile(`\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)`)
	pidRE  = regexp.MustCompile(`\bpid \d+\b`)
	// A SINCE cell: "12s ago", "3m ago", "1h2m ago".
	agoRE = regexp.MustCompile(`^([0-9]+[a-zµ]+)+ ago$`)
	// A table header: two or more upper-case names (or the page's "…"),
	// two or more spaces apart.
	headerRE = regexp.MustCompile(`^ *([A-Z][A-Z_-]*|…)( {2,}([A-Z][A-Z_-]*|…))+$`)
)

// normalise turns output into lines as data, so that the page and the real
// output compare line for line:
//   - what changes from run to run is replaced: the spec hash (the page
//     abbreviates it, "3c1f…"), times ("since 2026-…Z"), pids, SINCE
//     cells ("12s ago");
//   - a table (a header line of upper-case column names and the rows under
//     it, up to a blank line or a line indented less) becomes one line per
//     row of its cells, "a | b | c", cut at the header's column starts: the
//     widths of the columns, which follow the widest cell, do not matter,
//     what each cell holds does;
//   - the page may elide columns with "…" in a header ("TOTAL  …
//     VERDICT"): where page (the page's lines, nil for the page itself)
//     has such a header for the same table (the n-th of each), the real
//     header must have the page's columns before and after the "…", and at
//     least one between; those between become one "…" column whose cells
//     are not compared ("…" on both sides). The page leaves the scores
//     out, never a name, a rank or a verdict.
func normalise(out, page []string) []string {
	var elided [][]string // the page's headers, in order
	for _, l := range page {
		if headerRE.MatchString(l) {
			elided = append(elided, strings.Fields(l))
		}
	}
	var res []string
	tables := 0
	for i := 0; i < len(out); i++ {
		l := out[i]
		if !headerRE.MatchString(l) {
			l = hashRE.ReplaceAllString(l, "(<hash>)")
			l = timeRE.ReplaceAllString(l, "<time>")
			l = deployAgoRE.ReplaceAllString(l, "$1 <ago>")
			res = append(res, pidRE.ReplaceAllString(l, "pid <pid>"))
			continue
		}
		cols := columns(l)
		names := make([]string, len(cols))
		for k, c := range cols {
			names[k] = c.name
		}
		var pageNames []string
		if tables < len(elided) {
			pageNames = elided[tables]
		}
		tables++
		// keep[k]: column k is compared; group[k]: its place in the
		// normalised row (columns the page elides share one).
		keep, group, shown := elide(names, pageNames)
		row := func(cells []string) string {
			var data []string
			for k, c := range cells {
				if k > 0 && group[k] == group[k-1] {
					continue
				}
				if !keep[k] {
					c = "…"
				}
				data = append(data, c)
			}
			return strings.Join(data, " | ")
		}
		res = append(res, strings.Join(shown, " | "))
		indent := len(l) - len(strings.TrimLeft(l, " "))
		for i+1 < len(out) {
			r := out[i+1]
			if strings.TrimSpace(r) == "" || len(r)-len(strings.TrimLeft(r, " ")) < indent {
				break
			}
			i++
			cells := cut(r, cols)
			for k, c := range cells {
				switch {
				case names[k] == "SINCE" && agoRE.MatchString(c):
					cells[k] = "<ago>"
				default:
					c = timeRE.ReplaceAllString(c, "<time>")
					cells[k] = pidRE.ReplaceAllString(c, "pid <pid>")
				}
			}
			res = append(res, row(cells))
		}
	}
	return res
}

type column struct {
	name  string
	start int // in runes: the page's "…" is one column wide
}

// columns returns the names of a header line and where each starts.
// deployAgoRE is a deployment's age in status: "successful 20s ago",
// "running for 3s".
var deployAgoRE = regexp.MustCompile(`\b(successful|failed|cancelled|running for) (\d+[hms])+( ago)?`)

func columns(header string) []column {
	var cols []column
	rs := []rune(header)
	for k := 0; k < len(rs); k++ {
		if rs[k] != ' ' && (k == 0 || rs[k-1] == ' ') {
			end := k
			for end < len(rs) && rs[end] != ' ' {
				end++
			}
			cols = append(cols, column{name: string(rs[k:end]), start: k})
			k = end
		}
	}
	return cols
}

// cut splits a table row at the columns' starts; the last cell runs to the
// end of the line.
func cut(row string, cols []column) []string {
	rs := []rune(row)
	cells := make([]string, len(cols))
	for k, c := range cols {
		end := len(rs)
		if k+1 < len(cols) {
			end = min(end, cols[k+1].start)
		}
		if c.start < end {
			cells[k] = strings.TrimSpace(string(rs[c.start:end]))
		}
	}
	return cells
}

// elide matches a real header's names to the page's: with a "…" in the
// page's, the names it stands for (one or more) are one elided group; the
// normalised header is the page's then. Without one, or when the names do
// not fit around it, every column is kept, and the comparison shows the
// difference.
func elide(names, page []string) (keep []bool, group []int, shown []string) {
	keep, group = make([]bool, len(names)), make([]int, len(names))
	for k, n := range names {
		// The page's own "…" column: its cells are not compared.
		keep[k], group[k] = n != "…", k
	}
	shown = slices.Clone(names)
	dot := slices.Index(page, "…")
	if dot < 0 {
		return keep, group, shown
	}
	before, after := page[:dot], page[dot+1:]
	if len(names) < len(before)+len(after)+1 ||
		!slices.Equal(names[:len(before)], before) ||
		!slices.Equal(names[len(names)-len(after):], after) {
		return keep, group, shown
	}
	for k := len(before); k < len(names)-len(after); k++ {
		keep[k], group[k] = false, len(before)
	}
	return keep, group, slices.Clone(page)
}

// inNamespace returns the host PIDs of the processes in namespace ns (a
// /proc/PID/ns/KIND link, "net:[4026532]") of kind.
func inNamespace(kind, ns string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, kind)); err == nil && l == ns {
			pids = append(pids, pid)
		}
	}
	return pids
}
