package v1alpha1_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
)

// detectors are built-in detector names the example files use. The real
// list lives in internal/detect/probe; the test keeps its own so that the API
// package's tests do not depend on the twin.
var detectors = []string{
	"dcgm-xid-errors", "dcgm-gpu-temp-high", "dcgm-fb-nearly-full",
	"kmsg-xid", "job-step-stall", "job-slowdown", "job-restarted",
}

// load runs what every command runs on a file: load, default, validate
// against the real catalogue, and place a validation error on its line.
func load(path string) (*v1alpha1.Experiment, error) {
	exp, err := v1alpha1.LoadFile(path)
	if err != nil {
		return nil, err
	}
	exp.Default()
	err = exp.Validate(v1alpha1.ValidateOptions{
		CheckFault:    catalog.CheckSpec,
		KnownDetector: func(s string) bool { return slices.Contains(detectors, s) },
	})
	return exp, exp.Locate(err)
}

// TestBadFiles: each file in testdata/bad breaks one rule, and the error a
// user sees is exactly this one line.
func TestBadFiles(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"unknown-fault.yaml":              `testdata/bad/unknown-fault.yaml:8: spec.faults[0].id: unknown fault "hardware.xdi" (did you mean hardware.xid?)`,
		"param-out-of-range.yaml":         `testdata/bad/param-out-of-range.yaml:10: spec.faults[0].params.factor: 20 is above the maximum 10`,
		"unknown-xid.yaml":                `testdata/bad/unknown-xid.yaml:11: spec.faults[1].params.code: XID code 1000 is not a known XID`,
		"unknown-mechanism.yaml":          `testdata/bad/unknown-mechanism.yaml:9: spec.faults[0].mechanism: fault hardware.xid has no mechanism "carrier-pigeon" (known: `,
		"unknown-field.yaml":              `testdata/bad/unknown-field.yaml:11: spec.faults[0].parms: unknown field (did you mean params?)`,
		"unknown-top-field.yaml":          `testdata/bad/unknown-top-field.yaml:9: status: unknown field (known: apiVersion, kind, metadata, spec)`,
		"malformed.yaml":                  `testdata/bad/malformed.yaml:6: malformed YAML: did not find expected ',' or ']'`,
		"empty.yaml":                      `testdata/bad/empty.yaml: empty file; want one Experiment document`,
		"multi-doc.yaml":                  `testdata/bad/multi-doc.yaml:9: more than one YAML document; want exactly one Experiment`,
		"not-a-mapping.yaml":              `testdata/bad/not-a-mapping.yaml:1: document must be a mapping (an Experiment object), got a list`,
		"duplicate-key.yaml":              `testdata/bad/duplicate-key.yaml:9: spec.duration: duplicate key (first at line 8)`,
		"empty-selector.yaml":             `testdata/bad/empty-selector.yaml:6: spec.selector: empty selector; name nodes, nodeSelector, gpus or jobs`,
		"wrong-apiversion.yaml":           `testdata/bad/wrong-apiversion.yaml:1: apiVersion: must be gpuchaos.dev/v1alpha1, got "chaos-mesh.org/v1alpha1"`,
		"wrong-kind.yaml":                 `testdata/bad/wrong-kind.yaml:2: kind: must be Experiment, got "PodChaos"`,
		"missing-name.yaml":               `testdata/bad/missing-name.yaml:3: metadata.name: required`,
		"bad-name.yaml":                   `testdata/bad/bad-name.yaml:4: metadata.name: "XID_79" is not a DNS-1123 label (lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters)`,
		"duration-not-string.yaml":        `testdata/bad/duration-not-string.yaml:8: spec.duration: duration must be a string such as "90s", got 90`,
		"duration-unparsable.yaml":        `testdata/bad/duration-unparsable.yaml:8: spec.duration: invalid duration "5 minutes"`,
		"duration-too-long.yaml":          `testdata/bad/duration-too-long.yaml:8: spec.duration: 90h0m0s is over the limit of 24h`,
		"missing-duration.yaml":           `testdata/bad/missing-duration.yaml:5: spec.duration: required; a duration such as "5m"`,
		"no-faults.yaml":                  `testdata/bad/no-faults.yaml:7: spec.faults: at least one fault is required`,
		"bad-mode.yaml":                   `testdata/bad/bad-mode.yaml:8: spec.selector.mode: "some" is not one of one, all, fixed, percent`,
		"missing-mode.yaml":               `testdata/bad/missing-mode.yaml:6: spec.selector.mode: required; one of one, all, fixed, percent`,
		"percent-over-100.yaml":           `testdata/bad/percent-over-100.yaml:9: spec.selector.value: mode percent needs a value from 1 to 100, got 150`,
		"value-wrong-type.yaml":           `testdata/bad/value-wrong-type.yaml:9: spec.selector.value: must be an integer, got string "3"`,
		"ranks-without-jobs.yaml":         `testdata/bad/ranks-without-jobs.yaml:8: spec.selector.ranks: ranks need jobs: name the jobs the ranks belong to`,
		"bad-gpu.yaml":                    `testdata/bad/bad-gpu.yaml:8: spec.selector.gpus[1]: "gpu3" is neither a GPU index ("3") nor a GPU UUID ("GPU-…")`,
		"detector-and-probe.yaml":         `testdata/bad/detector-and-probe.yaml:12: spec.expectations[1]: set exactly one of detector or probe, not both`,
		"unknown-detector.yaml":           `testdata/bad/unknown-detector.yaml:10: spec.expectations[0].detector: unknown detector "dcgm-xid-error"; it is not one of the built-in detectors`,
		"missing-within.yaml":             `testdata/bad/missing-within.yaml:10: spec.expectations[0].within: required; a positive deadline such as "2m"`,
		"bad-regexp.yaml":                 "testdata/bad/bad-regexp.yaml:13: spec.expectations[0].probe.log.pattern: not a valid regular expression: missing closing ]: `[0-9a-f:`",
		"bad-metric.yaml":                 `testdata/bad/bad-metric.yaml:13: spec.steadyState[0].probe.threshold.metric: "dcgm-gpu-temp" is not a valid Prometheus metric name`,
		"bad-op.yaml":                     `testdata/bad/bad-op.yaml:14: spec.abortWhen[0].probe.threshold.op: "=>" is not one of > < >= <= == !=`,
		"prometheus-alert-and-query.yaml": `testdata/bad/prometheus-alert-and-query.yaml:12: spec.expectations[0].probe.prometheus: set exactly one of alert or query, not both`,
		"prometheus-bad-url.yaml":         `testdata/bad/prometheus-bad-url.yaml:13: spec.expectations[0].probe.prometheus.url: "localhost:9090" must start with http:// or https://`,
		"prometheus-value-string.yaml":    `testdata/bad/prometheus-value-string.yaml:15: spec.expectations[0].probe.prometheus.value: must be a number, got string "85"`,
		"negative-blast-radius.yaml":      `testdata/bad/negative-blast-radius.yaml:10: spec.blastRadius.maxGPUs: must not be negative, got -1`,
		// Valid as a file: the cap is exceeded only once targets are
		// selected (internal/run/target's tests and the run command check it).
		"blast-radius.yaml": "",
	}
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		if _, ok := tests[filepath.Base(path)]; !ok {
			t.Errorf("%s has no expected error in the table", path)
		}
	}
	for name, want := range tests {
		t.Run(strings.TrimSuffix(name, ".yaml"), func(t *testing.T) {
			t.Parallel()
			_, err := load(filepath.Join("testdata", "bad", name))
			got := ""
			if err != nil {
				got = err.Error()
			}
			// The mechanism list belongs to the catalogue; only its
			// start is pinned.
			if strings.HasSuffix(want, "(known: ") {
				if !strings.HasPrefix(got, want) {
					t.Errorf("error\n got: %s\nwant: %s…", got, want)
				}
				return
			}
			if got != want {
				t.Errorf("error\n got: %s\nwant: %s", got, want)
			}
		})
	}
}

