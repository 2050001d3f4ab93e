//go:build cgo && nvmlmock

package nvmlgpu

import (
	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu/nvmlgpu/nvmlmock"
)

// Open, in a binary built with the nvmlmock tag, opens eight mock H200s
// (nvmlmock) in place of the NVIDIA library. The tag exists to measure
// the agent's own cost with a node's eight GPUs on a machine without any
// (scripts/agent-cost -m): the binary then runs every code path it runs
// on a GPU node but the driver's. It is never in a default build, and
// such a binary must never be shipped: it reports GPUs that are not
// there.
func Open() (gpu.Source, error) { return New(nvmlmock.New()) }
