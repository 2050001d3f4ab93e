package v1alpha1

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const validDoc = `apiVersion: gpuchaos.dev/v1alpha1
kind: Experiment
metadata:
  name: xid-79
  labels:
    app.kubernetes.io/name: gpuchaos
spec:
  selector:
    nodes: [gpu-node-0]
    gpus: ["3", GPU-8f2a]
    mode: fixed
    value: 2
  faults:
    - id: hardware.xid
      mechanism: kmsg
      params:
        code: 0x4F
        fraction: 0.25
        verbose: true
        process: python3
  duration: 90s
  expectations:
    - detector: dcgm-xid-errors
      within: 2m
    - probe:
        threshold:
          metric: DCGM_FI_DEV_XID_ERRORS
          labels: {gpu: "3"}
          op: ">"
          value: 0
          for: 30s
      within: 1m
  blastRadius: {maxGPUs: 2}
  allowHardwareRisk: false
`

func TestLoadValid(t *testing.T) {
	t.Parallel()
	exp, err := Load([]byte(validDoc), "x.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"apiVersion (inline TypeMeta)", exp.APIVersion, GroupVersion},
		{"kind", exp.Kind, KindExperiment},
		{"name", exp.ObjectMeta.Name, "xid-79"},
		{"dotted label key", exp.ObjectMeta.Labels["app.kubernetes.io/name"], "gpuchaos"},
		{"gpus", strings.Join(exp.Spec.Selector.GPUs, ","), "3,GPU-8f2a"},
		{"mode", exp.Spec.Selector.Mode, ModeFixed},
		{"value", exp.Spec.Selector.Value, 2},
		{"hex int param is normalised", exp.Spec.Faults[0].Params["code"], ParamValue("79")},
		{"float param", exp.Spec.Faults[0].Params["fraction"], ParamValue("0.25")},
		{"bool param", exp.Spec.Faults[0].Params["verbose"], ParamValue("true")},
		{"string param", exp.Spec.Faults[0].Params["process"], ParamValue("python3")},
		{"duration", exp.Spec.Duration.Duration, 90 * time.Second},
		{"within", exp.Spec.Expectations[0].Within.Duration, 2 * time.Minute},
		{"probe metric", exp.Spec.Expectations[1].Probe.Threshold.Metric, "DCGM_FI_DEV_XID_ERRORS"},
		{"probe label", exp.Spec.Expectations[1].Probe.Threshold.Labels["gpu"], "3"},
		{"probe for", exp.Spec.Expectations[1].Probe.Threshold.For.Duration, 30 * time.Second},
		{"blast radius", exp.Spec.BlastRadius.MaxGPUs, 2},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %#v, want %#v", c.name, c.got, c.want)
		}
	}
}

