package twin

import (
	"slices"
	"sort"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/model/series"
)

// trimFraction sets how often Sleep trims: every twentieth of the
// retention in virtual time, so at most 5 % more than the retention is
// held between two trims and each trim copies little.
const trimFraction = 20

// Trim drops the samples older than before, keeping the newest sample of
// every series whatever its age, so a long-running twin (the live loop
// serving /metrics) holds a bounded window instead of every sample since
// its start. Keeping the newest sample preserves what an instant query
// sees: a series that went stale keeps its staleness marker, and one whose
// source vanished long ago still ends in it.
//
// Trim shifts samples within each series' slice: Samples slices read before
// the call must not be used after it. Kernel log lines are kept (Sleep
// bounds them).
func (t *Twin) Trim(before time.Time) {
	cut := before.UnixMilli()
	for _, se := range t.store.all {
		s := se.Samples
		i := keepFrom(s, cut)
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

// keepFrom returns the index of the first sample at or after cut, but never
// past the newest sample, which always stays.
func keepFrom(s []series.Sample, cut int64) int {
	if len(s) < 2 {
		return 0
	}
	return sort.Search(len(s)-1, func(i int) bool { return s[i].T >= cut })
}

// autoTrim is Sleep's trim: it drops history older than the retention
// behind the clock, or behind the pin once a fault has been applied,
// whichever is older. Unlike Trim it copies what it keeps into new slices,
// so that a caller holding a series' samples from before a Sleep (a probe,
// the PromQL adapter) still reads what it read, and the old arrays are
// freed once nobody does.
func (t *Twin) autoTrim() {
	t.trimmed = t.now
	from := t.now - t.retention
	if t.pinned {
		from = min(from, t.pin-t.retention)
	}
	if from <= 0 {
		return
	}
	cutTime := t.start.Add(from)
	cut := cutTime.UnixMilli()
	// Room for the samples until the next trim, so that appends between
	// two trims do not reallocate.
	grow := int(t.trimEvery/t.scrape) + 1
	for _, se := range t.store.all {
		s := se.Samples
		i := keepFrom(s, cut)
		if i == 0 {
			continue
		}
		kept := make([]series.Sample, len(s)-i, len(s)-i+grow)
		copy(kept, s[i:])
		se.Samples = kept
	}
	i := sort.Search(len(t.logs), func(i int) bool { return !t.logs[i].Time.Before(cutTime) })
	if i > 0 {
		// A copy, not a reslice: the dropped lines' text would otherwise
		// stay reachable through the old array.
		t.logs = slices.Clone(t.logs[i:])
	}
}
