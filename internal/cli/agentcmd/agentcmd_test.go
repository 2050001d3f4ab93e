package agentcmd

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/cli/command"
	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu/nvmlgpu"
	"github.com/gpuchaos/gpuchaos/internal/node/gpu/nvmlgpu/nvmlmock"
)

// mockGPUs opens nvmlmock's eight H200s, as a node with eight GPUs.
func mockGPUs() (gpu.Source, error) { return nvmlgpu.New(nvmlmock.New()) }

// noTwin is a StartTwin that is never called: New only asks whether one
// is set.
func noTwin(context.Context, TwinOptions) (gpu.Source, func(context.Context) error, error) {
	return nil, nil, errors.New("no twin in this test")
}

// TestLeanFlagsAreTheAgents: gpuchaos-agent takes every flag of
// 'gpuchaos agent', with the same default and help, bar the twin's, and
// adds only the log flags and --gpuchaos-binary; 'agent' has the twin's
// flags only where its binary passes the twin in.
func TestLeanFlagsAreTheAgents(t *testing.T) {
	t.Parallel()
	flagsOf := func(c *cobra.Command) map[string]*pflag.Flag {
		m := map[string]*pflag.Flag{}
		c.Flags().VisitAll(func(f *pflag.Flag) { m[f.Name] = f })
		c.PersistentFlags().VisitAll(func(f *pflag.Flag) { m[f.Name] = f })
		return m
	}
	twinFlags := []string{"twin", "twin-gpus", "seed"}
	full := flagsOf(New(Options{Twin: noTwin}))
	lean := flagsOf(newRoot(Options{}, strings.NewReader(""), io.Discard, io.Discard))
	for name, f := range full {
		if slices.Contains(twinFlags, name) {
			if _, ok := lean[name]; ok {
				t.Errorf("gpuchaos-agent has --%s, which needs the twin", name)
			}
			continue
		}
		g, ok := lean[name]
		switch {
		case !ok:
			t.Errorf("gpuchaos-agent lacks --%s of gpuchaos agent", name)
		case g.DefValue != f.DefValue || g.Usage != f.Usage || g.Shorthand != f.Shorthand:
			t.Errorf("--%s: gpuchaos-agent %q %q -%s, gpuchaos agent %q %q -%s", name, g.DefValue, g.Usage, g.Shorthand, f.DefValue, f.Usage, f.Shorthand)
		}
	}
	for name := range lean {
		if _, ok := full[name]; !ok && !slices.Contains([]string{"gpuchaos-binary", "log-level", "log-format"}, name) {
			t.Errorf("gpuchaos-agent has --%s, which gpuchaos agent has not", name)
		}
	}
	for _, name := range twinFlags {
		if _, ok := full[name]; !ok {
			t.Errorf("gpuchaos agent with the twin lacks --%s", name)
		}
		if New(Options{}).Flags().Lookup(name) != nil {
			t.Errorf("agent without the twin has --%s", name)
		}
	}
}

func TestLeanHelp(t *testing.T) {
	t.Parallel()
	var out, errb strings.Builder
	if code := Main([]string{"--help"}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("gpuchaos-agent --help: exit %d, stderr %q", code, errb.String())
	}
	help := out.String()
	for _, want := range []string{"gpuchaos-agent is gpuchaos's node agent", "--gpuchaos-binary", "--node-name", "--log-level", "Usage:\n  gpuchaos-agent [flags]"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q:\n%s", want, help)
		}
	}
	if strings.Contains(help, "--twin ") || strings.Contains(help, "--twin-gpus") {
		t.Errorf("--help lists --twin, which gpuchaos-agent has not:\n%s", help)
	}
}

// TestLeanBadInput: gpuchaos-agent refuses what gpuchaos agent refuses,
// with the same exit codes, naming itself.
func TestLeanBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
		code int
	}{
		{"interval too short", []string{"--interval", "1ms"}, "--interval", 2},
		{"the twin", []string{"--twin"}, "unknown flag: --twin", 2},
		{"stray argument", []string{"extra"}, "unknown command", 2},
		{"resync too short", []string{"--node-name", "n1", "--resync", "1ms"}, "--resync", 2},
		{"no ledger", []string{"--node-name", "n1", "--ledger", ""}, "--ledger", 2},
		{"missing kubeconfig", []string{"--node-name", "n1", "--listen", "127.0.0.1:0", "--kubeconfig", "/nonexistent/kubeconfig", "--ledger", "/nonexistent/ledger", "--gpuchaos-binary", "/bin/true"}, "--kubeconfig", 2},
		{"bad log format", []string{"--log-format", "yaml"}, "--log-format", 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out, errb strings.Builder
			code := Main(tc.args, strings.NewReader(""), &out, &errb)
			if code != tc.code || !strings.HasPrefix(errb.String(), "gpuchaos-agent: ") || !strings.Contains(errb.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and gpuchaos-agent: …%q", code, errb.String(), tc.code, tc.want)
			}
		})
	}
}

// TestLeanWithoutGPU: without NVML and without --node-name there is
// nothing to do, and no --twin to suggest.
func TestLeanWithoutGPU(t *testing.T) {
	t.Parallel()
	if src, err := nvmlgpu.Open(); err == nil {
		src.Close()
		t.Skip("this machine has NVML: the no-GPU path cannot be seen here")
	}
	var out, errb strings.Builder
	code := Main([]string{"--listen", "127.0.0.1:0", "--node-name", ""}, strings.NewReader(""), &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), gpu.ErrUnavailable.Error()) || strings.Contains(errb.String(), "--twin") {
		t.Errorf("exit %d, stderr %q; want 1, the GPUs unavailable, no --twin", code, errb.String())
	}
}

