package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// exampleLine is one gpuchaos command line shown in a help text or the
// README, with where it was shown.
type exampleLine struct {
	where string
	args  []string
}

// gpuchaosLines picks the gpuchaos invocations out of example text: the
// part of each line after "gpuchaos" up to a pipe, redirection or
// continuation, split on blanks (the examples quote nothing they need).
func gpuchaosLines(where, text string) []exampleLine {
	var out []exampleLine
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "$ "))
		line = strings.TrimPrefix(line, "sudo ")
		rest, ok := strings.CutPrefix(line, "gpuchaos ")
		if !ok {
			if i := strings.Index(line, "| gpuchaos "); i >= 0 {
				rest, ok = line[i+len("| gpuchaos "):], true
			}
		}
		if !ok {
			continue
		}
		if i := strings.IndexAny(rest, "|>&\\#"); i >= 0 {
			rest = rest[:i]
		}
		out = append(out, exampleLine{where: where, args: strings.Fields(rest)})
	}
	return out
}

// shellBlocks returns the fenced code blocks of a Markdown text whose info
// string is a shell's (sh, bash, console) or empty, fence by fence: a
// pattern over the whole text would pair one block's closing fence with
// the next one's opening.
func shellBlocks(md string) []string {
	var (
		out  []string
		cur  []string
		in   bool
		keep bool
	)
	for _, line := range strings.Split(md, "\n") {
		info, fence := strings.CutPrefix(strings.TrimSpace(line), "```")
		switch {
		case fence && !in:
			in, keep, cur = true, info == "" || info == "sh" || info == "bash" || info == "console", nil
		case fence && in:
			if keep {
				out = append(out, strings.Join(cur, "\n"))
			}
			in = false
		case in:
			cur = append(cur, line)
		}
	}
	return out
}

func walkCommands(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, s := range c.Commands() {
		walkCommands(s, fn)
	}
}

// repoPath reports whether an argument names a file of this repository
// (examples/…), as opposed to a placeholder for the user's own file.
var repoPath = regexp.MustCompile(`^(examples|internal|scripts|docs|api)/`)

// TestExamplesExist walks every command's examples and the README's
// command lines: every repository file they name exists, and each names a
// real command and real flags. Those that need nothing but the twin run,
// and must not be refused as bad input.
func TestExamplesExist(t *testing.T) {
	t.Parallel()
	var lines []exampleLine
	walkCommands(newRoot(nil, nil, nil), func(c *cobra.Command) {
		lines = append(lines, gpuchaosLines(c.CommandPath()+" --help", c.Example)...)
	})
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range shellBlocks(string(readme)) {
		lines = append(lines, gpuchaosLines("README.md", block)...)
	}
	if len(lines) < 40 {
		t.Fatalf("found only %d example lines; the walker lost some", len(lines))
	}
	for _, l := range lines {
		for _, arg := range l.args {
			for _, a := range strings.Split(arg, ",") {
				if repoPath.MatchString(a) {
					if _, err := os.Stat(filepath.Join("../..", a)); err != nil {
						t.Errorf("%s: gpuchaos %s: %v", l.where, strings.Join(l.args, " "), err)
					}
				}
			}
		}
		root := newRoot(nil, nil, nil)
		c, rest, err := root.Find(l.args)
		if err != nil || c == root {
			t.Errorf("%s: gpuchaos %s: no such command", l.where, strings.Join(l.args, " "))
			continue
		}
		if strings.Contains(strings.Join(rest, " "), "$(") {
			continue // a shell substitution stands for the value
		}
		c.InitDefaultHelpFlag()
		if err := c.ParseFlags(rest); err != nil {
			t.Errorf("%s: gpuchaos %s: %v", l.where, strings.Join(l.args, " "), err)
		}
	}
	// Run, from the repository root's point of view, what the twin alone
	// can run: experiments on the twin, coverage of the example rules and
	// packs, fleet simulations, the catalogue, the XID table, a captured
	// topology.
	for _, l := range lines {
		if !runnable(l.args) {
			continue
		}
		args := slices.Clone(l.args)
		for i, a := range args {
			if repoPath.MatchString(a) {
				args[i] = filepath.Join("../..", a)
			}
			if strings.Contains(a, ",examples/") {
				// a comma-separated list of repository files
				parts := strings.Split(a, ",")
				for j, p := range parts {
					if repoPath.MatchString(p) {
						parts[j] = filepath.Join("../..", p)
					}
				}
				args[i] = strings.Join(parts, ",")
			}
			if i > 0 && (args[i-1] == "--record" || args[i-1] == "-o") {
				args[i] = filepath.Join(t.TempDir(), filepath.Base(a))
			}
		}
		t.Run(strings.Join(l.args, " "), func(t *testing.T) {
			t.Parallel()
			// 1 is a verdict (an expectation that did not pass), not a
			// refusal; 2 means the example is wrong.
			if code, out, errs := runCLI(t, "", args...); code == 2 {
				t.Errorf("%s: gpuchaos %s exited 2: %s%s", l.where, strings.Join(l.args, " "), out, errs)
			}
		})
	}
}

// runnable reports whether an example needs only the embedded twin: no
// GPU, root, network server or file of the user's.
func runnable(args []string) bool {
	if len(args) == 0 {
		return false
	}
	for i, a := range args {
		if a == "--target" && i+1 < len(args) && args[i+1] != "twin" {
			return false
		}
		if strings.HasSuffix(a, ".yaml") && !repoPath.MatchString(a) {
			return false
		}
	}
	switch args[0] {
	case "run", "faults", "coverage":
		return true
	case "xid":
		return len(args) > 1 && args[1] == "codes"
	case "twin":
		return len(args) > 1 && args[1] == "simulate"
	case "topo":
		return len(args) > 2 && repoPath.MatchString(args[2])
	}
	return false
}
