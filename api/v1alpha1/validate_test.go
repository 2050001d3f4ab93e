package v1alpha1

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// base returns a valid experiment; each test case breaks one thing.
func base() *Experiment {
	return &Experiment{
		TypeMeta:   metav1.TypeMeta{APIVersion: GroupVersion, Kind: KindExperiment},
		ObjectMeta: metav1.ObjectMeta{Name: "xid-79"},
		Spec: ExperimentSpec{
			Selector: Selector{Nodes: []string{"gpu-node-0"}, Mode: ModeOne},
			Faults:   []FaultSpec{{ID: "hardware.xid", Params: map[string]ParamValue{"code": "79"}}},
			Duration: Duration{5 * time.Minute},
			SteadyState: []Check{{Name: "cool", Probe: ProbeSpec{Threshold: &ThresholdProbe{
				Metric: "DCGM_FI_DEV_GPU_TEMP", Labels: map[string]string{"Hostname": "gpu-node-0"}, Op: "<", Value: 80}}}},
			Expectations: []Expectation{{Detector: "dcgm-xid-errors", Within: Duration{2 * time.Minute}}},
			AbortWhen:    []Check{{Name: "restarted", Probe: ProbeSpec{Log: &LogProbe{Pattern: `NVRM: Xid \(PCI:[0-9a-f:]+\): 79`}}}},
		},
	}
}

// fakeOpts stands in for the catalogue and the detector list: it knows one
// fault with one parameter and two detectors.
func fakeOpts() ValidateOptions {
	return ValidateOptions{
		CheckFault: func(f FaultSpec) *FieldError {
			if f.ID != "hardware.xid" {
				return &FieldError{"id", "unknown fault " + f.ID}
			}
			if f.Params["code"] == "1000" {
				return &FieldError{"params.code", "XID code 1000 is not a known XID"}
			}
			return nil
		},
		KnownDetector: func(s string) bool { return s == "dcgm-xid-errors" || s == "kmsg-xid" },
	}
}

func promExpect(p PrometheusProbe) Expectation {
	return Expectation{Probe: &ProbeSpec{Prometheus: &p}, Within: Duration{time.Minute}}
}

func num(v float64) *float64 { return &v }

func intp(v int) *int { return &v }

