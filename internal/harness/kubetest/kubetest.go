package kubetest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/kube/kubeclient"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// The control plane scripts/setup-kube builds. A test holds these equal to
// the script's own pins, so the folder [Assets] looks in is the one the
// script writes.
const (
	KubeVersion = "v1.37.2"
	EtcdVersion = "v3.7.0"
)

// RequireEnv names the environment variable that turns a missing control
// plane from a skip into a failure. scripts/test sets it.
const RequireEnv = "GPUCHAOS_REQUIRE_KUBE"

// Binary names, as envtest and scripts/setup-kube spell them.
const (
	apiServerBin         = "kube-apiserver"
	etcdBin              = "etcd"
	controllerManagerBin = "kube-controller-manager"
)

// startTimeout bounds each server's start: envtest's default of 20 s is
// short for an API server starting beside a busy build on two cores.
const startTimeout = 90 * time.Second

// Assets returns the folder holding kube-apiserver, etcd and
// kube-controller-manager: KUBEBUILDER_ASSETS when it is set (envtest's own
// variable, so the same folder serves tools that read it), otherwise the
// folder scripts/setup-kube builds into,
// ${GPUCHAOS_CACHE:-$HOME/.cache/gpuchaos}/kube/kubernetes-V-etcd-V/bin.
// The error says which binary is missing where.
func Assets() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		cache, err := cacheDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(cache, "kube", "kubernetes-"+KubeVersion+"-etcd-"+EtcdVersion, "bin")
	}
	var missing []string
	for _, b := range []string{apiServerBin, etcdBin, controllerManagerBin} {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return dir, fmt.Errorf("%s missing in %s", strings.Join(missing, ", "), dir)
	}
	return dir, nil
}

// cacheDir is the folder the setup scripts build into:
// ${GPUCHAOS_CACHE:-$HOME/.cache/gpuchaos}.
func cacheDir() (string, error) {
	if cache := os.Getenv("GPUCHAOS_CACHE"); cache != "" {
		return cache, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find the setup-kube cache: %w", err)
	}
	return filepath.Join(home, ".cache", "gpuchaos"), nil
}

// Missing ends a test that lacks what it needs (a binary, root, the
// kernel log): it fails when [RequireEnv] is set, as scripts/test sets it,
// so CI never passes by skipping, and skips elsewhere with msg saying what
// to install.
func Missing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv(RequireEnv) != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// requireAssets returns [Assets]' folder, or ends the test: skipped, or
// failed when [RequireEnv] is set.
func requireAssets(t testing.TB) string {
	t.Helper()
	dir, err := Assets()
	if err != nil {
		Missing(t, fmt.Sprintf("a real Kubernetes control plane needs its binaries: %v (run scripts/setup-kube; KUBEBUILDER_ASSETS=$(scripts/setup-kube) names its folder)", err))
	}
	return dir
}

// Options configure [Start]. The zero value is a plain control plane
// whose client knows the built-in kinds.
type Options struct {
	// Scheme is the client's; nil means client-go's, which holds every
	// built-in kind. A test of custom resources passes one holding them too.
	Scheme *runtime.Scheme
	// CRDs installs gpuchaos's custom resource definitions (the chart's
	// crds folder, as make generate writes it) and adds their kinds to
	// the scheme, so Client reads and writes Experiments, NodeFaults and
	// Schedules.
	CRDs bool
}

// CRDDir returns the chart's crds folder, found from the module root.
func CRDDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "deploy", "helm", "gpuchaos", "crds"), nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = up
	}
}

// Scheme returns a scheme holding the built-in kinds and gpuchaos's, the
// one gpuchaos's commands use.
func Scheme() *runtime.Scheme { return kubeclient.Scheme }

// Env is a running control plane: an API server on loopback with its own
// etcd, and an administrator's credentials for it. It stops when the test
// that started it ends.
type Env struct {
	// Config reaches the API server as a member of system:masters.
	Config *rest.Config
	// Client is a controller-runtime client on Config, able to watch.
	Client client.WithWatch
	// Kubeconfig is a kubeconfig file holding Config, for processes such
	// as kube-controller-manager or a gpuchaos binary under test.
	Kubeconfig string

	assets string
	logs   string // folder of the servers' output files
	env    *envtest.Environment

	kwokExited <-chan struct{} // closed when StartKWOK's kwok exits
	// stopped is set between StopAPIServer and StartAPIServer; it
	// yields the stop's outcome.
	stopped chan error
}

