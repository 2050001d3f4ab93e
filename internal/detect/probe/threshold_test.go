package probe_test

import (
	"maps"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
)

// TestThresholdRuleNames: names the k8s target's server may not read are
// refused with the field named; values of any kind are not.
func TestThresholdRuleNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		th   v1alpha1.ThresholdProbe
		want string // "" means accepted
	}{
		{"classic", v1alpha1.ThresholdProbe{Metric: "DCGM_FI_DEV_GPU_TEMP", Labels: map[string]string{"Hostname": "n1"}, Op: ">", Value: 85}, ""},
		{"colon in a recorded name", v1alpha1.ThresholdProbe{Metric: "job:steps:rate5m", Op: "<", Value: 1}, ""},
		{"quote and backslash in a value", v1alpha1.ThresholdProbe{Metric: "m", Labels: map[string]string{"pod": `a"b\c` + "\n\x00é"}, Op: "==", Value: 1}, ""},
		{"empty metric", v1alpha1.ThresholdProbe{Op: ">"}, `threshold metric ""`},
		{"space in the metric", v1alpha1.ThresholdProbe{Metric: "gpu temp", Op: ">"}, `threshold metric "gpu temp" is not a Prometheus metric name`},
		{"dot in a label", v1alpha1.ThresholdProbe{Metric: "m", Labels: map[string]string{"k8s.node": "n"}, Op: ">"}, `threshold label "k8s.node"`},
		{"reserved label", v1alpha1.ThresholdProbe{Metric: "m", Labels: map[string]string{"__name__": "x"}, Op: ">"}, `threshold label "__name__"`},
	}
	for _, tc := range tests {
		_, err := probe.ThresholdRule("p", tc.th)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// FuzzThresholdRule checks the PromQL that threshold probes become, which
// the k8s target sends to a Prometheus server as text: whatever the
// metric, labels, comparison and value, the rule is refused or its text
// parses with Prometheus' own parser back to exactly the selector, the
// comparison and the value asked for. A label value that escaped its
// quotes would select other series, or fail on the server.
func FuzzThresholdRule(f *testing.F) {
	f.Add("DCGM_FI_DEV_GPU_TEMP", "Hostname", "gpu-node-0", "gpu", "3", ">", 85.0, false, int64(time.Minute))
	f.Add("m", "pod", `a"b\c`, "x", "\n\t\x00", "<", -1.5, false, int64(0))
	f.Add("m", "UUID", "GPU-é\u2028", "l", "\xff\xfe", "!=", math.NaN(), false, int64(0))
	f.Add("m:rate5m", "a", "}", "b", `"}`+" or vector(1) #", "==", math.Inf(1), false, int64(0))
	f.Add("m", "a", "", "b", "'", ">=", 1e300, true, int64(10*time.Minute))
	f.Add("m", "a", "{x=~\".*\"}", "b", "`", "<=", 0.0, true, int64(0))
	f.Add("9m", "a", "v", "b", "w", ">", 1.0, false, int64(0))
	f.Fuzz(func(t *testing.T, metric, k1, v1, k2, v2, op string, value float64, absent bool, forNs int64) {
		th := v1alpha1.ThresholdProbe{Metric: metric, Labels: map[string]string{k1: v1, k2: v2}, Op: op, Value: value, Absent: absent,
			For: v1alpha1.Duration{Duration: time.Duration(forNs)}}
		r, err := probe.ThresholdRule("fuzz", th)
		if err != nil {
			return
		}
		expr, err := parser.NewParser(parser.Options{}).ParseExpr(r.Expr)
		if err != nil {
			t.Fatalf("%q does not parse: %v", r.Expr, err)
		}
		var vs *parser.VectorSelector
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			if s, ok := n.(*parser.VectorSelector); ok {
				if vs != nil {
					t.Fatalf("%q has two selectors", r.Expr)
				}
				vs = s
			}
			return nil
		})
		if vs == nil {
			t.Fatalf("%q selects nothing", r.Expr)
		}
		got := map[string]string{}
		for _, m := range vs.LabelMatchers {
			if m.Type != labels.MatchEqual {
				t.Fatalf("%q: matcher %s is not an equality", r.Expr, m)
			}
			if _, dup := got[m.Name]; dup {
				t.Fatalf("%q: label %s matched twice", r.Expr, m.Name)
			}
			got[m.Name] = m.Value
		}
		want := maps.Clone(th.Labels)
		want[model.MetricNameLabel] = metric
		if !maps.Equal(got, want) {
			t.Fatalf("%q selects %v, want %v", r.Expr, got, want)
		}
		if absent {
			return
		}
		be, ok := expr.(*parser.BinaryExpr)
		if !ok || be.Op.String() != op {
			t.Fatalf("%q is not a %s comparison", r.Expr, op)
		}
		n, ok := be.RHS.(*parser.NumberLiteral)
		if !ok {
			if u, isUnary := be.RHS.(*parser.UnaryExpr); isUnary {
				n, ok = u.Expr.(*parser.NumberLiteral)
				if ok && u.Op == parser.SUB {
					n = &parser.NumberLiteral{Val: -n.Val}
				}
			}
		}
		if !ok || !(n.Val == value || math.IsNaN(n.Val) && math.IsNaN(value)) {
			t.Fatalf("%q compares with %v, want %s", r.Expr, be.RHS, strconv.FormatFloat(value, 'g', -1, 64))
		}
	})
}
