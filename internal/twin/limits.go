package twin

import (
	"fmt"
	"time"
)

// Limits on the inputs whose size drives the twin's memory or run time. A
// value past one is refused with an error naming the field or flag and the
// limit, rather than taken in and paid for with the host's memory.
const (
	// MaxWarmup is the longest fault-free warm-up a command runs before an
	// experiment or before serving. A day is many times the longest
	// lookback of any probe or rule (DefaultRetention) and costs under a
	// second of CPU on the default cluster; memory no longer grows with it,
	// since Sleep keeps only the retention.
	MaxWarmup = 24 * time.Hour

	// MaxGPUs is the most GPUs a cluster spec may hold. The twin integrates
	// every GPU's physics each simulated second and keeps about twenty
	// series per GPU: 512 nodes of eight take 3.3 s of CPU per simulated
	// 70 minutes and hold 270 MB at the default retention and 30 s scrapes.
	MaxGPUs = 4096

	// MaxGPUsPerNode is the most GPUs of one node: 72, a GB200 NVL72 rack
	// treated as one NVLink node.
	MaxGPUsPerNode = 72

	// MaxFailureRate is the highest background failure rate per GPU-hour,
	// for each class and for all classes together: one failure per GPU
	// every hour, fifty thousand times the rate of Llama 3's fleet (2e-5).
	// Anything higher has no physical meaning and only floods the event
	// queue.
	MaxFailureRate = 1.0

	// MaxClusterSpecBytes is the largest cluster spec file
	// LoadClusterSpec reads; the example spec is under 4 KiB.
	MaxClusterSpecBytes = 1 << 20

	// DefaultRetention is how much history Sleep keeps behind the clock
	// when Options.Retention is zero. It covers the longest lookback of
	// anything that reads the twin at or after the time it evaluates: the
	// rule packs' [1h] ranges over a recording rule whose own selector
	// looks back the 5 m lookback delta (65 m; [1h] offset 1m is 61 m), the
	// built-in detectors' 30 m baselines taken 10 m back under a 2 m for
	// (42 m), their 30 m increase windows and the 10 m XID log window. A
	// rule's for: costs no lookback: the evaluator carries its state
	// forward. No more than that, so that a day of warm-up holds about
	// what an hour does (BenchmarkWarmupMemory).
	DefaultRetention = 65 * time.Minute

	// MaxLogLines is how many kernel log lines the twin keeps, all nodes
	// together; past it the oldest go first, as in the kernel's ring
	// buffer. A log probe looks back minutes, and the twin writes a few
	// lines per fault.
	MaxLogLines = 1 << 16
)

// CheckWarmup checks a warm-up duration given by flag (such as
// "--warmup"): it must be between zero and MaxWarmup. The error names flag
// and the limit, in one line.
func CheckWarmup(flag string, d time.Duration) error {
	switch {
	case d < 0:
		return fmt.Errorf("%s: must not be negative, got %s", flag, d)
	case d > MaxWarmup:
		return fmt.Errorf("%s: at most %s, got %s", flag, MaxWarmup, d)
	}
	return nil
}
