// Package xidwatch watches the kernel log for NVIDIA XID errors as they are
// logged. It follows /dev/kmsg from its end (internal/node/kmsg), parses every
// record with the XID parser (internal/model/xid), maps each XID's PCI bus id to a
// GPU index and UUID through a resolver the caller gives (NVML's inventory on
// a real node, the twin's elsewhere), and hands each XID to a sink, keeps a
// counter per code and the last XID per GPU (what DCGM_FI_DEV_XID_ERRORS
// reports), and lets the engine's probes wait for one. The probe itself is
// the local target's and the latency benchmark is xidbench: both link the
// probe and scrape machinery, which the node agent, a user of the watcher
// alone, must not.
//
// It reads /dev/kmsg directly, so it sees every XID line whatever wrote it:
// the driver's (facility kern) and gpuchaos' injected ones (facility user)
// alike. NVSwitch SXid lines name a switch, not a GPU, and are not events.
package xidwatch
