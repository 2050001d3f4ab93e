package v1alpha1

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// MaxDuration is the longest fault window an experiment may ask for; a
// longer one is almost certainly a typo (90h for 90s) and would hold a
// fault on production hardware for days.
const MaxDuration = 24 * time.Hour

// FieldError is a validation error naming the field at fault by its path
// from the object's root, as written in YAML: spec.faults[1].params.code.
type FieldError struct {
	// Path is the field path; empty for the object as a whole.
	Path string
	// Msg says what is wrong with the field.
	Msg string
}

// Error formats the error as "path: message".
func (e *FieldError) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

// ValidateOptions plugs in the checks that need knowledge this package does
// not have (the fault catalogue, the detectors), keeping the API types free
// of dependencies on the rest of gpuchaos.
// +kubebuilder:object:generate=false
type ValidateOptions struct {
	// CheckFault validates one fault spec against the catalogue; the
	// returned FieldError's Path is relative to the fault (e.g.
	// "params.code", "id", "mechanism"). Nil skips the check.
	CheckFault func(FaultSpec) *FieldError
	// KnownDetector reports whether a built-in detector name exists. Nil
	// skips the check.
	KnownDetector func(string) bool
}

// Validate checks the rules a schema cannot express and returns the first
// problem as a *FieldError, or nil. The order is fixed (apiVersion, kind,
// metadata, spec.selector, spec.faults, spec.duration, spec.steadyState,
// spec.expectations, spec.abortWhen, spec.blastRadius), so the same file
// always reports the same error. Zero blast-radius caps and empty
// expectation names are valid: they mean the defaults Default fills.
func (e *Experiment) Validate(opts ValidateOptions) error {
	checks := []func() *FieldError{
		e.validateMeta,
		func() *FieldError { return validateSelector(e.Spec.Selector) },
		func() *FieldError { return validateFaults(e.Spec.Faults, opts) },
		func() *FieldError { return validateDuration(e.Spec.Duration.Duration) },
		func() *FieldError { return validateChecks("spec.steadyState", e.Spec.SteadyState, opts) },
		func() *FieldError { return validateExpectations(e.Spec.Expectations, opts) },
		func() *FieldError { return validateChecks("spec.abortWhen", e.Spec.AbortWhen, opts) },
		func() *FieldError { return validateBlastRadius(e.Spec.BlastRadius) },
	}
	for _, check := range checks {
		if fe := check(); fe != nil {
			return fe
		}
	}
	return nil
}

// Default fills what an experiment may leave out: zero blast-radius caps
// take DefaultMaxNodes, DefaultMaxGPUs and DefaultMaxConcurrent, and an
// expectation without a name is named after its detector (or its probe's
// metric), with -2, -3… added where two would otherwise share a name.
// Default is idempotent and leaves invalid values for Validate to report.
func (e *Experiment) Default() {
	e.Spec.BlastRadius = e.Spec.BlastRadius.WithDefaults()
	used := map[string]bool{}
	for _, x := range e.Spec.Expectations {
		if x.Name != "" {
			used[x.Name] = true
		}
	}
	for i := range e.Spec.Expectations {
		x := &e.Spec.Expectations[i]
		if x.Name != "" {
			continue
		}
		base := x.defaultName()
		if base == "" {
			base = "expectation-" + strconv.Itoa(i+1)
		}
		name := base
		for n := 2; used[name]; n++ {
			name = base + "-" + strconv.Itoa(n)
		}
		used[name] = true
		x.Name = name
	}
}

func (x *Expectation) defaultName() string {
	switch {
	case x.Detector != "":
		return x.Detector
	case x.Probe == nil:
		return ""
	case x.Probe.Detector != "":
		return x.Probe.Detector
	case x.Probe.Threshold != nil:
		return x.Probe.Threshold.Metric
	case x.Probe.Log != nil:
		return "log"
	case x.Probe.Prometheus != nil && x.Probe.Prometheus.Alert != "":
		return x.Probe.Prometheus.Alert
	case x.Probe.Prometheus != nil:
		return "prometheus"
	case x.Probe.Workload != nil:
		return "workload-" + x.Probe.Workload.Check
	case x.Probe.Kubernetes != nil:
		return "kubernetes-" + x.Probe.Kubernetes.Check
	}
	return ""
}

