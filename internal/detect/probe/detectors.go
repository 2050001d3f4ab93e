package probe

import (
	_ "embed"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/model"

	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
)

// EvalInterval is the rule evaluation interval the built-in detectors
// assume (their groups set it; Prometheus' default is 1m, 15s is what GPU
// fleets commonly set for fast alerting), and the one of threshold probes.
const EvalInterval = 15 * time.Second

// detectorRules is the built-in detectors' Prometheus rule file.
//
//go:embed detectors.yaml
var detectorRules []byte

// DetectorRulesSource is the name the built-in detectors' rules carry as
// their Source.
const DetectorRulesSource = "internal/detect/probe/detectors.yaml"

// Detector is a built-in detector: one of the alert rules or watchers a
// typical GPU fleet runs. All but the kernel-log watcher are alerting
// rules of detectors.yaml, a Prometheus rule file.
type Detector struct {
	Name string `json:"name"`
	// Layer is where the detector looks.
	Layer catalog.Layer `json:"layer"`
	// Reads lists the series or log it reads.
	Reads []string `json:"reads"`
	// Rule is the alerting rule's PromQL expression on one line, followed
	// by its for: clause when it has one ("X > 85 for 1m"), or the
	// watcher's behaviour.
	Rule        string `json:"rule"`
	Description string `json:"description"`

	rule *rules.Rule
	set  *rules.Set
	log  bool
}

// Probe returns the detector as a probe over src: an alert probe (see
// NewAlertProbe) for a rule, a log watcher for kmsg-xid.
func (d *Detector) Probe(src Source) Probe {
	if d.log {
		return &logProbe{name: d.Name, src: src, window: xidWindow, match: xidLine}
	}
	return NewAlertProbe(d.Name, d.rule, d.set, src)
}

// AlertRule returns the detector's alerting rule, nil for the log watcher.
func (d *Detector) AlertRule() *rules.Rule { return d.rule }

// DetectorRules returns the built-in detectors' rule set, as loaded from
// detectors.yaml: the rules the detectors' AlertRule return, in report
// order. Callers must not modify it.
func DetectorRules() *rules.Set { return builtins().set }

// Detectors returns the built-in detectors in report order.
func Detectors() []*Detector { return builtins().list }

// CollectiveTraceDetector is the name of the detector the NCCL collective
// tracer provides (node/colltrace). It is not a built-in rule, and the
// tracer is linked only where it runs, so whoever validates a spec knows
// the name from here.
const CollectiveTraceDetector = "collective-trace"

// LookupDetector returns a built-in detector by name.
func LookupDetector(name string) (*Detector, bool) {
	ds := Detectors()
	i := slices.IndexFunc(ds, func(d *Detector) bool { return d.Name == name })
	if i < 0 {
		return nil, false
	}
	return ds[i], true
}

// xidWindow is how long a log-watcher alert stays up after an XID line, as a
// node-problem-detector condition or a syslog alert with a silence would.
const xidWindow = 10 * time.Minute

// kmsgXID is the one built-in detector that is not PromQL: it reads the
// kernel log.
var kmsgXID = Detector{
	Name: "kmsg-xid", Layer: catalog.LayerKernelLog, Reads: []string{"kernel log: NVRM: Xid"},
	Rule:        "an NVRM Xid line in the kernel log within the last 10m",
	Description: "A syslog or node-problem-detector style watcher of kernel XID lines.",
	log:         true,
}

type registry struct {
	list []*Detector
	set  *rules.Set
}

// builtins loads detectors.yaml once. The file is part of the binary and a
// test loads it, so an error is a build defect.
var builtins = sync.OnceValue(func() registry {
	set, err := rules.Load(detectorRules, DetectorRulesSource)
	if err != nil {
		panic(fmt.Sprintf("built-in detectors: %v", err))
	}
	var reg registry
	reg.set = set
	log := kmsgXID
	for _, r := range set.Rules {
		// The log watcher sits between the exporter's detectors and the
		// workload's, as the layers go.
		if r.Group != "gpuchaos-exporter" && !slices.Contains(reg.list, &log) {
			reg.list = append(reg.list, &log)
		}
		reg.list = append(reg.list, &Detector{
			Name: r.Name, Layer: catalog.Layer(r.Annotations["layer"]), Reads: reads(r),
			Rule: RuleText(r), Description: r.Annotations["description"], rule: r, set: set,
		})
	}
	return reg
})

// RuleText shows an alerting rule on one line: its expression with
// whitespace collapsed, then " for D" when it has a for: clause, in
// Prometheus' duration form (1m, 2m30s).
func RuleText(r *rules.Rule) string {
	s := strings.Join(strings.Fields(r.Expr), " ")
	if r.For > 0 {
		s += " for " + model.Duration(r.For).String()
	}
	return s
}

// reads lists the metrics a rule selects, in order of first appearance.
func reads(r *rules.Rule) []string {
	var out []string
	for _, n := range metricNames(r.Parsed) {
		if n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}
