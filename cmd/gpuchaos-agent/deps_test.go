package main

import (
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
)

const module = "github.com/gpuchaos/gpuchaos/"

// forbidden are the packages gpuchaos-agent must not link, each with why:
// a path and every package below it. The agent's resident memory is mostly
// its binary's own pages, so each of these costs the agent memory on every
// GPU node for code it never runs.
var forbidden = []testutil.Forbidden{
	{Path: module + "internal/run/engine", Why: "the engine: experiments run in the controller or the CLI"},
	{Path: module + "internal/run/target", Why: "the targets the engine runs on"},
	{Path: module + "internal/detect/promeval", Why: "the PromQL evaluator"},
	{Path: module + "internal/detect/probe", Why: "the probes and the scrape store, which bring PromQL"},
	{Path: module + "internal/detect/rules", Why: "rule files and their analysis"},
	{Path: "github.com/prometheus/prometheus", Why: "PromQL and its storage"},
	{Path: module + "internal/twin", Why: "the digital twin: --twin is gpuchaos agent's alone"},
	{Path: module + "internal/fault/twinfault", Why: "the twin's injector"},
	{Path: module + "internal/fault/all", Why: "the registry with the twin's and the API server's injectors"},
	{Path: module + "internal/node/colltrace", Why: "the collective tracer"},
	{Path: module + "internal/kube/controller", Why: "the controller"},
	{Path: module + "internal/gputools/burn", Why: "a GPU load: the agent runs it as a gpuchaos child"},
	{Path: module + "internal/gputools/exhaust", Why: "a GPU load: the agent runs it as a gpuchaos child"},
	{Path: module + "internal/node/cuda", Why: "CUDA, for the loads alone"},
	{Path: "github.com/ebitengine/purego", Why: "CUDA's loader, for the loads alone"},
	{Path: module + "internal/node/xidwatch/xidbench", Why: "the XID benchmark, which reads /metrics through the scrape store"},
	{Path: module + "internal/node/gpu/nvmlgpu/nvmlmock", Why: "eight mock GPUs: only a measurement build (-tags nvmlmock) may link them"},
	{Path: "github.com/NVIDIA/go-nvml/pkg/nvml/mock", Why: "go-nvml's mocks: only a measurement build (-tags nvmlmock) may link them"},
	{Path: "sigs.k8s.io/controller-runtime", Why: "the controller's client, which links all of k8s.io/api through client-go's scheme"},
	{Path: "k8s.io/client-go/kubernetes", Why: "client-go's typed clientsets and their scheme of every built-in kind"},
	{Path: module + "internal/fault/kubefault", Why: "the API server's injectors: the controller applies them"},
}

// TestLinksOnlyWhatANodeNeeds holds gpuchaos-agent to its purpose: `go
// list -deps ./cmd/gpuchaos-agent` names no forbidden package, and each
// one found is reported with the chain of imports that brings it in.
func TestLinksOnlyWhatANodeNeeds(t *testing.T) {
	t.Parallel()
	testutil.NoDeps(t, module+"cmd/gpuchaos-agent", forbidden)
}

// TestForbiddenPackagesExist keeps the list honest: a path that names no
// package of the module's builds and tests (a typo, a package moved) would
// make TestLinksOnlyWhatANodeNeeds pass for nothing.
func TestForbiddenPackagesExist(t *testing.T) {
	t.Parallel()
	all := testutil.GoList(t, "-deps", "-test", "-f", "{{.ImportPath}}", module+"...")
	for _, f := range forbidden {
		found := false
		for p := range all {
			if p == f.Path || strings.HasPrefix(p, f.Path+"/") {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("forbidden %s is no package the module builds or tests", f.Path)
		}
	}
}