// WithDefaults returns the caps with zero fields replaced by the defaults.
func (b BlastRadius) WithDefaults() BlastRadius {
	if b.MaxNodes == 0 {
		b.MaxNodes = DefaultMaxNodes
	}
	if b.MaxGPUs == 0 {
		b.MaxGPUs = DefaultMaxGPUs
	}
	if b.MaxConcurrent == 0 {
		b.MaxConcurrent = DefaultMaxConcurrent
	}
	return b
}

var dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func checkDNSLabel(path, s string) *FieldError {
	if s == "" {
		return &FieldError{path, "required"}
	}
	if len(s) > 63 || !dns1123Label.MatchString(s) {
		return &FieldError{path, fmt.Sprintf("%q is not a DNS-1123 label (lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters)", s)}
	}
	return nil
}

func (e *Experiment) validateMeta() *FieldError {
	switch {
	case e.APIVersion == "":
		return &FieldError{"apiVersion", "required; must be " + GroupVersion}
	case e.APIVersion != GroupVersion:
		return &FieldError{"apiVersion", fmt.Sprintf("must be %s, got %q", GroupVersion, e.APIVersion)}
	case e.Kind == "":
		return &FieldError{"kind", "required; must be " + KindExperiment}
	case e.Kind != KindExperiment:
		return &FieldError{"kind", fmt.Sprintf("must be %s, got %q", KindExperiment, e.Kind)}
	}
	if fe := checkDNSLabel("metadata.name", e.ObjectMeta.Name); fe != nil {
		return fe
	}
	if e.ObjectMeta.Namespace != "" {
		return checkDNSLabel("metadata.namespace", e.ObjectMeta.Namespace)
	}
	return nil
}

var (
	gpuIndex = regexp.MustCompile(`^(0|[1-9][0-9]{0,3})$`)
	gpuUUID  = regexp.MustCompile(`^GPU-[0-9A-Za-z][0-9A-Za-z-]*$`)
)

// Modes lists the selector modes in the order messages show them.
func Modes() []SelectorMode { return []SelectorMode{ModeOne, ModeAll, ModeFixed, ModePercent} }

func modeList() string {
	s := make([]string, 0, 4)
	for _, m := range Modes() {
		s = append(s, string(m))
	}
	return strings.Join(s, ", ")
}

func validateSelector(s Selector) *FieldError {
	const p = "spec.selector"
	if len(s.Nodes) == 0 && len(s.NodeSelector) == 0 && len(s.GPUs) == 0 && len(s.Jobs) == 0 {
		return &FieldError{p, "empty selector; name nodes, nodeSelector, gpus or jobs"}
	}
	if fe := checkNames(p+".nodes", "node", s.Nodes); fe != nil {
		return fe
	}
	for i, g := range s.GPUs {
		if !gpuIndex.MatchString(g) && !gpuUUID.MatchString(g) {
			return &FieldError{fmt.Sprintf("%s.gpus[%d]", p, i), fmt.Sprintf("%q is neither a GPU index (\"3\") nor a GPU UUID (\"GPU-…\")", g)}
		}
		if j := slices.Index(s.GPUs[:i], g); j >= 0 {
			return &FieldError{fmt.Sprintf("%s.gpus[%d]", p, i), fmt.Sprintf("GPU %q is listed twice (also gpus[%d])", g, j)}
		}
	}
	if fe := checkNames(p+".jobs", "job", s.Jobs); fe != nil {
		return fe
	}
	if len(s.Ranks) > 0 && len(s.Jobs) == 0 {
		return &FieldError{p + ".ranks", "ranks need jobs: name the jobs the ranks belong to"}
	}
	for i, r := range s.Ranks {
		if r < 0 {
			return &FieldError{fmt.Sprintf("%s.ranks[%d]", p, i), fmt.Sprintf("rank %d is negative", r)}
		}
		if j := slices.Index(s.Ranks[:i], r); j >= 0 {
			return &FieldError{fmt.Sprintf("%s.ranks[%d]", p, i), fmt.Sprintf("rank %d is listed twice (also ranks[%d])", r, j)}
		}
	}
	switch s.Mode {
	case "":
		return &FieldError{p + ".mode", "required; one of " + modeList()}
	case ModeOne, ModeAll:
		if s.Value != 0 {
			return &FieldError{p + ".value", fmt.Sprintf("only used with mode fixed or percent, not %s", s.Mode)}
		}
	case ModeFixed:
		if s.Value < 1 {
			return &FieldError{p + ".value", fmt.Sprintf("mode fixed needs a value of at least 1, got %d", s.Value)}
		}
	case ModePercent:
		if s.Value < 1 || s.Value > 100 {
			return &FieldError{p + ".value", fmt.Sprintf("mode percent needs a value from 1 to 100, got %d", s.Value)}
		}
	default:
		return &FieldError{p + ".mode", fmt.Sprintf("%q is not one of %s", s.Mode, modeList())}
	}
	return nil
}

