package nodeagent_test

import (
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
)

// TestLinksNoControllerRuntime holds the node agent to what a DaemonSet on
// every GPU node can afford: no controller-runtime or typed clientset
// (they link every built-in API group, megabytes resident), no engine,
// detector, twin or collective tracer, and not the API server's
// injectors, which are the controller's.
func TestLinksNoControllerRuntime(t *testing.T) {
	t.Parallel()
	const mod = "github.com/gpuchaos/gpuchaos/"
	var forbidden []testutil.Forbidden
	for _, p := range []string{
		"sigs.k8s.io/controller-runtime", "k8s.io/client-go/kubernetes",
		"k8s.io/api/apps", "k8s.io/api/batch", "k8s.io/api/networking", "k8s.io/api/storage", "k8s.io/api/rbac",
		"github.com/prometheus/prometheus",
		mod + "internal/run", mod + "internal/detect", mod + "internal/twin", mod + "internal/node/colltrace",
		mod + "internal/fault/kubefault", mod + "internal/fault/twinfault", mod + "internal/fault/all",
		mod + "internal/kube/kubeclient",
	} {
		forbidden = append(forbidden, testutil.Forbidden{Path: p})
	}
	testutil.NoDeps(t, mod+"internal/kube/nodeagent", forbidden)
}
