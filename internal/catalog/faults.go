package catalog

// faults is the catalogue, built once at start-up from the family files.
var faults = []*Fault{}