// checkNames rejects empty and repeated names in a selector list.
func checkNames(path, what string, names []string) *FieldError {
	for i, n := range names {
		ip := fmt.Sprintf("%s[%d]", path, i)
		if strings.TrimSpace(n) == "" {
			return &FieldError{ip, "empty " + what + " name"}
		}
		if j := slices.Index(names[:i], n); j >= 0 {
			return &FieldError{ip, fmt.Sprintf("%s %q is listed twice (also [%d])", what, n, j)}
		}
	}
	return nil
}

func validateFaults(faults []FaultSpec, opts ValidateOptions) *FieldError {
	if len(faults) == 0 {
		return &FieldError{"spec.faults", "at least one fault is required"}
	}
	for i, f := range faults {
		p := fmt.Sprintf("spec.faults[%d]", i)
		if f.ID == "" {
			return &FieldError{p + ".id", "required; run 'gpuchaos faults' to list the fault ids"}
		}
		if opts.CheckFault == nil {
			continue
		}
		if fe := opts.CheckFault(f); fe != nil {
			return &FieldError{joinField(p, fe.Path), fe.Msg}
		}
	}
	return nil
}

func validateDuration(d time.Duration) *FieldError {
	switch {
	case d == 0:
		return &FieldError{"spec.duration", "required; a duration such as \"5m\""}
	case d < 0:
		return &FieldError{"spec.duration", fmt.Sprintf("must be positive, got %s", d)}
	case d > MaxDuration:
		return &FieldError{"spec.duration", fmt.Sprintf("%s is over the limit of %s", d, strings.TrimSuffix(MaxDuration.String(), "0m0s"))}
	}
	return nil
}

func validateChecks(path string, checks []Check, opts ValidateOptions) *FieldError {
	for i, c := range checks {
		p := fmt.Sprintf("%s[%d]", path, i)
		if c.Name == "" {
			return &FieldError{p + ".name", "required"}
		}
		for j := range i {
			if checks[j].Name == c.Name {
				return &FieldError{p + ".name", fmt.Sprintf("duplicate name %q (also %s[%d])", c.Name, path, j)}
			}
		}
		if c.Probe.Workload != nil {
			return &FieldError{p + ".probe.workload", "a workload probe judges the run against its injection and recovery; use it in spec.expectations"}
		}
		if fe := validateProbe(p+".probe", c.Probe, opts); fe != nil {
			return fe
		}
	}
	return nil
}

func validateExpectations(xs []Expectation, opts ValidateOptions) *FieldError {
	for i, x := range xs {
		p := fmt.Sprintf("spec.expectations[%d]", i)
		if x.Name != "" {
			for j := range i {
				if xs[j].Name == x.Name {
					return &FieldError{p + ".name", fmt.Sprintf("duplicate name %q (also spec.expectations[%d])", x.Name, j)}
				}
			}
		}
		switch {
		case x.Detector != "" && x.Probe != nil:
			return &FieldError{p, "set exactly one of detector or probe, not both"}
		case x.Detector == "" && x.Probe == nil:
			return &FieldError{p, "set exactly one of detector or probe"}
		case x.Detector != "":
			if fe := checkDetector(p+".detector", x.Detector, opts); fe != nil {
				return fe
			}
		default:
			if fe := validateProbe(p+".probe", *x.Probe, opts); fe != nil {
				return fe
			}
		}
		if x.Within.Duration <= 0 {
			return &FieldError{p + ".within", "required; a positive deadline such as \"2m\""}
		}
	}
	return nil
}

func checkDetector(path, name string, opts ValidateOptions) *FieldError {
	if opts.KnownDetector != nil && !opts.KnownDetector(name) {
		return &FieldError{path, fmt.Sprintf("unknown detector %q; it is not one of the built-in detectors", name)}
	}
	return nil
}

var (
	metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelName  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
	thresholds = []string{">", "<", ">=", "<=", "==", "!="}
)

