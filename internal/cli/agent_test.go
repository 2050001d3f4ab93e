package cli

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu/nvmlgpu"
)

func TestAgentTwin(t *testing.T) {
	t.Parallel()
	addr := testutil.FreeAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out, errb testutil.LockedBuffer
	root := newRoot(strings.NewReader(""), &out, &errb)
	root.SetArgs([]string{"agent", "--twin", "--twin-gpus", "3", "--listen", addr, "--interval", "100ms", "--hostname", "node-x"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()

	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	var page string
	has := func() bool { return strings.Contains(page, "DCGM_FI_DEV_GPU_TEMP{") }
	defer func() {
		if !has() {
			t.Logf("stdout %q, stderr %q", out.String(), errb.String())
		}
	}()
	testutil.Eventually(t, 30*time.Second, "GPU series on /metrics", func() bool {
		resp, err := client.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		page = string(b)
		return has()
	})
	if n := strings.Count(page, "DCGM_FI_DEV_GPU_TEMP{"); n != 3 {
		t.Errorf("%d GPU_TEMP series, want 3 (--twin-gpus 3)", n)
	}
	for _, want := range []string{`Hostname="node-x"`, `gpuchaos_agent_info{version="`, `source="twin"`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if want := "serving 3 GPUs (twin) at http://" + addr + "/metrics"; !strings.HasPrefix(out.String(), want) {
		t.Errorf("stdout %q, want prefix %q", out.String(), want)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("agent returned %v after Ctrl-C, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not stop within 10s of cancel")
	}
}

func TestAgentBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
		code int
	}{
		{"interval too short", []string{"agent", "--interval", "1ms"}, "--interval", 2},
		{"no twin gpus", []string{"agent", "--twin", "--twin-gpus", "0"}, "--twin-gpus", 2},
		{"stray argument", []string{"agent", "extra"}, "unknown command", 2},
		{"resync too short", []string{"agent", "--node-name", "n1", "--resync", "1ms"}, "--resync", 2},
		{"no ledger", []string{"agent", "--node-name", "n1", "--ledger", ""}, "--ledger", 2},
		{"missing kubeconfig", []string{"agent", "--node-name", "n1", "--listen", "127.0.0.1:0", "--kubeconfig", "/nonexistent/kubeconfig", "--ledger", "/nonexistent/ledger"}, "--kubeconfig", 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out, errb strings.Builder
			code := Main(tc.args, strings.NewReader(""), &out, &errb)
			if code != tc.code || !strings.Contains(errb.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errb.String(), tc.code, tc.want)
			}
		})
	}
}

func TestAgentWithoutGPU(t *testing.T) {
	t.Parallel()
	if src, err := nvmlgpu.Open(); err == nil {
		src.Close()
		t.Skip("this machine has NVML: the no-GPU path cannot be seen here")
	} else if !errors.Is(err, gpu.ErrUnavailable) {
		t.Fatalf("nvmlgpu.Open: %v", err)
	}
	var out, errb strings.Builder
	code := Main([]string{"agent", "--listen", "127.0.0.1:0"}, strings.NewReader(""), &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "--twin") {
		t.Errorf("exit %d, stderr %q; want 1 and a hint at --twin", code, errb.String())
	}
}
