// Package command holds mariposa's CLI commands, one file per command.
package command

import (
	"github.com/mitchellh/cli"
)

// Commands returns the factories for every mariposa command.
func Commands(ui cli.Ui) map[string]cli.CommandFactory {
	return map[string]cli.CommandFactory{
		"run":            func() (cli.Command, error) { return &RunCommand{UI: ui}, nil },
		"validate":       func() (cli.Command, error) { return &ValidateCommand{UI: ui}, nil },
		"fmt":            func() (cli.Command, error) { return &FmtCommand{UI: ui}, nil },
		"status":         func() (cli.Command, error) { return &StatusCommand{UI: ui}, nil },
		"version":        func() (cli.Command, error) { return &VersionCommand{UI: ui}, nil },
		"restart":        func() (cli.Command, error) { return &RestartCommand{UI: ui}, nil },
		"upgrade":        func() (cli.Command, error) { return &UpgradeCommand{UI: ui}, nil },
		"reset":          func() (cli.Command, error) { return &ResetCommand{UI: ui}, nil },
		"deploy":         func() (cli.Command, error) { return &DeployCommand{UI: ui}, nil },
		"deploy promote": func() (cli.Command, error) { return &DeployPromoteCommand{UI: ui}, nil },
		"deploy health":  func() (cli.Command, error) { return &DeployHealthCommand{UI: ui}, nil },
		"deploy stop":    func() (cli.Command, error) { return &DeployStopCommand{UI: ui}, nil },
		"why":            func() (cli.Command, error) { return &WhyCommand{UI: ui}, nil },
		"logs":           func() (cli.Command, error) { return &LogsCommand{UI: ui}, nil },
		"resume":         func() (cli.Command, error) { return &ResumeCommand{UI: ui}, nil },
		"pause":          func() (cli.Command, error) { return &PauseCommand{UI: ui}, nil },
		"queue":          func() (cli.Command, error) { return &QueueCommand{UI: ui}, nil },
		"queue drop":     func() (cli.Command, error) { return &QueueDropCommand{UI: ui}, nil },
		"drain":          func() (cli.Command, error) { return &DrainCommand{UI: ui}, nil },
		"plan":           func() (cli.Command, error) { return &PlanCommand{UI: ui}, nil },
		"events":         func() (cli.Command, error) { return &EventsCommand{UI: ui}, nil },
	}
}
