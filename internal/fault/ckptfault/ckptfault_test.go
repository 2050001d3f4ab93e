package ckptfault

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/faulttest"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/node/cgroup"
)

func TestKillWriterTearsTheCheckpoint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		byPID   bool
		signal  string
		wantSig syscall.Signal
	}{
		{name: "by job", signal: "SIGKILL", wantSig: syscall.SIGKILL},
		{name: "by pid", byPID: true, signal: "SIGKILL", wantSig: syscall.SIGKILL},
		{name: "SIGTERM", signal: "SIGTERM", wantSig: syscall.SIGTERM},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, job := realTempDir(t), jobName(t)
			w := start(t, "writer", job, dir)
			raw := map[string]string{"path": dir, "signal": tc.signal, "timeout": "20s"}
			ref := jobRef(job)
			if tc.byPID {
				raw["pid"], ref = strconv.Itoa(w.p.PID), jobRef("")
			}
			in := newInjector(t, idKillWriter, "")
			if err := in.Inject(context.Background(), "k", ref, faulttest.Values(t, idKillWriter, raw)); err != nil {
				t.Fatal(err)
			}
			if ws := w.wait(t, 10*time.Second); !ws.Signaled() || ws.Signal() != tc.wantSig {
				t.Fatalf("writer ended with %v, want killed by %v", ws, tc.wantSig)
			}
			b, err := in.dir.Read("k")
			if err != nil {
				t.Fatal(err)
			}
			st, err := parseState(b)
			if err != nil || st.Killed == nil || *st.Killed != w.p {
				t.Fatalf("record %+v, %v; want the writer %+v", st, err, w.p)
			}
			if !strings.HasSuffix(st.File, ".pt.tmp") || st.Pos <= 0 || st.Pos >= chunks*chunkSize {
				t.Fatalf("killed while writing %s at %d; want a .tmp part-written", st.File, st.Pos)
			}
			fi, err := os.Stat(st.File)
			if err != nil {
				t.Fatalf("the torn file is gone: %v", err)
			}
			if fi.Size() >= chunks*chunkSize {
				t.Errorf("torn file holds %d bytes, a whole checkpoint is %d", fi.Size(), chunks*chunkSize)
			}
			if _, err := os.Stat(strings.TrimSuffix(st.File, ".tmp")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the checkpoint being written was renamed into place: %v", err)
			}
			t.Logf("killed pid %d with %d of %d bytes of %s written", w.p.PID, fi.Size(), chunks*chunkSize, filepath.Base(st.File))
			if err := in.Recover(context.Background(), "k"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestKillWriterGivesUp(t *testing.T) {
	t.Parallel()
	dir, job := realTempDir(t), jobName(t)
	idle := start(t, "idle", job, dir)
	in := newInjector(t, idKillWriter, "")
	t0 := time.Now()
	err := in.Inject(context.Background(), "k", jobRef(job), faulttest.Values(t, idKillWriter, map[string]string{"path": dir, "timeout": "1s"}))
	if err == nil || !strings.Contains(err.Error(), "within 1s") {
		t.Fatalf("Inject = %v, want a timeout", err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("gave up after %s", d)
	}
	if ok, _ := in.dir.Exists("k"); ok {
		t.Error("a failed watch left a record")
	}
	if ok, _ := idle.p.Alive(); !ok {
		t.Error("the idle rank was killed")
	}
	// The engine's hold time bounds the watch too.
	ctx := fault.WithHoldUntil(context.Background(), time.Now().Add(300*time.Millisecond))
	t0 = time.Now()
	if err := in.Inject(ctx, "k", jobRef(job), faulttest.Values(t, idKillWriter, map[string]string{"path": dir})); err == nil {
		t.Fatal("Inject past the hold time succeeded")
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Errorf("hold time ignored: gave up after %s", d)
	}
}

func TestFillVolumeLeavesTheFreeSpaceAsked(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		free int64
	}{
		{"nothing free", 0},
		{"8 MiB free", 8 << 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := mountTmpfs(t, 64<<20)
			before, block, err := freeBytes(dir)
			if err != nil {
				t.Fatal(err)
			}
			in := newInjector(t, idFill, "")
			v := faulttest.Values(t, idFill, map[string]string{"path": dir, "free": strconv.FormatInt(tc.free, 10)})
			if err := in.Inject(context.Background(), "k", jobRef(""), v); err != nil {
				t.Fatal(err)
			}
			during, _, err := freeBytes(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("free %d bytes before, %d during (target %d, block %d)", before, during, tc.free, block)
			if during < tc.free || during > tc.free+fillSlack*block {
				t.Errorf("free %d bytes, want %d to %d", during, tc.free, tc.free+fillSlack*block)
			}
			// The job's next checkpoint cannot be written when nothing is free.
			if tc.free == 0 {
				err := os.WriteFile(filepath.Join(dir, "ckpt-1.pt"), make([]byte, 1<<20), 0o600)
				if !errors.Is(err, syscall.ENOSPC) {
					t.Errorf("writing 1 MiB on the filled volume = %v, want ENOSPC", err)
				}
				_ = os.Remove(filepath.Join(dir, "ckpt-1.pt"))
			}
			if err := in.Recover(context.Background(), "k"); err != nil {
				t.Fatal(err)
			}
			after, _, _ := freeBytes(dir)
			if after != before {
				t.Errorf("free %d bytes after recovery, %d before", after, before)
			}
		})
	}
}

func TestRefusesDirectoriesOutsideThePath(t *testing.T) {
	t.Parallel()
	real := realTempDir(t)
	link := filepath.Join(realTempDir(t), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(real, "ckpt-1.pt")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, wantErr string
	}{
		{"symlinked directory", link, "through a symlink"},
		{"a file", file, "not a directory"},
		{"missing", filepath.Join(real, "none"), "no such file"},
	}
	for _, id := range []string{idFill, idCorrupt} {
		for _, tc := range tests {
			t.Run(id+"/"+tc.name, func(t *testing.T) {
				in := newInjector(t, id, "")
				err := in.Inject(context.Background(), "k", jobRef(""), faulttest.Values(t, id, map[string]string{"path": tc.path}))
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Inject = %v, want an error with %q", err, tc.wantErr)
				}
				if ents, _ := os.ReadDir(real); len(ents) != 1 {
					t.Errorf("something was written in %s: %v", real, ents)
				}
			})
		}
	}
}

func TestCheckpointDirFromTheJobsEnvironment(t *testing.T) {
	t.Parallel()
	dir, job := realTempDir(t), jobName(t)
	start(t, "idle", job, dir, EnvCheckpointDir+"="+dir)
	got, err := checkpointDir(jobRef(job), faulttest.Values(t, idFill, nil))
	if err != nil || got != dir {
		t.Fatalf("checkpointDir = %q, %v; want %q", got, err, dir)
	}
	if _, err := checkpointDir(jobRef(job+"-none"), faulttest.Values(t, idFill, nil)); err == nil || !strings.Contains(err.Error(), EnvCheckpointDir) {
		t.Fatalf("checkpointDir of a job without ranks = %v", err)
	}
}

func sum(t *testing.T, file string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// writeCheckpoints writes the named files with pseudo-random content and
// returns the directory.
func writeCheckpoints(t *testing.T, size int, names ...string) string {
	t.Helper()
	dir := realTempDir(t)
	for i, n := range names {
		b := make([]byte, size)
		for j := range b {
			b[j] = byte(j*31 + i*7)
		}
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestCorruptNewestAndRestore(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		size  int
		bytes int
		want  int // bytes that must differ
	}{
		{"64 bytes of 1 MiB", 1 << 20, 64, 64},
		{"more bytes than the file", 100, 1000, 100},
		{"one byte", 4096, 1, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := writeCheckpoints(t, tc.size, "ckpt-2.pt", "ckpt-10.pt", "ckpt-9.pt", "ckpt-11.pt.tmp", "ckpt-x.pt")
			newest := filepath.Join(dir, "ckpt-10.pt")
			orig, _ := os.ReadFile(newest)
			others := map[string][32]byte{}
			for _, n := range []string{"ckpt-2.pt", "ckpt-9.pt", "ckpt-11.pt.tmp", "ckpt-x.pt"} {
				others[n] = sum(t, filepath.Join(dir, n))
			}
			in := newInjector(t, idCorrupt, "")
			v := faulttest.Values(t, idCorrupt, map[string]string{"path": dir, "bytes": strconv.Itoa(tc.bytes)})
			if err := in.Inject(context.Background(), "k", jobRef(""), v); err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(newest)
			diff := 0
			for i := range got {
				if got[i] != orig[i] {
					diff++
					if got[i] != ^orig[i] {
						t.Fatalf("byte %d is %#x, neither %#x nor its inverse", i, got[i], orig[i])
					}
				}
			}
			if diff != tc.want {
				t.Fatalf("%d bytes differ, want %d", diff, tc.want)
			}
			for n, s := range others {
				if sum(t, filepath.Join(dir, n)) != s {
					t.Errorf("%s changed; only the newest checkpoint may", n)
				}
			}
			if err := in.Recover(context.Background(), "k"); err != nil {
				t.Fatal(err)
			}
			if sum(t, newest) != sha256.Sum256(orig) {
				t.Fatal("checksum differs after recovery")
			}
		})
	}
}

func TestCorruptRecoverLeavesARewrittenCheckpointAlone(t *testing.T) {
	t.Parallel()
	dir := writeCheckpoints(t, 4096, "ckpt-1.pt")
	file := filepath.Join(dir, "ckpt-1.pt")
	in := newInjector(t, idCorrupt, "")
	if err := in.Inject(context.Background(), "k", jobRef(""), faulttest.Values(t, idCorrupt, map[string]string{"path": dir})); err != nil {
		t.Fatal(err)
	}
	// The job writes a new checkpoint of the same name (a new inode).
	fresh := bytes.Repeat([]byte{0x5a}, 4096)
	if err := os.WriteFile(file+".tmp", fresh, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".tmp", file); err != nil {
		t.Fatal(err)
	}
	if err := in.Recover(context.Background(), "k"); !errors.Is(err, fault.ErrTargetGone) {
		t.Fatalf("Recover = %v, want ErrTargetGone", err)
	}
	if got, _ := os.ReadFile(file); !bytes.Equal(got, fresh) {
		t.Fatal("recovery wrote into the new checkpoint")
	}
}

func TestSlowStorageRefusesWithoutABlockDevice(t *testing.T) {
	t.Parallel()
	dir := mountTmpfs(t, 1<<20)
	in := newInjector(t, idSlow, "")
	err := in.Inject(context.Background(), "k", jobRef("any"), faulttest.Values(t, idSlow, map[string]string{"path": dir}))
	if !errors.Is(err, ErrNoBlockDevice) || !strings.Contains(err.Error(), "fuse-latency") {
		t.Fatalf("Inject on tmpfs = %v, want ErrNoBlockDevice naming what would work", err)
	}
	if ok, _ := in.dir.Exists("k"); ok {
		t.Error("a refused inject left a record")
	}
}

// directRate measures a direct writer's bytes per second over d.
func directRate(t testing.TB, count string, d time.Duration) float64 {
	t.Helper()
	read := func() int64 {
		b, _ := os.ReadFile(count)
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n
	}
	c0, t0 := read(), time.Now()
	time.Sleep(d)
	return float64(read()-c0) / time.Since(t0).Seconds()
}

// kernelHolds checks that the kernel's files of the confinement's group
// hold every limit written into them: each word written is in what the
// file reads back (io.max reads back the limits not set as "max" too).
func kernelHolds(t *testing.T, c *cgroup.Confinement) {
	t.Helper()
	if len(c.Files) == 0 {
		t.Fatalf("group %s has no limits", c.Dir)
	}
	for _, f := range c.Files {
		b, err := os.ReadFile(filepath.Join(c.Mount, c.Dir, f.Name))
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Fields(string(b))
		for _, w := range strings.Fields(f.Value) {
			if !slices.Contains(got, w) {
				t.Errorf("%s of %s reads %q, want it to hold %q", f.Name, c.Dir, b, f.Value)
				break
			}
		}
	}
}

// TestSlowStorageThrottlesDirectWrites caps a direct-I/O writer on this
// machine's disk. It checks what the kernel was asked (the group's
// throttle file holds the cap, read back from the kernel) and a generous
// bound on what it did: capped, the writer never writes more than 20 %
// above the cap, whatever else the disk serves, and still writes; after
// recovery our group is gone and the writer writes on. How close the
// capped rate comes to the cap, and how fast the disk is without it,
// depend on the disk and its other load; BenchmarkSlowStorage reports
// them. Not parallel: other tests' disk traffic would starve the writer.
func TestSlowStorageThrottlesDirectWrites(t *testing.T) {
	dir := realTempDir(t)
	if _, err := blockDevice(dir); err != nil {
		t.Skipf("the temporary directory has no block device: %v", err)
	}
	if _, err := cgroup.Find("blkio"); err != nil {
		t.Skipf("no block-I/O cgroup controller: %v", err)
	}
	job := jobName(t)
	count := filepath.Join(t.TempDir(), "count")
	w := start(t, "direct", job, dir, countEnv+"="+count)
	time.Sleep(300 * time.Millisecond)
	before := directRate(t, count, time.Second)
	const bandwidth, factor = 40 << 20, 0.1 // a cap of 4 MiB/s
	in := newInjector(t, idSlow, "")
	v := faulttest.Values(t, idSlow, map[string]string{"path": dir, "factor": fmt.Sprint(factor), "bandwidth": strconv.Itoa(bandwidth)})
	if err := in.Inject(context.Background(), "k", jobRef(job), v); err != nil {
		t.Fatal(err)
	}
	b, _ := in.dir.Read("k")
	st, err := parseState(b)
	if err != nil || len(st.Confinements) != 1 {
		t.Fatalf("record %+v, %v", st, err)
	}
	want := float64(bandwidth) * factor
	for _, f := range st.Confinements[0].Files {
		if !strings.Contains(f.Value, strconv.Itoa(int(want))) {
			t.Errorf("limit %s = %q, want a cap of %.0f bytes/s", f.Name, f.Value, want)
		}
	}
	kernelHolds(t, st.Confinements[0])
	time.Sleep(300 * time.Millisecond)
	during := directRate(t, count, 2*time.Second)
	if err := in.Recover(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	after := directRate(t, count, time.Second)
	t.Logf("direct writes on %s: %.1f MiB/s before, %.2f capped (cap %.2f), %.1f after",
		st.Device, before/(1<<20), during/(1<<20), want/(1<<20), after/(1<<20))
	if during > 1.2*want {
		t.Errorf("capped rate %.2f MiB/s, over the cap of %.2f by more than 20%%", during/(1<<20), want/(1<<20))
	}
	if during <= 0 || after <= 0 {
		t.Errorf("the writer stopped: %.2f MiB/s capped, %.2f after recovery", during/(1<<20), after/(1<<20))
	}
	if st.Confinements[0].Exists() {
		t.Error("our group remains")
	}
	if ok, _ := w.p.Alive(); !ok {
		t.Error("the writer died")
	}
}

// BenchmarkSlowStorage reports a direct-I/O writer's rate under a cap of
// 4 MiB/s as a share of the cap (of-cap: 1 is exact), and the disk's
// direct rate without it (MiB/s-free). Each iteration is one second capped.
func BenchmarkSlowStorage(b *testing.B) {
	dir := realTempDir(b)
	if _, err := blockDevice(dir); err != nil {
		b.Skipf("the temporary directory has no block device: %v", err)
	}
	if _, err := cgroup.Find("blkio"); err != nil {
		b.Skipf("no block-I/O cgroup controller: %v", err)
	}
	job := jobName(b)
	count := filepath.Join(b.TempDir(), "count")
	start(b, "direct", job, dir, countEnv+"="+count)
	time.Sleep(300 * time.Millisecond)
	free := directRate(b, count, time.Second)
	const bandwidth, factor = 40 << 20, 0.1
	in := newInjector(b, idSlow, "")
	v := faulttest.Values(b, idSlow, map[string]string{"path": dir, "factor": fmt.Sprint(factor), "bandwidth": strconv.Itoa(bandwidth)})
	if err := in.Inject(context.Background(), "k", jobRef(job), v); err != nil {
		b.Fatal(err)
	}
	defer in.Recover(context.Background(), "k")
	time.Sleep(300 * time.Millisecond)
	var rates []float64
	for b.Loop() {
		rates = append(rates, directRate(b, count, time.Second))
	}
	slices.Sort(rates)
	b.ReportMetric(rates[len(rates)/2]/(bandwidth*factor), "of-cap")
	b.ReportMetric(free/(1<<20), "MiB/s-free")
}

func TestConformance(t *testing.T) {
	t.Parallel()
	t.Run(idFill, func(t *testing.T) {
		t.Parallel()
		faulttest.Run(t, func(t *testing.T) faulttest.Env {
			dir := mountTmpfs(t, 16<<20)
			in := newInjector(t, idFill, "")
			return faulttest.Env{
				Injector: in, Ref: jobRef(""), Values: faulttest.Values(t, idFill, map[string]string{"path": dir, "free": "1MiB"}),
				Applied: func(key string) bool {
					_, err := os.Stat(filepath.Join(dir, fillerPrefix+in.dir.Name(key)))
					return err == nil
				},
			}
		})
	})
	t.Run(idCorrupt, func(t *testing.T) {
		t.Parallel()
		faulttest.Run(t, func(t *testing.T) faulttest.Env {
			dir := writeCheckpoints(t, 8192, "ckpt-1.pt")
			file := filepath.Join(dir, "ckpt-1.pt")
			orig := sum(t, file)
			return faulttest.Env{
				Injector: newInjector(t, idCorrupt, ""), Ref: jobRef(""), Values: faulttest.Values(t, idCorrupt, map[string]string{"path": dir}),
				Applied: func(string) bool { return sum(t, file) != orig },
				Vanish:  func() { _ = os.Remove(file) },
			}
		})
	})
	t.Run(idKillWriter, func(t *testing.T) {
		t.Parallel()
		faulttest.Run(t, func(t *testing.T) faulttest.Env {
			dir, job := realTempDir(t), jobName(t)
			w := start(t, "writer", job, dir)
			return faulttest.Env{
				Injector: newInjector(t, idKillWriter, ""), Ref: jobRef(job),
				Values: faulttest.Values(t, idKillWriter, map[string]string{"path": dir, "timeout": "20s"}),
				Count: func() int {
					if ok, _ := w.p.Alive(); ok {
						return 0
					}
					return 1
				},
				Vanish: func() { _ = w.cmd.Process.Kill(); w.wait(t, 10*time.Second) },
			}
		})
	})
	t.Run(idSlow, func(t *testing.T) {
		t.Parallel()
		if _, err := cgroup.Find("blkio"); err != nil {
			t.Skipf("no block-I/O cgroup controller: %v", err)
		}
		faulttest.Run(t, func(t *testing.T) faulttest.Env {
			dir, job := realTempDir(t), jobName(t)
			if _, err := blockDevice(dir); err != nil {
				t.Skipf("no block device: %v", err)
			}
			w := start(t, "idle", job, dir)
			h, _ := cgroup.Find("blkio")
			return faulttest.Env{
				Injector: newInjector(t, idSlow, ""), Ref: jobRef(job),
				Values: faulttest.Values(t, idSlow, map[string]string{"path": dir, "bandwidth": "100MiB"}),
				Applied: func(string) bool {
					g, err := cgroup.GroupOf(h, w.p.PID, w.p.PID)
					return err == nil && strings.HasPrefix(filepath.Base(g), cgroup.NamePrefix)
				},
				Vanish: func() { _ = w.cmd.Process.Kill(); w.wait(t, 10*time.Second) },
			}
		})
	})
}

// TestRecoverAfterTheInjectorWasKilled injects from a helper process,
// SIGKILLs it, and recovers with a fresh injector in this process.
func TestRecoverAfterTheInjectorWasKilled(t *testing.T) {
	t.Parallel()
	t.Run(idFill, func(t *testing.T) {
		t.Parallel()
		dir := mountTmpfs(t, 32<<20)
		before, _, _ := freeBytes(dir)
		stateDir := t.TempDir()
		testutil.KillInjector(t, runHelper(t, idFill, stateDir, "crash-key", dir))
		in := newInjector(t, idFill, stateDir)
		filler := filepath.Join(dir, fillerPrefix+in.dir.Name("crash-key"))
		if _, err := os.Stat(filler); err != nil {
			t.Fatalf("no filler after the helper injected: %v", err)
		}
		if err := in.Recover(context.Background(), "crash-key"); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filler); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("filler still there: %v", err)
		}
		if after, _, _ := freeBytes(dir); after != before {
			t.Errorf("free %d bytes after recovery, %d before", after, before)
		}
	})
	t.Run(idCorrupt, func(t *testing.T) {
		t.Parallel()
		dir := writeCheckpoints(t, 1<<16, "ckpt-7.pt")
		file := filepath.Join(dir, "ckpt-7.pt")
		orig := sum(t, file)
		stateDir := t.TempDir()
		testutil.KillInjector(t, runHelper(t, idCorrupt, stateDir, "crash-key", dir))
		if sum(t, file) == orig {
			t.Fatal("the helper did not corrupt the checkpoint")
		}
		if err := newInjector(t, idCorrupt, stateDir).Recover(context.Background(), "crash-key"); err != nil {
			t.Fatal(err)
		}
		if sum(t, file) != orig {
			t.Fatal("checkpoint not restored")
		}
	})
}

// TestFillRecoverFindsAFillerWithoutItsSize covers a crash after the
// record and the fallocate but before anything else: the record names
// the filler from the key alone.
func TestFillRecoverFindsAFillerWithoutItsSize(t *testing.T) {
	t.Parallel()
	dir := mountTmpfs(t, 8<<20)
	in := newInjector(t, idFill, "")
	filler := filepath.Join(dir, fillerPrefix+in.dir.Name("k"))
	if err := in.dir.Write("k", state{Version: stateVersion, Key: "k", Fault: idFill, Dir: dir, File: filler}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filler, make([]byte, 4<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := in.Recover(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filler); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("filler remains: %v", err)
	}
}

func TestPickOffsets(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		seed       uint64
		n, size    int64
		wantLength int
	}{
		{"few of many", 1, 64, 1 << 20, 64},
		{"all", 2, 10, 10, 10},
		{"more than all", 3, 50, 10, 10},
		{"half", 4, 500, 1000, 500},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := pickOffsets(tc.seed, tc.n, tc.size)
			if len(got) != tc.wantLength {
				t.Fatalf("%d offsets, want %d", len(got), tc.wantLength)
			}
			for i, o := range got {
				if o < 0 || o >= tc.size || (i > 0 && o <= got[i-1]) {
					t.Fatalf("offsets %v not distinct, sorted and inside %d bytes", got, tc.size)
				}
			}
			if again := pickOffsets(tc.seed, tc.n, tc.size); fmt.Sprint(again) != fmt.Sprint(got) {
				t.Fatal("the same seed gave other offsets")
			}
		})
	}
}

