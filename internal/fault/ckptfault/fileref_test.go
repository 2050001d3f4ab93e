package ckptfault

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/harness/ckptpodtest"
)

// TestOpenRefProvesFreedWhileItsNumberIsReused frees a file on a fresh
// ext4, where the next file created takes the freed inode's number, and
// creates files meanwhile. While one is being created the kernel answers
// the freed inode's handle with ENOMEM instead of ESTALE; each time a
// probe sees that answer, openRef is asked at once and must still prove
// the inode freed. The count of answers seen keeps the test from passing
// without the race it is about.
func TestOpenRefProvesFreedWhileItsNumberIsReused(t *testing.T) {
	t.Parallel()
	mnt, _ := ckptpodtest.Ext4(t, 32<<20)
	dir := filepath.Join(mnt, "ckpt")
	must(t, os.Mkdir(dir, 0o700))
	file := filepath.Join(dir, "ckpt-5.pt")
	f, err := os.Create(file)
	must(t, err)
	r, err := refOf(f)
	must(t, errors.Join(err, f.Close()))
	if len(r.Handle) == 0 {
		t.Fatal("ext4 gave no file handle")
	}
	must(t, os.Remove(file))

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var churnErr error
	var reused atomic.Int64
	wg.Go(func() {
		next := filepath.Join(dir, "next.pt")
		for {
			select {
			case <-stop:
				return
			default:
			}
			fd, err := unix.Open(next, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
			if err != nil {
				churnErr = err
				return
			}
			var st unix.Stat_t
			if unix.Fstat(fd, &st) == nil && st.Ino == r.Inode {
				reused.Add(1)
			}
			unix.Close(fd)
			if err := unix.Unlink(next); err != nil {
				churnErr = err
				return
			}
		}
	})
	defer func() {
		close(stop)
		wg.Wait()
		must(t, churnErr)
	}()

	mfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(mfd)
	h := unix.NewFileHandle(r.HandleType, r.Handle)
	const want, maxProbes = 100, 5_000_000
	seen, probes := 0, 0
	for ; seen < want && probes < maxProbes; probes++ {
		fd, err := unix.OpenByHandleAt(mfd, h, unix.O_RDONLY|unix.O_CLOEXEC)
		if err == nil {
			unix.Close(fd)
			t.Fatalf("the handle of freed %s opens an inode", r)
		}
		if !errors.Is(err, unix.ENOMEM) {
			continue
		}
		seen++
		got, _, err := openRef(context.Background(), r, file, dir, os.O_RDONLY)
		if got != nil {
			got.Close()
		}
		if !errors.Is(err, errFreed) || errors.Is(err, fault.ErrUnproven) {
			t.Fatalf("openRef while the kernel answers ENOMEM for the freed inode's number (seen %d times) = %v, want it proved freed", seen, err)
		}
	}
	if seen < want {
		t.Fatalf("the kernel answered ENOMEM %d times in %d probes of the freed inode's handle, want %d: creating files did not reuse its number (reused %d times)", seen, probes, want, reused.Load())
	}
}