// TestExamples: every shipped example loads and validates against the real
// catalogue.
func TestExamples(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 4 {
		t.Fatalf("found %d examples, want at least 4", len(files))
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			t.Parallel()
			exp, err := load(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(exp.Spec.Expectations) == 0 {
				t.Errorf("%s expects nothing; an example must say what should notice", path)
			}
			for _, f := range exp.Spec.Faults {
				if _, _, _, err := catalog.ResolveSpec(f); err != nil {
					t.Errorf("ResolveSpec(%s): %v", f.ID, err)
				}
			}
		})
	}
}

// TestKubernetesExamples: the examples for the k8s target load and
// validate against the real catalogue, and each judges the cluster
// through at least one Kubernetes probe (that is what they are for).
func TestKubernetesExamples(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../examples/k8s/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("found %d k8s examples, want at least 3", len(files))
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			t.Parallel()
			exp, err := load(path)
			if err != nil {
				t.Fatal(err)
			}
			kube := 0
			for _, x := range exp.Spec.Expectations {
				if x.Probe != nil && x.Probe.Kubernetes != nil {
					kube++
				}
			}
			if kube == 0 {
				t.Errorf("%s has no Kubernetes probe", path)
			}
			for _, f := range exp.Spec.Faults {
				if _, _, _, err := catalog.ResolveSpec(f); err != nil {
					t.Errorf("ResolveSpec(%s): %v", f.ID, err)
				}
			}
		})
	}
}
