package command

import (
	"flag"

	"github.com/mitchellh/cli"
)

// parsePaths parses args with fs and returns the PATH arguments. On a bad
// flag, or with no path, it prints why and the help, and ok is false.
func parsePaths(ui cli.Ui, fs *flag.FlagSet, args []string, help, noPaths string) (paths []string, ok bool) {
	if err := fs.Parse(args); err != nil {
		ui.Error(err.Error())
		ui.Error("")
		ui.Error(help)
		return nil, false
	}
	if fs.NArg() == 0 {
		ui.Error(noPaths)
		ui.Error("")
		ui.Error(help)
		return nil, false
	}
	return fs.Args(), true
}
