// Command gpuchaos-agent is gpuchaos's node agent on its own, the Helm
// chart DaemonSet's command: 'gpuchaos agent' without --twin, in a binary
// that links only what a node needs, so that it stays small on every GPU
// node. The command lives in internal/cli/agentcmd.
package main

import (
	"os"

	"github.com/gpuchaos/gpuchaos/internal/cli/agentcmd"
)

func main() {
	os.Exit(agentcmd.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