func validateProbe(path string, p ProbeSpec, opts ValidateOptions) *FieldError {
	n := 0
	for _, set := range []bool{p.Detector != "", p.Threshold != nil, p.Log != nil, p.Prometheus != nil, p.Workload != nil, p.Kubernetes != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return &FieldError{path, fmt.Sprintf("set exactly one of detector, threshold, log, prometheus, workload or kubernetes (%d set)", n)}
	}
	switch {
	case p.Detector != "":
		return checkDetector(path+".detector", p.Detector, opts)
	case p.Threshold != nil:
		t := p.Threshold
		tp := path + ".threshold"
		if t.Metric == "" {
			return &FieldError{tp + ".metric", "required"}
		}
		if !metricName.MatchString(t.Metric) {
			return &FieldError{tp + ".metric", fmt.Sprintf("%q is not a valid Prometheus metric name", t.Metric)}
		}
		names := make([]string, 0, len(t.Labels))
		for k := range t.Labels {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			if !labelName.MatchString(k) {
				return &FieldError{joinKey(tp+".labels", k), fmt.Sprintf("%q is not a valid Prometheus label name", k)}
			}
		}
		if !t.Absent && !slices.Contains(thresholds, t.Op) {
			if t.Op == "" {
				return &FieldError{tp + ".op", "required; one of " + strings.Join(thresholds, " ")}
			}
			return &FieldError{tp + ".op", fmt.Sprintf("%q is not one of %s", t.Op, strings.Join(thresholds, " "))}
		}
		if t.For.Duration < 0 {
			return &FieldError{tp + ".for", fmt.Sprintf("must not be negative, got %s", t.For.Duration)}
		}
	case p.Log != nil:
		if p.Log.Pattern == "" {
			return &FieldError{path + ".log.pattern", "required"}
		}
		if _, err := regexp.Compile(p.Log.Pattern); err != nil {
			return &FieldError{path + ".log.pattern", "not a valid regular expression: " + strings.TrimPrefix(err.Error(), "error parsing regexp: ")}
		}
	case p.Prometheus != nil:
		return validatePrometheus(path+".prometheus", p.Prometheus)
	case p.Workload != nil:
		return validateWorkload(path+".workload", p.Workload)
	case p.Kubernetes != nil:
		return validateKubernetes(path+".kubernetes", p.Kubernetes)
	}
	return nil
}