func workExpect(w WorkloadProbe) Expectation {
	return Expectation{Probe: &ProbeSpec{Workload: &w}, Within: Duration{time.Minute}}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(e *Experiment)
		want   string // "" means valid
	}{
		{"valid", func(*Experiment) {}, ""},
		{"missing apiVersion", func(e *Experiment) { e.APIVersion = "" }, "apiVersion: required; must be gpuchaos.dev/v1alpha1"},
		{"wrong apiVersion", func(e *Experiment) { e.APIVersion = "gpuchaos.dev/v1" }, `apiVersion: must be gpuchaos.dev/v1alpha1, got "gpuchaos.dev/v1"`},
		{"wrong kind", func(e *Experiment) { e.Kind = "Schedule" }, `kind: must be Experiment, got "Schedule"`},
		{"missing name", func(e *Experiment) { e.ObjectMeta.Name = "" }, "metadata.name: required"},
		{"name not a label", func(e *Experiment) { e.ObjectMeta.Name = "-x" }, `metadata.name: "-x" is not a DNS-1123 label`},
		{"name too long", func(e *Experiment) { e.ObjectMeta.Name = strings.Repeat("a", 64) }, "is not a DNS-1123 label"},
		{"name of 63 is fine", func(e *Experiment) { e.ObjectMeta.Name = strings.Repeat("a", 63) }, ""},
		{"bad namespace", func(e *Experiment) { e.ObjectMeta.Namespace = "Prod" }, `metadata.namespace: "Prod" is not a DNS-1123 label`},
		{"metadata before selector", func(e *Experiment) { e.ObjectMeta.Name = ""; e.Spec.Selector = Selector{} }, "metadata.name: required"},
		{"empty selector", func(e *Experiment) { e.Spec.Selector = Selector{Mode: ModeAll} }, "spec.selector: empty selector; name nodes, nodeSelector, gpus or jobs"},
		{"nodeSelector alone is enough", func(e *Experiment) {
			e.Spec.Selector = Selector{NodeSelector: map[string]string{"a": "b"}, Mode: ModeAll}
		}, ""},
		{"gpus alone are enough", func(e *Experiment) { e.Spec.Selector = Selector{GPUs: []string{"0"}, Mode: ModeAll} }, ""},
		{"empty node name", func(e *Experiment) { e.Spec.Selector.Nodes = []string{"a", ""} }, "spec.selector.nodes[1]: empty node name"},
		{"repeated node", func(e *Experiment) { e.Spec.Selector.Nodes = []string{"a", "b", "a"} }, `spec.selector.nodes[2]: node "a" is listed twice (also [0])`},
		{"gpu uuid", func(e *Experiment) { e.Spec.Selector.GPUs = []string{"GPU-5fa1c0de-0000-1111-2222-333344445555"} }, ""},
		{"gpu neither", func(e *Experiment) { e.Spec.Selector.GPUs = []string{"3", "gpu3"} }, `spec.selector.gpus[1]: "gpu3" is neither a GPU index ("3") nor a GPU UUID ("GPU-…")`},
		{"gpu negative", func(e *Experiment) { e.Spec.Selector.GPUs = []string{"-1"} }, `spec.selector.gpus[0]: "-1" is neither`},
		{"gpu leading zero", func(e *Experiment) { e.Spec.Selector.GPUs = []string{"03"} }, `spec.selector.gpus[0]: "03" is neither`},
		{"gpu twice", func(e *Experiment) { e.Spec.Selector.GPUs = []string{"3", "3"} }, `spec.selector.gpus[1]: GPU "3" is listed twice (also gpus[0])`},
		{"ranks without jobs", func(e *Experiment) { e.Spec.Selector.Ranks = []int{1} }, "spec.selector.ranks: ranks need jobs"},
		{"ranks with jobs", func(e *Experiment) { e.Spec.Selector.Jobs = []string{"j"}; e.Spec.Selector.Ranks = []int{0, 1} }, ""},
		{"negative rank", func(e *Experiment) { e.Spec.Selector.Jobs = []string{"j"}; e.Spec.Selector.Ranks = []int{-1} }, "spec.selector.ranks[0]: rank -1 is negative"},
		{"repeated rank", func(e *Experiment) { e.Spec.Selector.Jobs = []string{"j"}; e.Spec.Selector.Ranks = []int{4, 4} }, "spec.selector.ranks[1]: rank 4 is listed twice"},
		{"empty job", func(e *Experiment) { e.Spec.Selector.Jobs = []string{" "} }, "spec.selector.jobs[0]: empty job name"},
		{"missing mode", func(e *Experiment) { e.Spec.Selector.Mode = "" }, "spec.selector.mode: required; one of one, all, fixed, percent"},
		{"bad mode", func(e *Experiment) { e.Spec.Selector.Mode = "random" }, `spec.selector.mode: "random" is not one of one, all, fixed, percent`},
		{"value with mode one", func(e *Experiment) { e.Spec.Selector.Value = 2 }, "spec.selector.value: only used with mode fixed or percent, not one"},
		{"fixed without value", func(e *Experiment) { e.Spec.Selector.Mode = ModeFixed }, "spec.selector.value: mode fixed needs a value of at least 1, got 0"},
		{"fixed 1", func(e *Experiment) { e.Spec.Selector.Mode, e.Spec.Selector.Value = ModeFixed, 1 }, ""},
		{"percent 0", func(e *Experiment) { e.Spec.Selector.Mode = ModePercent }, "spec.selector.value: mode percent needs a value from 1 to 100, got 0"},
		{"percent 101", func(e *Experiment) { e.Spec.Selector.Mode, e.Spec.Selector.Value = ModePercent, 101 }, "got 101"},
		{"percent 100", func(e *Experiment) { e.Spec.Selector.Mode, e.Spec.Selector.Value = ModePercent, 100 }, ""},
		{"no faults", func(e *Experiment) { e.Spec.Faults = nil }, "spec.faults: at least one fault is required"},
		{"fault without id", func(e *Experiment) { e.Spec.Faults = append(e.Spec.Faults, FaultSpec{}) }, "spec.faults[1].id: required"},
		{"catalogue path is prefixed", func(e *Experiment) {
			e.Spec.Faults = append(e.Spec.Faults, FaultSpec{ID: "hardware.xid", Params: map[string]ParamValue{"code": "1000"}})
		}, "spec.faults[1].params.code: XID code 1000 is not a known XID"},
		{"unknown fault", func(e *Experiment) { e.Spec.Faults[0].ID = "hardware.xdi" }, "spec.faults[0].id: unknown fault hardware.xdi"},
		{"missing duration", func(e *Experiment) { e.Spec.Duration = Duration{} }, `spec.duration: required; a duration such as "5m"`},
		{"negative duration", func(e *Experiment) { e.Spec.Duration = Duration{-time.Second} }, "spec.duration: must be positive, got -1s"},
		{"duration at the limit", func(e *Experiment) { e.Spec.Duration = Duration{24 * time.Hour} }, ""},
		{"duration over the limit", func(e *Experiment) { e.Spec.Duration = Duration{24*time.Hour + time.Second} }, "spec.duration: 24h0m1s is over the limit of 24h"},
		{"check without name", func(e *Experiment) { e.Spec.SteadyState[0].Name = "" }, "spec.steadyState[0].name: required"},
		{"check names repeat", func(e *Experiment) { e.Spec.SteadyState = append(e.Spec.SteadyState, e.Spec.SteadyState[0]) }, `spec.steadyState[1].name: duplicate name "cool" (also spec.steadyState[0])`},
		{"probe with no kind", func(e *Experiment) { e.Spec.SteadyState[0].Probe = ProbeSpec{} }, "spec.steadyState[0].probe: set exactly one of detector, threshold, log, prometheus, workload or kubernetes (0 set)"},
		{"probe with two kinds", func(e *Experiment) { e.Spec.SteadyState[0].Probe.Detector = "kmsg-xid" }, "spec.steadyState[0].probe: set exactly one of detector, threshold, log, prometheus, workload or kubernetes (2 set)"},
		{"bad metric", func(e *Experiment) { e.Spec.SteadyState[0].Probe.Threshold.Metric = "gpu-temp" }, `spec.steadyState[0].probe.threshold.metric: "gpu-temp" is not a valid Prometheus metric name`},
		{"recording-rule metric", func(e *Experiment) { e.Spec.SteadyState[0].Probe.Threshold.Metric = "job:gpu_temp:max5m" }, ""},
		{"missing metric", func(e *Experiment) { e.Spec.SteadyState[0].Probe.Threshold.Metric = "" }, "spec.steadyState[0].probe.threshold.metric: required"},
		{"bad label name", func(e *Experiment) {
			e.Spec.SteadyState[0].Probe.Threshold.Labels = map[string]string{"host.name": "x"}
		},
			`spec.steadyState[0].probe.threshold.labels["host.name"]: "host.name" is not a valid Prometheus label name`},
		{"bad op", func(e *Experiment) { e.Spec.SteadyState[0].Probe.Threshold.Op = "=<" }, `spec.steadyState[0].probe.threshold.op: "=<" is not one of > < >= <= == !=`},
		{"missing op", func(e *Experiment) { e.Spec.SteadyState[0].Probe.Threshold.Op = "" }, "spec.steadyState[0].probe.threshold.op: required"},
		{"absent needs no op", func(e *Experiment) { th := e.Spec.SteadyState[0].Probe.Threshold; th.Op, th.Absent = "", true }, ""},
		{"negative for", func(e *Experiment) { e.Spec.SteadyState[0].Probe.Threshold.For = Duration{-time.Minute} }, "spec.steadyState[0].probe.threshold.for: must not be negative, got -1m0s"},
		{"unknown detector in a check", func(e *Experiment) { e.Spec.SteadyState[0].Probe = ProbeSpec{Detector: "nope"} }, `spec.steadyState[0].probe.detector: unknown detector "nope"`},
		{"detector and probe", func(e *Experiment) { e.Spec.Expectations[0].Probe = &ProbeSpec{Detector: "kmsg-xid"} }, "spec.expectations[0]: set exactly one of detector or probe, not both"},
		{"neither detector nor probe", func(e *Experiment) { e.Spec.Expectations[0].Detector = "" }, "spec.expectations[0]: set exactly one of detector or probe"},
		{"unknown detector", func(e *Experiment) { e.Spec.Expectations[0].Detector = "dcgm-xid-error" }, `spec.expectations[0].detector: unknown detector "dcgm-xid-error"`},
		{"missing within", func(e *Experiment) { e.Spec.Expectations[0].Within = Duration{} }, "spec.expectations[0].within: required"},
		{"negative within", func(e *Experiment) { e.Spec.Expectations[0].Within = Duration{-time.Second} }, "spec.expectations[0].within: required"},
		{"expectation names repeat", func(e *Experiment) {
			e.Spec.Expectations[0].Name = "x"
			e.Spec.Expectations = append(e.Spec.Expectations, Expectation{Name: "x", Detector: "kmsg-xid", Within: Duration{time.Minute}})
		}, `spec.expectations[1].name: duplicate name "x" (also spec.expectations[0])`},
		{"bad regexp", func(e *Experiment) { e.Spec.AbortWhen[0].Probe.Log.Pattern = "Xid (" }, "spec.abortWhen[0].probe.log.pattern: not a valid regular expression: missing closing ): `Xid (`"},
		{"empty pattern", func(e *Experiment) { e.Spec.AbortWhen[0].Probe.Log.Pattern = "" }, "spec.abortWhen[0].probe.log.pattern: required"},
		{"prometheus alert", func(e *Experiment) { e.Spec.Expectations[0] = promExpect(PrometheusProbe{Alert: "GpuMissing"}) }, ""},
		{"prometheus alert with url", func(e *Experiment) {
			e.Spec.Expectations[0] = promExpect(PrometheusProbe{URL: "https://prom.example:9090/prometheus", Alert: "GpuMissing"})
		}, ""},
		{"prometheus query alone", func(e *Experiment) { e.Spec.Expectations[0] = promExpect(PrometheusProbe{Query: "up == 0"}) }, ""},
		{"prometheus query with op", func(e *Experiment) {
			e.Spec.Expectations[0] = promExpect(PrometheusProbe{Query: "DCGM_FI_DEV_GPU_TEMP", Op: ">", Value: num(85)})
		}, ""},
		{"prometheus query with tolerance", func(e *Experiment) {
			e.Spec.Expectations[0] = promExpect(PrometheusProbe{Query: "count(up)", Value: num(2), Tolerance: num(0)})
		}, ""},
		{"prometheus alert and query", func(e *Experiment) {
			e.Spec.Expectations[0] = promExpect(PrometheusProbe{Alert: "A", Query: "up"})
		}, "spec.expectations[0].probe.prometheus: set exactly one of alert or query, not both"},
		{"prometheus neither", func(e *Experiment) { e.Spec.Expectations[0] = promExpect(PrometheusProbe{URL: "http://p:9090"}) },
			"spec.expectations[0].probe.prometheus: set exactly one of alert or query"},
		{"prometheus alert with op", func(e *Experiment) {
			e.Spec.Expectations[0] = promExpect(PrometheusProbe{Alert: "A", Op: ">", Value: num(1)})
		}, "spec.expectations[0].probe.prometheus.alert: an alert probe holds while the alert fires"},
		{"prometheus alert with spaces", func(e *Experiment) { e.Spec.Expectations[0] = promExpect(PrometheusProbe{Alert: "A "}) },
			`spec.expectations[0].probe.prometheus.alert: "A " has leading or trailing spaces`},
		{"prometheus bad op", func(e *Experiment) {
			e.Spec.Expectations[0] = promExpect(PrometheusProbe{Query: "up", Op: "=>", Value: num(1)})
		}, `spec.expectations[0].probe.prometheus.op: "=>" is not one of > < >= <= == !=`},
		{"prometheus op without value", func(e *Experiment) { e.Spec.Expectations[0] = promExpect(PrometheusProbe{Query: "up", Op: ">"}) },
			"spec.expectations[0].probe.prometheus.value: required with op"},
		{"prometheus tolerance without value", func(e *Experiment) {
			e.Spec.Expectations[0] = promExpect(PrometheusProbe{Query: "up", Tolerance: num(1)})
		}, "spec.expectations[0].probe.prometheus.value: required with tolerance"},
		{"prometheus value alone", func(e *Experiment) { e.Spec.Expectations[0] = promExpect(PrometheusProbe{Query: "up", Value: num(1)}) },
			"spec.expectations[0].probe.prometheus.value: needs op (compare with it) or tolerance (hold near it)"},
		{"prometheus op and tolerance", func(e *Experiment) {
			e.Spec.Expectations[0] = promExpect(PrometheusProbe{Query: "up", Op: ">", Value: num(1), Tolerance: num(1)})
		}, "spec.expectations[0].probe.prometheus: set op or tolerance, not both"},
		{"prometheus negative tolerance", func(e *Experiment) {
			e.Spec.Expectations[0] = promExpect(PrometheusProbe{Query: "up", Value: num(1), Tolerance: num(-1)})
		}, "spec.expectations[0].probe.prometheus.tolerance: must be a number of at least 0, got -1"},
		{"prometheus url without scheme", func(e *Experiment) {
			e.Spec.Expectations[0] = promExpect(PrometheusProbe{URL: "prometheus:9090", Alert: "A"})
		}, `spec.expectations[0].probe.prometheus.url: "prometheus:9090" must start with http:// or https://`},
		{"prometheus ftp url", func(e *Experiment) { e.Spec.Expectations[0] = promExpect(PrometheusProbe{URL: "ftp://p/", Alert: "A"}) },
			`spec.expectations[0].probe.prometheus.url: "ftp://p/" must start with http:// or https://`},
		{"prometheus url without host", func(e *Experiment) {
			e.Spec.Expectations[0] = promExpect(PrometheusProbe{URL: "http:///x", Alert: "A"})
		}, `spec.expectations[0].probe.prometheus.url: "http:///x" names no host`},
		{"prometheus url with query", func(e *Experiment) {
			e.Spec.Expectations[0] = promExpect(PrometheusProbe{URL: "http://p:9090/api/v1/query?query=up", Alert: "A"})
		}, "must be the server's base URL, without a query or fragment"},
		{"prometheus url unparsable", func(e *Experiment) {
			e.Spec.Expectations[0] = promExpect(PrometheusProbe{URL: "http://p:x/", Alert: "A"})
		}, `spec.expectations[0].probe.prometheus.url: "http://p:x/" is not a URL`},
		{"prometheus in a check", func(e *Experiment) {
			e.Spec.AbortWhen[0].Probe = ProbeSpec{Prometheus: &PrometheusProbe{Query: "up"}, Log: e.Spec.AbortWhen[0].Probe.Log}
		}, "spec.abortWhen[0].probe: set exactly one of detector, threshold, log, prometheus, workload or kubernetes (2 set)"},
		{"workload resumed", func(e *Experiment) {
			e.Spec.Expectations[0] = workExpect(WorkloadProbe{Check: "resumed", MaxFallback: intp(1)})
		}, ""},
		{"workload goodput", func(e *Experiment) {
			e.Spec.Expectations[0] = workExpect(WorkloadProbe{Check: "goodput", Min: num(0.9), Job: "train"})
		}, ""},
		{"workload rate-recovered", func(e *Experiment) {
			e.Spec.Expectations[0] = workExpect(WorkloadProbe{Check: "rate-recovered", Tolerance: num(0.05), For: Duration{5 * time.Second}, Baseline: Duration{time.Minute}})
		}, ""},
		{"workload without check", func(e *Experiment) { e.Spec.Expectations[0] = workExpect(WorkloadProbe{}) },
			"spec.expectations[0].probe.workload.check: required; one of resumed, lost-work, rate-recovered, slowdown, stalled, goodput"},
		{"workload unknown check", func(e *Experiment) { e.Spec.Expectations[0] = workExpect(WorkloadProbe{Check: "resume"}) },
			`spec.expectations[0].probe.workload.check: "resume" is not one of resumed`},
		{"workload goodput without min", func(e *Experiment) { e.Spec.Expectations[0] = workExpect(WorkloadProbe{Check: "goodput"}) },
			"spec.expectations[0].probe.workload.min: required for check goodput"},
		{"workload min out of range", func(e *Experiment) {
			e.Spec.Expectations[0] = workExpect(WorkloadProbe{Check: "goodput", Min: num(1.5)})
		},
			"spec.expectations[0].probe.workload.min: must be a share in (0, 1], got 1.5"},
		{"workload setting of another check", func(e *Experiment) {
			e.Spec.Expectations[0] = workExpect(WorkloadProbe{Check: "lost-work", Tolerance: num(0.1)})
		}, "spec.expectations[0].probe.workload.tolerance: not read by check lost-work (only by rate-recovered, slowdown)"},
		{"workload tolerance as percent", func(e *Experiment) {
			e.Spec.Expectations[0] = workExpect(WorkloadProbe{Check: "slowdown", Tolerance: num(5)})
		}, "spec.expectations[0].probe.workload.tolerance: must be a share between 0 and 1 (0.05 is 5 %), got 5"},
		{"workload negative fallback", func(e *Experiment) {
			e.Spec.Expectations[0] = workExpect(WorkloadProbe{Check: "resumed", MaxFallback: intp(-1)})
		}, "spec.expectations[0].probe.workload.maxFallback: must be at least 0, got -1"},
		{"workload negative baseline", func(e *Experiment) {
			e.Spec.Expectations[0] = workExpect(WorkloadProbe{Check: "stalled", Baseline: Duration{-time.Second}})
		}, "spec.expectations[0].probe.workload.baseline: must not be negative, got -1s"},
		{"workload in a steady-state check", func(e *Experiment) {
			e.Spec.SteadyState[0].Probe = ProbeSpec{Workload: &WorkloadProbe{Check: "stalled"}}
		}, "spec.steadyState[0].probe.workload: a workload probe judges the run against its injection and recovery; use it in spec.expectations"},
		{"negative maxNodes", func(e *Experiment) { e.Spec.BlastRadius.MaxNodes = -1 }, "spec.blastRadius.maxNodes: must not be negative, got -1"},
		{"negative maxConcurrent", func(e *Experiment) { e.Spec.BlastRadius.MaxConcurrent = -2 }, "spec.blastRadius.maxConcurrent: must not be negative, got -2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := base()
			tc.mutate(e)
			err := e.Validate(fakeOpts())
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate = nil, want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %q, want it to contain %q", err, tc.want)
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Errorf("error is %T, want *FieldError", err)
			}
		})
	}
}

