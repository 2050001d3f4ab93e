package kubee2e_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/kube/controller"
	nt "github.com/gpuchaos/gpuchaos/internal/node/trafficctl/netnstest"
)

// within bounds every wait for state the processes reach: generous, for a
// busy two-core machine.
const within = 90 * time.Second

const (
	node      = "n1"
	chaosNS   = "chaos"
	plainNS   = "plain"
	leaseNS   = "default"
	scrapeJob = "gpuchaos-agent"
	// xidCode is rarer than the 79 other tests on this machine write to
	// the same kernel log, so the agent's counter is this test's.
	xidCode = 119
)

func TestMain(m *testing.M) {
	if os.Getenv(nt.SleeperEnv) != "" {
		nt.Sleep()
	}
	ctrllog.SetLogger(logr.Discard())
	code := m.Run()
	testutil.RemoveGPUChaos()
	os.Exit(code)
}

// binary is the gpuchaos command, built once: every part under test is
// the real command in a process of its own.
func binary(t *testing.T) string { return testutil.GPUChaos(t) }

// proc is a running gpuchaos process.
type proc struct {
	name string
	cmd  *exec.Cmd
	// out is stderr, where the servers log; stdout is kept apart for
	// what 'gpuchaos run' prints.
	out    *testutil.LockedBuffer
	stdout *testutil.LockedBuffer
	done   chan struct{}
}

// start runs gpuchaos with args; it is stopped with SIGTERM when t ends,
// and its output logged when t fails.
func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(os.Environ(), "NODE_NAME=")
	p := &proc{name: name, cmd: cmd, out: &testutil.LockedBuffer{}, stdout: &testutil.LockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop(t, syscall.SIGTERM)
		if t.Failed() {
			t.Logf("%s (pid %d) stdout:\n%s\nstderr:\n%s", name, cmd.Process.Pid, p.stdout.String(), p.out.String())
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends sig and waits for the process to exit.
func (p *proc) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(within):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("%s did not exit within %s of %s", p.name, within, sig)
	}
}

// wait waits for the process to exit on its own and returns its exit code.
func (p *proc) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(limit):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("%s did not exit within %s; output:\n%s", p.name, limit, p.out.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

// cluster is the whole system under test.
type cluster struct {
	env         *kubetest.Env
	controllers []*proc
	promURL     string
	watch       client.WithWatch
}

// setup starts the API server, the agent for n1, Prometheus scraping it
// and two controllers.
func setup(t *testing.T) *cluster {
	t.Helper()
	nt.RequireRoot(t)
	if _, err := os.Stat(testutil.PrometheusBin); err != nil {
		kubetest.Missing(t, fmt.Sprintf("%s: %v; this test needs the Prometheus server: run scripts/setup-prometheus (as root)", testutil.PrometheusBin, err))
	}
	env := kubetest.Start(t, kubetest.Options{CRDs: true})
	ctx := t.Context()
	c := &cluster{env: env}
	var err error
	c.watch, err = client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	for name, labels := range map[string]map[string]string{
		chaosNS: {v1alpha1.LabelChaos: v1alpha1.ChaosEnabled},
		plainNS: nil,
	} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}); err != nil {
			t.Fatalf("create namespace %s: %v", name, err)
		}
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := env.Client.Create(ctx, n); err != nil {
		t.Fatalf("create node: %v", err)
	}
	n.Status.Capacity = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}
	n.Status.Allocatable = n.Status.Capacity
	if err := env.Client.Status().Update(ctx, n); err != nil {
		t.Fatalf("set node capacity: %v", err)
	}

	dir := t.TempDir()
	agentAddr := testutil.FreeAddr(t)
	start(t, "agent", "agent", "--node-name", node, "--kubeconfig", env.Kubeconfig,
		"--ledger", filepath.Join(dir, "ledger.jsonl"), "--resync", "2s", "--listen", agentAddr,
		"--twin", "--twin-gpus", "2", "--log-level", "info")
	testutil.Eventually(t, within, "the agent to report its GPUs on node n1", func() bool {
		var n corev1.Node
		if err := env.Client.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
			t.Fatal(err)
		}
		_, ok := n.Annotations[v1alpha1.AnnotationGPUs]
		return ok
	})

	config := filepath.Join(dir, "prometheus.yml")
	writeFile(t, config, fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: %s
    scrape_interval: 1s
    scrape_timeout: 900ms
    static_configs: [{targets: [%q]}]
`, scrapeJob, agentAddr))
	c.promURL = testutil.StartPrometheus(t, config, filepath.Join(dir, "data"), within)
	testutil.Eventually(t, within, "Prometheus to scrape the agent", func() bool {
		return promQuery(t, c.promURL, `up{job="`+scrapeJob+`"} == 1`) > 0
	})

	for _, id := range []string{"controller-a", "controller-b"} {
		c.controllers = append(c.controllers, c.startController(t, id))
	}
	return c
}

func (c *cluster) startController(t *testing.T, name string) *proc {
	t.Helper()
	return start(t, name, "controller", "--kubeconfig", c.env.Kubeconfig,
		"--leader-election-namespace", leaseNS, "--health-probe-bind-address=0", "--metrics-bind-address=0",
		"--prometheus", c.promURL)
}

// leader waits for the Lease to name a holder and returns the controller
// process that holds it: the one that logged acquiring it, as the Lease's
// holderIdentity (host name and a random id) names no process.
func (c *cluster) leader(t *testing.T, not string) (*proc, string) {
	t.Helper()
	var holder string
	testutil.Eventually(t, within, "a controller to hold the Lease", func() bool {
		var l coordinationv1.Lease
		err := c.env.Client.Get(t.Context(), client.ObjectKey{Namespace: leaseNS, Name: controller.DefaultLeaderElectionID}, &l)
		if apierrors.IsNotFound(err) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || *l.Spec.HolderIdentity == not {
			return false
		}
		holder = *l.Spec.HolderIdentity
		return true
	})
	var lead *proc
	testutil.Eventually(t, within, "the Lease holder to log that it leads", func() bool {
		lead = nil
		for _, p := range c.controllers {
			if !p.exited() && strings.Contains(p.out.String(), `"msg":"Successfully acquired lease"`) {
				if lead != nil {
					t.Fatalf("both %s and %s logged acquiring the Lease", lead.name, p.name)
				}
				lead = p
			}
		}
		return lead != nil
	})
	return lead, holder
}

// TestKubernetesEndToEnd runs the Kubernetes path's scenarios one after
// another on one cluster, each through the real processes.
func TestKubernetesEndToEnd(t *testing.T) {
	began := time.Now()
	c := setup(t)
	t.Logf("set-up (build, API server, agent, Prometheus, controllers) %.1fs", time.Since(began).Seconds())
	c.leader(t, "")

	for _, tc := range []struct {
		name string
		fn   func(*testing.T, *cluster)
	}{
		{"refused namespace", testRefused},
		{"dry run", testDryRun},
		{"happy path", testHappyPath},
		{"delete mid-run", testDeleteMidRun},
		{"SIGINT mid-run", testInterrupt},
		// Last: it kills a controller.
		{"leader killed mid-run", testLeaderKilled},
	} {
		t0 := time.Now()
		ok := t.Run(tc.name, func(t *testing.T) { tc.fn(t, c) })
		t.Logf("%s: %.1fs", tc.name, time.Since(t0).Seconds())
		if !ok {
			break
		}
	}
}
