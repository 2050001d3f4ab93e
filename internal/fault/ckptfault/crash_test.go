package ckptfault

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/harness/ckptpodtest"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
)

// TestRecoveryAfterSIGKILLAtRandom is the recovery property: an injector
// killed at a random moment (from before its record is written to long
// after the fault is in), its target then vanishing in one of its ways or
// not, is recovered by a fresh injector, as the next run would, to the
// state the system would have had without the fault, or left pending
// with a reason. Never recovered or gone over a leftover.
//
// corrupt-newest acts on a checkpoint directory with a shadow beside it:
// every vanishing is done to both, so the shadow is what the directory
// must hold after recovery. fill-volume acts on a small tmpfs, whose free
// space and files must be as before.
func TestRecoveryAfterSIGKILLAtRandom(t *testing.T) {
	t.Parallel()
	rng := testutil.Rand(t)
	stateDir := t.TempDir()
	mnt := mountTmpfs(t, 16<<20)
	base := realTempDir(t)
	tally := testutil.Tally{}
	start := time.Now()
	sp := testutil.NewSpawner(t, "^$", roleEnv+"=injector")
	for round := range testutil.CrashRounds {
		key := fmt.Sprintf("crash-%d", round)
		var way string
		if rng.IntN(2) == 0 {
			way = corruptRound(t, sp, rng, round, key, stateDir, filepath.Join(base, fmt.Sprint(round)))
		} else {
			way = fillRound(t, sp, rng, round, key, stateDir, mnt)
		}
		tally.Add(way)
		if t.Failed() {
			break
		}
	}
	t.Logf("%d rounds in %s: %s", testutil.CrashRounds, time.Since(start).Round(time.Millisecond), tally)
}

// A corruptVanish is done to the checkpoint directory (dir/ckpt, the
// checkpoint ckpt-3.pt in it) and to its shadow alike. held, when not
// nil, gets a descriptor the op keeps open, read back after recovery.
type corruptVanish struct {
	name string
	do   func(dir string, held *[]*os.File) error
}

