package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/gputools/collbench"
	"github.com/gpuchaos/gpuchaos/internal/node/cuda"
)

func TestNCCLCommandInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"bad op", []string{"--op", "reduce"}, "--op"},
		{"bad dtype", []string{"--dtype", "fp8"}, "--dtype"},
		{"bad min size", []string{"--min-bytes", "lots"}, "--min-bytes"},
		{"zero max size", []string{"--max-bytes", "0"}, "--max-bytes"},
		{"max below min", []string{"--min-bytes", "8MiB", "--max-bytes", "1MiB"}, "--max-bytes 1MiB is below --min-bytes 8MiB"},
		{"over 16 GiB", []string{"--max-bytes", "32GiB"}, "--max-bytes 32GiB"},
		{"step factor", []string{"--step-factor", "1"}, "--step-factor 1"},
		{"warmup", []string{"--warmup", "-1"}, "--warmup -1"},
		{"iters", []string{"--iters", "0"}, "--iters 0"},
		{"rendezvous timeout", []string{"--rendezvous-timeout", "0s"}, "--rendezvous-timeout"},
		{"one gpu", []string{"--gpus", "0"}, "at least 2 GPUs"},
		{"bad gpu list", []string{"--gpus", "0,x"}, `"x" is not a GPU index`},
		{"--gpu without --rank", []string{"--gpu", "1"}, "--gpu is for one process per rank"},
		{"nranks missing", []string{"--rank", "0", "--rendezvous", "h:1"}, "--nranks"},
		{"nranks 1", []string{"--rank", "0", "--nranks", "1", "--rendezvous", "h:1"}, "--nranks 1"},
		{"rank missing", []string{"--nranks", "2", "--rendezvous", "h:1"}, "--rank"},
		{"rank too big", []string{"--rank", "2", "--nranks", "2", "--rendezvous", "h:1"}, "--rank 2: must be given, from 0 to 1"},
		{"no rendezvous", []string{"--rank", "1", "--nranks", "2"}, "--rendezvous HOST:PORT"},
		{"bad rendezvous", []string{"--rank", "1", "--nranks", "2", "--rendezvous", "nohostport"}, "--rendezvous"},
		{"--gpus with --rank", []string{"--rank", "1", "--nranks", "2", "--rendezvous", "h:1", "--gpus", "0,1"}, "--gpus"},
		{"negative --gpu", []string{"--rank", "1", "--nranks", "2", "--rendezvous", "h:1", "--gpu", "-1"}, "--gpu -1"},
		{"delay without rank", []string{"--delay", "5ms"}, "--delay-rank"},
		{"delay rank without delay", []string{"--delay-rank", "1"}, "--delay-rank 1 --delay 0s"},
		{"bad format", []string{"--format", "xml"}, "--format"},
		{"extra argument", []string{"now"}, "unknown command"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			wantBadInput(t, append([]string{"nccl"}, tc.args...), 2, tc.wantErr)
		})
	}
}

// TestNCCLWithoutGPU is the CI case: no driver, exit 1, one line saying so.
func TestNCCLWithoutGPU(t *testing.T) {
	t.Parallel()
	if _, err := cuda.Open(); err == nil {
		t.Skip("a CUDA driver is present")
	}
	code, out, errs := runCLI(t, "", "nccl", "--iters", "1")
	if code != 1 || !strings.Contains(errs, "no CUDA driver found") || !strings.Contains(errs, "libcuda.so.1") {
		t.Fatalf("exit %d, stderr %q; want 1 and a line naming libcuda.so.1", code, errs)
	}
	if strings.Count(errs, "\n") != 1 || out != "" {
		t.Errorf("want one line on stderr and nothing on stdout; got %q / %q", errs, out)
	}
}

func TestNCCLHelp(t *testing.T) {
	t.Parallel()
	code, out, _ := runCLI(t, "", "nccl", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"busbw", "--rendezvous 127.0.0.1:29600", "--min-bytes", "NCCL_NVLS_ENABLE=0"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q", want)
		}
	}
	// The straggler flags are for the tracer's test, not for users.
	if strings.Contains(out, "--delay-rank") {
		t.Error("help shows the hidden --delay-rank")
	}
}

func TestParseByteSize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{"1048576", 1 << 20, false}, {"1MiB", 1 << 20, false}, {"256MiB", 256 << 20, false},
		{"64KiB", 64 << 10, false}, {"2G", 2 << 30, false}, {"8 MB", 8 << 20, false}, {"512B", 512, false},
		{"1mib", 1 << 20, false},
		{"", 0, true}, {"0", 0, true}, {"-1M", 0, true}, {"1.5M", 0, true}, {"1TiB", 0, true}, {"99999999GiB", 0, true},
	}
	for _, tc := range tests {
		got, err := parseByteSize("--max-bytes", tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("parseByteSize(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "--max-bytes") {
			t.Errorf("error %q does not name the flag", err)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	t.Parallel()
	for in, want := range map[uint64]string{1 << 20: "1 MiB", 256 << 20: "256 MiB", 3 << 30: "3 GiB", 1536: "1536 B", 2048: "2 KiB", 1000: "1000 B"} {
		if got := formatBytes(in); got != want {
			t.Errorf("formatBytes(%d) = %q; want %q", in, got, want)
		}
	}
}

func TestNCCLTable(t *testing.T) {
	t.Parallel()
	delay := 1
	r := collbench.Result{NCCLVersion: "2.28.3", NCCLLibrary: "libnccl.so.2", CUDADriverVersion: 13000, Mode: collbench.ModeSingleProcess,
		NRanks: 2, Warmup: 5, Iters: 20, DelayRank: &delay, DelaySeconds: 0.002,
		Ranks: []collbench.RankInfo{{Rank: 0, Host: "vm", GPU: 0, PCIBusID: "0000:00:06.0", Name: "NVIDIA H200"}},
		Results: []collbench.SizeResult{{Op: collbench.AllReduce, Bytes: 268435456, Count: 134217728, DType: collbench.BF16,
			TimeUS: 887.8, AlgBW: 302.37, BusBW: 302.37, Wrong: 0}},
		Errors: []string{"rank 1: boom"}}
	var b bytes.Buffer
	if err := writeNCCLTable(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"NCCL 2.28.3 (libnccl.so.2), CUDA driver 13.0, 2 ranks, single-process",
		"rank 0: vm gpu 0 0000:00:06.0 NVIDIA H200", "straggler: rank 1 sleeps 2ms", "BUSBW (GB/s)",
		"all_reduce  268435456  134217728  bf16      887.8        302.37        302.37      0", "error: rank 1: boom"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}
