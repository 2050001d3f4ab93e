package coverage

import (
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/twin"
)

// TestImpact: goodput is the window's productive share, never below 0 even
// when a restart rolls the job back past the window's start (XID 79 on a
// job whose last checkpoint is older than the fault); the work lost before
// the window still counts in the GPU-hours lost.
func TestImpact(t *testing.T) {
	t.Parallel()
	st := func(wall, prod float64) twin.JobStatus {
		return twin.JobStatus{WallSeconds: wall, ProductiveSeconds: prod}
	}
	tests := []struct {
		name          string
		before, after twin.JobStatus
		goodput, lost float64
	}{
		{"healthy", st(1000, 990), st(4600, 4554), 0.99, 36 * 8 / 3600.0},
		{"half", st(0, 0), st(3600, 1800), 0.5, 1800 * 8 / 3600.0},
		{"rolled back past the window", st(1000, 900), st(4600, 540), 0, (3600 + 360) * 8 / 3600.0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := impact(tt.before, tt.after, 8)
			if d := got.Goodput - tt.goodput; d > 1e-9 || d < -1e-9 {
				t.Errorf("goodput %g, want %g", got.Goodput, tt.goodput)
			}
			if d := got.LostGPUHours - tt.lost; d > 1e-9 || d < -1e-9 {
				t.Errorf("lost %g GPU-h, want %g", got.LostGPUHours, tt.lost)
			}
		})
	}
}
