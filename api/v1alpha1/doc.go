// Package v1alpha1 holds the gpuchaos experiment types, served by the
// Kubernetes controller as custom resources and written by people as YAML
// files.
//
// Loading is strict, as kubectl's is: Load rejects unknown fields, values of
// the wrong type, duplicate keys and multi-document files, and every error
// names the file, the line and the field path
// (spec.faults[0].parms: unknown field (did you mean params?)). The json
// tags of the Go types are the single source of truth for field names, so
// the YAML a person writes and the JSON the API server stores agree.
// Validate then checks the rules a schema cannot express and returns a
// *FieldError naming the offending field.
//
// The Kubernetes types (Experiment, NodeFault, Schedule and their lists)
// are registered with AddToScheme; zz_generated.deepcopy.go and the CRD
// manifests under deploy/helm/gpuchaos/crds come from controller-gen
// (make generate).
//
// +kubebuilder:object:generate=true
// +groupName=gpuchaos.dev
package v1alpha1

//go:generate go tool controller-gen object paths=.
//go:generate go tool controller-gen crd:maxDescLen=400,allowDangerousTypes=true paths=. output:crd:artifacts:config=../../deploy/helm/gpuchaos/crds
