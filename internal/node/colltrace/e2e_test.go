package colltrace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
)

// requireTracing skips unless this process can load BPF programs and the
// kernel has uprobes.
func requireTracing(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("collective tracing needs root (CAP_BPF and CAP_PERFMON); run the tests as root to trace the stand-in")
	}
	_, pmu := os.Stat("/sys/bus/event_source/devices/uprobe")
	_, tracefs := os.Stat("/sys/kernel/tracing/uprobe_events")
	if pmu != nil && tracefs != nil {
		t.Skip("the kernel has no uprobe support (no uprobe PMU, no tracefs uprobe_events)")
	}
}

// buildStandIn compiles the stand-in libnccl.so.2 and rank program into a
// temporary directory and returns it.
func buildStandIn(t *testing.T) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found: the end-to-end test builds a stand-in libnccl.so.2 with gcc")
	}
	dir := t.TempDir()
	src, err := filepath.Abs("testdata/standin")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-shared", "-fPIC", "-O1", "-Wl,-soname,libnccl.so.2", "-o", filepath.Join(dir, "libnccl.so.2"), filepath.Join(src, "nccl.c")},
		{"-O1", "-o", filepath.Join(dir, "rank"), filepath.Join(src, "rank.c"), "-L" + dir, "-l:libnccl.so.2", "-Wl,-rpath," + dir},
	} {
		if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

// startRanks starts one stand-in process per delay (rank i sleeping
// delays[i] ms more per step) and waits until each has mapped the library.
func startRanks(t *testing.T, dir, name string, delays ...int) []*exec.Cmd {
	t.Helper()
	var cmds []*exec.Cmd
	for r, d := range delays {
		cmd := exec.Command(filepath.Join(dir, "rank"), strconv.Itoa(r), strconv.Itoa(d), "1000000")
		cmd.Env = append(os.Environ(), "RANK="+strconv.Itoa(r), "STANDIN_NRANKS="+strconv.Itoa(len(delays)),
			"STANDIN_SHM="+filepath.Join(dir, "shm-"+name))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	t.Cleanup(func() {
		for _, c := range cmds {
			c.Process.Kill() // works on a stopped process too
			c.Wait()
		}
	})
	for _, c := range cmds {
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("pid %d to map libnccl.so", c.Process.Pid), func() bool {
			_, err := ProcLib("", c.Process.Pid, "libnccl.so")
			return err == nil
		})
	}
	return cmds
}

func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestTraceStandIn traces two stand-in ranks through real uprobes: one
// delayed by 30 ms per step, none delayed, and one stopped with SIGSTOP.
func TestTraceStandIn(t *testing.T) {
	requireTracing(t)
	dir := buildStandIn(t)
	fds := countFDs(t)
	const hangTimeout = time.Second
	tests := []struct {
		name   string
		delays []int
		// byPID finds the library through the ranks' maps instead of
		// naming it.
		byPID bool
		// stop is the rank to SIGSTOP once tracing runs, -1 for none.
		stop  int
		trace time.Duration
		check func(t *testing.T, r Report, pids []int)
	}{
		{
			name: "rank 1 delayed 30ms", delays: []int{0, 30}, stop: -1, trace: 2500 * time.Millisecond,
			check: func(t *testing.T, r Report, pids []int) {
				if len(r.Findings) != 1 || r.Findings[0].Kind != KindStraggler || r.Findings[0].Rank.Label != "rank 1" || r.Findings[0].Rank.PID != pids[1] {
					t.Fatalf("findings %+v, want rank 1 (pid %d) as the only straggler", r.Findings, pids[1])
				}
				// The delayed rank sleeps 30 ms more before each call; its
				// lag is that, give or take the stand-in's 50 µs polling
				// and timer slack.
				if lag := r.Findings[0].Value; lag < 27*time.Millisecond || lag > 33*time.Millisecond {
					t.Errorf("median lag %v, want 30ms ± 3ms", lag)
				}
			},
		},
		{
			name: "no rank delayed", delays: []int{0, 0}, byPID: true, stop: -1, trace: 1500 * time.Millisecond,
			check: func(t *testing.T, r Report, _ []int) {
				if len(r.Findings) != 0 {
					t.Errorf("findings %+v, want none", r.Findings)
				}
				if r.Collectives < 64 {
					t.Errorf("%d collectives judged, want a full window of 64", r.Collectives)
				}
			},
		},
		{
			name: "rank 1 stopped", delays: []int{0, 0}, byPID: true, stop: 1, trace: hangTimeout + 1200*time.Millisecond,
			check: func(t *testing.T, r Report, pids []int) {
				if len(r.Findings) != 1 || r.Findings[0].Kind != KindHung || r.Findings[0].Rank.PID != pids[1] {
					t.Fatalf("findings %+v, want rank 1 (pid %d) hung", r.Findings, pids[1])
				}
				if r.Ranks[1].Behind < 1 || r.Ranks[1].BehindFor < hangTimeout {
					t.Errorf("rank 1 behind %d calls for %v", r.Ranks[1].Behind, r.Ranks[1].BehindFor)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmds := startRanks(t, dir, strconv.Itoa(len(tt.name)), tt.delays...)
			var pids []int
			for _, c := range cmds {
				pids = append(pids, c.Process.Pid)
			}
			opts := Options{PIDs: pids, Analysis: AnalysisOptions{HangTimeout: hangTimeout}}
			if !tt.byPID {
				opts.Lib = filepath.Join(dir, "libnccl.so.2")
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tr, err := Start(ctx, opts)
			if err != nil {
				t.Fatalf("start tracer: %v", err)
			}
			defer tr.Close()
			if got := tr.Attached(); len(got) != 4 {
				t.Errorf("attached %v, want the stand-in's four collectives", got)
			}
			if tt.stop >= 0 {
				time.Sleep(200 * time.Millisecond)
				if err := cmds[tt.stop].Process.Signal(syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				time.Sleep(tt.trace - 200*time.Millisecond)
			} else {
				time.Sleep(tt.trace)
			}
			r := tr.Report()
			for _, rr := range r.Ranks {
				t.Logf("%s: %d calls, last in %d/%d, median lag %v, max lag %v, behind %d for %v",
					rr.Rank, rr.Calls, rr.Last, r.Collectives, rr.MedianLag, rr.MaxLag, rr.Behind, rr.BehindFor)
			}
			t.Logf("median spread %v, max %v, lost %d, notes %q", r.MedianSpread, r.MaxSpread, r.Lost, r.Notes)
			if r.Lost != 0 {
				t.Errorf("%d events lost", r.Lost)
			}
			if len(r.Ranks) != 2 {
				t.Fatalf("ranks %+v, want the two stand-ins", r.Ranks)
			}
			tt.check(t, r, pids)
			if err := tr.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
			if err := tr.Close(); err != nil {
				t.Errorf("second close: %v", err)
			}
		})
	}
	if after := countFDs(t); after != fds {
		t.Errorf("%d open files before tracing, %d after: the tracer leaks", fds, after)
	}
}

func TestStartErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"nothing to trace", Options{}, "neither a library nor a pid"},
		{"unknown symbol", Options{Lib: "/bin/true", Symbols: []string{"ncclFoo"}}, "ncclFoo is not an NCCL function"},
		{"missing library", Options{Lib: "/nonexistent/libnccl.so.2"}, "stat /nonexistent/libnccl.so.2"},
		{"pid without the library", Options{PIDs: []int{os.Getpid()}}, "libnccl.so"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr, err := Start(context.Background(), tt.opts)
			if err == nil {
				tr.Close()
				t.Fatal("started")
			}
			if !contains(err.Error(), tt.want) {
				t.Errorf("error %q, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestStartLibraryWithoutNCCL attaches to a file exporting none of the
// symbols: Start fails and leaves nothing open.
func TestStartLibraryWithoutNCCL(t *testing.T) {
	requireTracing(t)
	fds := countFDs(t)
	_, err := Start(context.Background(), Options{Lib: "/bin/true"})
	if err == nil || !contains(err.Error(), "is exported by") {
		t.Errorf("error %v, want none exported", err)
	}
	if errors.Is(err, ErrNotMapped) {
		t.Errorf("error %v is not about maps", err)
	}
	if after := countFDs(t); after != fds {
		t.Errorf("%d open files before, %d after a failed start", fds, after)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
