package numafault

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/internal/childproc"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
)

// TestRecoverWhateverBecameOfTheTarget injects, makes the target vanish in
// each way it can, and checks what a fresh injector's Recover says:
// recovered with nothing of ours left, or gone only with the proof.
func TestRecoverWhateverBecameOfTheTarget(t *testing.T) {
	t.Parallel()
	root := fakeTwoNodes(t)
	gpu0 := func(context.Context, int) (int, error) { return 0, nil }
	type env struct {
		in   *Injector
		tag  string
		rank int // the wrong-affinity rank's pid
	}
	tests := []struct {
		name, id string
		vanish   func(t *testing.T, e env)
		want     string // recovered or gone
		proof    string
		// pinned: the rank's threads must stay where the fault put them
		// (a recycled pid's process is never touched).
		pinned bool
	}{
		{name: "hog exited", id: "numa.memory-pressure", want: "recovered",
			vanish: func(t *testing.T, e env) {
				for _, pid := range tagged(t, e.tag) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}},
		{name: "hog not recorded", id: "numa.memory-pressure", want: "recovered",
			vanish: func(t *testing.T, e env) {
				// As if the injector died between starting the hog and
				// recording it, and the hog outlived it.
				st, err := readState(e.in.dir, "k")
				if err != nil {
					t.Fatal(err)
				}
				st.Child = nil
				if err := e.in.dir.Write("k", st); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "rank exited", id: "numa.wrong-affinity", want: "gone", proof: "has exited",
			vanish: func(t *testing.T, e env) {
				id := procID{PID: e.rank, StartTicks: mustStart(t, e.rank)}
				_ = syscall.Kill(e.rank, syscall.SIGKILL)
				// Until every thread has ended: a leader already a zombie
				// while its threads still die is not gone yet.
				testutil.Eventually(t, 10*time.Second, "the target gone", func() bool { _, gone, _ := id.Gone(); return gone })
			}},
		{name: "rank's pid reused", id: "numa.wrong-affinity", want: "gone", proof: "now names a process started at tick", pinned: true,
			vanish: func(t *testing.T, e env) {
				st, err := readState(e.in.dir, "k")
				if err != nil {
					t.Fatal(err)
				}
				st.Target.StartTicks--
				if err := e.in.dir.Write("k", st); err != nil {
					t.Fatal(err)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, m := lookup(t, tc.id)
			e := env{tag: newTag(t)}
			o := hogOptions(t, e.tag)
			o.GPUNode, o.SysNodeDir = gpu0, root
			if tc.id == "numa.memory-pressure" {
				o.SysNodeDir = ""
				topo := liveTopology(t)
				o.GPUNode = func(context.Context, int) (int, error) { return topo.Nodes[0].ID, nil }
			}
			raw := map[string]string{"fraction": "0.1"}
			if tc.id == "numa.wrong-affinity" {
				rank := sleeper(t, "aff-"+e.tag)
				e.rank = rank.Process.Pid
				waitThreads(t, e.rank)
				raw = map[string]string{"pid": strconv.Itoa(e.rank)}
			}
			in, err := New(f, m, o)
			if err != nil {
				t.Fatal(err)
			}
			e.in = in.(*Injector)
			if err := in.Inject(context.Background(), "k", inventory.Ref{Kind: catalog.ScopeRank}, values(t, f, raw)); err != nil {
				t.Fatal(err)
			}
			mark := e.in.dir.Mark("k")
			tc.vanish(t, e)
			fresh, err := New(f, m, Options{StateDir: o.StateDir, Exec: o.Exec, termGrace: o.termGrace, SysNodeDir: o.SysNodeDir})
			if err != nil {
				t.Fatal(err)
			}
			err = fresh.Recover(context.Background(), "k")
			kept, _ := e.in.dir.Exists("k")
			switch tc.want {
			case "recovered":
				if err != nil || kept {
					t.Fatalf("Recover = %v (record kept %v), want success", err, kept)
				}
			case "gone":
				if !errors.Is(err, fault.ErrTargetGone) || errors.Is(err, fault.ErrUnproven) || !strings.Contains(err.Error(), tc.proof) || kept {
					t.Fatalf("Recover = %v (record kept %v), want ErrTargetGone with %q", err, kept, tc.proof)
				}
			}
			if left := tagged(t, e.tag); len(left) > 0 {
				t.Errorf("hogs left: %v", left)
			}
			if found, _ := childproc.Find(mark, os.Args[0]); len(found.Procs) > 0 {
				t.Errorf("marked processes left: %v", found.Procs)
			}
			if e.rank != 0 && exists(e.rank) {
				for tid, cpus := range threadMasks(t, e.rank) {
					if onlyOne := len(cpus) == 1 && cpus[0] == 1; onlyOne != tc.pinned {
						t.Errorf("thread %d may run on %v, want pinned %v", tid, cpus, tc.pinned)
					}
				}
			}
		})
	}
}

// TestRemoteMemoryRecoverOfAnEndedRank recovers remote-memory records
// (which this one-node machine cannot inject) whose rank has ended.
func TestRemoteMemoryRecoverOfAnEndedRank(t *testing.T) {
	t.Parallel()
	f, m := lookup(t, "numa.remote-memory")
	rank := sleeper(t, "pages-"+newTag(t))
	live := procID{PID: rank.Process.Pid, StartTicks: mustStart(t, rank.Process.Pid)}
	exited := sleeper(t, "pages-"+newTag(t))
	gone := procID{PID: exited.Process.Pid, StartTicks: mustStart(t, exited.Process.Pid)}
	_ = exited.Process.Kill()
	_ = exited.Wait()
	tests := []struct {
		name   string
		target procID
		proof  string
	}{
		{"rank exited", gone, "has exited: /proc/"},
		{"pid reused", procID{PID: live.PID, StartTicks: live.StartTicks - 1}, "now names a process started at tick"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in, err := New(f, m, Options{StateDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			d := in.(*Injector).dir
			target := tc.target
			if err := d.Write("k", state{Version: stateVersion, Key: "k", Fault: f.ID, Target: &target, ToNode: 1, BackNode: 0}); err != nil {
				t.Fatal(err)
			}
			err = in.Recover(context.Background(), "k")
			if !errors.Is(err, fault.ErrTargetGone) || !strings.Contains(err.Error(), tc.proof) {
				t.Fatalf("Recover = %v, want ErrTargetGone with %q", err, tc.proof)
			}
			if ok, _ := d.Exists("k"); ok {
				t.Error("record kept")
			}
		})
	}
}
