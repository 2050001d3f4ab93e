package cli

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
)

func TestTwinServe(t *testing.T) {
	t.Parallel()
	addr := testutil.FreeAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out, errb testutil.LockedBuffer
	root := newRoot(strings.NewReader(""), &out, &errb)
	root.SetArgs([]string{"twin", "serve", "--listen", addr, "--warmup", "2m", "--seed", "3"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()

	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	get := func(path string) (int, string, error) {
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	healthy := false
	defer func() {
		if !healthy {
			t.Logf("stdout %q, stderr %q", out.String(), errb.String())
		}
	}()
	testutil.Eventually(t, 20*time.Second, "/healthz to answer 200", func() bool {
		code, _, err := get("/healthz")
		return err == nil && code == http.StatusOK
	})
	healthy = true
	if want := "serving the twin's metrics at http://" + addr + "/metrics"; !strings.HasPrefix(out.String(), want) {
		t.Errorf("stdout %q, want it to start with %q", out.String(), want)
	}
	code, page, err := get("/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics: %d, %v", code, err)
	}
	for _, want := range []string{
		"# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n",
		`DCGM_FI_DEV_GPU_TEMP{Hostname="gpu-node-1",UUID="`,
		"# TYPE gpuchaos_job_restarts_total counter\n",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if n := strings.Count(page, "\nDCGM_FI_DEV_GPU_TEMP{"); n != 16 {
		t.Errorf("%d GPU temperatures on the page, want 16", n)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve ended with %v after its context was cancelled, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop within 10s of its context ending")
	}
	if _, _, err := get("/healthz"); err == nil {
		t.Error("still serving after the command returned")
	}
}

func TestTwinServeBadFlags(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() })
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, []byte("nodes: {count: 100000}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"zero speed", []string{"--speed", "0"}, 2, "--speed: must be a positive number, got 0"},
		{"negative warm-up", []string{"--warmup", "-1m"}, 2, "--warmup: must not be negative, got -1m0s"},
		{"warm-up past the limit", []string{"--warmup", "10000h"}, 2, "--warmup: at most 24h0m0s, got 10000h0m0s"},
		{"speed past the limit", []string{"--speed", "1e30"}, 2, "--speed: at most 3600 virtual seconds per wall second, got 1e+30"},
		{"NaN speed", []string{"--speed", "NaN"}, 2, "--speed: must be a positive number, got NaN"},
		{"infinite speed", []string{"--speed", "+Inf"}, 2, "--speed: must be a positive number, got +Inf"},
		{"missing cluster file", []string{"--cluster", "/nonexistent/cluster.yaml"}, 2, "gpuchaos: --cluster: load cluster spec"},
		{"cluster past the GPU limit", []string{"--cluster", big}, 2, "gpuchaos: --cluster: " + big + ": nodes.count: 100000 is outside 1..4096\n"},
		{"port in use", []string{"--listen", busy.Addr().String(), "--warmup", "0s"}, 1, "--listen: listen tcp " + busy.Addr().String()},
		{"extra argument", []string{"now"}, 2, `unknown command "now"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, _, errs := runCLI(t, "", append([]string{"twin", "serve"}, tc.args...)...)
			if code != tc.code || !strings.Contains(errs, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errs, tc.code, tc.want)
			}
			if tc.code == 2 && (strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "gpuchaos: ")) {
				t.Errorf("stderr %q, want one line starting gpuchaos:", errs)
			}
		})
	}
}
