package main

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/gpuchaos/gpuchaos/"

// forbidden are the packages gpuchaos-agent must not link, each with why:
// a path and every package below it. The agent's resident memory is mostly
// its binary's own pages, so each of these costs the agent memory on every
// GPU node for code it never runs.
var forbidden = []struct{ path, why string }{
	{module + "internal/run/engine", "the engine: experiments run in the controller or the CLI"},
	{module + "internal/run/target", "the targets the engine runs on"},
	{module + "internal/detect/promeval", "the PromQL evaluator"},
	{module + "internal/detect/probe", "the probes and the scrape store, which bring PromQL"},
	{module + "internal/detect/rules", "rule files and their analysis"},
	{"github.com/prometheus/prometheus", "PromQL and its storage"},
	{module + "internal/twin", "the digital twin: --twin is gpuchaos agent's alone"},
	{module + "internal/fault/twinfault", "the twin's injector"},
	{module + "internal/fault/all", "the registry with the twin's and the API server's injectors"},
	{module + "internal/node/colltrace", "the collective tracer"},
	{module + "internal/kube/controller", "the controller"},
	{module + "internal/gputools/burn", "a GPU load: the agent runs it as a gpuchaos child"},
	{module + "internal/gputools/exhaust", "a GPU load: the agent runs it as a gpuchaos child"},
	{module + "internal/node/cuda", "CUDA, for the loads alone"},
	{"github.com/ebitengine/purego", "CUDA's loader, for the loads alone"},
	{module + "internal/node/xidwatch/xidbench", "the XID benchmark, which reads /metrics through the scrape store"},
	{module + "internal/node/gpu/nvmlgpu/nvmlmock", "eight mock GPUs: only a measurement build (-tags nvmlmock) may link them"},
	{"github.com/NVIDIA/go-nvml/pkg/nvml/mock", "go-nvml's mocks: only a measurement build (-tags nvmlmock) may link them"},
	{"sigs.k8s.io/controller-runtime", "the controller's client, which links all of k8s.io/api through client-go's scheme"},
	{"k8s.io/client-go/kubernetes", "client-go's typed clientsets and their scheme of every built-in kind"},
	{module + "internal/fault/kubefault", "the API server's injectors: the controller applies them"},
}

// TestLinksOnlyWhatANodeNeeds holds gpuchaos-agent to its purpose: `go
// list -deps ./cmd/gpuchaos-agent` names no forbidden package, and each
// one found is reported with the chain of imports that brings it in.
func TestLinksOnlyWhatANodeNeeds(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the imports with")
	}
	imports := goList(t, goTool, "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", module+"cmd/gpuchaos-agent")
	for _, f := range forbidden {
		for dep := range imports {
			if dep == f.path || strings.HasPrefix(dep, f.path+"/") {
				t.Errorf("gpuchaos-agent links %s, %s:\n\t%s", dep, f.why, strings.Join(chain(imports, module+"cmd/gpuchaos-agent", dep), "\n\t-> "))
			}
		}
	}
}

// TestForbiddenPackagesExist keeps the list honest: a path that names no
// package of the module's builds and tests (a typo, a package moved) would
// make TestLinksOnlyWhatANodeNeeds pass for nothing.
func TestForbiddenPackagesExist(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the packages with")
	}
	all := goList(t, goTool, "-deps", "-test", "-f", "{{.ImportPath}}", module+"...")
	for _, f := range forbidden {
		found := false
		for p := range all {
			if p == f.path || strings.HasPrefix(p, f.path+"/") {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("forbidden %s is no package the module builds or tests", f.path)
		}
	}
}

// goList runs go list with args and returns each package it printed with
// the rest of its line split into fields (its imports, with the -f above).
func goList(t *testing.T, goTool string, args ...string) map[string][]string {
	t.Helper()
	cmd := exec.CommandContext(context.Background(), goTool, append([]string{"list"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	pkgs := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 {
			pkgs[f[0]] = f[1:]
		}
	}
	return pkgs
}

// chain returns the shortest import path from from to to, both included.
func chain(imports map[string][]string, from, to string) []string {
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
