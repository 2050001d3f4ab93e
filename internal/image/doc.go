// Package image builds the gpuchaos container image, the one the Helm
// chart (deploy/helm/gpuchaos) runs as the controller and the agent,
// without docker or a registry: go-containerregistry assembles the layers
// and config in memory and writes an OCI layout and a docker-archive
// tarball that `docker load`, `kind load image-archive`, `ctr image
// import` and `skopeo copy` read.
//
// It carries two binaries: gpuchaos, the entrypoint (the controller and
// every other command), and gpuchaos-agent beside it, the node agent
// alone, which the chart's DaemonSet runs so that the agent's memory on
// every node is that of the code it needs.
//
// The binaries are built with cgo because the agent reads GPUs through NVML
// (github.com/NVIDIA/go-nvml dlopens libnvidia-ml through cgo, and the
// NVIDIA container toolkit mounts that library into the pod); a cgo binary
// needs the C library it was linked against, so the image carries the
// build machine's own glibc files, found from the binaries' ELF headers,
// and records the Debian package and version each came from.
//
// The image is reproducible: every timestamp is the one given (the commit
// time or SOURCE_DATE_EPOCH), layers are written in a fixed order with
// fixed owners, and nothing of the build machine's file times leaks in, so
// the same binary and the same runtime files give the same digest.
package image
