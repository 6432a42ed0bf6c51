package command

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/render"
	"github.com/mariposa-sh/mariposa/schema"
)

// ValidateCommand checks service files without running anything.
type ValidateCommand struct {
	UI cli.Ui
	// Environ replaces os.Environ() for MARIPOSA_VAR_* and env(); for tests.
	Environ []string
}

func (c *ValidateCommand) Synopsis() string { return "Checks service files and reports every problem" }

func (c *ValidateCommand) Help() string {
	return strings.TrimSpace(`
Usage: mariposa validate [options] PATH...

  Loads the service files (a directory means every *.hcl in it) exactly as
  "mariposa run" would, and reports every problem at once, each with its file,
  line and column: HCL errors, and templates that do not parse (syntax
  errors, unknown functions, and the consul-template functions mariposa
  removes). Nothing is registered or started, and Consul is not contacted.

  Warnings do not make the configuration invalid. Among them: a service's
  program not found in PATH or not executable, or its dir missing, on the
  machine running validate (the files may run on another one).

  Exits 0 when the configuration is valid, 1 when it is not.

Options:

  -json              Print the result as JSON on standard output:
                     {"valid", "error_count", "warning_count", "services",
                     "diagnostics"}.

  -var NAME=VALUE    Set a variable, as with "mariposa run". Repeatable.
                     MARIPOSA_VAR_NAME environment variables apply too.
`)
}

// validateVars collects repeated -var NAME=VALUE flags.
type validateVars map[string]string

func (v validateVars) String() string { return "" }

func (v validateVars) Set(s string) error {
	k, val, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("-var wants NAME=VALUE, got %q", s)
	}
	v[k] = val
	return nil
}

// validateResult is the -json output.
type validateResult struct {
	Valid        bool                `json:"valid"`
	ErrorCount   int                 `json:"error_count"`
	WarningCount int                 `json:"warning_count"`
	Services     []string            `json:"services"`
	Diagnostics  *schema.Diagnostics `json:"diagnostics"`
}

func (c *ValidateCommand) Run(args []string) int {
	var asJSON bool
	vars := validateVars{}
	flags := flag.NewFlagSet("validate", flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	flags.BoolVar(&asJSON, "json", false, "")
	flags.Var(vars, "var", "")
	paths, ok := parsePaths(c.UI, flags, args, c.Help(), "validate needs at least one file or directory")
	if !ok {
		return 1
	}

	cfg, diags := schema.Load(paths, schema.LoadOptions{
		Vars:          vars,
		Environ:       c.Environ,
		CheckTemplate: render.CheckTemplate,
		CheckHost:     true,
		Users:         userCheck(false),
	})
	valid := !diags.HasErrors() && cfg != nil

	if asJSON {
		res := validateResult{
			Valid:        valid,
			ErrorCount:   diags.ErrorCount(),
			WarningCount: diags.WarningCount(),
			Services:     []string{},
			Diagnostics:  diags,
		}
		if valid {
			for _, s := range cfg.Services {
				res.Services = append(res.Services, s.Name)
			}
		}
		out, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			c.UI.Error(err.Error())
			return 1
		}
		c.UI.Output(string(out))
		if !valid {
			return 1
		}
		return 0
	}

	if diags.Len() > 0 {
		var buf bytes.Buffer
		if err := diags.WriteText(&buf, 0, false); err != nil {
			c.UI.Error(err.Error())
			return 1
		}
		text := strings.TrimRight(buf.String(), "\n")
		if valid {
			c.UI.Warn(text)
		} else {
			c.UI.Error(text)
		}
	}
	if !valid {
		c.UI.Error(fmt.Sprintf("\n%s, %s.", validatePlural(diags.ErrorCount(), "error"), validatePlural(diags.WarningCount(), "warning")))
		return 1
	}
	c.UI.Output(fmt.Sprintf("%s valid (%s).", validatePlural(len(cfg.Services), "service"), validatePlural(len(cfg.Files), "file")))
	return 0
}

func validatePlural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
