package ckptfault

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/harness/ckptpodtest"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// The test binary plays more parts when re-executed, chosen by roleEnv:
// a rank that writes checkpoints slowly ("writer"), a rank that writes
// with O_DIRECT as fast as it may and counts the bytes ("direct"), a rank
// that writes nothing ("idle"), and a process that injects one fault,
// says "injected" and waits to be SIGKILLed ("injector").
const (
	roleEnv  = "CKPTFAULT_TEST_ROLE"
	dirEnv   = "CKPTFAULT_TEST_DIR"
	countEnv = "CKPTFAULT_TEST_COUNT"

	helperFaultEnv = "CKPTFAULT_HELPER_FAULT"
	helperStateEnv = "CKPTFAULT_HELPER_STATE"
	helperKeyEnv   = "CKPTFAULT_HELPER_KEY"
	helperJobEnv   = "CKPTFAULT_HELPER_JOB"
	helperPodEnv   = "CKPTFAULT_HELPER_POD"
)

// A writer's checkpoint is chunks × chunkSize bytes, written a chunk at a
// time with a pause between, so a write lasts about 100 ms.
const (
	chunks    = 32
	chunkSize = 4096
)

func TestMain(m *testing.M) {
	ckptpodtest.Main()
	switch os.Getenv(roleEnv) {
	case "writer":
		os.Exit(writer(os.Getenv(dirEnv)))
	case "direct":
		os.Exit(directWriter(os.Getenv(dirEnv), os.Getenv(countEnv)))
	case "idle":
		time.Sleep(time.Minute)
		os.Exit(0)
	case "injector":
		os.Exit(injectorHelper())
	}
	os.Exit(m.Run())
}

