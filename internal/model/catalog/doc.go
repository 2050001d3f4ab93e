// Package catalog is the fault catalogue: every fault gpuchaos can inject,
// with typed parameters, a safety class, the mechanisms that cause it and the
// layers each reaches, and the signature a real occurrence leaves, which the
// twin plays. Injectors, the twin, coverage and the CLI all read this one
// table (STYLE.md: one catalogue feeds both sides).
package catalog
