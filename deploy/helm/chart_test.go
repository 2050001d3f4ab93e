package helm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/image"
)

// HelmVersion is the helm scripts/setup-helm builds; a test holds the two
// equal, so the path helmBin looks in is the one the script writes.
const HelmVersion = "v3.22.0"

// HelmEnv names the helm binary; scripts/test sets it from
// scripts/setup-helm.
const HelmEnv = "GPUCHAOS_HELM"

const (
	chartDir  = "gpuchaos"
	release   = "gpuchaos"
	namespace = "gpuchaos-system"
)

// helmBin returns the helm binary: $GPUCHAOS_HELM, or where
// scripts/setup-helm builds it. Without it the test is skipped, or failed
// when GPUCHAOS_REQUIRE_KUBE is set (scripts/test), as the other
// real-part tests are.
func helmBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv(HelmEnv)
	if bin == "" {
		cache := os.Getenv("GPUCHAOS_CACHE")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache", "gpuchaos")
		}
		bin = filepath.Join(cache, "helm", HelmVersion, "bin", "helm")
	}
	if _, err := os.Stat(bin); err != nil {
		kubetest.Missing(t, "the chart tests need helm: "+err.Error()+" (run scripts/setup-helm; GPUCHAOS_HELM=$(scripts/setup-helm) names it)")
	}
	return bin
}

func helm(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(helmBin(t), args...)
	// helm keeps its caches and config here; none of the user's.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}

func TestSetupHelmPinsHelmVersion(t *testing.T) {
	b, err := os.ReadFile("../../scripts/setup-helm")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "\nhelm_version="+HelmVersion+"\n") {
		t.Errorf("scripts/setup-helm does not build helm %s, the version HelmVersion looks for", HelmVersion)
	}
}

// valueSets are the configurations rendered and applied: the defaults,
// everything optional on, and the agent without privileged mode.
var valueSets = []struct {
	name string
	set  []string
}{
	{"defaults", nil},
	{"monitoring", []string{"serviceMonitor.enabled=true", "dashboard.enabled=true"}},
	{"unprivileged agent", []string{"agent.privileged=false"}},
}

func setArgs(set []string) []string {
	var args []string
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return args
}

func TestLint(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			out := helm(t, append([]string{"lint", "--strict", chartDir}, setArgs(vs.set)...)...)
			if !bytes.Contains(out, []byte("0 chart(s) failed")) {
				t.Errorf("helm lint:\n%s", out)
			}
		})
	}
}

// render runs helm template with the CRDs and returns the objects.
func render(t *testing.T, set []string) []*unstructured.Unstructured {
	t.Helper()
	// The Kubernetes of the test API server the objects are applied to.
	out := helm(t, append([]string{"template", release, chartDir, "--namespace", namespace, "--include-crds", "--kube-version", kubetest.KubeVersion}, setArgs(set)...)...)
	return decode(t, out)
}

func decode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("decode: %v", err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func convert[T any](t *testing.T, o *unstructured.Unstructured) *T {
	t.Helper()
	var v T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &v); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
	return &v
}

