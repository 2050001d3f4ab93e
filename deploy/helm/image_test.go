package helm_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpuchaos/gpuchaos/internal/image"
)

// TestChartPullsTheBuiltImage holds the chart's default image equal to the
// reference tools/build-image tags by default, so a cluster that loaded
// the built tarball runs it without any --set.
func TestChartPullsTheBuiltImage(t *testing.T) {
	tag, err := image.ChartAppVersion("../..")
	if err != nil {
		t.Fatal(err)
	}
	want := image.DefaultRepository + ":" + tag
	seen := 0
	for _, o := range render(t, nil) {
		if o.GetKind() != "Deployment" && o.GetKind() != "DaemonSet" {
			continue
		}
		cs, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			seen++
			c := c.(map[string]any)
			if got := c["image"]; got != want {
				t.Errorf("%s %s: image %v, want %s (what tools/build-image tags)", o.GetKind(), o.GetName(), got, want)
			}
			if o.GetKind() == "DaemonSet" {
				checkNVIDIAEnv(t, c)
			}
		}
	}
	if seen < 2 {
		t.Fatalf("rendered %d containers of Deployments and DaemonSets, want the controller's and the agent's", seen)
	}
}

// checkNVIDIAEnv: the image sets no NVIDIA_* variables, so without these
// the NVIDIA runtime gives the agent neither NVML nor the GPUs.
func checkNVIDIAEnv(t *testing.T, c map[string]any) {
	t.Helper()
	env := map[string]any{}
	list, _ := c["env"].([]any)
	for _, e := range list {
		e := e.(map[string]any)
		env[e["name"].(string)] = e["value"]
	}
	for k, v := range map[string]string{"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility"} {
		if env[k] != v {
			t.Errorf("agent env %s=%v, want %s", k, env[k], v)
		}
	}
}
