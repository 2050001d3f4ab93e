package gpu

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/twin"
)

// The twin lists no process on a GPU it has and refuses one it lacks.
func TestTwinProcesses(t *testing.T) {
	t.Parallel()
	src, err := NewTwin(LockedTwin(newTwin(t, twin.Options{Seed: 1, ScrapeInterval: time.Second})), "gpu-node-0")
	if err != nil {
		t.Fatal(err)
	}
	devs, err := src.Devices(context.Background())
	if err != nil || len(devs) == 0 {
		t.Fatalf("devices: %v, %v", devs, err)
	}
	pl, ok := src.(ProcessLister)
	if !ok {
		t.Fatal("the twin source is not a ProcessLister")
	}
	ps, err := pl.Processes(context.Background(), devs[0].Index)
	if err != nil || len(ps) != 0 {
		t.Errorf("Processes = %v, %v, want none", ps, err)
	}
	if _, err := pl.Processes(context.Background(), 999); !errors.Is(err, ErrNoDevice) {
		t.Errorf("Processes(999): %v, want ErrNoDevice", err)
	}
}
