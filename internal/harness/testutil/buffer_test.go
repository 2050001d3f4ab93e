package testutil

import (
	"strings"
	"sync"
	"testing"
)

// TestLockedBufferConcurrent writes from many goroutines while reading;
// under -race a missing lock fails, and every byte must arrive.
func TestLockedBufferConcurrent(t *testing.T) {
	var b LockedBuffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				_, _ = b.Write([]byte("x"))
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("x", 800) {
		t.Errorf("got %d bytes, want 800", len(got))
	}
}