// TestValidateWithoutOptions: nil checks are skipped, not called.
func TestValidateWithoutOptions(t *testing.T) {
	t.Parallel()
	e := base()
	e.Spec.Faults[0].ID = "anything.at-all"
	e.Spec.Expectations[0].Detector = "made-up"
	if err := e.Validate(ValidateOptions{}); err != nil {
		t.Errorf("Validate with no options = %v, want nil", err)
	}
}

func TestDefault(t *testing.T) {
	t.Parallel()
	e := base()
	e.Spec.BlastRadius = BlastRadius{MaxGPUs: 2}
	within := Duration{time.Minute}
	e.Spec.Expectations = []Expectation{
		{Detector: "kmsg-xid", Within: within},
		{Name: "kmsg-xid-2", Detector: "dcgm-xid-errors", Within: within},
		{Detector: "kmsg-xid", Within: within},
		{Probe: &ProbeSpec{Threshold: &ThresholdProbe{Metric: "DCGM_FI_DEV_XID_ERRORS", Op: ">"}}, Within: within},
		{Probe: &ProbeSpec{Log: &LogProbe{Pattern: "Xid"}}, Within: within},
		{Probe: &ProbeSpec{Detector: "job-down"}, Within: within},
		{Within: within},
		{Probe: &ProbeSpec{Prometheus: &PrometheusProbe{Alert: "GpuMissing"}}, Within: within},
		{Probe: &ProbeSpec{Prometheus: &PrometheusProbe{Query: "up == 0"}}, Within: within},
	}
	e.Default()
	wantNames := []string{"kmsg-xid", "kmsg-xid-2", "kmsg-xid-3", "DCGM_FI_DEV_XID_ERRORS", "log", "job-down", "expectation-7", "GpuMissing", "prometheus"}
	for i, want := range wantNames {
		if got := e.Spec.Expectations[i].Name; got != want {
			t.Errorf("expectations[%d].name = %q, want %q", i, got, want)
		}
	}
	wantBR := BlastRadius{MaxNodes: DefaultMaxNodes, MaxGPUs: 2, MaxConcurrent: DefaultMaxConcurrent}
	if e.Spec.BlastRadius != wantBR {
		t.Errorf("blastRadius = %+v, want %+v", e.Spec.BlastRadius, wantBR)
	}
	before := e.Spec.Expectations[2].Name
	e.Default()
	if e.Spec.Expectations[2].Name != before {
		t.Errorf("Default is not idempotent: %q became %q", before, e.Spec.Expectations[2].Name)
	}
	neg := BlastRadius{MaxNodes: -1}.WithDefaults()
	if neg.MaxNodes != -1 {
		t.Errorf("WithDefaults replaced a negative cap: %+v; Validate must see it", neg)
	}
}