// writer writes ckpt-STEP.pt as the reference workload does: to
// ckpt-STEP.pt.tmp, synced, then renamed.
func writer(dir string) int {
	chunk := make([]byte, chunkSize)
	for step := 1; ; step++ {
		final := filepath.Join(dir, fmt.Sprintf("ckpt-%d.pt", step))
		f, err := os.Create(final + ".tmp")
		if err != nil {
			return 1
		}
		for i := range chunks {
			chunk[0] = byte(i)
			if _, err := f.Write(chunk); err != nil {
				return 1
			}
			time.Sleep(3 * time.Millisecond)
		}
		if f.Sync() != nil || f.Close() != nil || os.Rename(final+".tmp", final) != nil {
			return 1
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// directWriter writes 256 KiB blocks with O_DIRECT over a 16 MiB file,
// round and round, and keeps the bytes written in count.
func directWriter(dir, count string) int {
	fd, err := unix.Open(filepath.Join(dir, "direct.bin"), unix.O_WRONLY|unix.O_CREAT|unix.O_DIRECT, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "direct:", err)
		return 1
	}
	const block = 256 << 10
	buf, err := unix.Mmap(-1, 0, block, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return 1
	}
	c, err := os.OpenFile(count, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return 1
	}
	var total int64
	for {
		if _, err := unix.Pwrite(fd, buf, total%(16<<20)); err != nil {
			fmt.Fprintln(os.Stderr, "direct:", err)
			return 1
		}
		total += block
		if _, err := c.WriteAt(fmt.Appendf(nil, "%20d\n", total), 0); err != nil {
			return 1
		}
	}
}

// proc is a process the test started.
type proc struct {
	cmd  *exec.Cmd
	p    procfind.Proc
	done chan error
}

// start runs the test binary in role as rank 0 of job, writing to dir.
func start(t testing.TB, role, job, dir string, extra ...string) *proc {
	t.Helper()
	pr := &proc{done: make(chan error, 1)}
	pr.cmd = exec.Command(os.Args[0], "-test.run=^$")
	pr.cmd.Env = append(os.Environ(), append([]string{roleEnv + "=" + role, dirEnv + "=" + dir,
		procfind.EnvJob + "=" + job, "RANK=0", "LOCAL_RANK=0", "WORLD_SIZE=1"}, extra...)...)
	if err := pr.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { pr.done <- pr.cmd.Wait() }()
	t.Cleanup(func() {
		_ = pr.cmd.Process.Kill()
		err := <-pr.done
		pr.done <- err
	})
	var err error
	if pr.p, err = procfind.Identify(pr.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	// Until the exec, /proc shows the parent's environment, in which no
	// rank of the job is seen.
	environ := fmt.Sprintf("/proc/%d/environ", pr.p.PID)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if b, _ := os.ReadFile(environ); strings.Contains(string(b), roleEnv+"="+role+"\x00") || time.Now().After(deadline) {
			break
		}
	}
	return pr
}

// wait returns the process's end, or fails after d.
func (pr *proc) wait(t *testing.T, d time.Duration) syscall.WaitStatus {
	t.Helper()
	select {
	case err := <-pr.done:
		pr.done <- err
	case <-time.After(d):
		t.Fatalf("pid %d still runs after %s", pr.p.PID, d)
	}
	return pr.cmd.ProcessState.Sys().(syscall.WaitStatus)
}

func newInjector(t testing.TB, id, stateDir string) *Injector {
	t.Helper()
	f, ok := catalog.Lookup(id)
	if !ok {
		t.Fatalf("no fault %s", id)
	}
	if stateDir == "" {
		stateDir = t.TempDir()
	}
	in, err := New(f, f.Mechanism(mechanisms[id]), Options{StateDir: stateDir})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// realTempDir is a fresh directory named as the kernel prints it.
func realTempDir(t testing.TB) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func jobName(t testing.TB) string {
	return fmt.Sprintf("ckptfault-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
}

func jobRef(job string) inventory.Ref { return inventory.Ref{Kind: catalog.ScopeJob, Job: job} }

// injectorHelper injects helperFaultEnv on helperJobEnv's checkpoint
// directory (dirEnv), saying "starting" before (and taking the rest of
// its environment then, when a testutil.Spawner started it) and
// "injected" after, and waits to be killed.
func injectorHelper() int {
	testutil.Starting()
	id := os.Getenv(helperFaultEnv)
	f, _ := catalog.Lookup(id)
	in, err := New(f, f.Mechanism(mechanisms[id]), Options{StateDir: os.Getenv(helperStateEnv)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	raw := map[string]string{"path": os.Getenv(dirEnv)}
	if id == idFill {
		raw["free"] = "4MiB"
	}
	v, err := f.Resolve(raw)
	ctx := context.Background()
	if uid := os.Getenv(helperPodEnv); uid != "" {
		ctx = WithPod(ctx, Pod{UID: uid})
	}
	if err == nil {
		err = in.Inject(ctx, os.Getenv(helperKeyEnv), jobRef(os.Getenv(helperJobEnv)), v)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	testutil.Injected()
	return 0
}

// helperEnv is the environment of an injector helper, but for its role.
func helperEnv(t *testing.T, id, stateDir, key, dir string) []string {
	return []string{helperFaultEnv + "=" + id, helperStateEnv + "=" + stateDir,
		helperKeyEnv + "=" + key, dirEnv + "=" + dir, helperJobEnv + "=" + jobName(t)}
}

// runHelper starts the injector helper and returns once it has injected.
func runHelper(t *testing.T, id, stateDir, key, dir string) *exec.Cmd {
	t.Helper()
	return testutil.StartInjector(t, "^$", append(helperEnv(t, id, stateDir, key, dir), roleEnv+"=injector")...)
}

// mountTmpfs mounts a tmpfs of size bytes on a fresh directory, or skips
// the test when this machine does not let it.
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := realTempDir(t)
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.FormatInt(size, 10)); err != nil {
		t.Skipf("cannot mount a tmpfs here (root and CAP_SYS_ADMIN needed): %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}
