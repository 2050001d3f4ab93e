package ckptfault

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/fault/faulttest"
	"github.com/gpuchaos/gpuchaos/internal/node/cgroup"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// Outcomes a vanish case expects of Recover.
const (
	wantRecovered = "recovered"
	wantGone      = "gone"
	wantPending   = "pending"
	// wantFreed: gone with the proof when the kernel has freed the inode
	// by the time Recover looks, recovered (emptied and unlinked) while a
	// reference it does not control still holds it for a moment (a
	// writer's descriptor closing, a dying process): the space comes back
	// either way, and which one is a race the test cannot fix.
	wantFreed = "freed"
)

// checkOutcome checks Recover's error against want: nil, gone with proof
// (its text holding proof) and the record removed, or unproven with the
// record kept.
func checkOutcome(t *testing.T, in *Injector, key string, err error, want, proof string) {
	t.Helper()
	kept, _ := in.dir.Exists(key)
	switch want {
	case wantRecovered:
		if err != nil {
			t.Fatalf("Recover = %v, want success", err)
		}
	case wantFreed:
		if err != nil && (!errors.Is(err, fault.ErrTargetGone) || errors.Is(err, fault.ErrUnproven) || !strings.Contains(err.Error(), proof)) {
			t.Fatalf("Recover = %v, want success or ErrTargetGone with %q", err, proof)
		}
	case wantGone:
		if !errors.Is(err, fault.ErrTargetGone) || errors.Is(err, fault.ErrUnproven) || !strings.Contains(err.Error(), proof) {
			t.Fatalf("Recover = %v, want ErrTargetGone with %q", err, proof)
		}
	case wantPending:
		if !errors.Is(err, fault.ErrUnproven) || errors.Is(err, fault.ErrTargetGone) || !strings.Contains(err.Error(), proof) {
			t.Fatalf("Recover = %v, want ErrUnproven with %q", err, proof)
		}
		if !kept {
			t.Fatal("an unproven recovery dropped its record")
		}
		return
	}
	if kept {
		t.Fatalf("record kept after %s", want)
	}
}

// editRecord rewrites key's record through edit, as an older version or
// a filesystem without handles would have written it.
func editRecord(t *testing.T, in *Injector, key string, edit func(*state)) {
	t.Helper()
	b, err := in.dir.Read(key)
	if err != nil {
		t.Fatal(err)
	}
	st, err := parseState(b)
	if err != nil {
		t.Fatal(err)
	}
	edit(&st)
	if err := in.dir.Write(key, st); err != nil {
		t.Fatal(err)
	}
}

