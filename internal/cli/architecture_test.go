package cli

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/gpuchaos/gpuchaos/"

// TestArchitecture holds docs/ARCHITECTURE.md to the tree: its room list
// names every folder under internal/, its package list names every
// package of `go list ./...` exactly once, and no package imports one
// listed below it, so the order the document gives is the layering the
// code keeps. Test files are free to import anything.
func TestArchitecture(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	rooms, listed := architectureLists(t, doc)

	entries, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && !slices.Contains(rooms, "internal/"+e.Name()) {
			t.Errorf("docs/ARCHITECTURE.md: room internal/%s is not in the list of rooms", e.Name())
		}
	}
	for _, r := range rooms {
		if _, err := os.Stat("../../" + r); err != nil {
			t.Errorf("docs/ARCHITECTURE.md: room %s: %v", r, err)
		}
	}
	if len(rooms) >= 15 {
		t.Errorf("%d rooms under internal/; a newcomer reads fewer than 15", len(rooms))
	}

	imports := goListImports(t)
	pos := map[string]int{}
	for i, p := range listed {
		if _, dup := pos[p]; dup {
			t.Errorf("docs/ARCHITECTURE.md lists %s twice", p)
		}
		pos[p] = i
		if _, ok := imports[p]; !ok {
			t.Errorf("docs/ARCHITECTURE.md lists %s, which is not a package of go list ./...", p)
		}
	}
	var pkgs []string
	for p := range imports {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	for _, p := range pkgs {
		at, ok := pos[p]
		if !ok {
			t.Errorf("docs/ARCHITECTURE.md does not list package %s", p)
			continue
		}
		for _, q := range imports[p] {
			if qat, ok := pos[q]; ok && qat > at {
				t.Errorf("%s imports %s, which docs/ARCHITECTURE.md lists below it", p, q)
			}
		}
	}
}

// architectureLists returns the rooms (the first fenced block) and the
// packages of the fenced block under "## Packages", in order. A package
// line is indented by two spaces and starts with a module path; deeper
// indented lines continue its description, unindented ones head a room.
func architectureLists(t *testing.T, doc []byte) (rooms, pkgs []string) {
	t.Helper()
	fences := regexp.MustCompile("(?s)```\n(.*?)```").FindAllSubmatchIndex(doc, -1)
	if len(fences) == 0 {
		t.Fatal("docs/ARCHITECTURE.md has no fenced block of rooms")
	}
	for _, line := range strings.Split(string(doc[fences[0][2]:fences[0][3]]), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			rooms = append(rooms, f[0])
		}
	}
	at := bytes.Index(doc, []byte("\n## Packages\n"))
	if at < 0 {
		t.Fatal(`docs/ARCHITECTURE.md has no "## Packages" section`)
	}
	var block []byte
	for _, f := range fences {
		if f[0] > at {
			block = doc[f[2]:f[3]]
			break
		}
	}
	path := regexp.MustCompile(`^  ((?:internal|api|cmd|deploy|tools)(?:/[\w.-]+)*)(?:\s|$)`)
	sc := bufio.NewScanner(bytes.NewReader(block))
	for sc.Scan() {
		if m := path.FindStringSubmatch(sc.Text()); m != nil {
			pkgs = append(pkgs, m[1])
		}
	}
	if len(pkgs) == 0 {
		t.Fatal(`docs/ARCHITECTURE.md: no packages under "## Packages"`)
	}
	return rooms, pkgs
}

// goListImports returns every package of the module (path relative to the
// module) with the module's packages its non-test files import.
func goListImports(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v\n%s", err, stderr.Bytes())
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		p := strings.TrimPrefix(f[0], module)
		imports[p] = nil
		for _, q := range f[1:] {
			if rel, ok := strings.CutPrefix(q, module); ok {
				imports[p] = append(imports[p], rel)
			}
		}
	}
	return imports
}
