package command

import (
	"os"
	"strings"
	"testing"

	"github.com/mitchellh/cli"
)

// usageLines is the Usage part of a command's help: the "Usage:" line and
// the "       mariposa ..." lines that continue it.
func usageLines(help string) string {
	var out []string
	for _, line := range strings.Split(help, "\n") {
		switch {
		case strings.HasPrefix(line, "Usage: "):
			out = append(out, line)
		case len(out) > 0 && strings.HasPrefix(strings.TrimSpace(line), "mariposa ") && strings.HasPrefix(line, "  "):
			out = append(out, line)
		case len(out) > 0:
			return strings.Join(out, "\n")
		}
	}
	return strings.Join(out, "\n")
}

// Every command has its page, website/commands/NAME.md ("deploy promote":
// deploy-promote.md), and the page opens with what `mariposa NAME -h`
// says the usage is, so the two cannot drift.
func TestCommandPagesMatchHelp(t *testing.T) {
	cmds := Commands(cli.NewMockUi())
	for name, f := range cmds {
		c, err := f()
		if err != nil {
			t.Fatal(err)
		}
		want := usageLines(c.Help())
		if want == "" {
			t.Errorf("mariposa %s: its help has no Usage line", name)
			continue
		}
		page := "../website/commands/" + strings.ReplaceAll(name, " ", "-") + ".md"
		b, err := os.ReadFile(page)
		if parent, _, nested := strings.Cut(name, " "); err != nil && nested {
			// A nested command may share its parent's page
			// (queue drop on queue.md): the parent's usage shows it.
			pb, perr := os.ReadFile("../website/commands/" + parent + ".md")
			texts, _ := fencedBlocks(string(pb), "text")
			line := strings.TrimPrefix(want, "Usage: ")
			switch {
			case perr != nil || len(texts) == 0:
				t.Errorf("mariposa %s has no page (%v), nor has mariposa %s", name, err, parent)
			case strings.TrimRight(texts[0], "\n") == want: // one help for both
			case !strings.Contains(line, "\n") && strings.Contains(texts[0], line+"\n"):
			default:
				t.Errorf("mariposa %s has no page (%v), and the top of mariposa %s's does not show its usage:\n%s", name, err, parent, want)
			}
			continue
		}
		if err != nil {
			t.Errorf("mariposa %s has no page: %v", name, err)
			continue
		}
		texts, _ := fencedBlocks(string(b), "text")
		if len(texts) == 0 {
			t.Errorf("%s has no text block", page)
			continue
		}
		if got := strings.TrimRight(texts[0], "\n"); got != want {
			t.Errorf("%s opens with\n%s\nbut mariposa %s -h says\n%s", page, got, name, want)
		}
		if !strings.HasPrefix(string(b), "# ") || !strings.Contains(strings.SplitN(string(b), "\n", 2)[0], "mariposa "+name) {
			t.Errorf("%s: the title does not name mariposa %s", page, name)
		}
	}
	// And no page names a command that does not exist.
	entries, err := os.ReadDir("../website/commands")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := strings.ReplaceAll(strings.TrimSuffix(e.Name(), ".md"), "-", " ")
		if _, ok := cmds[name]; !ok {
			t.Errorf("website/commands/%s documents no command (mariposa %s)", e.Name(), name)
		}
	}
}

func TestUsageLines(t *testing.T) {
	help := "Usage: mariposa run [options] PATH...\n       mariposa run -cluster [options] [PATH...]\n\n  Registers..."
	if got, want := usageLines(help), "Usage: mariposa run [options] PATH...\n       mariposa run -cluster [options] [PATH...]"; got != want {
		t.Errorf("usageLines = %q", got)
	}
}