// waitFreed returns once the corrupted checkpoint's inode is freed: its
// handle no longer opens. Unlinking the last name frees it at once unless
// something still holds it open, and under load one thing can for a few
// milliseconds: a child process another test forks inherits every open
// file until its exec closes them (O_CLOEXEC). The inode is then deleted
// but held open, which Recover rightly restores, so a case about a freed
// inode waits for the state it is about.
func waitFreed(t *testing.T, in *Injector, key, dir string) {
	t.Helper()
	b, err := in.dir.Read(key)
	if err != nil {
		t.Fatal(err)
	}
	st, err := parseState(b)
	if err != nil {
		t.Fatal(err)
	}
	if st.Ref == nil || len(st.Ref.Handle) == 0 {
		return // no handle to ask; the case's want says what then
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mnt, err := mountFD(st.Ref, dir)
		if err != nil {
			t.Fatal(err)
		}
		fd, err := unix.OpenByHandleAt(mnt, unix.NewFileHandle(st.Ref.HandleType, st.Ref.Handle), unix.O_RDONLY|unix.O_CLOEXEC)
		unix.Close(mnt)
		if errors.Is(err, unix.ESTALE) {
			return
		}
		if err == nil {
			unix.Close(fd)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is still not freed 30 s after its last name went (open_by_handle_at: %v)", st.Ref, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCorruptRecoverWhereverTheCheckpointWent corrupts a checkpoint, makes
// it vanish from its path in each way a job or an operator can, and
// checks that Recover restores it wherever it still lives, says gone only
// when its inode is freed or every flipped byte overwritten, and keeps the
// entry pending when it cannot tell.
func TestCorruptRecoverWhereverTheCheckpointWent(t *testing.T) {
	t.Parallel()
	fresh := bytes.Repeat([]byte{0x5a}, 4096)
	// rewritten differs from writeCheckpoints' content and from its
	// inverse at every byte, so no flipped byte survives the rewrite.
	rewritten := make([]byte, 4096)
	for j := range rewritten {
		rewritten[j] = byte(j*31) ^ 0x0f
	}
	tests := []struct {
		name string
		// vanish acts on the corrupted checkpoint at file in dir; it
		// returns where the checkpoint's original bytes must be after
		// recovery ("" for nowhere) and a cleanup.
		vanish func(t *testing.T, in *Injector, dir, file string) (restoredAt string)
		want   string
		proof  string
		// check runs after Recover.
		check func(t *testing.T, dir, file string)
	}{
		{name: "left where it was", want: wantRecovered,
			vanish: func(t *testing.T, _ *Injector, _, file string) string { return file }},
		{name: "deleted", want: wantGone, proof: "no longer exists (open_by_handle_at: stale file handle)",
			vanish: func(t *testing.T, in *Injector, dir, file string) string {
				must(t, os.Remove(file))
				waitFreed(t, in, "k", dir)
				return ""
			}},
		{name: "deleted but held open", want: wantRecovered,
			vanish: func(t *testing.T, _ *Injector, _, file string) string {
				// The job still reads it: the kernel keeps the inode, and
				// our bytes in it, until it closes it.
				f, err := os.Open(file)
				must(t, err)
				t.Cleanup(func() { f.Close() })
				must(t, os.Remove(file))
				return "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
			}},
		{name: "renamed in its directory", want: wantRecovered,
			vanish: func(t *testing.T, _ *Injector, dir, file string) string {
				to := filepath.Join(dir, "ckpt-5.pt.bad")
				must(t, os.Rename(file, to))
				return to
			}},
		{name: "moved to another directory", want: wantRecovered,
			vanish: func(t *testing.T, _ *Injector, dir, file string) string {
				other := filepath.Join(filepath.Dir(dir), filepath.Base(dir)+"-quarantine")
				must(t, os.Mkdir(other, 0o700))
				t.Cleanup(func() { os.RemoveAll(other) })
				to := filepath.Join(other, "ckpt-5.pt")
				must(t, os.Rename(file, to))
				return to
			}},
		{name: "directory renamed", want: wantRecovered,
			vanish: func(t *testing.T, _ *Injector, dir, file string) string {
				to := dir + "-old"
				must(t, os.Rename(dir, to))
				t.Cleanup(func() { os.RemoveAll(to) })
				return filepath.Join(to, filepath.Base(file))
			}},
		{name: "directory removed", want: wantFreed, proof: "no longer exists",
			vanish: func(t *testing.T, in *Injector, dir, _ string) string {
				must(t, os.RemoveAll(dir))
				waitFreed(t, in, "k", filepath.Dir(dir))
				return ""
			}},
		{name: "replaced by a new checkpoint", want: wantGone, proof: "no longer exists",
			vanish: func(t *testing.T, in *Injector, dir, file string) string {
				must(t, os.WriteFile(file+".tmp", fresh, 0o600))
				must(t, os.Rename(file+".tmp", file))
				waitFreed(t, in, "k", dir)
				return ""
			},
			check: func(t *testing.T, _, file string) {
				if got, _ := os.ReadFile(file); !bytes.Equal(got, fresh) {
					t.Error("recovery wrote into the new checkpoint")
				}
			}},
		{name: "replaced while a hard link keeps it", want: wantRecovered,
			vanish: func(t *testing.T, _ *Injector, dir, file string) string {
				latest := filepath.Join(dir, "latest.pt")
				must(t, os.Link(file, latest))
				must(t, os.WriteFile(file+".tmp", fresh, 0o600))
				must(t, os.Rename(file+".tmp", file))
				return latest
			},
			check: func(t *testing.T, _, file string) {
				if got, _ := os.ReadFile(file); !bytes.Equal(got, fresh) {
					t.Error("recovery wrote into the new checkpoint")
				}
			}},
		{name: "rewritten in place", want: wantGone, proof: "none of the",
			vanish: func(t *testing.T, _ *Injector, _, file string) string {
				must(t, os.WriteFile(file, rewritten, 0o600)) // O_TRUNC: the same inode
				return ""
			},
			check: func(t *testing.T, _, file string) {
				if got, _ := os.ReadFile(file); !bytes.Equal(got, rewritten) {
					t.Error("recovery wrote into the rewritten checkpoint")
				}
			}},
		{name: "appended to", want: wantPending, proof: "still hold the flipped byte",
			vanish: func(t *testing.T, _ *Injector, _, file string) string {
				f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0)
				must(t, err)
				_, err = f.Write([]byte("more"))
				must(t, errors.Join(err, f.Close()))
				return ""
			}},
		{name: "version 1 record, renamed in its directory", want: wantRecovered,
			vanish: func(t *testing.T, in *Injector, dir, file string) string {
				editRecord(t, in, "k", func(st *state) { st.Version, st.Ref = 1, nil })
				to := filepath.Join(dir, "ckpt-5.pt.bad")
				must(t, os.Rename(file, to))
				return to
			}},
		{name: "no file handle, moved out of its directory", want: wantPending, proof: "no file handle",
			vanish: func(t *testing.T, in *Injector, dir, file string) string {
				editRecord(t, in, "k", func(st *state) { st.Ref.Handle, st.Ref.HandleType = nil, 0 })
				to := dir + "-elsewhere.pt"
				must(t, os.Rename(file, to))
				t.Cleanup(func() { os.Remove(to) })
				return ""
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := writeCheckpoints(t, 4096, "ckpt-5.pt")
			file := filepath.Join(dir, "ckpt-5.pt")
			orig, _ := os.ReadFile(file)
			in := newInjector(t, idCorrupt, "")
			v := faulttest.Values(t, idCorrupt, map[string]string{"path": dir, "bytes": "16"})
			must(t, in.Inject(context.Background(), "k", jobRef(""), v))
			at := tc.vanish(t, in, dir, file)
			err := in.Recover(context.Background(), "k")
			checkOutcome(t, in, "k", err, tc.want, tc.proof)
			if at != "" {
				if got, err := os.ReadFile(at); err != nil || !bytes.Equal(got, orig) {
					t.Errorf("checkpoint at %s not restored (%v)", at, err)
				}
			}
			if tc.check != nil {
				tc.check(t, dir, file)
			}
		})
	}
}

// TestFillRecoverWhereverTheFillerWent fills a volume, makes the filler
// vanish from its path in each way it can, and checks that Recover frees
// the space wherever the filler lives, says gone only when its inode is
// freed, and keeps the entry pending when it cannot tell.
func TestFillRecoverWhereverTheFillerWent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// vanish acts on the filler at filler, in dir on the tmpfs at
		// mnt; it returns a function to call once recovery is over (the
		// held descriptor closed), or nil.
		vanish func(t *testing.T, in *Injector, mnt, dir, filler string) func()
		want   string
		proof  string
	}{
		{name: "left where it was", want: wantRecovered,
			vanish: func(*testing.T, *Injector, string, string, string) func() { return nil }},
		{name: "deleted", want: wantFreed, proof: "no longer exists",
			vanish: func(t *testing.T, _ *Injector, _, _, filler string) func() { must(t, os.Remove(filler)); return nil }},
		{name: "renamed", want: wantRecovered,
			vanish: func(t *testing.T, _ *Injector, _, dir, filler string) func() {
				must(t, os.Rename(filler, filepath.Join(dir, "big.bin")))
				return nil
			}},
		{name: "moved to another directory", want: wantRecovered,
			vanish: func(t *testing.T, _ *Injector, mnt, _, filler string) func() {
				must(t, os.Mkdir(filepath.Join(mnt, "other"), 0o700))
				must(t, os.Rename(filler, filepath.Join(mnt, "other", "big.bin")))
				return nil
			}},
		{name: "deleted but held open", want: wantRecovered,
			vanish: func(t *testing.T, _ *Injector, _, _, filler string) func() {
				f, err := os.Open(filler)
				must(t, err)
				must(t, os.Remove(filler))
				return func() { f.Close() }
			}},
		{name: "directory removed", want: wantFreed, proof: "no longer exists",
			vanish: func(t *testing.T, _ *Injector, _, dir, _ string) func() { must(t, os.RemoveAll(dir)); return nil }},
		{name: "filesystem unmounted", want: wantPending, proof: "is mounted at neither",
			vanish: func(t *testing.T, _ *Injector, mnt, _, filler string) func() {
				// Kept busy by a descriptor, so the filler lives on, unreachable.
				f, err := os.Open(filler)
				must(t, err)
				must(t, unix.Unmount(mnt, unix.MNT_DETACH))
				return func() { f.Close() }
			}},
		{name: "without O_TMPFILE, killed before the filler was recorded, its path empty", want: wantPending, proof: "may be left",
			vanish: func(t *testing.T, in *Injector, _, dir, filler string) func() {
				// Nothing at its path: never created, or created empty and
				// moved since, which the record cannot tell apart.
				editRecord(t, in, "k", func(st *state) { st.Ref = nil })
				to := filepath.Join(dir, "moved.bin")
				must(t, os.Rename(filler, to))
				return func() { os.Remove(to) }
			}},
		{name: "without O_TMPFILE, killed before the filler was recorded", want: wantRecovered,
			vanish: func(t *testing.T, in *Injector, _, _, _ string) func() {
				editRecord(t, in, "k", func(st *state) { st.Ref = nil })
				return nil
			}},
		{name: "version 1 record, filler moved", want: wantPending, proof: "version 1 record names no inode",
			vanish: func(t *testing.T, in *Injector, _, dir, filler string) func() {
				editRecord(t, in, "k", func(st *state) { st.Version, st.Ref = 1, nil })
				to := filepath.Join(dir, "big.bin")
				must(t, os.Rename(filler, to))
				return func() { os.Remove(to) }
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mnt := mountTmpfs(t, 16<<20)
			dir := filepath.Join(mnt, "ckpt")
			must(t, os.Mkdir(dir, 0o700))
			before, _, _ := freeBytes(mnt)
			in := newInjector(t, idFill, "")
			filler := filepath.Join(dir, fillerPrefix+in.dir.Name("k"))
			must(t, in.Inject(context.Background(), "k", jobRef(""), faulttest.Values(t, idFill, map[string]string{"path": dir, "free": "2MiB"})))
			done := tc.vanish(t, in, mnt, dir, filler)
			err := in.Recover(context.Background(), "k")
			checkOutcome(t, in, "k", err, tc.want, tc.proof)
			if done != nil {
				done()
			}
			if tc.want == wantPending {
				return
			}
			if after, _, _ := freeBytes(mnt); after != before {
				t.Errorf("%d bytes free after recovery, %d before", after, before)
			}
			_ = filepath.WalkDir(mnt, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					t.Errorf("left behind: %s", p)
				}
				return nil
			})
		})
	}
}

