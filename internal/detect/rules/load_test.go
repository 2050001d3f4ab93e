package rules

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func loadTestdata(t *testing.T, name string) (*Set, error) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return Load(data, name)
}

func names(rs []*Rule) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Name
	}
	return out
}

func TestLoadAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file  string
		rules []string
	}{
		{"plain.yaml", []string{"gpu:temp:avg5m", "GpuHot", "JobDown"}},
		// The ConfigMap is skipped; each PrometheusRule contributes its
		// groups, and a group name may repeat across objects.
		{"manifest.yaml", []string{"GpuXid", "GpuHot"}},
		{"list.yaml", []string{"NodeCordoned"}},
		// Prometheus allows one alert name in several groups.
		{"dup_alert_groups.yaml", []string{"GpuHot", "GpuHot"}},
		{"severity_pair.yaml", []string{"GpuHot", "GpuHot", "gpu:temp:max", "gpu:temp:max"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			set, err := loadTestdata(t, tt.file)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got := names(set.Rules); !slices.Equal(got, tt.rules) {
				t.Errorf("rules = %q, want %q", got, tt.rules)
			}
			for _, r := range set.Rules {
				if r.Parsed == nil {
					t.Errorf("%s: expression not parsed", r.Name)
				}
				if r.Source != tt.file {
					t.Errorf("%s: Source = %q, want %q", r.Name, r.Source, tt.file)
				}
			}
		})
	}
}

func TestLoadRuleFields(t *testing.T) {
	t.Parallel()
	set, err := loadTestdata(t, "plain.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rec, hot, down := set.Rules[0], set.Rules[1], set.Rules[2]
	if rec.Kind != KindRecord || hot.Kind != KindAlert {
		t.Errorf("kinds = %s, %s; want record, alert", rec.Kind, hot.Kind)
	}
	if hot.Group != "gpu" || hot.Index != 1 || hot.Line != 9 {
		t.Errorf("GpuHot at group %q index %d line %d, want gpu 1 9", hot.Group, hot.Index, hot.Line)
	}
	if hot.For != 2*time.Minute || hot.KeepFiringFor != time.Minute || hot.Interval != 30*time.Second {
		t.Errorf("GpuHot for=%s keep=%s interval=%s, want 2m 1m 30s", hot.For, hot.KeepFiringFor, hot.Interval)
	}
	// Group labels apply underneath; the rule's own value wins.
	if hot.Labels["team"] != "gpu-oncall" || hot.Labels["severity"] != "warning" || rec.Labels["team"] != "ml-infra" {
		t.Errorf("labels: GpuHot %v, record %v", hot.Labels, rec.Labels)
	}
	if hot.Annotations["summary"] != "GPU {{ $labels.gpu }} is hot" {
		t.Errorf("annotation = %q", hot.Annotations["summary"])
	}
	if down.Interval != 0 || down.Group != "jobs" || down.Index != 0 {
		t.Errorf("JobDown interval=%s group=%q index=%d, want 0 jobs 0", down.Interval, down.Group, down.Index)
	}
	if got := names(set.Alerts()); !slices.Equal(got, []string{"GpuHot", "JobDown"}) {
		t.Errorf("Alerts() = %q", got)
	}
	if got := set.Lookup("GpuHot"); len(got) != 1 || got[0] != hot {
		t.Errorf("Lookup(GpuHot) = %v", got)
	}
	if got := set.Lookup("Nope"); len(got) != 0 {
		t.Errorf("Lookup(Nope) = %v, want none", got)
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file string
		// want are the exact error lines, in order.
		want []string
	}{
		{"not_yaml.yaml", []string{`not_yaml.yaml:6: not YAML: mapping values are not allowed in this context`}},
		{"scalar.yaml", []string{`scalar.yaml:1: not a rule file: the document is a YAML scalar, not a mapping with "groups" or a PrometheusRule`}},
		{"empty.yaml", []string{`empty.yaml: empty file: no rule groups`}},
		{"comments_only.yaml", []string{`comments_only.yaml: empty file: no rule groups`}},
		{"only_deployment.yaml", []string{`only_deployment.yaml: no rules: the file holds a Deployment but no PrometheusRule`}},
		{"not_rules.yaml", []string{`not_rules.yaml:1: not a rule file: no top-level "groups" list and no PrometheusRule kind (keys: group); did you mean "groups" instead of "group"?`}},
		{"wrong_api.yaml", []string{`wrong_api.yaml:1: PrometheusRule with apiVersion "example.com/v1", want monitoring.coreos.com/v1`}},
		{"two_plain_docs.yaml", []string{`two_plain_docs.yaml:7: document 2 of a plain rule file: Prometheus reads only the first YAML document and would ignore this one; merge the groups into one document`}},
		{"bad_expr.yaml", []string{`bad_expr.yaml: group "gpu" rule "GpuHot" (line 6): expr: 1:27: parse error: unexpected right parenthesis ')'`}},
		{"dup_alert.yaml", []string{`dup_alert.yaml: group "gpu" rule "GpuHot" (line 13): duplicate alert name: also defined at line 4 with the same labels, so both write the same ALERTS series; rename one or give them different labels (e.g. severity)`}},
		{"dup_record.yaml", []string{`dup_record.yaml: group "b" rule "gpu:temp:max" (line 8): duplicate recording rule: also defined at line 4 with the same labels, so both would write the same series`}},
		{"dup_group.yaml", []string{`dup_group.yaml: group "gpu" (line 6): group name repeated (first at line 2); Prometheus requires unique group names in a file`}},
		{"unknown_field.yaml", []string{
			`unknown_field.yaml: group "gpu" rule "GpuHot" (line 6): unknown field "severity" in a rule (it takes record, alert, expr, for, keep_firing_for, labels, annotations)`,
			`unknown_field.yaml: group "gpu" rule "GpuCold" (line 9): unknown field "anotations" in a rule (did you mean "annotations"?)`,
		}},
		{"unknown_group_field.yaml", []string{`unknown_group_field.yaml: group "gpu" (line 3): unknown field "intervall" in a group (did you mean "interval"?)`}},
		{"record_with_for.yaml", []string{`record_with_for.yaml: group "gpu" rule "gpu:temp:max" (line 4): invalid field 'for' in recording rule`}},
		{"both_names.yaml", []string{`both_names.yaml: group "gpu" rule "GpuHot" (line 4): only one of 'record' and 'alert' must be set`}},
		{"bad_duration.yaml", []string{`bad_duration.yaml: group "gpu" rule "GpuHot" (line 4): not a valid duration string: "ten minutes"`}},
		{"bad_template.yaml", []string{`bad_template.yaml: group "gpu" rule "GpuHot" (line 4): annotation "summary": template: __alert_GpuHot:1: function "is" not defined`}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			set, err := loadTestdata(t, tt.file)
			if err == nil {
				t.Fatalf("Load succeeded with %d rules, want an error", len(set.Rules))
			}
			if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, tt.want) {
				t.Errorf("error:\n got %q\nwant %q", got, tt.want)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Errorf("error %T is not a *rules.Error", err)
			}
		})
	}
}

