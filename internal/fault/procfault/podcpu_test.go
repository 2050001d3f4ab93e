package procfault

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/faulttest"
	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/node/cgroup"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind/podproc/podproctest"
)

// podContainerGroup makes a pod with one app container in kubelet's
// layout in the real cpu hierarchy and returns the hierarchy and the
// container's group. It fails in CI, and skips elsewhere, unless root can.
func podContainerGroup(t *testing.T) (cgroup.Hierarchy, podproctest.KubePod) {
	t.Helper()
	if os.Geteuid() != 0 {
		kubetest.Missing(t, "not root: a pod's cgroups need root")
	}
	h, err := cgroup.Find("cpu")
	if err != nil {
		kubetest.Missing(t, fmt.Sprintf("no cpu cgroup controller: %v", err))
	}
	uid, id := podproctest.RandomIDs(t)
	return h, podproctest.NewKubePod(t, h.Version == cgroup.V2, h.Mount, "/", uid, id, "cpu")
}

// quotaFiles reads the container group's own quota files.
func quotaFiles(t *testing.T, h cgroup.Hierarchy, dir string) []cgroup.File {
	t.Helper()
	var out []cgroup.File
	for _, name := range quotaFileNames(h.Version) {
		b, err := os.ReadFile(filepath.Join(h.Mount, dir, name))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, cgroup.File{Name: name, Value: strings.TrimSpace(string(b))})
	}
	return out
}

// setQuota writes a quota that is not the default "max", so that a
// recovery that wrote "max" back instead of what was there shows.
func setQuota(t *testing.T, h cgroup.Hierarchy, dir string) []cgroup.File {
	t.Helper()
	q := &podQuota{Hierarchy: h, Dir: dir}
	files := []cgroup.File{{Name: "cpu.max", Value: "150000 50000"}}
	if h.Version == cgroup.V1 {
		files = []cgroup.File{{Name: "cpu.cfs_period_us", Value: "50000"}, {Name: "cpu.cfs_quota_us", Value: "150000"}}
	}
	if err := q.write(files); err != nil {
		t.Fatal(err)
	}
	return files
}

func podInjector(t *testing.T) *Injector { return podInjectorIn(t, t.TempDir()) }

// podInjectorIn is the node agent's cgroup-cpu injector on state dir.
func podInjectorIn(t *testing.T, dir string) *Injector {
	t.Helper()
	f, _ := catalog.Lookup(idStraggler)
	o := testOptions(dir)
	o.PodCgroups = true
	in, err := New(f, f.Mechanism(mechCgroupCPU), o)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// A cgroup-cpu straggler on a rank in a pod sets the quota of the
// container's own group, leaving the rank in it (kubelet's group keeps
// its processes), and Recover writes back exactly the quota that was
// there, here one that is not the default. Measured (cpus 0) or given,
// the quota is cpus/slowdown of a 100 ms period.
func TestStragglerInPodSetsTheContainerQuota(t *testing.T) {
	for _, tc := range []struct {
		name string
		cpus string
	}{{"given cpus", "1"}, {"measured", "0"}} {
		t.Run(tc.name, func(t *testing.T) {
			h, pod := podContainerGroup(t)
			job := jobName(t)
			r := startRank(t, job, 0, false)
			podproctest.Join(t, h.Mount, pod.Container, r.proc.PID)
			before := setQuota(t, h, pod.Container)
			in := podInjector(t)
			v := faulttest.Values(t, idStraggler, map[string]string{"slowdown": "2", "cpus": tc.cpus, "window": "200ms", "pid": fmt.Sprint(r.proc.PID)})
			if err := in.Inject(context.Background(), "k", ref(job, 0), v); err != nil {
				t.Fatal(err)
			}
			st := record(t, in, "k")
			if st.PodQuota == nil || st.Confinement != nil {
				t.Fatalf("record %+v: want a pod quota and no confinement", st)
			}
			if g, err := cgroup.GroupOf(h, r.proc.PID, r.proc.PID); err != nil || g != pod.Container {
				t.Fatalf("the rank is in group %q (%v), want still its container's %s", g, err, pod.Container)
			}
			quota := int64(100000 * st.CPUs / 2)
			want := []cgroup.File{{Name: "cpu.max", Value: fmt.Sprintf("%d 100000", quota)}}
			if h.Version == cgroup.V1 {
				want = []cgroup.File{{Name: "cpu.cfs_period_us", Value: "100000"}, {Name: "cpu.cfs_quota_us", Value: fmt.Sprint(quota)}}
			}
			if got := quotaFiles(t, h, pod.Container); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("the container group holds %v after Inject (cpus %.3f), want %v", got, st.CPUs, want)
			}
			if fmt.Sprint(st.PodQuota.Before) != fmt.Sprint(before) {
				t.Errorf("recorded %v as the quota before, want %v", st.PodQuota.Before, before)
			}
			if err := in.Recover(context.Background(), "k"); err != nil {
				t.Fatal(err)
			}
			if got := quotaFiles(t, h, pod.Container); fmt.Sprint(got) != fmt.Sprint(before) {
				t.Errorf("the container group holds %v after Recover, want %v as before", got, before)
			}
			if _, err := in.dir.Read("k"); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("record after Recover: %v, want none", err)
			}
		})
	}
}

