package probe_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
	"github.com/gpuchaos/gpuchaos/internal/model/xid"
)

func dur(d time.Duration) v1alpha1.Duration { return v1alpha1.Duration{Duration: d} }

func TestFromSpec(t *testing.T) {
	t.Parallel()
	hot := scenario{series: []*series.Series{
		h(temp, gpu("n1", 3), recent(2*time.Minute, 90, 70)),
		h(temp, gpu("n2", 1), recent(2*time.Minute, 95, 70)),
	}}
	xidLog := scenario{logs: []series.LogLine{
		{Time: now.Add(-time.Minute), Node: "n1", Priority: 3, Text: xid.FormatLine("0000:18:00", 79, -1, "", "")},
		{Time: now.Add(-30 * time.Second), Node: "n2", Priority: 6, Text: "systemd[1]: Started foo.service"},
	}}
	tests := []struct {
		name     string
		probe    string
		spec     v1alpha1.ProbeSpec
		sc       scenario
		wantName string
		holds    bool
		want     []probe.Subject
	}{
		{
			name: "detector keeps its name", spec: v1alpha1.ProbeSpec{Detector: "dcgm-gpu-temp-high"}, sc: hot,
			wantName: "dcgm-gpu-temp-high", holds: true, want: []probe.Subject{gpuSubject("n1", 3), gpuSubject("n2", 1)},
		},
		{
			name: "detector under its own name", probe: "dcgm-gpu-temp-high", spec: v1alpha1.ProbeSpec{Detector: "dcgm-gpu-temp-high"}, sc: hot,
			wantName: "dcgm-gpu-temp-high", holds: true, want: []probe.Subject{gpuSubject("n1", 3), gpuSubject("n2", 1)},
		},
		{
			name: "renamed detector behaves the same", probe: "gpu-too-hot", spec: v1alpha1.ProbeSpec{Detector: "dcgm-gpu-temp-high"}, sc: hot,
			wantName: "gpu-too-hot", holds: true, want: []probe.Subject{gpuSubject("n1", 3), gpuSubject("n2", 1)},
		},
		{
			name: "threshold with labels and for", probe: "hot-n1",
			spec: v1alpha1.ProbeSpec{Threshold: &v1alpha1.ThresholdProbe{Metric: temp, Labels: map[string]string{"Hostname": "n1"}, Op: ">=", Value: 90, For: dur(time.Minute)}},
			sc:   hot, wantName: "hot-n1", holds: true, want: []probe.Subject{gpuSubject("n1", 3)},
		},
		{
			name: "threshold for not yet met", probe: "hot-long",
			spec: v1alpha1.ProbeSpec{Threshold: &v1alpha1.ThresholdProbe{Metric: temp, Op: ">", Value: 85, For: dur(3 * time.Minute)}},
			sc:   hot, wantName: "hot-long",
		},
		{
			name: "threshold without for holds at once", probe: "hot-now",
			spec: v1alpha1.ProbeSpec{Threshold: &v1alpha1.ThresholdProbe{Metric: temp, Op: ">", Value: 92}},
			sc:   hot, wantName: "hot-now", holds: true, want: []probe.Subject{gpuSubject("n2", 1)},
		},
		{
			name: "absent with no series holds with an empty subject", probe: "no-temp",
			spec: v1alpha1.ProbeSpec{Threshold: &v1alpha1.ThresholdProbe{Metric: "DCGM_FI_DEV_POWER_USAGE", Absent: true}},
			sc:   hot, wantName: "no-temp", holds: true, want: []probe.Subject{{}},
		},
		{
			name: "absent with a fresh series does not hold", probe: "no-temp",
			spec: v1alpha1.ProbeSpec{Threshold: &v1alpha1.ThresholdProbe{Metric: temp, Absent: true}},
			sc:   hot, wantName: "no-temp",
		},
		{
			// absent() carries the selector's equality matchers as its
			// labels, so the observation is about node n3.
			name: "absent looks only at matching series", probe: "no-temp-n3",
			spec: v1alpha1.ProbeSpec{Threshold: &v1alpha1.ThresholdProbe{Metric: temp, Labels: map[string]string{"Hostname": "n3"}, Absent: true}},
			sc:   hot, wantName: "no-temp-n3", holds: true, want: []probe.Subject{{Node: "n3"}},
		},
		{
			// absent(m): a series last scraped 6m ago is past the 5m
			// lookback.
			name: "absent without for uses the lookback", probe: "gone",
			spec:     v1alpha1.ProbeSpec{Threshold: &v1alpha1.ThresholdProbe{Metric: temp, Absent: true}},
			sc:       scenario{series: []*series.Series{h(temp, gpu("n1", 0), goneFor(6*time.Minute, 60))}},
			wantName: "gone", holds: true, want: []probe.Subject{{}},
		},
		{
			// absent_over_time(m[10m]): the same series was seen 6m ago.
			name: "absent with for looks back that far", probe: "gone",
			spec:     v1alpha1.ProbeSpec{Threshold: &v1alpha1.ThresholdProbe{Metric: temp, Absent: true, For: dur(10 * time.Minute)}},
			sc:       scenario{series: []*series.Series{h(temp, gpu("n1", 0), goneFor(6*time.Minute, 60))}},
			wantName: "gone",
		},
		{
			name: "absent with a for shorter than the lookback", probe: "gone",
			spec:     v1alpha1.ProbeSpec{Threshold: &v1alpha1.ThresholdProbe{Metric: temp, Absent: true, For: dur(time.Minute)}},
			sc:       scenario{series: []*series.Series{h(temp, gpu("n1", 0), goneFor(2*time.Minute, 60))}},
			wantName: "gone", holds: true, want: []probe.Subject{{}},
		},
		{
			name: "log pattern matches", probe: "xid-79",
			spec: v1alpha1.ProbeSpec{Log: &v1alpha1.LogProbe{Pattern: `NVRM: Xid \(PCI:[0-9a-f:]+\): 79,`}},
			sc:   xidLog, wantName: "xid-79", holds: true, want: []probe.Subject{{Node: "n1"}},
		},
		{
			name: "log pattern that matches nothing", probe: "xid-48",
			spec: v1alpha1.ProbeSpec{Log: &v1alpha1.LogProbe{Pattern: `Xid .*: 48,`}},
			sc:   xidLog, wantName: "xid-48",
		},
		{
			name: "log pattern matches any line", probe: "systemd",
			spec: v1alpha1.ProbeSpec{Log: &v1alpha1.LogProbe{Pattern: `^systemd\[`}},
			sc:   xidLog, wantName: "systemd", holds: true, want: []probe.Subject{{Node: "n2"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := probe.FromSpec(tt.probe, tt.spec, &fakeSource{now: now, series: tt.sc.series, logs: tt.sc.logs})
			if err != nil {
				t.Fatalf("FromSpec: %v", err)
			}
			if p.Name() != tt.wantName {
				t.Errorf("Name() = %q, want %q", p.Name(), tt.wantName)
			}
			obs, err := p.Observe(context.Background())
			if err != nil {
				t.Fatalf("Observe: %v", err)
			}
			if obs.Holds != tt.holds {
				t.Fatalf("holds = %v, want %v (%+v)", obs.Holds, tt.holds, obs)
			}
			if !slices.Equal(obs.Subjects, tt.want) {
				t.Errorf("subjects %+v, want %+v", obs.Subjects, tt.want)
			}
		})
	}
}

func TestFromSpecErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		probe   string
		spec    v1alpha1.ProbeSpec
		wantErr []string
	}{
		{"unknown detector", "p", v1alpha1.ProbeSpec{Detector: "dcgm-gpu-on-fire"}, []string{`"dcgm-gpu-on-fire"`, "not a built-in detector"}},
		{"invalid log pattern", "p", v1alpha1.ProbeSpec{Log: &v1alpha1.LogProbe{Pattern: `Xid (`}}, []string{"log pattern", "missing closing )"}},
		{"empty spec", "steady", v1alpha1.ProbeSpec{}, []string{`"steady"`, "defines nothing"}},
		{"prometheus on the twin", "alert", v1alpha1.ProbeSpec{Prometheus: &v1alpha1.PrometheusProbe{Alert: "GpuMissing"}}, []string{`"alert"`, "asks a Prometheus server", "live twin"}},
		{"unknown comparison", "p", v1alpha1.ProbeSpec{Threshold: &v1alpha1.ThresholdProbe{Metric: "m", Op: "=>"}}, []string{`"=>"`, "not one of"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := probe.FromSpec(tt.probe, tt.spec, &fakeSource{now: now})
			if err == nil {
				t.Fatalf("FromSpec returned %v and no error", p)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestFromSpecHonoursContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	specs := map[string]v1alpha1.ProbeSpec{
		"detector":  {Detector: "job-down"},
		"threshold": {Threshold: &v1alpha1.ThresholdProbe{Metric: temp, Op: ">", Value: 1}},
		"log":       {Log: &v1alpha1.LogProbe{Pattern: "x"}},
	}
	for name, spec := range specs {
		p, err := probe.FromSpec(name+"-renamed", spec, &fakeSource{now: now})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := p.Observe(ctx); err == nil {
			t.Errorf("%s: Observe with a cancelled context returned no error", name)
		}
	}
}
