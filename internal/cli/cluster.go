package cli

import (
	"bytes"
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/gpuchaos/gpuchaos/internal/limitread"
	"github.com/gpuchaos/gpuchaos/internal/twin"
)

// loadCluster reads the twin cluster spec named by --cluster. When the file
// is an Experiment instead, the error says so and how to run it, rather
// than listing the Experiment's fields a cluster spec does not have.
func loadCluster(path string) (twin.ClusterSpec, error) {
	spec, err := twin.LoadClusterSpec(path)
	if err == nil {
		return spec, nil
	}
	if kind := documentKind(path); kind != "" {
		return twin.ClusterSpec{}, fmt.Errorf("--cluster: %s has kind: %s, not a twin cluster spec: run it with 'gpuchaos run %s' (a cluster spec has name, nodes and jobs; see examples/twin/)", path, kind, path)
	}
	return twin.ClusterSpec{}, fmt.Errorf("--cluster: %w", err)
}

// documentKind returns the kind: of a small Kubernetes-style YAML file, or
// "" when it has none or cannot be read.
func documentKind(path string) string {
	// The loader refused the file, perhaps for its size: read no more of
	// it than a spec may hold (/dev/zero has no end).
	b, err := limitread.File(path, twin.MaxClusterSpecBytes)
	if err != nil {
		return ""
	}
	var head struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
	}
	if yaml.NewDecoder(bytes.NewReader(b)).Decode(&head) != nil || head.APIVersion == "" {
		return ""
	}
	return head.Kind
}