// TestRenderedRBACIsGenerated holds every role the chart renders equal to
// the rules controller-gen wrote from deploy/rbac's markers, and each
// binding to the service account its workload runs as.
func TestRenderedRBACIsGenerated(t *testing.T) {
	objs := render(t, nil)
	roles := []struct{ kind, name, file string }{
		{"ClusterRole", "gpuchaos-controller", "controller"},
		{"ClusterRole", "gpuchaos-agent", "agent"},
		{"Role", "gpuchaos-leader-election", "leaderelection"},
	}
	for _, r := range roles {
		o := find(objs, r.kind, r.name)
		if o == nil {
			t.Errorf("no %s %s rendered", r.kind, r.name)
			continue
		}
		b, err := os.ReadFile(filepath.Join(chartDir, "files", "rbac", r.file, "role.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var want rbacv1.ClusterRole
		if err := yaml.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if len(want.Rules) == 0 {
			t.Fatalf("%s: no generated rules", r.file)
		}
		got := convert[rbacv1.ClusterRole](t, o)
		if !equality.Semantic.DeepEqual(got.Rules, want.Rules) {
			t.Errorf("%s %s: rendered rules differ from files/rbac/%s/role.yaml\n got: %+v\nwant: %+v", r.kind, r.name, r.file, got.Rules, want.Rules)
		}
	}
	if n := len(slices.DeleteFunc(slices.Clone(objs), func(o *unstructured.Unstructured) bool {
		return o.GetKind() != "ClusterRole" && o.GetKind() != "Role"
	})); n != len(roles) {
		t.Errorf("%d roles rendered, want %d (a role whose rules are not generated?)", n, len(roles))
	}

	dep := find(objs, "Deployment", "gpuchaos-controller")
	ds := find(objs, "DaemonSet", "gpuchaos-agent")
	if dep == nil || ds == nil {
		t.Fatalf("controller Deployment or agent DaemonSet missing")
	}
	bindings := []struct{ kind, name, sa string }{
		{"ClusterRoleBinding", "gpuchaos-controller", convert[struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}](t, dep).Spec.Template.Spec.ServiceAccountName},
		{"RoleBinding", "gpuchaos-leader-election", "gpuchaos-controller"},
		{"ClusterRoleBinding", "gpuchaos-agent", convert[struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}](t, ds).Spec.Template.Spec.ServiceAccountName},
	}
	for _, b := range bindings {
		o := find(objs, b.kind, b.name)
		if o == nil {
			t.Errorf("no %s %s", b.kind, b.name)
			continue
		}
		rb := convert[rbacv1.RoleBinding](t, o)
		if rb.RoleRef.Name != b.name || len(rb.Subjects) != 1 || rb.Subjects[0].Name != b.sa || rb.Subjects[0].Namespace != namespace {
			t.Errorf("%s %s binds %s to %+v, want role %s to service account %s/%s", b.kind, b.name, rb.RoleRef.Name, rb.Subjects, b.name, namespace, b.sa)
		}
		if find(objs, "ServiceAccount", b.sa) == nil {
			t.Errorf("%s %s names service account %s, which is not rendered", b.kind, b.name, b.sa)
		}
	}
}

// TestAgentDaemonSet holds the agent's pod to what its injectors need and
// no more: the node name from the downward API, the host namespaces, the
// ledger, cgroup and kmsg host paths, and privileged mode only when asked.
func TestAgentDaemonSet(t *testing.T) {
	for _, privileged := range []bool{true, false} {
		set := []string{"agent.privileged=" + map[bool]string{true: "true", false: "false"}[privileged]}
		ds := find(render(t, set), "DaemonSet", "gpuchaos-agent")
		pod := convert[struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}](t, ds).Spec.Template.Spec
		c := pod.Containers[0]
		if !slices.Equal(c.Command, []string{image.AgentBinaryPath}) {
			t.Errorf("command %v, want [%s], the agent's lean binary", c.Command, image.AgentBinaryPath)
		}
		if !slices.Contains(c.Args, "--node-name=$(NODE_NAME)") || !slices.Contains(c.Args, "--gpuchaos-binary="+image.BinaryPath) {
			t.Errorf("args %v, want --node-name=$(NODE_NAME) and the faults' children from --gpuchaos-binary=%s", c.Args, image.BinaryPath)
		}
		var nodeName *corev1.EnvVar
		for i := range c.Env {
			if c.Env[i].Name == "NODE_NAME" {
				nodeName = &c.Env[i]
			}
		}
		if nodeName == nil || nodeName.ValueFrom == nil || nodeName.ValueFrom.FieldRef == nil || nodeName.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
			t.Errorf("NODE_NAME = %+v, want the downward API's spec.nodeName", nodeName)
		}
		if !pod.HostPID || !pod.HostNetwork {
			t.Errorf("hostPID %v hostNetwork %v, want both", pod.HostPID, pod.HostNetwork)
		}
		paths := map[string]string{}
		for _, v := range pod.Volumes {
			if v.HostPath != nil {
				paths[v.HostPath.Path] = string(*v.HostPath.Type)
			}
		}
		want := map[string]string{"/var/lib/gpuchaos": "DirectoryOrCreate", "/sys/fs/cgroup": "Directory", "/dev/kmsg": "CharDevice"}
		if !equality.Semantic.DeepEqual(paths, want) {
			t.Errorf("host paths %v, want %v", paths, want)
		}
		sc := c.SecurityContext
		gotPriv := sc != nil && sc.Privileged != nil && *sc.Privileged
		if gotPriv != privileged {
			t.Errorf("agent.privileged=%v rendered privileged %v", privileged, gotPriv)
		}
		if !privileged {
			if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || !slices.Contains(sc.Capabilities.Add, "NET_ADMIN") {
				t.Errorf("unprivileged capabilities %+v, want ALL dropped and the injectors' added", sc.Capabilities)
			}
		}
		if pod.NodeSelector["nvidia.com/gpu.present"] != "true" {
			t.Errorf("node selector %v, want GPU nodes", pod.NodeSelector)
		}
	}
}

