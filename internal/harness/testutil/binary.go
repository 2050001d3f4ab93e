package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var gpuchaos struct {
	once sync.Once
	path string
	err  error
}

// GPUChaos builds the gpuchaos command once per test binary and returns
// its path, for tests whose parts under test are the real command in
// processes of their own (the node agent, the controller, the CLI). The
// package's TestMain removes it with RemoveGPUChaos.
func GPUChaos(tb testing.TB) string {
	tb.Helper()
	gpuchaos.once.Do(func() {
		dir, err := os.MkdirTemp("", "gpuchaos-test-bin-")
		if err != nil {
			gpuchaos.err = err
			return
		}
		gpuchaos.path = filepath.Join(dir, "gpuchaos")
		if out, err := exec.Command("go", "build", "-o", gpuchaos.path, "github.com/gpuchaos/gpuchaos/cmd/gpuchaos").CombinedOutput(); err != nil {
			gpuchaos.err = fmt.Errorf("go build gpuchaos: %v\n%s", err, out)
		}
	})
	if gpuchaos.err != nil {
		tb.Fatal(gpuchaos.err)
	}
	return gpuchaos.path
}

// RemoveGPUChaos removes what GPUChaos built, if anything.
func RemoveGPUChaos() {
	if gpuchaos.path != "" {
		os.RemoveAll(filepath.Dir(gpuchaos.path))
	}
}
