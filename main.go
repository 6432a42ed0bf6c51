// Command mariposa is a Consul-native service supervisor.
package main

import (
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/command"
	"github.com/mariposa-sh/mariposa/version"
)

func main() {
	os.Exit(realMain(os.Args[1:]))
}

func realMain(args []string) int {
	// MARIPOSA_CPUPROFILE=file writes a CPU profile of the whole run, for
	// looking into mariposa's own cost (go tool pprof).
	if path := os.Getenv("MARIPOSA_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil {
			if pprof.StartCPUProfile(f) == nil {
				defer func() { pprof.StopCPUProfile(); f.Close() }()
			}
		}
	}
	ui := &cli.BasicUi{Reader: os.Stdin, Writer: os.Stdout, ErrorWriter: os.Stderr}
	c := &cli.CLI{
		Name:         "mariposa",
		Version:      version.String(),
		Args:         args,
		Commands:     command.Commands(ui),
		Autocomplete: false,
		HelpWriter:   os.Stdout,
		ErrorWriter:  os.Stderr,
	}
	code, err := c.Run()
	if err != nil {
		fmt.Fprintf(os.Stderr, "mariposa: %v\n", err)
		return 1
	}
	return code
}
