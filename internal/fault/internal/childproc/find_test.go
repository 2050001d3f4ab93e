package childproc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// TestFindAndStopMarked starts marked children, some of them by another
// Group (as a crashed injector would have), and checks that Find sees
// exactly the live ones carrying the mark and StopMarked ends them all.
func TestFindAndStopMarked(t *testing.T) {
	t.Parallel()
	mark := filepath.Join(t.TempDir(), "k.json")
	startMarked := func(g *Group, m, role string) *Child {
		c, err := g.Start(Spec{Path: os.Args[0], Env: append(os.Environ(), roleEnv+"="+role), Output: os.Stderr, Mark: m})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(-c.Proc.PID, syscall.SIGKILL) })
		if err := c.AwaitReady(context.Background(), role, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		return c
	}
	var mine, theirs Group
	a := startMarked(&mine, mark, "ready")
	b := startMarked(&theirs, mark, "stubborn")
	other := startMarked(&mine, mark+".other", "ready")
	exited := startMarked(&theirs, mark, "ready")
	_ = syscall.Kill(exited.Proc.PID, syscall.SIGKILL)
	<-exited.Done()

	found, err := Find(mark, os.Args[0])
	if err != nil && !errors.Is(err, fault.ErrUnproven) {
		t.Fatal(err)
	}
	slices.SortFunc(found.Procs, func(x, y procfind.Proc) int { return x.PID - y.PID })
	want := []procfind.Proc{a.Proc, b.Proc}
	slices.SortFunc(want, func(x, y procfind.Proc) int { return x.PID - y.PID })
	if !slices.Equal(found.Procs, want) || found.Searched == 0 {
		t.Fatalf("Find = %+v, want %v among the processes searched", found, want)
	}

	stopped, err := mine.StopMarked(context.Background(), mark, os.Args[0], 200*time.Millisecond, nil)
	if err != nil && !errors.Is(err, fault.ErrUnproven) {
		t.Fatal(err)
	}
	if len(stopped.Procs) != 2 {
		t.Fatalf("StopMarked stopped %v, want two", stopped.Procs)
	}
	for _, c := range []*Child{a, b} {
		if ok, _ := c.Proc.Alive(); ok {
			t.Errorf("pid %d outlived StopMarked", c.Proc.PID)
		}
	}
	if ok, _ := other.Proc.Alive(); !ok {
		t.Error("StopMarked stopped a child of another mark")
	}
	if again, _ := Find(mark, os.Args[0]); len(again.Procs) != 0 {
		t.Errorf("Find after StopMarked = %v", again.Procs)
	}
	if _, err := Find("", os.Args[0]); err == nil {
		t.Error("Find of an empty mark succeeded")
	}
}
