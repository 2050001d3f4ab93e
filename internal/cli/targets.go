package cli

import (
	"github.com/gpuchaos/gpuchaos/internal/kube/kubetarget"
	"github.com/gpuchaos/gpuchaos/internal/run/target"
	"github.com/gpuchaos/gpuchaos/internal/run/target/livetarget"
	"github.com/gpuchaos/gpuchaos/internal/run/target/localtarget"
	"github.com/gpuchaos/gpuchaos/internal/run/target/twintarget"
)

// targets lists every kind of target `gpuchaos run --target` opens by
// name. A new kind is one package and one line here.
func targets() target.Registry {
	return target.Registry{
		target.Twin:  twintarget.Open,
		target.Live:  livetarget.Open,
		target.Local: localtarget.Open,
		target.K8s:   kubetarget.Open,
	}
}
