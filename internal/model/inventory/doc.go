// Package inventory lists what a target offers (nodes, GPUs, job ranks) and
// resolves an experiment's selector against an inventory of
// nodes, GPUs and job ranks into the concrete targets one run touches, and
// enforces the blast-radius caps before anything is injected.
package inventory
