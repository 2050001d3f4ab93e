package nodeagent_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoControllerRuntime holds the node agent to what a DaemonSet on
// every GPU node can afford: no controller-runtime or typed clientset
// (they link every built-in API group, megabytes resident), no engine,
// detector, twin or collective tracer, and not the API server's
// injectors, which are the controller's.
func TestLinksNoControllerRuntime(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the imports with")
	}
	const mod = "github.com/gpuchaos/gpuchaos/"
	forbidden := []string{
		"sigs.k8s.io/controller-runtime", "k8s.io/client-go/kubernetes",
		"k8s.io/api/apps", "k8s.io/api/batch", "k8s.io/api/networking", "k8s.io/api/storage", "k8s.io/api/rbac",
		"github.com/prometheus/prometheus",
		mod + "internal/run", mod + "internal/detect", mod + "internal/twin", mod + "internal/node/colltrace",
		mod + "internal/fault/kubefault", mod + "internal/fault/twinfault", mod + "internal/fault/all",
		mod + "internal/kube/kubeclient",
	}
	pkg := mod + "internal/kube/nodeagent"
	out, err := exec.CommandContext(context.Background(), goTool, "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") {
				t.Errorf("%s links %s", pkg, dep)
			}
		}
	}
}
