package cli

import (
	"bytes"
	"flag"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
)

// TestPackageDocs holds every package to exactly one package doc comment
// (STYLE.md), so `go doc` says what each package is for.
func TestPackageDocs(t *testing.T) {
	t.Parallel()
	dirs := map[string][]string{}
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "../.." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			dirs[filepath.Dir(path)] = append(dirs[filepath.Dir(path)], path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir, files := range dirs {
		var docs []string
		for _, f := range files {
			af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if af.Doc != nil {
				docs = append(docs, filepath.Base(f))
			}
		}
		if len(docs) != 1 {
			t.Errorf("%s: %d files carry a package doc (%v), want exactly one", dir, len(docs), docs)
		}
	}
}

// TestREADMEExperiments loads, validates and runs on the twin every
// experiment shown in the README, so the docs cannot drift from the spec
// or show an experiment that fails where the README says it passes.
func TestREADMEExperiments(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(b), -1)
	if len(blocks) == 0 {
		t.Fatal("README shows no experiment")
	}
	for i, m := range blocks {
		path := filepath.Join(t.TempDir(), "readme.yaml")
		if err := os.WriteFile(path, []byte(m[1]), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := loadExperiment(path); err != nil {
			t.Errorf("README experiment %d: %v", i+1, err)
			continue
		}
		if code, out, errs := runCLI(t, "", "run", path); code != 0 {
			t.Errorf("README experiment %d does not pass on the twin: exit %d\n%s%s", i+1, code, out, errs)
		}
	}
}

var update = flag.Bool("update", false, "rewrite README.md's demo transcript from the demo's output")

// TestREADMEDemo holds README's demo transcript to what `gpuchaos demo`
// prints (all but the wall time of its last line), and its prose counts to
// the catalogue and the built-in detectors, so a fault or a detector added
// shows in the README or fails here. -update rewrites the transcript.
func TestREADMEDemo(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "", "demo", "--html", filepath.Join(t.TempDir(), "demo.html"))
	if code != 0 {
		t.Fatalf("demo: exit %d\n%s", code, errs)
	}
	const head = "```\n$ gpuchaos demo\n"
	start := bytes.Index(readme, []byte(head))
	if start < 0 {
		t.Fatal("README.md shows no demo transcript (a block starting \"$ gpuchaos demo\")")
	}
	start += len(head)
	end := start + bytes.Index(readme[start:], []byte("```\n"))
	ranIn := regexp.MustCompile(`(?m)^Ran in .*\n`)
	want := ranIn.ReplaceAllString(out, "Ran in 2.9s of wall time. Heatmap: gpuchaos-demo.html\n")
	if got := string(readme[start:end]); got != want {
		if *update {
			readme = slices.Concat(readme[:start], []byte(want), readme[end:])
			if err := os.WriteFile("../../README.md", readme, 0o644); err != nil {
				t.Fatal(err)
			}
		} else {
			t.Errorf("README.md's demo transcript differs from the demo's output (go test ./internal/cli -run TestREADMEDemo -update rewrites it):\n%s", firstDiff(got, want))
		}
	}
	for _, c := range []struct {
		re   string
		want int
		what string
	}{
		{`gpuchaos' (\d+) built-in detectors`, len(probe.Detectors()), "built-in detectors"},
		{`(\d+) faults? × \d+ detectors`, len(catalog.All()), "faults in the catalogue"},
		{`(\d+) faults in \d+ families`, len(catalog.All()), "faults in the catalogue"},
		{`\d+ faults in (\d+) families`, len(catalog.Families()), "fault families"},
	} {
		for _, m := range regexp.MustCompile(c.re).FindAllSubmatch(readme, -1) {
			if n, _ := strconv.Atoi(string(m[1])); n != c.want {
				t.Errorf("README.md says %q; there are %d %s", m[0], c.want, c.what)
			}
		}
	}
}

// firstDiff shows the first line where got and want part.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d:\nREADME: %s\ndemo:   %s", i+1, gl, wl)
		}
	}
	return ""
}