// agentSeries are the gpuchaos_* series the agent exports, read from its
// source so the dashboard cannot name one that was renamed.
func agentSeries(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../../internal/node/exporter/exposition.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`"(gpuchaos_[a-z_]+)"`).FindAllSubmatch(b, -1) {
		out[string(m[1])] = true
	}
	if len(out) < 5 {
		t.Fatalf("found only %v in the agent's exposition", out)
	}
	return out
}

// controllerSeries are the series the dashboard reads from the controller
// (experiment verdicts); the controller must export them.
var controllerSeries = map[string]bool{
	"gpuchaos_experiment_verdicts_total":                true,
	"gpuchaos_experiment_time_to_detect_seconds_bucket": true,
}

// TestDashboard checks the dashboard ConfigMap carries the Grafana
// sidecar's label, its JSON parses, every panel query is PromQL the real
// parser accepts, and every gpuchaos series it reads is one the agent
// exports or one of the controller's.
func TestDashboard(t *testing.T) {
	if o := find(render(t, nil), "ConfigMap", "gpuchaos-dashboard"); o != nil {
		t.Errorf("the dashboard is rendered by default")
	}
	o := find(render(t, []string{"dashboard.enabled=true"}), "ConfigMap", "gpuchaos-dashboard")
	if o == nil {
		t.Fatal("dashboard.enabled=true rendered no ConfigMap gpuchaos-dashboard")
	}
	if got := o.GetLabels()["grafana_dashboard"]; got != "1" {
		t.Errorf("label grafana_dashboard = %q, want 1 (the Grafana sidecar's)", got)
	}
	cm := convert[corev1.ConfigMap](t, o)
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal([]byte(cm.Data["gpuchaos.json"]), &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	agent := agentSeries(t)
	seen := map[string]bool{}
	vars := strings.NewReplacer("$__range", "1h", "$__rate_interval", "1m", "$node", ".*")
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			expr, err := parser.NewParser(parser.Options{}).ParseExpr(vars.Replace(q.Expr))
			if err != nil {
				t.Errorf("panel %q: %q: %v", p.Title, q.Expr, err)
				continue
			}
			parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
				if vs, ok := n.(*parser.VectorSelector); ok && strings.HasPrefix(vs.Name, "gpuchaos_") {
					seen[vs.Name] = true
					if !agent[vs.Name] && !controllerSeries[vs.Name] {
						t.Errorf("panel %q reads %s, which neither the agent nor the controller exports", p.Title, vs.Name)
					}
				}
				return nil
			})
		}
	}
	for _, s := range []string{"gpuchaos_active_faults", "gpuchaos_injections_total", "gpuchaos_xid_events_total", "gpuchaos_experiment_verdicts_total"} {
		if !seen[s] {
			t.Errorf("no panel reads %s", s)
		}
	}
}

