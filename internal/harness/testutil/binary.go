package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// builtCommand is one of the module's commands built once per test binary.
type builtCommand struct {
	once sync.Once
	path string
	err  error
}

var gpuchaos, gpuchaosAgent builtCommand

// GPUChaos builds the gpuchaos command once per test binary and returns
// its path, for tests whose parts under test are the real command in
// processes of their own (the node agent, the controller, the CLI). The
// package's TestMain removes it with RemoveGPUChaos.
func GPUChaos(tb testing.TB) string {
	tb.Helper()
	return gpuchaos.build(tb, "gpuchaos")
}

// GPUChaosAgent builds gpuchaos-agent, the node agent's lean binary, as
// GPUChaos builds gpuchaos; RemoveGPUChaos removes it too.
func GPUChaosAgent(tb testing.TB) string {
	tb.Helper()
	return gpuchaosAgent.build(tb, "gpuchaos-agent")
}

func (c *builtCommand) build(tb testing.TB, name string) string {
	tb.Helper()
	c.once.Do(func() {
		dir, err := os.MkdirTemp("", name+"-test-bin-")
		if err != nil {
			c.err = err
			return
		}
		c.path = filepath.Join(dir, name)
		if out, err := exec.Command("go", "build", "-o", c.path, "github.com/gpuchaos/gpuchaos/cmd/"+name).CombinedOutput(); err != nil {
			c.err = fmt.Errorf("go build %s: %v\n%s", name, err, out)
		}
	})
	if c.err != nil {
		tb.Fatal(c.err)
	}
	return c.path
}

// RemoveGPUChaos removes what GPUChaos and GPUChaosAgent built, if
// anything.
func RemoveGPUChaos() {
	for _, c := range []*builtCommand{&gpuchaos, &gpuchaosAgent} {
		if c.path != "" {
			os.RemoveAll(filepath.Dir(c.path))
		}
	}
}