// TestValidateKubernetesProbe: each check is accepted with the fields it
// needs, and refused, naming the field's path, without one, with a field
// it does not read, or with a value out of its set.
func TestValidateKubernetesProbe(t *testing.T) {
	t.Parallel()
	const path = "spec.expectations[0].probe.kubernetes"
	tests := []struct {
		name string
		k    KubernetesProbe
		want string // "" means valid
	}{
		{"node condition", KubernetesProbe{Check: KubeNodeCondition, ConditionType: "SysLogsXIDError", Status: "True", Reason: "SysLogsXIDErrorIsNotHealthy"}, ""},
		{"taint", KubernetesProbe{Check: KubeTaint, Key: "nvidia.com/gpu-xid-error", Value: "true", Effect: "NoSchedule"}, ""},
		{"label", KubernetesProbe{Check: KubeLabel, Key: "dgxc.nvidia.com/nvsentinel-state", Value: "quarantined"}, ""},
		{"unschedulable", KubernetesProbe{Check: KubeUnschedulable}, ""},
		{"pod phase", KubernetesProbe{Check: KubePodPhase, Namespace: "train", Selector: "job=llm", Phase: "Running", AnyNode: true}, ""},
		{"pod restarts", KubernetesProbe{Check: KubePodRestarts, Selector: "job=llm", MinRestarts: 2}, ""},
		{"event", KubernetesProbe{Check: KubeEvent, Reason: "AwaitingPodCompletion", Type: "NodeDraining", Namespace: "default"}, ""},
		{"pods evicted", KubernetesProbe{Check: KubePodsEvicted, Namespace: "train", Selector: "job in (llm)"}, ""},
		{"job resumed", KubernetesProbe{Check: KubeJobResumed, Selector: "training.kubeflow.org/job-name=llm"}, ""},

		{"no check", KubernetesProbe{}, path + ".check: required; one of nodeCondition"},
		{"unknown check", KubernetesProbe{Check: "drained"}, path + `.check: "drained" is not one of`},
		{"condition without type", KubernetesProbe{Check: KubeNodeCondition}, path + ".conditionType: required for check nodeCondition"},
		{"bad status", KubernetesProbe{Check: KubeNodeCondition, ConditionType: "X", Status: "true"}, path + `.status: "true" is not one of True, False, Unknown`},
		{"taint without key", KubernetesProbe{Check: KubeTaint, Effect: "NoSchedule"}, path + ".key: required for check taint"},
		{"bad effect", KubernetesProbe{Check: KubeTaint, Key: "a", Effect: "NoExec"}, path + `.effect: "NoExec" is not one of`},
		{"bad key", KubernetesProbe{Check: KubeLabel, Key: "a b"}, path + `.key: "a b" is not a qualified name`},
		{"field not read", KubernetesProbe{Check: KubeUnschedulable, Key: "a"}, path + ".key: not read by check unschedulable (only by taint, label)"},
		{"effect on a label", KubernetesProbe{Check: KubeLabel, Key: "a", Effect: "NoSchedule"}, path + ".effect: not read by check label (only by taint)"},
		{"phase without selector", KubernetesProbe{Check: KubePodPhase, Phase: "Running"}, path + ".selector: required for check podPhase"},
		{"pod phase without phase", KubernetesProbe{Check: KubePodPhase, Selector: "a=b"}, path + ".phase: required for check podPhase"},
		{"bad phase", KubernetesProbe{Check: KubePodPhase, Selector: "a=b", Phase: "running"}, path + `.phase: "running" is not one of`},
		{"bad selector", KubernetesProbe{Check: KubePodsEvicted, Selector: "a=(b"}, path + `.selector: "a=(b" is not a label selector`},
		{"bad namespace", KubernetesProbe{Check: KubePodsEvicted, Selector: "a=b", Namespace: "Train"}, path + `.namespace: "Train" is not a namespace name`},
		{"negative restarts", KubernetesProbe{Check: KubePodRestarts, Selector: "a=b", MinRestarts: -1}, path + ".minRestarts: must be at least 0, got -1"},
		{"restarts elsewhere", KubernetesProbe{Check: KubePodPhase, Selector: "a=b", Phase: "Running", MinRestarts: 1}, path + ".minRestarts: not read by check podPhase"},
		{"event without reason", KubernetesProbe{Check: KubeEvent, Type: "Warning"}, path + ".reason: required for check event"},
		{"any node on a drain", KubernetesProbe{Check: KubePodsEvicted, Selector: "a=b", AnyNode: true}, path + ".anyNode: not read by check podsEvicted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := base()
			k := tc.k
			e.Spec.Expectations = []Expectation{{Probe: &ProbeSpec{Kubernetes: &k}, Within: Duration{time.Minute}}}
			err := e.Validate(ValidateOptions{})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate = %v, want valid", err)
			case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
				t.Fatalf("Validate = %v, want %q…", err, tc.want)
			}
		})
	}
	t.Run("with another probe kind", func(t *testing.T) {
		e := base()
		e.Spec.Expectations = []Expectation{{Probe: &ProbeSpec{Detector: "kmsg-xid", Kubernetes: &KubernetesProbe{Check: KubeUnschedulable}}, Within: Duration{time.Minute}}}
		if err := e.Validate(ValidateOptions{}); err == nil || !strings.Contains(err.Error(), "(2 set)") {
			t.Fatalf("Validate = %v, want two probe kinds refused", err)
		}
	})
	t.Run("default name", func(t *testing.T) {
		e := base()
		e.Spec.Expectations = []Expectation{{Probe: &ProbeSpec{Kubernetes: &KubernetesProbe{Check: KubeUnschedulable}}, Within: Duration{time.Minute}}}
		e.Default()
		if got := e.Spec.Expectations[0].Name; got != "kubernetes-unschedulable" {
			t.Fatalf("default name %q, want kubernetes-unschedulable", got)
		}
	})
}
