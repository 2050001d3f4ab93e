package childproc

import (
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// roleEnv makes the test binary act as a child instead of running tests.
const roleEnv = "CHILDPROC_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "":
		os.Exit(m.Run())
	case "ready":
		ready()
		time.Sleep(time.Minute)
	case "stubborn":
		// Ignores SIGTERM, so only SIGKILL ends it.
		signal.Ignore(syscall.SIGTERM)
		ready()
		time.Sleep(time.Minute)
	case "exit":
		os.Exit(3)
	}
	os.Exit(0)
}

func ready() {
	w := os.NewFile(3, "ready")
	_, _ = w.Write([]byte("ready\n"))
	_ = w.Close()
}
