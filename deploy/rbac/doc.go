// Package rbac holds no code: its sub-packages carry the kubebuilder RBAC
// markers the chart's roles are generated from, one package per role, so
// each role is written once, beside why it needs each verb, and the chart
// (deploy/helm/gpuchaos/templates/rbac.yaml) reads the generated rules
// instead of a copy that could drift.
//
// go generate ./deploy/... runs controller-gen over each package and
// writes deploy/helm/gpuchaos/files/rbac/<role>/role.yaml; deploy/helm's
// tests hold the rendered chart's rules equal to those files.
package rbac
