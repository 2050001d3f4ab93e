package cli

import (
	"fmt"

	"github.com/gpuchaos/gpuchaos/internal/twin"
)

// loadCluster reads the twin cluster spec named by --cluster.
func loadCluster(path string) (twin.ClusterSpec, error) {
	spec, err := twin.LoadClusterSpec(path)
	if err != nil {
		return twin.ClusterSpec{}, fmt.Errorf("--cluster: %w", err)
	}
	return spec, nil
}
