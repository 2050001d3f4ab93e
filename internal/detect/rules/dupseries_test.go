package rules

import (
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

func TestSameSeries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		a, b string
		want bool
	}{
		{"same expression", `rate(x[5m])`, `rate(x[5m])`, true},
		{"same expression, other spelling", `sum by (a) (x)`, `sum(x) by (a)`, true},
		{"both aggregate everything", `max(x)`, `max(y{gpu="0"})`, true},
		{"both pin their grouping", `sum by (code) (x{code="200"})`, `sum by (code) (y{code="200"})`, true},
		{"scalars", `1`, `vector(2)`, true},
		{"regex matchers keep codes apart (kube-prometheus)",
			`sum by (cluster, code, verb) (increase(apiserver_request_total{job="apiserver",code=~"2.."}[1h]))`,
			`sum by (cluster, code, verb) (increase(apiserver_request_total{job="apiserver",code=~"3.."}[1h]))`, false},
		{"pinned to different values", `sum by (code) (x{code="200"})`, `sum by (code) (x{code="500"})`, false},
		{"grouping not pinned", `max(x)`, `max by (Hostname) (x)`, false},
		{"label_replace", `label_replace(max(x), "a", "1", "", "")`, `label_replace(max(x), "a", "2", "", "")`, false},
		{"label_replace drops the pin", `sum by (a) (label_replace(x{a="1"}, "a", "$1", "b", "(.*)"))`, `sum by (a) (y{a="1"})`, false},
		{"plain selectors", `x{a="1"}`, `y{a="1"}`, false},
		{"without", `sum without (a) (x)`, `sum without (a) (y)`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, err := parser.NewParser(parser.Options{}).ParseExpr(tt.a)
			if err != nil {
				t.Fatal(err)
			}
			b, err := parser.NewParser(parser.Options{}).ParseExpr(tt.b)
			if err != nil {
				t.Fatal(err)
			}
			if got := sameSeries(a, b); got != tt.want {
				t.Errorf("sameSeries(%s, %s) = %v, want %v", tt.a, tt.b, got, tt.want)
			}
		})
	}
}

// TestLoadKubePrometheus holds the loader to a real file Prometheus loads
// (observation 10 of scripts/coverage-observations): kube-prometheus'
// control-plane rules record code_verb:apiserver_request_total:increase1h
// four times with different code matchers. It loads, with one warning per
// repeat, as promtool prints lint findings and exits 0.
func TestLoadKubePrometheus(t *testing.T) {
	t.Parallel()
	set, err := loadTestdata(t, "public/kube-prometheus-kubernetesControlPlane-prometheusRule.yaml")
	if err != nil {
		t.Fatalf("refused a file Prometheus loads: %v", err)
	}
	if len(set.Rules) < 100 {
		t.Errorf("loaded %d rules, want the file's 100 and more", len(set.Rules))
	}
	if len(set.Warnings) != 3 {
		t.Fatalf("warnings = %q, want 3", set.Warnings)
	}
	for _, w := range set.Warnings {
		if !strings.Contains(w.Error(), `rule "code_verb:apiserver_request_total:increase1h"`) || !strings.Contains(w.Error(), "repeat the rule at line 1072") {
			t.Errorf("warning %q", w)
		}
	}
}

func TestLoadDuplicateRecordWarns(t *testing.T) {
	t.Parallel()
	data := []byte(`groups:
- name: a
  rules:
  - record: gpu:temp:max
    expr: max(DCGM_FI_DEV_GPU_TEMP)
  - record: gpu:temp:max
    expr: max by (Hostname) (DCGM_FI_DEV_GPU_TEMP)
`)
	set, err := Load(data, "w.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := `w.yaml: group "a" rule "gpu:temp:max" (line 6): recording rule name and labels repeat the rule at line 4; loaded, since their expressions may write different series, but check they never write the same one`
	if len(set.Warnings) != 1 || set.Warnings[0].Error() != want {
		t.Errorf("warnings = %q\nwant %q", set.Warnings, want)
	}
}
