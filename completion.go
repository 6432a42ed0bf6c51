package main

import (
	"regexp"
	"strings"

	"github.com/mitchellh/cli"
	"github.com/posener/complete"
)

// withCompletion makes every command complete its flags and arguments in
// bash and zsh. Both come from the command's own help, so completion knows
// every flag the help documents and no other: flags from its indented
// "-name" lines, file arguments from a PATH or FILE in its Usage line.
func withCompletion(cmds map[string]cli.CommandFactory) map[string]cli.CommandFactory {
	out := make(map[string]cli.CommandFactory, len(cmds))
	for name, f := range cmds {
		out[name] = func() (cli.Command, error) {
			c, err := f()
			if err != nil {
				return nil, err
			}
			return &completingCommand{Command: c}, nil
		}
	}
	return out
}

type completingCommand struct {
	cli.Command
}

// flagLine is a help line documenting a flag: "  -token-file=PATH ...",
// "  -dev  ...", "  -ca-file, -ca-path ...".
var flagLine = regexp.MustCompile(`^\s{2,}(-[a-z][a-z0-9-]*)((?:[=\s][A-Z]+\b)?)`)

func (c *completingCommand) AutocompleteFlags() complete.Flags {
	flags := complete.Flags{}
	for _, line := range strings.Split(c.Help(), "\n") {
		m := flagLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var p complete.Predictor = complete.PredictNothing
		switch v := strings.TrimLeft(m[2], "= "); {
		case strings.Contains(v, "FILE") || strings.Contains(v, "PATH"):
			p = complete.PredictFiles("*")
		case v != "":
			p = complete.PredictAnything
		}
		flags[m[1]] = p
	}
	return flags
}

func (c *completingCommand) AutocompleteArgs() complete.Predictor {
	for _, line := range strings.Split(c.Help(), "\n") {
		if strings.Contains(line, "mariposa ") && (strings.Contains(line, "PATH") || strings.Contains(line, "FILE")) {
			return complete.PredictFiles("*.hcl") // and directories, to walk into
		}
	}
	return complete.PredictNothing
}
