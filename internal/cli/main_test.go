package cli

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/node/trafficctl/netnstest"
)

// mainArgsEnv, set in a re-executed test binary's environment to a JSON
// list of arguments, makes it run gpuchaos with them and exit with its
// code: a gpuchaos process a test can SIGKILL.
const mainArgsEnv = "GPUCHAOS_CLI_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(netnstest.SleeperEnv) != "" {
		netnstest.Sleep() // a process living in a test's network namespace
	}
	if a := os.Getenv(mainArgsEnv); a != "" {
		var args []string
		if err := json.Unmarshal([]byte(a), &args); err != nil {
			os.Stderr.WriteString("bad " + mainArgsEnv + ": " + err.Error() + "\n")
			os.Exit(3)
		}
		os.Exit(Main(args, os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