// TestLoadJSON: JSON is YAML, and what the API server stores must load.
func TestLoadJSON(t *testing.T) {
	t.Parallel()
	exp, err := Load([]byte(validDoc), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(exp)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Load(raw, "x.json")
	if err != nil {
		t.Fatalf("Load of own JSON: %v\n%s", err, raw)
	}
	raw2, err := json.Marshal(again)
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != string(raw2) {
		t.Errorf("round trip changed the object:\n%s\n%s", raw, raw2)
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	head := "apiVersion: gpuchaos.dev/v1alpha1\nkind: Experiment\nmetadata: {name: x}\n"
	tests := []struct {
		name, doc, want string
	}{
		{"empty input", "", "t.yaml: empty file; want one Experiment document"},
		{"comments only", "# nothing\n", "t.yaml: empty file; want one Experiment document"},
		{"null document", "~\n", "t.yaml: empty document; want one Experiment"},
		{"bare separator", "---\n", "t.yaml: empty document; want one Experiment"},
		{"two documents", head + "---\n" + head, "t.yaml:4: more than one YAML document; want exactly one Experiment"},
		{"malformed", "a: [1,\n", "t.yaml:1: malformed YAML: did not find expected node content"},
		{"tab indentation", "spec:\n\tduration: 5m\n", "t.yaml:2: malformed YAML: found character that cannot start any token"},
		{"scalar document", "hello\n", `t.yaml:1: document must be a mapping (an Experiment object), got string "hello"`},
		{"a twin cluster spec", "name: h200-2x8\nnodes:\n  count: 2\n", "t.yaml:1: this is a twin cluster spec (nodes, jobs), not an Experiment: pass it with --cluster, and the experiment as the file"},
		{"misspelt inline field", "apiversion: x\n", "t.yaml:1: apiversion: unknown field (did you mean apiVersion?)"},
		{"unknown nested field", head + "spec:\n  faults:\n    - id: a\n    - id: b\n      parms: {}\n", "t.yaml:8: spec.faults[1].parms: unknown field (did you mean params?)"},
		{"unknown field far from any", head + "spec:\n  selector: {flavour: x}\n", "t.yaml:5: spec.selector.flavour: unknown field (known: gpus, jobs, mode, nodeSelector, nodes, ranks, value)"},
		{"field in a pointer struct", head + "spec:\n  expectations:\n    - probe: {log: {patern: x}}\n", "t.yaml:6: spec.expectations[0].probe.log.patern: unknown field (did you mean pattern?)"},
		{"wrong case is unknown", head + "spec:\n  Duration: 5m\n", "t.yaml:5: spec.Duration: unknown field (did you mean duration?)"},
		{"duplicate key", head + "spec:\n  duration: 5m\n  duration: 6m\n", "t.yaml:6: spec.duration: duplicate key (first at line 5)"},
		{"duplicate map key", head + "spec:\n  selector:\n    nodeSelector: {zone: a, zone: b}\n", "t.yaml:6: spec.selector.nodeSelector.zone: duplicate key (first at line 6)"},
		{"string field given a number", "apiVersion: 1\n", `t.yaml:1: apiVersion: must be a string, got number 1 (quote it: "1")`},
		{"string map value given a number", "metadata:\n  labels:\n    app.kubernetes.io/version: 2\n", `t.yaml:3: metadata.labels["app.kubernetes.io/version"]: must be a string, got number 2 (quote it: "2")`},
		{"list given a scalar", head + "spec:\n  selector: {nodes: gpu-node-0}\n", `t.yaml:5: spec.selector.nodes: must be a list, got string "gpu-node-0"`},
		{"struct given a list", head + "spec:\n  selector: [a]\n", "t.yaml:5: spec.selector: must be a mapping of fields, got a list"},
		{"map given a scalar", head + "spec:\n  faults: [{id: a, params: code}]\n", `t.yaml:5: spec.faults[0].params: must be a mapping, got string "code"`},
		{"int given a float", head + "spec:\n  selector: {value: 2.5}\n", "t.yaml:5: spec.selector.value: must be an integer, got number 2.5"},
		{"int out of range", head + "spec:\n  selector: {ranks: [99999999999999999999]}\n", "t.yaml:5: spec.selector.ranks[0]: must be an integer, got number 99999999999999999999"},
		{"bool given a string", head + "spec:\n  allowHardwareRisk: yes\n", `t.yaml:5: spec.allowHardwareRisk: must be true or false, got string "yes"`},
		{"float given infinity", head + "spec:\n  abortWhen: [{name: a, probe: {threshold: {value: .inf}}}]\n", "t.yaml:5: spec.abortWhen[0].probe.threshold.value: must be a finite number, got .inf"},
		{"duration given a number", head + "spec:\n  duration: 90\n", `t.yaml:5: spec.duration: duration must be a string such as "90s", got 90`},
		{"duration unparsable", head + "spec:\n  duration: soon\n", `t.yaml:5: spec.duration: invalid duration "soon"`},
		{"param given a list", head + "spec:\n  faults:\n    - id: a\n      params:\n        code: [79]\n", "t.yaml:8: spec.faults[0].params.code: parameter must be a scalar, got [79]"},
		{"param given null", head + "spec:\n  faults: [{id: a, params: {code: ~}}]\n", "t.yaml:5: spec.faults[0].params.code: parameter must be a scalar, got null"},
		{"param given infinity", head + "spec:\n  faults: [{id: a, params: {rate: -.inf}}]\n", "t.yaml:5: spec.faults[0].params.rate: must be a finite number, got -.inf"},
		{"custom tag", head + "spec:\n  faults: [{id: a, params: {code: !secret x}}]\n", "t.yaml:5: spec.faults[0].params.code: unsupported YAML tag !secret"},
		{"merge key", head + "x: &a {name: y}\n", "t.yaml:4: x: unknown field (known: apiVersion, kind, metadata, spec)"},
		{"merge key in metadata", "metadata:\n  <<: {name: y}\n", "t.yaml:2: metadata: YAML merge keys (<<) are not supported; write the fields out"},
		{"self-referencing alias", head + "spec:\n  faults: [{id: a, params: {code: &p [1, *p]}}]\n", "t.yaml:5: spec.faults[0].params.code[1][1][1][1][1][1][1][1][1][1][1][1][1…: nested too deeply"},
		{"unknown field with a newline", "metadata: {\"na\\nme\": x}\n", `t.yaml:1: metadata["na\nme"]: unknown field (did you mean name?)`},
		{"complex key", "metadata:\n  labels:\n    ? [a]\n    : b\n", "t.yaml:3: metadata.labels: mapping keys must be plain scalars, got a list"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			exp, err := Load([]byte(tc.doc), "t.yaml")
			if err == nil {
				t.Fatalf("Load accepted the document: %+v", exp)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("error\n got: %s\nwant: %s", got, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
			var le *LoadError
			if !errors.As(err, &le) {
				t.Errorf("error is %T, want *LoadError", err)
			}
		})
	}
}

func TestLoadAliases(t *testing.T) {
	t.Parallel()
	doc := "apiVersion: gpuchaos.dev/v1alpha1\nkind: Experiment\nmetadata:\n  name: a\n  labels: &l {team: gpu}\n  annotations: *l\n"
	exp, err := Load([]byte(doc), "t.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got := exp.ObjectMeta.Annotations["team"]; got != "gpu" {
		t.Errorf("alias not followed: annotations = %v", exp.ObjectMeta.Annotations)
	}
}

// TestLoadAliasBomb: nested aliases that expand exponentially (10^9 nodes
// here) must be refused quickly instead of exhausting memory. A parameter
// value goes through the loader's untyped path, which follows aliases.
func TestLoadAliasBomb(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("[&a0 [a, a, a, a, a, a, a, a, a, a]")
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&b, ", &a%d [", i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]")
	}
	b.WriteString("]")
	doc := "spec:\n  faults:\n    - id: a\n      params:\n        code: " + b.String() + "\n"
	_, err := Load([]byte(doc), "bomb.yaml")
	// Where the budget runs out inside the value depends on the walk
	// order; the field and the reason do not.
	if err == nil || !strings.HasPrefix(err.Error(), "bomb.yaml:5: spec.faults[0].params.code[") ||
		!strings.HasSuffix(err.Error(), ": document too large: over 65536 YAML nodes once aliases are expanded") {
		t.Fatalf("Load error = %v, want document too large at spec.faults[0].params.code", err)
	}
}

func TestLoadFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok.yaml")
	if err := os.WriteFile(ok, []byte(validDoc), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(ok); err != nil {
		t.Errorf("LoadFile(%s): %v", ok, err)
	}
	missing := filepath.Join(dir, "missing.yaml")
	_, err := LoadFile(missing)
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadFile(missing) = %v, want an error wrapping os.ErrNotExist", err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, make([]byte, maxFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("LoadFile(big) = %v, want a size error", err)
	}
}

