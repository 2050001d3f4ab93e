package kubetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
)

// controllerManagerLease is the Lease kube-controller-manager holds while
// it leads; holding it is the sign that its controllers are starting.
var controllerManagerLease = client.ObjectKey{Namespace: "kube-system", Name: "kube-controller-manager"}

// StartControllerManager runs kube-controller-manager from the same folder
// as e's API server, against it, with the named controllers
// ("garbage-collector-controller", "node-lifecycle-controller", …; its
// --controllers flag, so "*" or none means its default set). It returns
// once the controller manager holds its leader lease, which it takes just
// before starting its controllers, and stops it (SIGTERM, then SIGKILL)
// when t ends. It serves no port of its own: its secure port is off,
// so it talks to the API server on loopback and listens nowhere.
func (e *Env) StartControllerManager(t testing.TB, controllers ...string) {
	t.Helper()
	dir := t.TempDir()
	// The keys the API server signs and checks service-account tokens
	// with, so the token and root-CA controllers run as in a cluster.
	api := e.env.ControlPlane.GetAPIServer()
	rootCA := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(rootCA, api.SecureServing.CA, 0o600); err != nil {
		t.Fatalf("write the API server's CA: %v", err)
	}
	if len(controllers) == 0 {
		controllers = []string{"*"}
	}
	args := []string{
		"--kubeconfig=" + e.Kubeconfig,
		"--secure-port=0",
		"--controllers=" + strings.Join(controllers, ","),
		"--leader-elect=true",
		"--service-account-private-key-file=" + filepath.Join(api.CertDir, "sa-signer.key"),
		"--root-ca-file=" + rootCA,
	}
	out, _, err := e.logFile(t, controllerManagerBin)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, filepath.Join(e.assets, controllerManagerBin), args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second // then SIGKILL
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start %s: %v", controllerManagerBin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cancel()
		<-exited
	})

	began := time.Now()
	testutil.Eventually(t, startTimeout, "kube-controller-manager to hold its leader lease", func() bool {
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			t.Fatalf("%s exited before leading: %v", controllerManagerBin, err)
		default:
		}
		var lease coordinationv1.Lease
		err := e.Client.Get(context.Background(), controllerManagerLease, &lease)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("read lease %s: %v", controllerManagerLease, err)
		}
		return err == nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != ""
	})
	t.Logf("kube-controller-manager (%s) leading in %s", fmt.Sprint(controllers), time.Since(began).Round(time.Millisecond))
}
