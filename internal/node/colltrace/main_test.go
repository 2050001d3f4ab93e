package colltrace

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a tracer's reader goroutine outlives its
// Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
