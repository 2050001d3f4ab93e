package testutil

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
)

// Forbidden is a package a binary or package must not link, and why: the
// path and every package below it.
type Forbidden struct {
	Path, Why string
}

// NoDeps fails t for every package that pkg links (`go list -deps`) and
// forbidden names, with the chain of imports that brings it in, so a
// package kept lean on purpose (the node agent, the node's registry)
// cannot grow a dependency unnoticed.
func NoDeps(t testing.TB, pkg string, forbidden []Forbidden) {
	t.Helper()
	imports := GoList(t, "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", pkg)
	for _, f := range forbidden {
		for dep := range imports {
			if dep == f.Path || strings.HasPrefix(dep, f.Path+"/") {
				why := ""
				if f.Why != "" {
					why = ", " + f.Why
				}
				t.Errorf("%s links %s%s:\n\t%s", pkg, dep, why, strings.Join(importChain(imports, pkg, dep), "\n\t-> "))
			}
		}
	}
}

// GoList runs `go list` with args and returns each package it printed with
// the rest of its line split into fields (its imports, with a -f such as
// NoDeps's). The go command is the one running the tests; its absence
// fails t.
func GoList(t testing.TB, args ...string) map[string][]string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command lists the imports: %v", err)
	}
	cmd := exec.CommandContext(context.Background(), goTool, append([]string{"list"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	pkgs := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			pkgs[f[0]] = f[1:]
		}
	}
	return pkgs
}

// importChain returns the shortest import path from from to to, both
// included.
func importChain(imports map[string][]string, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == to {
			var path []string
			for ; p != ""; p = prev[p] {
				path = append([]string{p}, path...)
			}
			return path
		}
		for _, q := range imports[p] {
			if _, seen := prev[q]; !seen {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	return []string{from, "…", to}
}