// Start starts etcd and kube-apiserver from [Assets]' folder, waits until
// the API server is ready, and stops both, removing their data, when t
// ends. When t fails, the tail of each server's output is logged. Without
// the binaries it skips t, or fails it when [RequireEnv] is set.
func Start(t testing.TB, opts Options) *Env {
	t.Helper()
	assets := requireAssets(t)
	if opts.Scheme == nil {
		opts.Scheme = clientgoscheme.Scheme
		if opts.CRDs {
			opts.Scheme = Scheme()
		}
	}
	e := &Env{assets: assets, logs: t.TempDir()}

	no := false
	e.env = &envtest.Environment{
		BinaryAssetsDirectory: assets,
		// envtest would otherwise follow USE_EXISTING_CLUSTER to whatever
		// cluster the caller's kubeconfig names; tests never touch one.
		UseExistingCluster:       &no,
		ControlPlaneStartTimeout: startTimeout,
		ControlPlaneStopTimeout:  30 * time.Second,
		Scheme:                   opts.Scheme,
	}
	if opts.CRDs {
		dir, err := CRDDir()
		if err != nil {
			t.Fatalf("find the CRDs: %v", err)
		}
		e.env.CRDDirectoryPaths = []string{dir}
		e.env.ErrorIfCRDPathMissing = true
	}
	// Explicit paths, so a TEST_ASSET_* variable in the caller's
	// environment cannot swap in another binary either.
	api := e.env.ControlPlane.GetAPIServer()
	api.Path = filepath.Join(assets, apiServerBin)
	// A certificate folder of our own outlives a stop of the API server
	// (envtest clears and regenerates one it made itself), so a restart
	// serves the same certificates and Kubeconfig stays valid.
	api.CertDir = t.TempDir()
	etcd := &envtest.Etcd{Path: filepath.Join(assets, etcdBin)}
	e.env.ControlPlane.Etcd = etcd
	var err error
	if api.Out, api.Err, err = e.logFile(t, apiServerBin); err != nil {
		t.Fatal(err)
	}
	if etcd.Out, etcd.Err, err = e.logFile(t, etcdBin); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			e.logTails(t)
		}
	})

	began := time.Now()
	cfg, err := e.env.Start()
	// Registered before the error check: a half-started control plane
	// (etcd up, API server not) still has processes to stop.
	t.Cleanup(func() {
		if err := e.env.Stop(); err != nil {
			t.Errorf("stop the test control plane: %v", err)
		}
	})
	if err != nil {
		t.Fatalf("start kube-apiserver and etcd from %s: %v", assets, err)
	}
	t.Logf("kube-apiserver and etcd from %s ready in %s", assets, time.Since(began).Round(time.Millisecond))
	e.Config = cfg

	if e.Client, err = client.NewWithWatch(cfg, client.Options{Scheme: opts.Scheme}); err != nil {
		t.Fatalf("client for the test API server: %v", err)
	}
	e.Kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(e.Kubeconfig, e.env.KubeConfig, 0o600); err != nil {
		t.Fatalf("write the test kubeconfig: %v", err)
	}
	return e
}

// StopAPIServer stops kube-apiserver, leaving etcd running, so a test can
// see what a client does while the API server is unreachable. It returns
// once the API server refuses connections; the process may still be
// draining its watches (it waits for them up to its stop timeout, then is
// killed), which [Env.StartAPIServer] waits out.
func (e *Env) StopAPIServer(t testing.TB) {
	t.Helper()
	if e.stopped != nil {
		t.Fatal("StopAPIServer: the API server is already stopped")
	}
	stopped := make(chan error, 1)
	e.stopped = stopped
	go func() { stopped <- e.env.ControlPlane.GetAPIServer().Stop() }()
	// Registered after the control plane's own stop, so it runs first:
	// the two must not stop the one process at once.
	t.Cleanup(func() {
		if e.stopped == stopped {
			<-stopped
		}
	})
	addr := e.address(t)
	deadline := time.Now().Add(startTimeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver still accepts connections on %s %s after it was told to stop", addr, startTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StartAPIServer starts kube-apiserver again after [Env.StopAPIServer], on
// the same etcd, port and certificates, so Config, Client and Kubeconfig
// work unchanged and every object is still there. It returns once the API
// server answers /healthz.
func (e *Env) StartAPIServer(t testing.TB) {
	t.Helper()
	if e.stopped == nil {
		t.Fatal("StartAPIServer: the API server was not stopped")
	}
	began := time.Now()
	if err := <-e.stopped; err != nil {
		// Stop kills what outlives its timeout: watches a client keeps
		// open hold a draining API server up.
		t.Logf("kube-apiserver did not stop within its timeout and was killed: %v", err)
	}
	e.stopped = nil
	// The killed process may hold the port a moment longer.
	addr := e.address(t)
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			ln.Close()
			break
		}
		if time.Since(began) > startTimeout {
			t.Fatalf("the API server's port %s is still taken: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := e.env.ControlPlane.GetAPIServer().Start(); err != nil {
		t.Fatalf("restart kube-apiserver: %v", err)
	}
	t.Logf("kube-apiserver restarted in %s", time.Since(began).Round(time.Millisecond))
}

// address is host:port of the API server.
func (e *Env) address(t testing.TB) string {
	t.Helper()
	u, err := url.Parse(e.Config.Host)
	if err != nil {
		t.Fatalf("API server address %q: %v", e.Config.Host, err)
	}
	return u.Host
}

// logFile opens the output file of one server, closed when t ends.
// The same file serves as its stdout and stderr.
func (e *Env) logFile(t testing.TB, name string) (stdout, stderr *os.File, err error) {
	f, err := os.Create(filepath.Join(e.logs, name+".log"))
	if err != nil {
		return nil, nil, fmt.Errorf("create the %s log: %w", name, err)
	}
	t.Cleanup(func() { f.Close() })
	return f, f, nil
}

// tailLines is how much of each server's output a failed test shows.
const tailLines = 40

// logTails logs the last lines of every server's output.
func (e *Env) logTails(t testing.TB) {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(e.logs, "*.log"))
	if err != nil {
		return
	}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Logf("read %s: %v", n, err)
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > tailLines {
			lines = lines[len(lines)-tailLines:]
		}
		t.Logf("last lines of %s:\n%s", filepath.Base(n), strings.Join(lines, "\n"))
	}
}