func TestLocate(t *testing.T) {
	t.Parallel()
	exp, err := Load([]byte(validDoc), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"written field", &FieldError{"spec.selector.mode", "m"}, "x.yaml:11: spec.selector.mode: m"},
		{"list item", &FieldError{"spec.selector.gpus[1]", "m"}, "x.yaml:10: spec.selector.gpus[1]: m"},
		{"map key", &FieldError{"spec.faults[0].params.code", "m"}, "x.yaml:17: spec.faults[0].params.code: m"},
		{"quoted map key", &FieldError{`metadata.labels["app.kubernetes.io/name"]`, "m"}, `x.yaml:6: metadata.labels["app.kubernetes.io/name"]: m`},
		{"missing field goes to its parent", &FieldError{"spec.expectations[1].name", "m"}, "x.yaml:25: spec.expectations[1].name: m"},
		{"missing parameter goes to params", &FieldError{"spec.faults[0].params.pid", "m"}, "x.yaml:16: spec.faults[0].params.pid: m"},
		{"root", &FieldError{"", "m"}, "x.yaml:1: m"},
		{"other errors pass through", errors.New("plain"), "plain"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := exp.Locate(tc.err)
			if got.Error() != tc.want {
				t.Errorf("Locate = %q, want %q", got, tc.want)
			}
			var fe *FieldError
			if _, isField := tc.err.(*FieldError); isField && !errors.As(got, &fe) {
				t.Errorf("Locate lost the *FieldError")
			}
		})
	}
	if (&Experiment{}).Locate(nil) != nil {
		t.Error("Locate(nil) is not nil")
	}
}

func TestParentPath(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"spec.faults[0].params.code":        "spec.faults[0].params",
		"spec.faults[0]":                    "spec.faults",
		`metadata.labels["a.b/c"]`:          "metadata.labels",
		`metadata.labels["x[1]"]`:           "metadata.labels",
		"spec":                              "",
		"spec.selector.nodeSelector.zone":   "spec.selector.nodeSelector",
		`spec.selector.nodeSelector["a.b"]`: "spec.selector.nodeSelector",
	}
	for in, want := range tests {
		if got := parentPath(in); got != want {
			t.Errorf("parentPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSuggest(t *testing.T) {
	t.Parallel()
	known := []string{"id", "mechanism", "params"}
	tests := []struct{ in, want string }{
		{"parms", " (did you mean params?)"},
		{"Params", " (did you mean params?)"},
		{"mechansim", " (did you mean mechanism?)"},
		{"colour", " (known: id, mechanism, params)"},
	}
	for _, tc := range tests {
		if got := suggest(tc.in, known); got != tc.want {
			t.Errorf("suggest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