// TestSlowRecoverNeedsTheHierarchyMounted checks that a group missing
// from a path that holds no cgroup hierarchy any more (a recovery run in
// another mount namespace) is not taken for a group released.
func TestSlowRecoverNeedsTheHierarchyMounted(t *testing.T) {
	t.Parallel()
	in := newInjector(t, idSlow, "")
	self, err := procfind.Identify(os.Getpid())
	must(t, err)
	c := &cgroup.Confinement{Hierarchy: cgroup.Hierarchy{Version: cgroup.V1, Mount: t.TempDir(), Controller: "blkio"},
		Proc: self, Home: "/", Dir: "/" + cgroup.NamePrefix + "k-0", Moves: []cgroup.Move{{ID: self.PID, From: "/"}}}
	must(t, in.dir.Write("k", state{Version: stateVersion, Key: "k", Fault: idSlow, Dir: t.TempDir(), Device: "8:0", BPS: 4096,
		Confinements: []*cgroup.Confinement{c}}))
	checkOutcome(t, in, "k", in.Recover(context.Background(), "k"), wantPending, "not the cgroup v1 hierarchy")
}

// TestRecordReferences checks that a record carries what recovery follows
// a file by, and that it survives its JSON.
func TestRecordReferences(t *testing.T) {
	t.Parallel()
	dir := writeCheckpoints(t, 4096, "ckpt-1.pt")
	in := newInjector(t, idCorrupt, "")
	must(t, in.Inject(context.Background(), "k", jobRef(""), faulttest.Values(t, idCorrupt, map[string]string{"path": dir})))
	b, err := in.dir.Read("k")
	must(t, err)
	st, err := parseState(b)
	must(t, err)
	if st.Ref == nil || st.Ref.Inode != st.Inode || len(st.Ref.Handle) == 0 {
		t.Fatalf("record's reference %+v for inode %d", st.Ref, st.Inode)
	}
	var raw map[string]any
	must(t, json.Unmarshal(b, &raw))
	if raw["version"] != float64(stateVersion) {
		t.Errorf("record version %v, want %d", raw["version"], stateVersion)
	}
	must(t, in.Recover(context.Background(), "k"))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
