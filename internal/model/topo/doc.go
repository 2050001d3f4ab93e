// Package topo reads the GPU topology matrix that 'nvidia-smi topo -m'
// prints: which GPUs and NICs there are, how each pair is connected (NVLink
// bonds, or the PCIe path between them) and which CPUs and NUMA node each
// GPU is close to. Placement advice, the twin and 'gpuchaos topo parse'
// build on the Matrix it returns.
//
// The parser takes the text as nvidia-smi writes it, ANSI escapes included
// (nvidia-smi underlines the header even into a pipe), as well as copies
// whose tabs became spaces. It reads cells as whitespace-separated tokens:
// no cell of the matrix holds a space, so this survives both the tab
// layout, with the empty cell nvidia-smi leaves before "GPU NUMA ID", and
// pasted text.
package topo
