// Package all links every target kind into the binary: each registers its
// opener with the target package. A new kind is one folder under
// internal/target and one line here.
package all

import (
	_ "github.com/gpuchaos/gpuchaos/internal/target/k8starget"
	_ "github.com/gpuchaos/gpuchaos/internal/target/livetarget"
	_ "github.com/gpuchaos/gpuchaos/internal/target/localtarget"
	_ "github.com/gpuchaos/gpuchaos/internal/target/twintarget"
)
