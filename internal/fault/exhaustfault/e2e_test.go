package exhaustfault

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
)

// e2eBinEnv names a real gpuchaos binary; with it, TestRealBinary runs
// each fault on GPU 0 of this machine. It needs a GPU and nvidia-smi:
//
//	go build -o /tmp/gpuchaos ./cmd/gpuchaos
//	GPUPROC_E2E_BIN=/tmp/gpuchaos go test -run TestRealBinary -v ./internal/fault/exhaustfault
const e2eBinEnv = "GPUPROC_E2E_BIN"

// smiSample is one nvidia-smi reading of GPU 0.
type smiSample struct{ util, memUsedMiB, memTotalMiB float64 }

func readSMI(t *testing.T) smiSample {
	t.Helper()
	out, err := exec.Command("nvidia-smi", "-i", "0", "--query-gpu=utilization.gpu,memory.used,memory.total",
		"--format=csv,noheader,nounits").Output()
	if err != nil {
		t.Fatalf("nvidia-smi: %v", err)
	}
	f := strings.Split(strings.TrimSpace(string(out)), ",")
	if len(f) != 3 {
		t.Fatalf("nvidia-smi printed %q", out)
	}
	var v [3]float64
	for i := range f {
		if v[i], err = strconv.ParseFloat(strings.TrimSpace(f[i]), 64); err != nil {
			t.Fatalf("nvidia-smi printed %q", out)
		}
	}
	return smiSample{v[0], v[1], v[2]}
}

// lastJSON returns the last JSON object line of a log.
func lastJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The commands print indented JSON: take from the last line that
	// opens an object at column 0.
	i := bytes.LastIndex(b, []byte("\n{"))
	if i < 0 {
		i = bytes.IndexByte(b, '{') - 1
	}
	var m map[string]any
	if err := json.NewDecoder(bytes.NewReader(b[i+1:])).Decode(&m); err != nil {
		t.Fatalf("no result JSON at the end of %s: %v\n%s", path, err, b)
	}
	return m
}

func TestRealBinary(t *testing.T) {
	bin := os.Getenv(e2eBinEnv)
	if bin == "" {
		t.Skip("set " + e2eBinEnv + " to a gpuchaos binary to run the faults on a real GPU")
	}
	tests := []struct {
		fault  string
		values catalog.Values
		check  func(t *testing.T, before smiSample, during []smiSample, result map[string]any)
	}{
		{fault: "exhaustion.sm-burn", values: catalog.Values{"load": 0.5, "ceiling": int64(85)},
			check: func(t *testing.T, _ smiSample, during []smiSample, res map[string]any) {
				var sum float64
				for _, s := range during {
					sum += s.util
				}
				mean := sum / float64(len(during))
				t.Logf("GPU utilisation at load 0.5: mean %.1f %% over %d samples; result duty %v, stop %v",
					mean, len(during), res["duty"], res["stop_reason"])
				if mean < 25 || mean > 80 {
					t.Errorf("mean utilisation %.1f %% at duty 0.5, want about 50", mean)
				}
				if res["duty"] != 0.5 {
					t.Errorf("result duty %v, want 0.5", res["duty"])
				}
			}},
		{fault: "exhaustion.vram", values: catalog.Values{"fraction": 0.5},
			check: func(t *testing.T, before smiSample, during []smiSample, res map[string]any) {
				used := during[len(during)-1].memUsedMiB - before.memUsedMiB
				t.Logf("memory used rose by %.0f MiB of %.0f; result held %v bytes", used, before.memTotalMiB, res["held_bytes"])
				if used < 0.4*before.memTotalMiB {
					t.Errorf("memory used rose by %.0f MiB, want about half of %.0f", used, before.memTotalMiB)
				}
			}},
		{fault: "exhaustion.pcie", values: catalog.Values{"rate": int64(10e9)},
			check: func(t *testing.T, _ smiSample, _ []smiSample, res map[string]any) {
				avg, _ := res["average_gb_per_s"].(float64)
				t.Logf("pcie storm capped at 10 GB/s: average %.2f GB/s; h2d %v, d2h %v", avg, res["h2d"], res["d2h"])
				if avg <= 5 || avg > 10 {
					t.Errorf("average %.2f GB/s under a 10 GB/s cap, want at most 10 and near it", avg)
				}
			}},
		{fault: "exhaustion.noisy-neighbour", values: catalog.Values{"share": 0.3, "memory": 0.2},
			check: func(t *testing.T, before smiSample, during []smiSample, _ map[string]any) {
				used := during[len(during)-1].memUsedMiB - before.memUsedMiB
				t.Logf("neighbour: memory used rose by %.0f MiB", used)
				if used < 0.15*before.memTotalMiB {
					t.Errorf("memory used rose by %.0f MiB, want about a fifth of %.0f", used, before.memTotalMiB)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.fault, func(t *testing.T) {
			f, _ := catalog.Lookup(tc.fault)
			name, _ := mechanismOf(tc.fault)
			dir := t.TempDir()
			inj, err := New(f, f.Mechanism(name), Options{Exec: bin, StateDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			before := readSMI(t)
			ctx := fault.WithHoldUntil(context.Background(), time.Now().Add(30*time.Second))
			const key = "e2e/0"
			start := time.Now()
			if err := inj.Inject(ctx, key, inventory.Ref{GPU: 0}, tc.values); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s ready after %s", tc.fault, time.Since(start).Round(time.Millisecond))
			var during []smiSample
			for range 10 {
				time.Sleep(500 * time.Millisecond)
				during = append(during, readSMI(t))
			}
			st, err := readState(inj.(*Injector).dir, key)
			if err != nil {
				t.Fatal(err)
			}
			start = time.Now()
			if err := inj.Recover(context.Background(), key); err != nil {
				t.Fatal(err)
			}
			t.Logf("recovered in %s", time.Since(start).Round(time.Millisecond))
			for _, c := range st.Children {
				if ok, _ := running(c); ok {
					t.Errorf("pid %d still runs after recover", c.PID)
				}
			}
			tc.check(t, before, during, lastJSON(t, filepath.Join(dir, fileStem(key)+".log")))
		})
	}
}
