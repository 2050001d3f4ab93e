package coverage

import (
	"github.com/gpuchaos/gpuchaos/internal/twin"
	"slices"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
)

// TestPrepareEvaluatesOnlyRulesThatCanFire: a rule that reads an opt-in
// counter left off, a metric no exporter produces, or a record that never
// produces a series is a column and a report like any other, but is left
// out of the evaluation, so it costs nothing per fault: a fleet's pile of
// dead rules must not slow the run.
func TestPrepareEvaluatesOnlyRulesThatCanFire(t *testing.T) {
	t.Parallel()
	set, err := rules.Load([]byte(`groups:
- name: g
  rules:
  - {alert: Hot, expr: DCGM_FI_DEV_GPU_TEMP > 85}
  - {alert: Dbe, expr: "increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[5m]) > 0"}
  - {alert: Elsewhere, expr: nvidia_gpu_temperature > 85}
  - {record: "gpu:elsewhere:max", expr: max(nvidia_gpu_temperature)}
  - {alert: ElsewhereRecorded, expr: "gpu:elsewhere:max > 85"}
  - {alert: Either, expr: nvidia_gpu_temperature > 85 or DCGM_FI_DEV_GPU_TEMP > 85}
`), "g.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		optIn []string
		live  []string
	}{
		{"default counters", nil, []string{"Hot", "Either"}},
		{"the ECC counter enabled", []string{"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"}, []string{"Hot", "Dbe", "Either"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rs := prepare(set, rules.AnalyzeOptions{OptIn: tt.optIn})
			var live []string
			for _, r := range rs.live.Rules {
				live = append(live, r.Name)
			}
			if !slices.Equal(live, tt.live) {
				t.Errorf("evaluated %v, want %v", live, tt.live)
			}
			if len(rs.cols) != 5 || len(rs.reports) != 6 {
				t.Errorf("%d columns and %d reports, want every alert (5) and every rule (6)", len(rs.cols), len(rs.reports))
			}
		})
	}
}

// TestCoverageTwinKeepsItsWholeSpan: the clean hour vets a suggestion over
// warm-up plus an hour, evaluated from the twin's start, which outruns the
// twin's default retention; the coverage twin keeps its first samples.
func TestCoverageTwinKeepsItsWholeSpan(t *testing.T) {
	t.Parallel()
	opts := Options{Spec: twin.Default(), Seed: 1}
	tw, err := newTwin(opts)
	if err != nil {
		t.Fatal(err)
	}
	start := tw.Now()
	if err := tw.Sleep(t.Context(), 20*time.Minute+cleanHour); err != nil {
		t.Fatal(err)
	}
	s := tw.Select("DCGM_FI_DEV_GPU_TEMP")
	if len(s) == 0 || len(s[0].Samples) == 0 {
		t.Fatal("no temperature series")
	}
	if first := time.UnixMilli(s[0].Samples[0].T); first.Sub(start) > time.Minute {
		t.Errorf("the oldest sample is %s after the start, want the start kept", first.Sub(start))
	}
}

// TestNoteOffTwinFollowsRecords: a rule that reads a record of a series the
// fleet has and the twin does not export reads nothing on the twin, as the
// record does, and its reason says so (as kube-prometheus'
// cluster:node_cpu:ratio_rate5m over node:node_cpu_utilization:ratio_rate5m).
func TestNoteOffTwinFollowsRecords(t *testing.T) {
	t.Parallel()
	set, err := rules.Load([]byte(`groups:
- name: g
  rules:
  - {record: "node:cpu:rate5m", expr: "sum by (instance) (rate(node_cpu_seconds_total[5m]))"}
  - {record: "cluster:cpu:rate5m", expr: "sum(node:cpu:rate5m)"}
  - {alert: ClusterBusy, expr: "cluster:cpu:rate5m > 0.9"}
  - {alert: HotAndBusy, expr: "DCGM_FI_DEV_GPU_TEMP > 85 and on () cluster:cpu:rate5m > 0.9"}
  - {record: "gpu:temp:max", expr: "max(DCGM_FI_DEV_GPU_TEMP)"}
  - {alert: Hot, expr: "gpu:temp:max > 85"}
`), "g.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rs := prepare(set, rules.AnalyzeOptions{})
	rs.noteOffTwin(map[string]bool{"DCGM_FI_DEV_GPU_TEMP": true})
	const note = "the twin does not export node_cpu_seconds_total, so there it reads nothing"
	for i, r := range rs.reports {
		want := note
		if r.Name == "gpu:temp:max" || r.Name == "Hot" {
			want = ""
		}
		if r.Status != string(rules.StatusOK) || r.Reason != want {
			t.Errorf("%s: status %s, reason %q; want ok, %q", r.Name, r.Status, r.Reason, want)
		}
		if c := rs.col[i]; c != nil && c.Reason != r.Reason {
			t.Errorf("%s: column reason %q, report %q", r.Name, c.Reason, r.Reason)
		}
	}
}
