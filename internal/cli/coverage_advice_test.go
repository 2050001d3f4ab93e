package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
)

// declareRe finds the exporter a reason tells the user to declare.
var declareRe = regexp.MustCompile(`declare it with --exporter ([a-z0-9_.-]+)`)

// TestEveryAdviceIsAccepted takes every metric the registry knows, asks
// the analysis about a rule over it on a fleet with the default
// exporters, and follows whatever the reason tells the user to do through
// the real flag parsing: `--exporter NAME`, `--exporter
// dcgm-exporter=FILE` with the field listed, or `--opt-in NAME`. The
// flags must accept it, and the rule must then be ok. A rule that is not
// ok must say what would make it so: advice the flags refuse cannot be
// followed.
func TestEveryAdviceIsAccepted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	counts := map[string]int{}
	for _, m := range rules.Known() {
		set, err := rules.Load(fmt.Appendf(nil, "groups:\n- name: g\n  rules:\n  - {alert: A, expr: '%s > 0'}\n", m.Name), "advice.yaml")
		if err != nil {
			t.Fatal(err)
		}
		an := rules.Analyze(set, rules.AnalyzeOptions{})[0]
		if an.Status == rules.StatusOK {
			counts["ok"]++
			continue
		}
		// Follow every piece of advice the reason gives, together: an
		// opt-in metric of an undeclared exporter needs both flags.
		opts := rules.AnalyzeOptions{Exporters: rules.DefaultExporters()}
		followed := false
		if strings.Contains(an.Reason, "--exporter dcgm-exporter=FILE") {
			followed = true
			counts["counters CSV"]++
			file := filepath.Join(dir, m.Name+".csv")
			if err := os.WriteFile(file, []byte(m.Name+", gauge, as advised\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			names, counters, err := parseExporters([]string{"dcgm-exporter=" + file})
			if err != nil {
				t.Errorf("%s: the analysis says %q and --exporter refuses the file: %v", m.Name, an.Reason, err)
				continue
			}
			opts.Exporters, opts.Counters = append(opts.Exporters, names...), counters
		}
		if sm := declareRe.FindStringSubmatch(an.Reason); sm != nil {
			followed = true
			counts["--exporter"]++
			names, _, err := parseExporters([]string{sm[1]})
			if err != nil {
				t.Errorf("%s: the analysis says %q and --exporter refuses %s: %v", m.Name, an.Reason, sm[1], err)
				continue
			}
			opts.Exporters = append(opts.Exporters, names...)
		}
		if strings.Contains(an.Reason, "--opt-in") || strings.Contains(an.Reason, "pass it as opt-in") {
			followed = true
			counts["--opt-in"]++
			if err := checkOptIn([]string{m.Name}); err != nil {
				t.Errorf("%s: the analysis says %q and --opt-in refuses it: %v", m.Name, an.Reason, err)
				continue
			}
			opts.OptIn = []string{m.Name}
		}
		if !followed {
			t.Errorf("%s is %s with no advice a flag can follow: %q", m.Name, an.Status, an.Reason)
			continue
		}
		if after := rules.Analyze(set, opts)[0]; after.Status != rules.StatusOK {
			t.Errorf("%s: followed the advice %q, and the rule is %s: %q", m.Name, an.Reason, after.Status, after.Reason)
		}
	}
	t.Logf("advice followed: %v", counts)
	// Each kind of advice occurs: the registry has metrics of undeclared
	// exporters, DCGM fields and opt-in counters.
	for _, k := range []string{"ok", "counters CSV", "--exporter", "--opt-in"} {
		if counts[k] == 0 {
			t.Errorf("no metric took the path %q (%v)", k, counts)
		}
	}
}
