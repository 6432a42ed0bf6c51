package command

import (
	"flag"

	"github.com/mitchellh/cli"
)

// parsePaths parses args with fs and returns the PATH arguments. On a bad
// flag, or with no path, it prints why and the help, and ok is false.
func parsePaths(ui cli.Ui, fs *flag.FlagSet, args []string, help, noPaths string) (paths []string, ok bool) {
	return parsePathsOpt(ui, fs, args, help, noPaths, nil)
}

// parsePathsOpt is parsePaths where no path is fine when *noneOK is true
// once the flags are parsed (run -cluster).
func parsePathsOpt(ui cli.Ui, fs *flag.FlagSet, args []string, help, noPaths string, noneOK *bool) (paths []string, ok bool) {
	if err := fs.Parse(args); err != nil {
		ui.Error(err.Error())
		ui.Error("")
		ui.Error(help)
		return nil, false
	}
	if fs.NArg() == 0 && (noneOK == nil || !*noneOK) {
		ui.Error(noPaths)
		ui.Error("")
		ui.Error(help)
		return nil, false
	}
	return fs.Args(), true
}
