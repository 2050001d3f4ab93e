package testutil

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/node/kmsg"
)

// KmsgLines follows the real kernel log from when FollowKmsg was called
// and keeps the records that contain its needle.
type KmsgLines struct {
	mu    sync.Mutex
	lines []string
}

// FollowKmsg reads /dev/kmsg from its newest record until tb ends; it
// fails tb when the kernel log cannot be opened (root is needed).
func FollowKmsg(tb testing.TB, needle string) *KmsgLines {
	tb.Helper()
	fl, err := kmsg.Open(kmsg.Options{})
	if err != nil {
		tb.Fatalf("follow the kernel log %s: %v", kmsg.DefaultPath, err)
	}
	k := &KmsgLines{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = fl.Run(ctx, func(r kmsg.Record) {
			if strings.Contains(r.Message, needle) {
				k.mu.Lock()
				k.lines = append(k.lines, r.Message)
				k.mu.Unlock()
			}
		})
	}()
	tb.Cleanup(func() { cancel(); <-done })
	return k
}

// Lines returns the records kept so far.
func (k *KmsgLines) Lines() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.lines)
}