// validateKubernetes checks a Kubernetes probe: a known check, the fields
// it needs, and no field it does not read (the user believes such a field
// narrows the check).
func validateKubernetes(path string, k *KubernetesProbe) *FieldError {
	if k.Check == "" {
		return &FieldError{path + ".check", "required; one of " + strings.Join(KubeChecks, ", ")}
	}
	if !slices.Contains(KubeChecks, k.Check) {
		return &FieldError{path + ".check", fmt.Sprintf("%q is not one of %s", k.Check, strings.Join(KubeChecks, ", "))}
	}
	pods := []string{KubePodPhase, KubePodRestarts, KubePodsEvicted, KubeJobResumed}
	uses := map[string][]string{
		"conditionType": {KubeNodeCondition},
		"status":        {KubeNodeCondition},
		"reason":        {KubeNodeCondition, KubeEvent},
		"key":           {KubeTaint, KubeLabel},
		"value":         {KubeTaint, KubeLabel},
		"effect":        {KubeTaint},
		"type":          {KubeEvent},
		"namespace":     append(slices.Clone(pods), KubeEvent),
		"selector":      pods,
		"phase":         {KubePodPhase},
		"minRestarts":   {KubePodRestarts},
		"anyNode":       {KubePodPhase, KubePodRestarts},
	}
	set := map[string]bool{
		"conditionType": k.ConditionType != "", "status": k.Status != "", "reason": k.Reason != "",
		"key": k.Key != "", "value": k.Value != "", "effect": k.Effect != "", "type": k.Type != "",
		"namespace": k.Namespace != "", "selector": k.Selector != "", "phase": k.Phase != "",
		"minRestarts": k.MinRestarts != 0, "anyNode": k.AnyNode,
	}
	for _, f := range []string{"conditionType", "status", "reason", "key", "value", "effect", "type", "namespace", "selector", "phase", "minRestarts", "anyNode"} {
		if set[f] && !slices.Contains(uses[f], k.Check) {
			return &FieldError{path + "." + f, fmt.Sprintf("not read by check %s (only by %s)", k.Check, strings.Join(uses[f], ", "))}
		}
	}
	required := map[string][]string{
		KubeNodeCondition: {"conditionType"},
		KubeTaint:         {"key"},
		KubeLabel:         {"key"},
		KubePodPhase:      {"selector", "phase"},
		KubePodRestarts:   {"selector"},
		KubeEvent:         {"reason"},
		KubePodsEvicted:   {"selector"},
		KubeJobResumed:    {"selector"},
	}
	for _, f := range required[k.Check] {
		if !set[f] {
			return &FieldError{path + "." + f, "required for check " + k.Check}
		}
	}
	switch {
	case k.Status != "" && !slices.Contains([]string{"True", "False", "Unknown"}, k.Status):
		return &FieldError{path + ".status", fmt.Sprintf("%q is not one of True, False, Unknown", k.Status)}
	case k.Effect != "" && !slices.Contains([]string{"NoSchedule", "PreferNoSchedule", "NoExecute"}, k.Effect):
		return &FieldError{path + ".effect", fmt.Sprintf("%q is not one of NoSchedule, PreferNoSchedule, NoExecute", k.Effect)}
	case k.Phase != "" && !slices.Contains([]string{"Pending", "Running", "Succeeded", "Failed", "Unknown"}, k.Phase):
		return &FieldError{path + ".phase", fmt.Sprintf("%q is not one of Pending, Running, Succeeded, Failed, Unknown", k.Phase)}
	case k.MinRestarts < 0:
		return &FieldError{path + ".minRestarts", fmt.Sprintf("must be at least 0, got %d", k.MinRestarts)}
	}
	if k.Key != "" {
		if errs := validation.IsQualifiedName(k.Key); len(errs) > 0 {
			return &FieldError{path + ".key", fmt.Sprintf("%q is not a qualified name: %s", k.Key, strings.Join(errs, "; "))}
		}
	}
	if k.Namespace != "" {
		if errs := validation.IsDNS1123Label(k.Namespace); len(errs) > 0 {
			return &FieldError{path + ".namespace", fmt.Sprintf("%q is not a namespace name: %s", k.Namespace, strings.Join(errs, "; "))}
		}
	}
	if k.Selector != "" {
		if _, err := labels.Parse(k.Selector); err != nil {
			return &FieldError{path + ".selector", fmt.Sprintf("%q is not a label selector: %v", k.Selector, err)}
		}
	}
	return nil
}

// validateWorkload checks a workload probe: a known check, and only the
// settings that check reads, each in range.
func validateWorkload(path string, w *WorkloadProbe) *FieldError {
	if w.Check == "" {
		return &FieldError{path + ".check", "required; one of " + strings.Join(WorkloadChecks, ", ")}
	}
	if !slices.Contains(WorkloadChecks, w.Check) {
		return &FieldError{path + ".check", fmt.Sprintf("%q is not one of %s", w.Check, strings.Join(WorkloadChecks, ", "))}
	}
	if w.Job != "" && !labelValue(w.Job) {
		return &FieldError{path + ".job", fmt.Sprintf("%q is not a job name", w.Job)}
	}
	// A setting another check reads is a mistake worth naming: the user
	// believes it constrains this one.
	uses := map[string][]string{
		"maxFallback":  {WorkloadResumed},
		"maxLostSteps": {WorkloadLostWork},
		"tolerance":    {WorkloadRateRecovered, WorkloadSlowdown},
		"min":          {WorkloadGoodput},
		"for":          {WorkloadRateRecovered, WorkloadSlowdown, WorkloadStalled},
	}
	set := map[string]bool{
		"maxFallback": w.MaxFallback != nil, "maxLostSteps": w.MaxLostSteps != nil, "tolerance": w.Tolerance != nil,
		"min": w.Min != nil, "for": w.For.Duration != 0,
	}
	for _, k := range []string{"maxFallback", "maxLostSteps", "tolerance", "min", "for"} {
		if set[k] && !slices.Contains(uses[k], w.Check) {
			return &FieldError{path + "." + k, fmt.Sprintf("not read by check %s (only by %s)", w.Check, strings.Join(uses[k], ", "))}
		}
	}
	switch {
	case w.MaxFallback != nil && *w.MaxFallback < 0:
		return &FieldError{path + ".maxFallback", fmt.Sprintf("must be at least 0, got %d", *w.MaxFallback)}
	case w.MaxLostSteps != nil && *w.MaxLostSteps < 0:
		return &FieldError{path + ".maxLostSteps", fmt.Sprintf("must be at least 0, got %d", *w.MaxLostSteps)}
	case w.Tolerance != nil && (*w.Tolerance <= 0 || *w.Tolerance >= 1):
		return &FieldError{path + ".tolerance", fmt.Sprintf("must be a share between 0 and 1 (0.05 is 5 %%), got %g", *w.Tolerance)}
	case w.Check == WorkloadGoodput && w.Min == nil:
		return &FieldError{path + ".min", "required for check goodput; the lowest passing goodput, such as 0.9"}
	case w.Min != nil && (*w.Min <= 0 || *w.Min > 1):
		return &FieldError{path + ".min", fmt.Sprintf("must be a share in (0, 1], got %g", *w.Min)}
	case w.Baseline.Duration < 0:
		return &FieldError{path + ".baseline", fmt.Sprintf("must not be negative, got %s", w.Baseline.Duration)}
	case w.For.Duration < 0:
		return &FieldError{path + ".for", fmt.Sprintf("must not be negative, got %s", w.For.Duration)}
	}
	return nil
}