// TestInstallOnRealAPIServer applies everything the chart renders, its
// CRDs first, to a real kube-apiserver, in each value set: the API server
// validates every object against its schema, the ServiceMonitor against
// prometheus-operator's own CRD (testdata). Then it asks the API server's
// RBAC authorizer what the two service accounts may do.
func TestInstallOnRealAPIServer(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{})
	ctx := context.Background()
	c := env.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		t.Fatal(err)
	}
	smon, err := os.ReadFile("testdata/monitoring.coreos.com_servicemonitors.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for i, vs := range valueSets {
		objs := render(t, vs.set)
		if i == 0 {
			objs = append(decode(t, smon), objs...)
		}
		// CRDs first, established before any object of their kinds.
		slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
			return boolInt(b.GetKind() == "CustomResourceDefinition") - boolInt(a.GetKind() == "CustomResourceDefinition")
		})
		for _, o := range objs {
			apply(t, c, o)
			if o.GetKind() == "CustomResourceDefinition" {
				established(t, c, o.GetName())
			}
		}
		t.Logf("%s: applied %d objects", vs.name, len(objs))
	}

	sar := []struct {
		sa, verb, group, resource, sub, ns string
		allowed                            bool
	}{
		{"gpuchaos-controller", "create", "gpuchaos.dev", "nodefaults", "", "", true},
		{"gpuchaos-controller", "update", "gpuchaos.dev", "schedules", "status", "team-a", true},
		{"gpuchaos-controller", "patch", "", "nodes", "", "", true},
		{"gpuchaos-controller", "create", "", "pods", "eviction", "team-a", true},
		{"gpuchaos-controller", "list", "policy", "poddisruptionbudgets", "", "", true},
		{"gpuchaos-controller", "update", "coordination.k8s.io", "leases", "", namespace, true},
		{"gpuchaos-controller", "update", "coordination.k8s.io", "leases", "", "kube-system", false},
		{"gpuchaos-controller", "delete", "", "nodes", "", "", false},
		{"gpuchaos-controller", "get", "", "secrets", "", namespace, false},
		{"gpuchaos-agent", "watch", "gpuchaos.dev", "nodefaults", "", "", true},
		{"gpuchaos-agent", "patch", "gpuchaos.dev", "nodefaults", "status", "", true},
		{"gpuchaos-agent", "patch", "", "nodes", "", "", true},
		{"gpuchaos-agent", "create", "gpuchaos.dev", "nodefaults", "", "", false},
		{"gpuchaos-agent", "list", "", "pods", "", "", false},
		{"gpuchaos-agent", "list", "", "nodes", "", "", false},
		{"gpuchaos-agent", "create", "gpuchaos.dev", "experiments", "", "team-a", false},
	}
	for _, s := range sar {
		r := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "system:serviceaccount:" + namespace + ":" + s.sa,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: s.verb, Group: s.group, Resource: s.resource, Subresource: s.sub, Namespace: s.ns,
			},
		}}
		if err := c.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed != s.allowed {
			t.Errorf("%s %s %s/%s %s in %q: allowed %v, want %v (%s)", s.sa, s.verb, s.group, s.resource, s.sub, s.ns, r.Status.Allowed, s.allowed, r.Status.Reason)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// apply creates o, or updates it when a previous value set made it. A
// kind whose CRD was just established may take the client's REST mapper
// a moment to learn; that is retried, nothing else.
func apply(t *testing.T, c client.Client, o *unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	testutil.Eventually(t, 60*time.Second, "apply "+o.GetKind()+" "+o.GetName(), func() bool {
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(o.GroupVersionKind())
		err := c.Get(ctx, client.ObjectKeyFromObject(o), cur)
		switch {
		case meta.IsNoMatchError(err):
			return false
		case err == nil:
			o.SetResourceVersion(cur.GetResourceVersion())
			err = c.Update(ctx, o)
		case client.IgnoreNotFound(err) == nil:
			err = c.Create(ctx, o)
		}
		if meta.IsNoMatchError(err) {
			return false
		}
		if err != nil {
			t.Fatalf("apply %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		return true
	})
}

func established(t *testing.T, c client.Client, name string) {
	t.Helper()
	testutil.Eventually(t, 60*time.Second, "CRD "+name+" established", func() bool {
		var crd apiextensionsv1.CustomResourceDefinition
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("apiextensions.k8s.io/v1")
		u.SetKind("CustomResourceDefinition")
		if err := c.Get(context.Background(), client.ObjectKey{Name: name}, u); err != nil {
			t.Fatal(err)
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &crd); err != nil {
			t.Fatal(err)
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true
			}
		}
		return false
	})
}

// TestControllerArgs: the controller's flags follow the values both ways,
// since gpuchaos controller elects a leader unless told
// --leader-elect=false.
func TestControllerArgs(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want []string
	}{
		{nil, []string{"controller", "--leader-elect=true", "--leader-election-namespace=gpuchaos-system"}},
		{[]string{"controller.leaderElect=false", "controller.prometheus=http://prom:9090"}, []string{"--leader-elect=false", "--prometheus=http://prom:9090"}},
	} {
		dep := find(render(t, tc.set), "Deployment", "gpuchaos-controller")
		pod := convert[struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}](t, dep).Spec.Template.Spec
		args := pod.Containers[0].Args
		for _, w := range tc.want {
			if !slices.Contains(args, w) {
				t.Errorf("set %v: args %v lack %s", tc.set, args, w)
			}
		}
	}
}
