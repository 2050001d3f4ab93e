package engine

import (
	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
)

// ValidateOptions are the checks an Experiment's spec passes before it
// runs, the same for `gpuchaos run` and the controller: its faults against
// the catalogue, its detectors against the built-in ones and the
// collective tracer's.
func ValidateOptions() v1alpha1.ValidateOptions {
	return v1alpha1.ValidateOptions{
		CheckFault: catalog.CheckSpec,
		KnownDetector: func(name string) bool {
			_, ok := probe.LookupDetector(name)
			return ok || name == probe.CollectiveTraceDetector
		},
	}
}
