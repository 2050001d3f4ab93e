package nodeall_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/nodeall"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
)

// TestLinksNeitherTwinNorKubernetes holds the node's registry, and the
// contract under it, to what the node agent may link: not the twin and its
// injector, not the API server's injectors or a Kubernetes client, not the
// engine, the PromQL evaluator or the collective tracer.
func TestLinksNeitherTwinNorKubernetes(t *testing.T) {
	t.Parallel()
	const mod = "github.com/gpuchaos/gpuchaos/"
	var forbidden []testutil.Forbidden
	for _, p := range []string{
		mod + "internal/twin", mod + "internal/fault/twinfault", mod + "internal/fault/kubefault",
		mod + "internal/run", mod + "internal/node/colltrace",
		"sigs.k8s.io/controller-runtime", "k8s.io/client-go", "github.com/prometheus/prometheus/promql",
	} {
		forbidden = append(forbidden, testutil.Forbidden{Path: p})
	}
	for _, pkg := range []string{mod + "internal/fault", mod + "internal/fault/nodeall"} {
		testutil.NoDeps(t, pkg, forbidden)
	}
}

// TestRegistryIsTheNodes: every entry acts on the node, on exactly the
// node's targets.
func TestRegistryIsTheNodes(t *testing.T) {
	t.Parallel()
	for _, e := range nodeall.Registry() {
		if !slices.Equal(e.Targets, fault.NodeTargets()) {
			t.Errorf("entry %s runs on %v, want the node's targets %v", e.Mechanism, e.Targets, fault.NodeTargets())
		}
	}
}

// TestEnv: what a node's process knows becomes its injectors' Env, with
// the real kernel log by default and the pod's cgroup rules in an agent.
func TestEnv(t *testing.T) {
	t.Parallel()
	env := nodeall.Env(nodeall.Node{StateDir: "/state"})
	if env.Kmsg == nil || env.StateDir != "/state" || env.PodCgroups || env.HogCgroups != nil || env.Twin != nil {
		t.Errorf("Env of a plain node = %+v", env)
	}
	if env := nodeall.Env(nodeall.Node{Exec: "/usr/local/bin/gpuchaos"}); env.Exec != "/usr/local/bin/gpuchaos" {
		t.Errorf("Env.Exec = %q, want the node's gpuchaos binary", env.Exec)
	}
	env = nodeall.Env(nodeall.Node{Pod: &nodeall.Pod{CgroupRoot: t.TempDir()}})
	if !env.PodCgroups || env.HogCgroups == nil {
		t.Errorf("Env in a pod = %+v, want the pod's cgroup rules", env)
	}
	f, ok := catalog.Lookup("workload.kill-rank")
	if !ok {
		t.Fatal("workload.kill-rank is not in the catalogue")
	}
	if _, err := nodeall.Injector(f, f.Mechanism(catalog.MechanismTwin), nodeall.Env(nodeall.Node{StateDir: t.TempDir()})); err == nil ||
		!strings.Contains(err.Error(), "has no injector") {
		t.Errorf("the twin mechanism from the node's registry: %v, want a refusal", err)
	}
}