// A container whose group is gone (it ended) took its quota with it:
// Recover says so with the proof, as ErrTargetGone and not ErrUnproven,
// and forgets the record.
func TestStragglerInPodRecoverAfterTheContainerEnded(t *testing.T) {
	h, pod := podContainerGroup(t)
	job := jobName(t)
	r := startRank(t, job, 0, false)
	podproctest.Join(t, h.Mount, pod.Container, r.proc.PID)
	in := podInjector(t)
	v := faulttest.Values(t, idStraggler, map[string]string{"slowdown": "2", "cpus": "1", "pid": fmt.Sprint(r.proc.PID)})
	if err := in.Inject(context.Background(), "k", ref(job, 0), v); err != nil {
		t.Fatal(err)
	}
	// The runtime removes an ended container's group; its processes are
	// gone first, so the rank leaves it here.
	podproctest.Join(t, h.Mount, filepath.Dir(pod.Container), r.proc.PID)
	if err := os.Remove(filepath.Join(h.Mount, pod.Container)); err != nil {
		t.Fatal(err)
	}
	err := in.Recover(context.Background(), "k")
	if !errors.Is(err, fault.ErrTargetGone) || errors.Is(err, fault.ErrUnproven) || !strings.Contains(err.Error(), pod.Container) {
		t.Fatalf("Recover: %v, want ErrTargetGone naming group %s", err, pod.Container)
	}
	if _, err := in.dir.Read("k"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record after Recover: %v, want none", err)
	}
}

// A container that runs two ranks shares one quota between them: a
// straggler there would slow both, so Inject refuses, naming the other
// rank, and changes nothing.
func TestStragglerInPodRefusesAContainerOfTwoRanks(t *testing.T) {
	h, pod := podContainerGroup(t)
	job := jobName(t)
	r0, r1 := startRank(t, job, 0, false), startRank(t, job, 1, false)
	podproctest.Join(t, h.Mount, pod.Container, r0.proc.PID)
	podproctest.Join(t, h.Mount, pod.Container, r1.proc.PID)
	before := setQuota(t, h, pod.Container)
	in := podInjector(t)
	v := faulttest.Values(t, idStraggler, map[string]string{"slowdown": "2", "cpus": "1", "pid": fmt.Sprint(r0.proc.PID)})
	err := in.Inject(context.Background(), "k", ref(job, 0), v)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("also runs rank 1 (pid %d)", r1.proc.PID)) {
		t.Fatalf("Inject: %v, want a refusal naming rank 1", err)
	}
	if got := quotaFiles(t, h, pod.Container); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("the container group holds %v after a refused Inject, want %v", got, before)
	}
	if _, err := in.dir.Read("k"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record after a refused Inject: %v, want none", err)
	}
}

// The crash suite on the pod path: an injector SIGKILLed at a random
// moment of a cgroup-cpu straggler on a rank in a pod (before, during or
// after it writes the container group's quota), its rank sometimes ended
// too, is recovered by a fresh injector from the record alone: the
// container group holds exactly its quota from before and still holds
// the rank, or the recovery is pending with its record kept.
func TestStragglerInPodRecoveryAfterSIGKILLAtRandom(t *testing.T) {
	h, pod := podContainerGroup(t)
	rng := testutil.Rand(t)
	dir := t.TempDir()
	job := jobName(t)
	var r *rank
	fresh := func() {
		r = startRank(t, job, 0, false)
		podproctest.Join(t, h.Mount, pod.Container, r.proc.PID)
	}
	fresh()
	before := setQuota(t, h, pod.Container)
	sp := testutil.NewSpawner(t, "^$", roleEnv+"=injector")
	tally := testutil.Tally{}
	for round := range testutil.CrashRounds {
		key := fmt.Sprintf("crash-%d", round)
		moment := testutil.Moment(rng, 100*time.Millisecond)
		injected := sp.KillAt(t, moment, helperFaultEnv+"="+idStraggler, helperMechEnv+"="+mechCgroupCPU, helperStateEnv+"="+dir,
			helperKeyEnv+"="+key, helperPIDEnv+"="+strconv.Itoa(r.proc.PID), helperCPUsEnv+"=1", helperPodEnv+"=1")
		in := podInjectorIn(t, dir)
		way := vanishRank(t, rng, r, in, key, mechCgroupCPU)
		err := in.Recover(context.Background(), key)
		what := fmt.Sprintf("round %d: killed after %s (injected %v), %s", round, moment, injected, way)
		diff := func() string {
			var d []string
			if got := quotaFiles(t, h, pod.Container); fmt.Sprint(got) != fmt.Sprint(before) {
				d = append(d, fmt.Sprintf("quota %v, was %v", got, before))
			}
			if alive, _ := r.proc.Alive(); alive {
				if g, err := cgroup.GroupOf(h, r.proc.PID, r.proc.PID); err == nil && g != pod.Container {
					d = append(d, "rank in "+g)
				}
			}
			return strings.Join(d, "; ")
		}
		kept := func() bool { ok, _ := in.dir.Exists(key); return ok }
		verdict := testutil.CheckRecovery(t, what, err, diff, kept, "is gone")
		tally.Add(way + "/" + verdict)
		if t.Failed() {
			break
		}
		if alive, _ := r.proc.Alive(); !alive || verdict == "pending" {
			_ = syscall.Kill(r.proc.PID, syscall.SIGKILL)
			fresh()
		}
	}
	t.Logf("%d rounds: %s", testutil.CrashRounds, tally)
}