func TestParseState(t *testing.T) {
	t.Parallel()
	base := `{"version":1,"key":"k","dir":"/ckpt","created":"2026-01-01T00:00:00Z",`
	tests := []struct {
		name, in, wantErr string
	}{
		{"fill", base + `"fault":"checkpoint.fill-volume","file":"/ckpt/.gpuchaos-fill-ab"}`, ""},
		{"corrupt", base + `"fault":"checkpoint.corrupt-newest","file":"/ckpt/ckpt-1.pt","size":10,"offsets":[1,5],"original":"AAE="}`, ""},
		{"kill watching", base + `"fault":"checkpoint.kill-writer","signal":"SIGKILL"}`, ""},
		{"filler elsewhere", base + `"fault":"checkpoint.fill-volume","file":"/etc/.gpuchaos-fill-ab"}`, "not directly in"},
		{"filler climbing out", base + `"fault":"checkpoint.fill-volume","file":"/ckpt/../etc/.gpuchaos-fill-ab"}`, "not directly in"},
		{"filler not ours", base + `"fault":"checkpoint.fill-volume","file":"/ckpt/ckpt-1.pt"}`, "not a filler"},
		{"offset past the end", base + `"fault":"checkpoint.corrupt-newest","file":"/ckpt/ckpt-1.pt","size":10,"offsets":[10],"original":"AA=="}`, "outside"},
		{"repeated offset", base + `"fault":"checkpoint.corrupt-newest","file":"/ckpt/ckpt-1.pt","size":10,"offsets":[1,1],"original":"AAE="}`, "repeated"},
		{"bytes short", base + `"fault":"checkpoint.corrupt-newest","file":"/ckpt/ckpt-1.pt","size":10,"offsets":[1,2],"original":"AA=="}`, "original bytes"},
		{"killed pid 1", base + `"fault":"checkpoint.kill-writer","killed":{"pid":1,"start_ticks":3}}`, "process"},
		{"relative dir", strings.Replace(base, `"/ckpt"`, `"ckpt"`, 1) + `"fault":"checkpoint.kill-writer"}`, "clean absolute"},
		{"foreign confinement", base + `"fault":"checkpoint.slow-storage","confinements":[{"version":1,"mount":"/sys/fs/cgroup/blkio","controller":"blkio","proc":{"pid":9,"start_ticks":1},"home":"/","dir":"/kubepods","files":[],"moves":[]}]}`, "not one of ours"},
		{"foreign fault", base + `"fault":"workload.kill-rank"}`, "not this package's"},
		{"version 2 with a reference", strings.Replace(base, `"version":1`, `"version":2`, 1) +
			`"fault":"checkpoint.corrupt-newest","file":"/ckpt/ckpt-1.pt","inode":7,"ref":{"dev":1,"inode":7,"handle_type":1,"handle":"AQI="},"size":10,"offsets":[1],"original":"AA=="}`, ""},
		{"reference to another inode", strings.Replace(base, `"version":1`, `"version":2`, 1) +
			`"fault":"checkpoint.corrupt-newest","file":"/ckpt/ckpt-1.pt","inode":7,"ref":{"dev":1,"inode":8},"size":10,"offsets":[1],"original":"AA=="}`, "reference to inode 8"},
		{"filler reference without an inode", strings.Replace(base, `"version":1`, `"version":2`, 1) +
			`"fault":"checkpoint.fill-volume","file":"/ckpt/.gpuchaos-fill-ab","ref":{"dev":1}}`, "without an inode"},
		{"other version", strings.Replace(base, `"version":1`, `"version":9`, 1) + `"fault":"checkpoint.kill-writer"}`, "version"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseState([]byte(tc.in))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("parseState = %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}

func FuzzParseState(f *testing.F) {
	f.Add([]byte(`{"version":1,"key":"k","dir":"/ckpt","fault":"checkpoint.fill-volume","file":"/ckpt/.gpuchaos-fill-ab"}`))
	f.Add([]byte(`{"version":1,"key":"k","dir":"/ckpt","fault":"checkpoint.corrupt-newest","file":"/ckpt/ckpt-1.pt","size":10,"offsets":[1,5],"original":"AAE="}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseState(b)
		if err != nil {
			return
		}
		// Nothing accepted may send a delete or a write outside the
		// directory, or past the recorded file's end.
		if st.File != "" && st.Fault != idKillWriter && filepath.Dir(st.File) != st.Dir {
			t.Fatalf("accepted file %q outside %q", st.File, st.Dir)
		}
		for _, o := range st.Offsets {
			if o < 0 || o >= st.Size {
				t.Fatalf("accepted offset %d of %d", o, st.Size)
			}
		}
	})
}

func FuzzCheckpointName(f *testing.F) {
	f.Add("ckpt-12.pt")
	f.Add("ckpt-12.pt.tmp")
	f.Fuzz(func(t *testing.T, name string) {
		m := checkpointName.FindStringSubmatch(name)
		if m == nil {
			return
		}
		if name != "ckpt-"+m[1]+".pt" || strings.HasSuffix(name, ".tmp") {
			t.Fatalf("%q taken for a checkpoint", name)
		}
		if _, err := strconv.ParseInt(m[1], 10, 64); err != nil && len(m[1]) < 19 {
			t.Fatalf("step %q of %q: %v", m[1], name, err)
		}
	})
}

// TestCatalogueHasTheParametersRead guards the parameters this package reads against a
// catalogue edit that renames them.
func TestCatalogueHasTheParametersRead(t *testing.T) {
	t.Parallel()
	want := map[string][]string{
		idKillWriter: {"path", "signal", "timeout", "pid"},
		idFill:       {"path", "free"},
		idSlow:       {"path", "factor", "bandwidth", "pid"},
		idCorrupt:    {"path", "bytes", "seed"},
	}
	for id, params := range want {
		f, _ := catalog.Lookup(id)
		for _, p := range params {
			if f.Param(p) == nil {
				t.Errorf("%s has no parameter %s", id, p)
			}
		}
	}
}
