package cli

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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
