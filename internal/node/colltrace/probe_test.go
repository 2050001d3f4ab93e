package colltrace

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
)

// trackerAt reports a tracker's verdict at a fixed time.
type trackerAt struct {
	tr  *Tracker
	now time.Duration
}

func (s trackerAt) Report() Report { return s.tr.Report(s.now) }

func TestProbe(t *testing.T) {
	t.Parallel()
	straggling := NewTracker(AnalysisOptions{})
	late := job{ranks: 3, calls: 40, period: 40 * time.Millisecond, delay: func(r, k int) time.Duration {
		if r == 1 {
			return 20 * time.Millisecond
		}
		return 0
	}}
	lateEnd := late.feed(straggling)
	both := NewTracker(AnalysisOptions{HangTimeout: time.Second})
	bothEnd := job{ranks: 3, calls: 40, period: 40 * time.Millisecond, stop: map[int]int{2: 30}, delay: late.delay}.feed(both)
	calm := NewTracker(AnalysisOptions{})
	calmEnd := job{ranks: 2, calls: 40, period: 40 * time.Millisecond}.feed(calm)
	byGPU := func(r Rank) probe.Subject { return probe.Subject{Node: "n1", GPU: strconv.Itoa(r.PID - 100)} }
	tests := []struct {
		name    string
		src     Reporter
		subject func(Rank) probe.Subject
		want    probe.Observation
	}{
		{"quiet job", trackerAt{calm, calmEnd}, nil, probe.Observation{}},
		{"straggler", trackerAt{straggling, lateEnd}, nil,
			probe.Observation{Holds: true, Subjects: []probe.Subject{{Node: "n1"}}, Value: 0.02}},
		{"hung first, then straggler, subjects by gpu", trackerAt{both, bothEnd + 2*time.Second}, byGPU,
			probe.Observation{Holds: true, Subjects: []probe.Subject{{Node: "n1", GPU: "2"}, {Node: "n1", GPU: "1"}}, Value: 2.38}}, // 9 periods + 20 ms + 2 s since rank 0 entered collective 30
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := NewProbe(probe.CollectiveTraceDetector, tt.src, ProbeOptions{Node: "n1", Subject: tt.subject})
			if p.Name() != "collective-trace" {
				t.Errorf("name %q", p.Name())
			}
			got, err := p.Observe(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got.Holds != tt.want.Holds || len(got.Subjects) != len(tt.want.Subjects) || got.Value < tt.want.Value-1e-9 || got.Value > tt.want.Value+1e-9 {
				t.Fatalf("observed %+v, want %+v", got, tt.want)
			}
			for i := range got.Subjects {
				if got.Subjects[i] != tt.want.Subjects[i] {
					t.Errorf("subject %d: %+v, want %+v", i, got.Subjects[i], tt.want.Subjects[i])
				}
			}
			if got.Holds != (got.Detail != "") || got.Holds && !strings.Contains(got.Detail, "pid 101") {
				t.Errorf("detail %q", got.Detail)
			}
		})
	}
}

func TestProbeHonoursContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := NewProbe("x", trackerAt{NewTracker(AnalysisOptions{}), 0}, ProbeOptions{})
	if _, err := p.Observe(ctx); err == nil {
		t.Error("Observe on a cancelled context: no error")
	}
}
