package twin

import (
	"sort"
	"time"
)

// Trim drops the samples older than before, keeping the newest sample of
// every series whatever its age, so a long-running twin (the live loop
// serving /metrics) holds a bounded window instead of every sample since
// its start. Keeping the newest sample preserves what an instant query
// sees: a series that went stale keeps its staleness marker, and one whose
// source vanished long ago still ends in it.
//
// Trim shifts samples within each series' slice: Samples slices read before
// the call must not be used after it. Kernel log lines are kept.
func (t *Twin) Trim(before time.Time) {
	cut := before.UnixMilli()
	for _, se := range t.store.all {
		s := se.Samples
		if len(s) < 2 {
			continue
		}
		// Search all but the last sample, so the newest always stays.
		i := sort.Search(len(s)-1, func(i int) bool { return s[i].T >= cut })
		if i == 0 {
			continue
		}
		// Shifting in place keeps the capacity: the next scrapes append
		// into it, so a twin trimmed periodically stops allocating once its
		// window is full.
		n := copy(s, s[i:])
		se.Samples = s[:n]
	}
}
