package ckptfault

import "github.com/gpuchaos/gpuchaos/internal/fault/faulttest"

// mechanisms maps each fault of this package to its mechanism as the
// catalogue pairs them, for tests that build an injector by fault id.
var mechanisms = faulttest.FirstBuilt(Entries())
