package rules

import (
	"os"
	"slices"
	"strings"
	"testing"
)

func mustPack(t *testing.T, name string) *Set {
	t.Helper()
	set, err := Pack(name)
	if err != nil {
		t.Fatalf("Pack(%q): %v", name, err)
	}
	return set
}

func TestPacks(t *testing.T) {
	t.Parallel()
	if got, want := Packs(), []string{"recommended", "seed", "typical"}; !slices.Equal(got, want) {
		t.Errorf("Packs() = %q, want %q", got, want)
	}
	for _, name := range Packs() {
		set := mustPack(t, name)
		for _, r := range set.Rules {
			if r.Source != "packs/"+name+".yaml" {
				t.Errorf("%s: Source = %q", r.Name, r.Source)
			}
		}
	}
	for _, bad := range []string{"", "nope", "../load", "seed.yaml"} {
		if _, err := Pack(bad); err == nil {
			t.Errorf("Pack(%q) succeeded", bad)
		}
	}
	if _, err := Pack("typcal"); err == nil || !strings.Contains(err.Error(), `did you mean "typical"?`) {
		t.Errorf("Pack(typcal) error = %v, want a suggestion", err)
	}
}

func TestSeedPackNeverFires(t *testing.T) {
	t.Parallel()
	set := mustPack(t, "seed")
	if len(set.Rules) != 1 {
		t.Fatalf("seed pack has %d rules, want 1", len(set.Rules))
	}
	r := set.Rules[0]
	if r.Name != "GPUThrottlingDetected" || r.Expr != `increase(nvidia_gpu_temperature{job="dcgm-exporter"}[5m]) > 5` || r.For.Minutes() != 10 {
		t.Errorf("seed rule = %s %q for %s, not the seed's", r.Name, r.Expr, r.For)
	}
	a := Analyze(set, AnalyzeOptions{})[0]
	want := "GPUThrottlingDetected reads nvidia_gpu_temperature, which no exporter produces (it looks like nvidia_gpu_temperature_celsius from mindprince/nvidia_gpu_prometheus_exporter, an exporter this fleet does not run); did you mean DCGM_FI_DEV_GPU_TEMP (default)?"
	if a.Status != StatusNeverFires || a.Reason != want {
		t.Errorf("seed analysis = %s %q\nwant never_fires %q", a.Status, a.Reason, want)
	}
	// Enabling every opt-in counter changes nothing: the metric is not a
	// dcgm-exporter metric at all.
	var all []string
	for _, m := range Known() {
		all = append(all, m.Name)
	}
	if a := Analyze(set, AnalyzeOptions{OptIn: all})[0]; a.Status != StatusNeverFires {
		t.Errorf("with every opt-in enabled: %s", a.Status)
	}
}

func TestRecommendedPackAllOK(t *testing.T) {
	t.Parallel()
	set := mustPack(t, "recommended")
	var recordFeedsAlert, keepFiring bool
	records := map[string]bool{}
	for _, a := range Analyze(set, AnalyzeOptions{}) {
		if a.Status != StatusOK || a.Reason != "" {
			t.Errorf("%s: %s %s", a.Rule.Name, a.Status, a.Reason)
		}
		for _, m := range a.Metrics {
			if m.Availability != AvailDefault && m.Availability != AvailRecorded {
				t.Errorf("%s reads %s (%s); the recommended pack reads only default and recorded metrics", a.Rule.Name, m.Name, m.Availability)
			}
			if m.Availability == AvailRecorded && a.Rule.Kind == KindAlert {
				recordFeedsAlert = true
			}
		}
		if a.Rule.Kind == KindRecord {
			records[a.Rule.Name] = true
			continue
		}
		if a.Rule.KeepFiringFor > 0 {
			keepFiring = true
		}
		if a.Rule.Interval == 0 {
			t.Errorf("%s: group %s sets no interval", a.Rule.Name, a.Rule.Group)
		}
		if a.Rule.Labels["severity"] == "" || a.Rule.Annotations["summary"] == "" {
			t.Errorf("%s: needs a severity label and a summary", a.Rule.Name)
		}
	}
	if !recordFeedsAlert || !keepFiring {
		t.Errorf("recording rule feeds an alert: %v; keep_firing_for used: %v", recordFeedsAlert, keepFiring)
	}
	for r := range records {
		if !strings.HasPrefix(r, "gpuchaos:") {
			t.Errorf("record %s is outside the gpuchaos: namespace", r)
		}
	}
}

func TestTypicalPack(t *testing.T) {
	t.Parallel()
	set := mustPack(t, "typical")
	if n := len(set.Rules); n < 10 || n > 15 {
		t.Errorf("typical pack has %d rules, want 10 to 15", n)
	}
	const ecc = "GpuEccDoubleBitError"
	for _, tt := range []struct {
		name  string
		optIn []string
		want  Status
	}{
		{"defaults", nil, StatusOptInOff},
		{"dbe counter enabled", []string{"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"}, StatusOK},
	} {
		for _, a := range Analyze(set, AnalyzeOptions{OptIn: tt.optIn}) {
			want := StatusOK
			if a.Rule.Name == ecc {
				want = tt.want
			}
			if a.Status != want {
				t.Errorf("%s: %s is %s, want %s (%s)", tt.name, a.Rule.Name, a.Status, want, a.Reason)
			}
			if a.Rule.Name == ecc && want == StatusOptInOff && !strings.Contains(a.Reason, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, an opt-in counter") {
				t.Errorf("%s: reason %q does not name the opt-in counter", tt.name, a.Reason)
			}
		}
	}
}

// TestPacksDocumented checks that packs/README.md has a section for every
// rule of every pack.
func TestPacksDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("packs/README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range Packs() {
		for _, r := range mustPack(t, name).Rules {
			if !strings.Contains(string(doc), "`"+r.Name+"`") {
				t.Errorf("packs/README.md does not document %s (pack %s)", r.Name, name)
			}
		}
	}
}
