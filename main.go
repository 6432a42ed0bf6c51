// Command mariposa is a Consul-native service supervisor.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strings"

	"github.com/agext/levenshtein"
	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/command"
	"github.com/mariposa-sh/mariposa/internal/proc"
	"github.com/mariposa-sh/mariposa/version"
)

// The main goroutine stays on the main thread, which forks every child
// (proc.ServeForks) and is the one an upgrade in place re-execs from: a
// child gets its parent-death signal when the thread that forked it ends,
// and an execve ends every thread but its caller.
func init() { runtime.LockOSThread() }

func main() {
	// A supervisor's heap is small and mostly idle. Collecting when it has
	// grown by half rather than doubled (Go's GOGC=100) keeps 1.5-2 MB less
	// resident with 100 idle services, and costs no CPU there: an idle
	// mariposa allocates so little that the runtime's forced collection
	// every two minutes comes first either way. GOGC in the environment
	// still decides.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(50)
	}
	os.Exit(proc.ServeForks(func() int { return realMain(os.Args[1:], os.Stdout, os.Stderr) }))
}

// realMain runs the command line args and returns the exit status.
//
// Usage errors (no command, an unknown one) exit 1 with the command list on
// stderr, like every other usage error of mariposa. mitchellh/cli (and so
// consul and nomad) exits 127 there, which shells reserve for "command not
// found": a script would read it as mariposa missing.
func realMain(args []string, stdout, stderr io.Writer) int {
	// MARIPOSA_CPUPROFILE=file writes a CPU profile of the whole run, for
	// looking into mariposa's own cost (go tool pprof).
	if path := os.Getenv("MARIPOSA_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil {
			if pprof.StartCPUProfile(f) == nil {
				defer func() { pprof.StopCPUProfile(); f.Close() }()
			}
		}
	}
	// Hidden: the running mariposa asks the binary it is about to exec in
	// an upgrade whether it runs here and reads its state.
	if len(args) > 0 && args[0] == "upgrade-preflight" {
		return command.UpgradePreflight(args[1:], stdout, stderr)
	}
	ui := &cli.BasicUi{Reader: os.Stdin, Writer: stdout, ErrorWriter: stderr}
	cmds := withCompletion(command.Commands(ui))
	help := helpFunc(cmds)

	// "mariposa help [COMMAND]" is "mariposa [COMMAND] -h".
	if len(args) > 0 && args[0] == "help" {
		if len(args) > 1 {
			// "mariposa help deploy promote" too.
			args = append(append([]string{}, args[1:]...), "-h")
		} else {
			args = []string{"-h"}
		}
	}
	c := &cli.CLI{
		Name:     "mariposa",
		Version:  version.String(),
		Args:     args,
		Commands: cmds,
		HelpFunc: help,
		// Shell completion (bash, zsh): `mariposa -autocomplete-install`
		// adds `complete -C mariposa mariposa` to the shell's startup
		// files; the shell then runs mariposa with COMP_LINE set, and
		// mitchellh/cli answers with the commands and flags.
		Autocomplete: true,
		HelpWriter:   stdout,
		ErrorWriter:  stderr,
	}
	sub := c.Subcommand()
	switch {
	case os.Getenv("COMP_LINE") != "" || isAutocompleteFlag(args):
		// A completion request or (un)installing completion: the CLI's
		// own business, whatever the arguments look like.
	case len(args) == 0:
		fmt.Fprintln(stderr, help(cmds))
		return 1
	case sub != "" && cmds[sub] == nil:
		fmt.Fprintf(stderr, "mariposa: unknown command %q%s\n\n%s\n", sub, didYouMean(sub, cmds), help(cmds))
		return 1
	case sub == "" && !c.IsHelp() && !c.IsVersion():
		fmt.Fprintf(stderr, "mariposa: no command given (flags go after the command)\n\n%s\n", help(cmds))
		return 1
	}
	code, err := c.Run()
	if err != nil {
		fmt.Fprintf(stderr, "mariposa: %v\n", err)
		return 1
	}
	return code
}

// isAutocompleteFlag reports whether args are -autocomplete-install or
// -autocomplete-uninstall alone.
func isAutocompleteFlag(args []string) bool {
	if len(args) != 1 {
		return false
	}
	switch strings.TrimPrefix(args[0], "-") {
	case "-autocomplete-install", "autocomplete-install", "-autocomplete-uninstall", "autocomplete-uninstall":
		return true
	}
	return false
}

// helpFunc is the command list, with how to get a command's own help. It
// lists every command of all, nested ones too ("deploy promote", "queue
// drop"), whatever map the CLI passes: mitchellh/cli gives the top level
// only, and its BasicHelpFunc would leave the nested ones out.
func helpFunc(all map[string]cli.CommandFactory) cli.HelpFunc {
	return func(map[string]cli.CommandFactory) string {
		names := make([]string, 0, len(all))
		width := 0
		for n := range all {
			names = append(names, n)
			width = max(width, len(n))
		}
		sort.Strings(names)
		var b strings.Builder
		b.WriteString("Usage: mariposa [--version] [--help] <command> [<args>]\n\nAvailable commands are:\n")
		for _, n := range names {
			synopsis := ""
			if c, err := all[n](); err == nil {
				synopsis = c.Synopsis()
			}
			fmt.Fprintf(&b, "    %s%s  %s\n", n, strings.Repeat(" ", width-len(n)), synopsis)
		}
		return b.String() + "\nRun \"mariposa help COMMAND\" (or \"mariposa COMMAND -h\") for a command's options."
	}
}

// didYouMean suggests the command nearest to a typo, or "".
func didYouMean(given string, cmds map[string]cli.CommandFactory) string {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	best, bestDist := "", 3
	for _, n := range names {
		if d := levenshtein.Distance(given, n, nil); d < bestDist {
			best, bestDist = n, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}