var corruptVanishes = []corruptVanish{
	{"none", func(string, *[]*os.File) error { return nil }},
	{"deleted", func(dir string, _ *[]*os.File) error { return rmIfThere(filepath.Join(dir, "ckpt", "ckpt-3.pt")) }},
	{"deleted but held open", func(dir string, held *[]*os.File) error {
		f, err := os.Open(filepath.Join(dir, "ckpt", "ckpt-3.pt"))
		if err != nil {
			return err
		}
		*held = append(*held, f)
		return os.Remove(f.Name())
	}},
	{"renamed", func(dir string, _ *[]*os.File) error {
		return os.Rename(filepath.Join(dir, "ckpt", "ckpt-3.pt"), filepath.Join(dir, "ckpt", "ckpt-3.pt.bad"))
	}},
	{"moved out", func(dir string, _ *[]*os.File) error {
		if err := os.Mkdir(filepath.Join(dir, "quarantine"), 0o700); err != nil {
			return err
		}
		return os.Rename(filepath.Join(dir, "ckpt", "ckpt-3.pt"), filepath.Join(dir, "quarantine", "ckpt-3.pt"))
	}},
	{"directory renamed", func(dir string, _ *[]*os.File) error {
		return os.Rename(filepath.Join(dir, "ckpt"), filepath.Join(dir, "ckpt-old"))
	}},
	{"directory removed", func(dir string, _ *[]*os.File) error { return os.RemoveAll(filepath.Join(dir, "ckpt")) }},
	{"replaced", func(dir string, _ *[]*os.File) error {
		p := filepath.Join(dir, "ckpt", "ckpt-3.pt")
		if err := os.WriteFile(p+".tmp", []byte("a new checkpoint"), 0o600); err != nil {
			return err
		}
		return os.Rename(p+".tmp", p)
	}},
	{"replaced, a hard link left", func(dir string, _ *[]*os.File) error {
		p := filepath.Join(dir, "ckpt", "ckpt-3.pt")
		if err := os.Link(p, filepath.Join(dir, "ckpt", "latest.pt")); err != nil {
			return err
		}
		if err := os.WriteFile(p+".tmp", []byte("a new checkpoint"), 0o600); err != nil {
			return err
		}
		return os.Rename(p+".tmp", p)
	}},
	{"rewritten", func(dir string, _ *[]*os.File) error {
		p := filepath.Join(dir, "ckpt", "ckpt-3.pt")
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		// Each byte moves off both its value and its inverse, whatever
		// the fault did to it: no flipped byte survives.
		for i := range b {
			b[i] = byte(i) ^ 0x0f
		}
		return os.WriteFile(p, b, 0o600)
	}},
	{"appended to", func(dir string, _ *[]*os.File) error {
		f, err := os.OpenFile(filepath.Join(dir, "ckpt", "ckpt-3.pt"), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		_, err = f.WriteString("more")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}},
}

// corruptRound runs one round of corrupt-newest in base and returns the
// way its checkpoint vanished.
func corruptRound(t *testing.T, sp *testutil.Spawner, rng *rand.Rand, round int, key, stateDir, base string) string {
	t.Helper()
	work, shadow := filepath.Join(base, "w"), filepath.Join(base, "s")
	content := make([]byte, 16<<10)
	for i := range content {
		// Neither byte(i)^0x0f nor its inverse (masks 0x0f and 0xf0 are
		// never drawn), so "rewritten" changes every byte off both.
		content[i] = byte(i) ^ byte(1+rng.IntN(14))
	}
	for _, d := range []string{work, shadow} {
		must(t, os.MkdirAll(filepath.Join(d, "ckpt"), 0o700))
		must(t, os.WriteFile(filepath.Join(d, "ckpt", "ckpt-1.pt"), []byte("an older checkpoint"), 0o600))
		must(t, os.WriteFile(filepath.Join(d, "ckpt", "ckpt-3.pt"), content, 0o600))
	}
	// The record's write waits for two fsyncs, 10-30 ms on a busy disk:
	// kills up to a few times that land on every step and after.
	moment := testutil.Moment(rng, 80*time.Millisecond)
	injected := sp.KillAt(t, moment, helperEnv(t, idCorrupt, stateDir, key, filepath.Join(work, "ckpt"))...)
	v := corruptVanishes[rng.IntN(len(corruptVanishes))]
	var heldW, heldS []*os.File
	defer func() {
		for _, f := range append(heldW, heldS...) {
			f.Close()
		}
	}()
	must(t, v.do(work, &heldW))
	must(t, v.do(shadow, &heldS))
	in := newInjector(t, idCorrupt, stateDir)
	err := in.Recover(context.Background(), key)
	what := fmt.Sprintf("round %d: corrupt-newest killed after %s (injected %v), checkpoint %s", round, moment, injected, v.name)
	diff := func() string {
		w, s := treeSums(t, work), treeSums(t, shadow)
		for i := range heldW {
			w["held"], s["held"] = fdSum(t, heldW[i]), fdSum(t, heldS[i])
		}
		var d []string
		for _, p := range sortedKeys(w, s) {
			if w[p] != s[p] {
				d = append(d, p)
			}
		}
		if len(d) == 0 {
			return ""
		}
		return "differs from the shadow at " + strings.Join(d, ", ")
	}
	kept := func() bool { ok, _ := in.dir.Exists(key); return ok }
	verdict := testutil.CheckRecovery(t, what, err, diff, kept, "no longer exists", "none of the")
	return fmt.Sprintf("corrupt/%s/%s%s", v.name, verdict, cut(injected))
}

// fillVanishes are what may become of the filler after the kill.
var fillVanishes = []struct {
	name string
	do   func(mnt, filler string) (*os.File, error)
}{
	{"none", func(string, string) (*os.File, error) { return nil, nil }},
	{"deleted", func(_, filler string) (*os.File, error) { return nil, rmIfThere(filler) }},
	{"renamed", func(mnt, filler string) (*os.File, error) {
		return nil, renameIfThere(filler, filepath.Join(mnt, "ckpt", "big.bin"))
	}},
	{"moved out", func(mnt, filler string) (*os.File, error) {
		if err := os.MkdirAll(filepath.Join(mnt, "other"), 0o700); err != nil {
			return nil, err
		}
		return nil, renameIfThere(filler, filepath.Join(mnt, "other", "big.bin"))
	}},
	{"deleted but held open", func(_, filler string) (*os.File, error) {
		f, err := os.Open(filler)
		if os.IsNotExist(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return f, os.Remove(filler)
	}},
}

// fillRound runs one round of fill-volume on the tmpfs at mnt and returns
// the way its filler vanished.
func fillRound(t *testing.T, sp *testutil.Spawner, rng *rand.Rand, round int, key, stateDir, mnt string) string {
	t.Helper()
	dir := filepath.Join(mnt, "ckpt")
	must(t, os.MkdirAll(dir, 0o700))
	before, _, _ := freeBytes(mnt)
	moment := testutil.Moment(rng, 80*time.Millisecond)
	injected := sp.KillAt(t, moment, helperEnv(t, idFill, stateDir, key, dir)...)
	in := newInjector(t, idFill, stateDir)
	v := fillVanishes[rng.IntN(len(fillVanishes))]
	held, err := v.do(mnt, filepath.Join(dir, fillerPrefix+in.dir.Name(key)))
	must(t, err)
	err = in.Recover(context.Background(), key)
	if held != nil {
		held.Close()
	}
	what := fmt.Sprintf("round %d: fill-volume killed after %s (injected %v), filler %s", round, moment, injected, v.name)
	diff := func() string {
		var d []string
		if after, _, _ := freeBytes(mnt); after != before {
			d = append(d, fmt.Sprintf("%d bytes free, %d before", after, before))
		}
		for p := range treeSums(t, mnt) {
			d = append(d, "file "+p)
		}
		return strings.Join(d, "; ")
	}
	kept := func() bool { ok, _ := in.dir.Exists(key); return ok }
	verdict := testutil.CheckRecovery(t, what, err, diff, kept, "no longer exists")
	if verdict == "pending" {
		// Cleared by hand, so the next round starts from an empty volume.
		for p := range treeSums(t, mnt) {
			_ = os.Remove(filepath.Join(mnt, p))
		}
	}
	return fmt.Sprintf("fill/%s/%s%s", v.name, verdict, cut(injected))
}

// cut marks in the tally a round whose kill landed before Inject
// returned.
func cut(injected bool) string {
	if injected {
		return ""
	}
	return "(cut)"
}

// treeSums maps each regular file under root, by relative path, to the
// checksum of its bytes.
func treeSums(t *testing.T, root string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out[rel] = sha256.Sum256(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// fdSum is the checksum of what f holds now, through its own inode.
func fdSum(t *testing.T, f *os.File) [32]byte {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func sortedKeys(ms ...map[string][32]byte) []string {
	var ks []string
	for _, m := range ms {
		for k := range m {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return slices.Compact(ks)
}

func rmIfThere(p string) error {
	if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

func renameIfThere(from, to string) error {
	if err := os.Rename(from, to); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// TestPodRecoveryAfterSIGKILLAtRandom is the same property for the
// faults on a pod's directory (/ckpt in the pod's container, a tmpfs on
// the node): the injector is killed at a random moment, the pod's
// container then dies or not, and a fresh injector recovers the
// checkpoint byte for byte and the volume's free space, through the pod
// or, with its process gone, through the node's mount of the volume.
func TestPodRecoveryAfterSIGKILLAtRandom(t *testing.T) {
	rng := testutil.Rand(t)
	stateDir := t.TempDir()
	fx := newPodFixture(t, "sleep")
	tally := testutil.Tally{}
	sp := testutil.NewSpawner(t, "^$", roleEnv+"=injector")
	for round := range testutil.CrashRounds {
		key := fmt.Sprintf("pod-crash-%d", round)
		id := idCorrupt
		if rng.IntN(2) == 0 {
			id = idFill
		}
		content := make([]byte, 16<<10)
		for i := range content {
			content[i] = byte(rng.IntN(256))
		}
		must(t, os.WriteFile(filepath.Join(fx.host, "ckpt-3.pt"), content, 0o600))
		before, _, _ := freeBytes(fx.host)
		moment := testutil.Moment(rng, 80*time.Millisecond)
		env := append(helperEnv(t, id, stateDir, key, ckptpodtest.Dir), helperPodEnv+"="+fx.pod.UID)
		injected := sp.KillAt(t, moment, env...)
		gone := rng.IntN(3) == 0
		if gone {
			fx.ctr.Kill()
		}
		in := newInjector(t, id, stateDir)
		err := in.Recover(context.Background(), key)
		what := fmt.Sprintf("round %d: %s killed after %s (injected %v), the pod's process gone %v", round, id, moment, injected, gone)
		diff := func() string {
			var d []string
			if b, err := os.ReadFile(filepath.Join(fx.host, "ckpt-3.pt")); err != nil || !bytes.Equal(b, content) {
				d = append(d, fmt.Sprintf("ckpt-3.pt differs (%v)", err))
			}
			if after, _, _ := freeBytes(fx.host); after != before {
				d = append(d, fmt.Sprintf("%d bytes free, %d before", after, before))
			}
			for p := range treeSums(t, fx.host) {
				if strings.HasPrefix(p, fillerPrefix) {
					d = append(d, "file "+p)
				}
			}
			return strings.Join(d, "; ")
		}
		kept := func() bool { ok, _ := in.dir.Exists(key); return ok }
		verdict := testutil.CheckRecovery(t, what, err, diff, kept, "no longer exists")
		tally.Add(fmt.Sprintf("%s/gone=%v/%s%s", id, gone, verdict, cut(injected)))
		if t.Failed() {
			break
		}
		if gone {
			fx.ctr = ckptpodtest.Start(t, fx.pod, fx.host, "sleep")
		}
	}
	t.Logf("%d rounds: %s", testutil.CrashRounds, tally)
}