// started is a gpuchaos-agent running in this process under a context
// the test cancels as SIGTERM would.
type started struct {
	stdout, stderr testutil.LockedBuffer
	stop           func()
	done           chan int
}

func start(t *testing.T, o Options, args ...string) *started {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	s := &started{stop: func() { cancel(&command.SignalError{Signal: syscall.SIGTERM}) }, done: make(chan int, 1)}
	t.Cleanup(s.stop)
	root := newRoot(o, strings.NewReader(""), &s.stdout, &s.stderr)
	go func() { s.done <- command.Execute(ctx, root, args) }()
	return s
}

// exit stops the agent and returns its exit code.
func (s *started) exit(t *testing.T) int {
	t.Helper()
	s.stop()
	select {
	case code := <-s.done:
		return code
	case <-time.After(30 * time.Second):
		t.Fatal("gpuchaos-agent did not stop within 30s of SIGTERM")
		return -1
	}
}

// TestLeanServesEightGPUs runs gpuchaos-agent over nvmlmock's eight
// H200s: every GPU's series on /metrics, and a clean exit on SIGTERM.
func TestLeanServesEightGPUs(t *testing.T) {
	t.Parallel()
	addr := testutil.FreeAddr(t)
	s := start(t, Options{OpenGPUs: mockGPUs}, "--listen", addr, "--interval", "100ms", "--hostname", "node-x")
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	var page string
	testutil.Eventually(t, 30*time.Second, "GPU series on /metrics", func() bool {
		resp, err := client.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		page = string(b)
		return strings.Contains(page, "DCGM_FI_DEV_GPU_TEMP{")
	})
	if n := strings.Count(page, "DCGM_FI_DEV_GPU_TEMP{"); n != nvmlmock.GPUs {
		t.Errorf("%d GPU_TEMP series, want %d", n, nvmlmock.GPUs)
	}
	for _, want := range []string{`Hostname="node-x"`, `gpuchaos_agent_info{version="`, `source="nvml"`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if want := "serving 8 GPUs (nvml) at http://" + addr + "/metrics"; !strings.HasPrefix(s.stdout.String(), want) {
		t.Errorf("stdout %q, want prefix %q", s.stdout.String(), want)
	}
	if code := s.exit(t); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0; stderr %q", code, s.stderr.String())
	}
}

// TestLeanNodeFaultMode runs gpuchaos-agent for a node of a real API
// server: it reports the node's eight GPUs on its Node, as the controller
// reads them.
func TestLeanNodeFaultMode(t *testing.T) {
	t.Parallel()
	env := kubetest.Start(t, kubetest.Options{CRDs: true})
	const node = "gpu-node-0"
	ctx := t.Context()
	if err := env.Client.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
		t.Fatalf("create node: %v", err)
	}
	dir := t.TempDir()
	s := start(t, Options{OpenGPUs: mockGPUs}, "--node-name", node, "--kubeconfig", env.Kubeconfig,
		"--ledger", filepath.Join(dir, "ledger.jsonl"), "--listen", testutil.FreeAddr(t), "--no-xid-watch",
		"--gpuchaos-binary", "/bin/true")
	var gpus []v1alpha1.GPUReport
	testutil.Eventually(t, 60*time.Second, "the agent to report its GPUs on its Node", func() bool {
		var n corev1.Node
		if err := env.Client.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
			t.Fatal(err)
		}
		a, ok := n.Annotations[v1alpha1.AnnotationGPUs]
		return ok && json.Unmarshal([]byte(a), &gpus) == nil
	})
	if len(gpus) != nvmlmock.GPUs {
		t.Errorf("the Node lists %d GPUs, want %d: %+v", len(gpus), nvmlmock.GPUs, gpus)
	}
	if !strings.Contains(s.stdout.String(), "applying the NodeFaults of node "+node) {
		t.Errorf("stdout %q does not say it applies the node's NodeFaults", s.stdout.String())
	}
	if code := s.exit(t); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0; stderr %q", code, s.stderr.String())
	}
}

// TestChildBinary: --gpuchaos-binary wins; without it gpuchaos-agent runs
// the children from the gpuchaos beside it, warning when there is none,
// and gpuchaos agent from itself.
func TestChildBinary(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, flag, beside, want, warn string
	}{
		{"the flag", "/usr/local/bin/gpuchaos", "gpuchaos", "/usr/local/bin/gpuchaos", ""},
		{"gpuchaos itself", "", "", "", ""},
		{"beside, missing", "", "gpuchaos-not-here", filepath.Join(filepath.Dir(self), "gpuchaos-not-here"), "no executable"},
		{"beside, there", "", filepath.Base(self), self, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var warn strings.Builder
			got, err := childBinary(tc.flag, tc.beside, &warn, "gpuchaos-agent")
			if err != nil || got != tc.want {
				t.Errorf("childBinary = %q, %v; want %q", got, err, tc.want)
			}
			if tc.warn == "" && warn.Len() > 0 || !strings.Contains(warn.String(), tc.warn) {
				t.Errorf("warned %q, want %q", warn.String(), tc.warn)
			}
		})
	}
}