// labelValue accepts a job name as Prometheus label values carry it: any
// printable text without spaces at its ends.
func labelValue(s string) bool {
	return s == strings.TrimSpace(s) && strings.IndexFunc(s, func(r rune) bool { return r < ' ' }) < 0
}

// validatePrometheus checks a Prometheus probe's shape; the query itself
// is parsed by the server, which names any syntax error when asked.
func validatePrometheus(path string, p *PrometheusProbe) *FieldError {
	if p.URL != "" {
		u, err := url.Parse(p.URL)
		switch {
		case err != nil:
			return &FieldError{path + ".url", fmt.Sprintf("%q is not a URL: %v", p.URL, errors.Unwrap(err))}
		case u.Scheme != "http" && u.Scheme != "https":
			return &FieldError{path + ".url", fmt.Sprintf("%q must start with http:// or https://", p.URL)}
		case u.Host == "":
			return &FieldError{path + ".url", fmt.Sprintf("%q names no host", p.URL)}
		case u.RawQuery != "" || u.Fragment != "":
			return &FieldError{path + ".url", fmt.Sprintf("%q must be the server's base URL, without a query or fragment", p.URL)}
		}
	}
	switch {
	case p.Alert != "" && p.Query != "":
		return &FieldError{path, "set exactly one of alert or query, not both"}
	case p.Alert == "" && p.Query == "":
		return &FieldError{path, "set exactly one of alert or query"}
	case p.Alert != "":
		if p.Op != "" || p.Value != nil || p.Tolerance != nil {
			return &FieldError{path + ".alert", "an alert probe holds while the alert fires; op, value and tolerance apply to a query"}
		}
		if strings.TrimSpace(p.Alert) != p.Alert {
			return &FieldError{path + ".alert", fmt.Sprintf("%q has leading or trailing spaces", p.Alert)}
		}
		return nil
	}
	switch {
	case p.Op != "" && !slices.Contains(thresholds, p.Op):
		return &FieldError{path + ".op", fmt.Sprintf("%q is not one of %s", p.Op, strings.Join(thresholds, " "))}
	case p.Op != "" && p.Tolerance != nil:
		return &FieldError{path, "set op or tolerance, not both: op compares with value, tolerance holds near value"}
	case p.Op != "" && p.Value == nil:
		return &FieldError{path + ".value", "required with op"}
	case p.Tolerance != nil && p.Value == nil:
		return &FieldError{path + ".value", "required with tolerance"}
	case p.Value != nil && p.Op == "" && p.Tolerance == nil:
		return &FieldError{path + ".value", "needs op (compare with it) or tolerance (hold near it)"}
	case p.Tolerance != nil && !(*p.Tolerance >= 0):
		return &FieldError{path + ".tolerance", fmt.Sprintf("must be a number of at least 0, got %v", *p.Tolerance)}
	}
	return nil
}

func validateBlastRadius(b BlastRadius) *FieldError {
	for _, f := range []struct {
		name string
		v    int
	}{{"maxNodes", b.MaxNodes}, {"maxGPUs", b.MaxGPUs}, {"maxConcurrent", b.MaxConcurrent}} {
		if f.v < 0 {
			return &FieldError{"spec.blastRadius." + f.name, fmt.Sprintf("must not be negative, got %d", f.v)}
		}
	}
	return nil
}
