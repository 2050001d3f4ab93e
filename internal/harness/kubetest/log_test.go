package kubetest_test

import (
	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// envtest logs through controller-runtime's global logger, which prints a
// warning with a stack after 30 s when nobody set it; a test that runs
// longer (a restarted API server) would show it.
func init() { ctrllog.SetLogger(logr.Discard()) }
