package exhaustfault

import (
	"context"
	"syscall"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/fault/internal/childproc"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
)

// TestRecoverWhateverBecameOfTheChildren injects a fault of two children,
// makes them or their record vanish in each way they can, and checks that
// a fresh injector's Recover leaves no child running: the recorded ones
// by pid and start time, the unrecorded ones (an injector killed between
// starting a child and recording it) by their mark.
func TestRecoverWhateverBecameOfTheChildren(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		vanish func(t *testing.T, r rig, st *state)
	}{
		{"children exited", func(t *testing.T, r rig, _ *state) {
			for _, pid := range r.alive(t) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}},
		{"no child recorded", func(t *testing.T, _ rig, st *state) { st.Children = nil }},
		{"one child of two recorded", func(t *testing.T, _ rig, st *state) { st.Children = st.Children[:1] }},
		{"one child exited, the other not recorded", func(t *testing.T, _ rig, st *state) {
			_ = syscall.Kill(st.Children[0].PID, syscall.SIGKILL)
			st.Children = st.Children[:1]
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, "exhaustion.noisy-neighbour", "ready", nil)
			const key = "exp/vanish"
			v := catalog.Values{"share": 0.5, "memory": 0.1}
			if err := r.inj.Inject(shortHold(), key, inventory.Ref{Kind: catalog.ScopeGPU, GPU: 0}, v); err != nil {
				t.Fatal(err)
			}
			st, err := readState(r.inj.dir, key)
			if err != nil || len(st.Children) != 2 {
				t.Fatalf("state %+v, %v; want two children", st, err)
			}
			tc.vanish(t, r, &st)
			if err := r.inj.dir.Write(key, st); err != nil {
				t.Fatal(err)
			}
			fresh := newRig(t, "exhaustion.noisy-neighbour", "ready", func(o *Options) { o.StateDir = r.stateDir })
			if err := fresh.inj.Recover(context.Background(), key); err != nil {
				t.Fatalf("Recover = %v, want success", err)
			}
			if left := r.alive(t); len(left) > 0 {
				t.Errorf("children left running: %v", left)
			}
			if found, _ := childproc.Find(r.inj.dir.Mark(key), r.inj.opts.Exec); len(found.Procs) > 0 {
				t.Errorf("marked processes left: %v", found.Procs)
			}
			if r.stateExists(t, key) {
				t.Error("state file left after recover")
			}
		})
	}
}
