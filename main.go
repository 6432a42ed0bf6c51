// Command mariposa is a Consul-native service supervisor.
package main

import (
	"fmt"
	"os"

	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/command"
	"github.com/mariposa-sh/mariposa/version"
)

func main() {
	os.Exit(realMain(os.Args[1:]))
}

func realMain(args []string) int {
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