func TestLoadErrorFields(t *testing.T) {
	t.Parallel()
	_, err := loadTestdata(t, "bad_expr.yaml")
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %T is not a *rules.Error", err)
	}
	if e.Source != "bad_expr.yaml" || e.Group != "gpu" || e.Rule != "GpuHot" || e.RuleIndex != 1 || e.Line != 6 {
		t.Errorf("Error = %+v", e)
	}
}

func TestLoadFiles(t *testing.T) {
	t.Parallel()
	dir := "testdata"
	t.Run("lines count across documents", func(t *testing.T) {
		set, err := loadTestdata(t, "manifest.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if got := []int{set.Rules[0].Line, set.Rules[1].Line}; !slices.Equal(got, []int{20, 33}) {
			t.Errorf("lines = %v, want [20 33]", got)
		}
	})
	t.Run("merges in order", func(t *testing.T) {
		set, err := LoadFiles(filepath.Join(dir, "plain.yaml"), filepath.Join(dir, "manifest.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"gpu:temp:avg5m", "GpuHot", "JobDown", "GpuXid", "GpuHot"}
		if got := names(set.Rules); !slices.Equal(got, want) {
			t.Errorf("rules = %q, want %q", got, want)
		}
		if len(set.Lookup("GpuHot")) != 2 {
			t.Errorf("Lookup(GpuHot) found %d, want 2", len(set.Lookup("GpuHot")))
		}
	})
	t.Run("duplicate record across files", func(t *testing.T) {
		a, b := filepath.Join(dir, "dup_record_other.yaml"), filepath.Join(dir, "dup_alert_groups.yaml")
		if _, err := LoadFiles(a, b); err != nil {
			t.Fatalf("distinct files: %v", err)
		}
		c := filepath.Join(t.TempDir(), "again.yaml")
		data, _ := os.ReadFile(a)
		if err := os.WriteFile(c, data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadFiles(a, c)
		want := c + `: group "c" rule "gpu:temp:max" (line 4): duplicate recording rule: also defined at ` + a + `:4 with the same labels, so both would write the same series`
		if err == nil || err.Error() != want {
			t.Errorf("error = %v\nwant %s", err, want)
		}
	})
	t.Run("reports every bad file", func(t *testing.T) {
		_, err := LoadFiles(filepath.Join(dir, "empty.yaml"), filepath.Join(dir, "missing.yaml"), filepath.Join(dir, "bad_expr.yaml"))
		if err == nil {
			t.Fatal("no error")
		}
		msg := err.Error()
		for _, want := range []string{"empty.yaml: empty file", "missing.yaml: no such file", `rule "GpuHot" (line 6): expr:`} {
			if !strings.Contains(msg, want) {
				t.Errorf("error lacks %q:\n%s", want, msg)
			}
		}
	})
	t.Run("no files", func(t *testing.T) {
		if _, err := LoadFiles(); err == nil {
			t.Error("no error for no files")
		}
	})
	// A fleet's rules folder: its rule files in name order, the other
	// files there (a README, a Deployment beside the PrometheusRules)
	// skipped, subdirectories not entered.
	t.Run("directory", func(t *testing.T) {
		d := t.TempDir()
		copyTo := func(src, dst string) {
			t.Helper()
			data, err := os.ReadFile(filepath.Join(dir, src))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Dir(filepath.Join(d, dst)), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, dst), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		copyTo("manifest.yaml", "b-manifest.yml")
		copyTo("plain.yaml", "a-plain.rules")
		copyTo("only_deployment.yaml", "c-deployment.yaml")
		copyTo("not_yaml.yaml", "README.md")
		copyTo("bad_expr.yaml", "nested/bad.yaml")
		set, err := LoadFiles(d)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"gpu:temp:avg5m", "GpuHot", "JobDown", "GpuXid", "GpuHot"}
		if got := names(set.Rules); !slices.Equal(got, want) {
			t.Errorf("rules = %q, want %q", got, want)
		}
		if set.Rules[0].Source != filepath.Join(d, "a-plain.rules") {
			t.Errorf("first rule's source %q, want the file's path", set.Rules[0].Source)
		}
		if len(set.Warnings) != 1 || !strings.Contains(set.Warnings[0].Error(), "c-deployment.yaml: no rules: the file holds a Deployment") {
			t.Errorf("warnings = %v, want the Deployment skipped", set.Warnings)
		}
		// Named alone, the same file is a mistake.
		if _, err := LoadFiles(filepath.Join(d, "c-deployment.yaml")); err == nil {
			t.Error("a file of only a Deployment loads when named")
		}
		_, err = LoadFiles(filepath.Join(d, "nested"), d+"/empty-dir-does-not-exist")
		if err == nil || !strings.Contains(err.Error(), `rule "GpuHot" (line 6): expr:`) || !strings.Contains(err.Error(), "empty-dir-does-not-exist: no such file") {
			t.Errorf("error = %v, want the bad rule in nested/ and the missing path", err)
		}
		empty := t.TempDir()
		if err := os.WriteFile(filepath.Join(empty, "notes.txt"), []byte("no rules here\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadFiles(empty); err == nil || !strings.Contains(err.Error(), empty+": no rule files in the directory") {
			t.Errorf("error = %v, want no rule files in %s", err, empty)
		}
	})
	t.Run("size limit", func(t *testing.T) {
		huge := filepath.Join(t.TempDir(), "huge.yaml")
		f, err := os.Create(huge)
		if err != nil {
			t.Fatal(err)
		}
		// Sparse: refused by its size, never read.
		if err := f.Truncate(50 << 20); err != nil || f.Close() != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct{ path, want string }{
			{huge, huge + ": 50.0 MiB, over the 4 MiB limit for a rule file"},
			// A device has no size to stat: read up to the limit.
			{"/dev/zero", "/dev/zero: more than 4 MiB, over the 4 MiB limit for a rule file"},
		} {
			_, err := LoadFiles(tt.path)
			var le *Error
			if err == nil || err.Error() != tt.want || !errors.As(err, &le) {
				t.Errorf("LoadFiles(%s) = %v, want *Error %q", tt.path, err, tt.want)
			}
		}
	})
}

func FuzzLoad(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	packs, _ := filepath.Glob("packs/*.yaml")
	for _, p := range append(files, packs...) {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		set, err := Load(data, "fuzz.yaml")
		if err != nil {
			if set != nil {
				t.Fatal("a Set returned with an error")
			}
			if !strings.HasPrefix(err.Error(), "fuzz.yaml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if len(set.Rules) == 0 {
			t.Fatal("Load succeeded with no rules")
		}
		for _, r := range set.Rules {
			if r.Parsed == nil || r.Name == "" || r.Line < 1 {
				t.Fatalf("incomplete rule %+v", r)
			}
		}
		// Analysis must not fail on anything Load accepts.
		if got := Analyze(set, AnalyzeOptions{}); len(got) != len(set.Rules) {
			t.Fatalf("Analyze returned %d analyses for %d rules", len(got), len(set.Rules))
		}
	})
}
