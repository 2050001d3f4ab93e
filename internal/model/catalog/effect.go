package catalog

// EffectKind names a change the twin knows how to play. Each kind documents
// which Effect fields it reads; the twin applies an effect to the target the
// engine resolved (a GPU, a node, a rank or a job) and reverts it on
// recovery. Consequences that a real fault has beyond the target (a crashed
// job restarting) are the twin's to model.
type EffectKind string

// The effect kinds the twin plays.
const (
	// EffectXID: Code is the XID. Writes a real-format NVRM line for the
	// GPU to the kernel log, sets DCGM_FI_DEV_XID_ERRORS to Code, and
	// applies the code's action from the XID table: restart-app crashes
	// the job's process on that GPU; reset-gpu makes the GPU unusable
	// (job crashes, it cannot rejoin until recovery); reboot removes the
	// GPU (as EffectOffBus); none and investigate change nothing else.
	EffectXID EffectKind = "xid"
	// EffectOffBus: the GPU falls off the bus (XID 79 line): every series
	// of that GPU disappears, the job crashes and cannot restart on it.
	EffectOffBus EffectKind = "off-bus"
	// EffectECC: Value is single-bit errors per minute (DCGM_FI_DEV_ECC_
	// SBE_VOL_TOTAL grows; XID 92 once the rate is high, above 100/min);
	// Code > 0 adds that many double-bit errors (DBE counter, XID 48, the
	// job crashes).
	EffectECC EffectKind = "ecc"
	// EffectRowRemap: Mode "pending" (XID 63, correctable remapped rows
	// +1, remap pending until reset) or "failure" (XID 64,
	// DCGM_FI_DEV_ROW_REMAP_FAILURE=1, uncorrectable remapped rows +1, job
	// crashes).
	EffectRowRemap EffectKind = "row-remap"
	// EffectCooling: Factor multiplies the GPU's thermal resistance (a
	// failed fan or blocked airflow). Temperature follows a first-order
	// curve to the new equilibrium; above the model's slowdown temperature
	// the SM clock, power and the rank's step rate drop.
	EffectCooling EffectKind = "cooling"
	// EffectPowerCap: Factor is the allowed fraction of TDP. Clocks drop
	// until power fits; DCGM_FI_DEV_POWER_VIOLATION grows. Mode "" is a
	// software power limit (clock event reason SW power cap, 0x4); "brake"
	// is the board's power-brake signal (HW slowdown 0x8 and HW power
	// brake 0x80).
	EffectPowerCap EffectKind = "power-cap"
	// EffectNVLink: Mode "down": the GPU's NVLinks are down, intra-node
	// collectives fall back to PCIe/SHM (Factor of NVLink bandwidth,
	// about 0.09 measured on H200), NVLINK_BANDWIDTH_TOTAL drops to zero
	// and an XID 74 line is written when Code is 74. Mode "errors": Value
	// CRC errors per minute on the links, bandwidth unchanged.
	EffectNVLink EffectKind = "nvlink"
	// EffectSMLoad: Value (0..1] of the SMs taken by a co-tenant: GPU_UTIL
	// rises to 100, power towards TDP, temperature follows, and the rank's
	// compute slows by 1/(1-Value) (capped at 10x).
	EffectSMLoad EffectKind = "sm-load"
	// EffectVRAM: Value is the fraction of HBM held by someone else.
	// FB_USED/FB_FREE move; when the job's working set no longer fits the
	// job crashes with out-of-memory at its next step.
	EffectVRAM EffectKind = "vram"
	// EffectPCIe: Value is bytes per second of host-device copies. PCIe
	// TX/RX bytes and MEM_COPY_UTIL rise; the rank's step slows by Factor
	// (input pipeline contention).
	EffectPCIe EffectKind = "pcie"
	// EffectCollective: Factor multiplies the job's collective bandwidth;
	// Mode "intra" (NVLink/P2P path, NCCL P2P/SHM/protocol faults),
	// "inter" (network path) or "all". Mode "hang": collectives never
	// complete (the job stalls until its watchdog, Value seconds, kills it).
	EffectCollective EffectKind = "collective"
	// EffectNetwork: inter-node network of the target node. Value is added
	// one-way delay in seconds, Factor multiplies bandwidth (rate limit or
	// loss-induced retransmits); Mode "partition" blocks it (collectives
	// hang as with EffectCollective "hang").
	EffectNetwork EffectKind = "network"
	// EffectCheckpoint: Mode "kill-writer" (the job dies mid-write, the
	// partial checkpoint is discarded), "fill" (writes fail, no new
	// checkpoints), "slow" (storage bandwidth times Factor), "partition"
	// (writes hang; a sync checkpoint stalls the job), "corrupt" (the
	// newest checkpoint is unreadable; a restart falls back one).
	EffectCheckpoint EffectKind = "checkpoint"
	// EffectCompute: Factor (>1) multiplies the rank's compute time. No
	// GPU metric changes beyond utilisation falling: the silent kind
	// (NUMA misplacement, CPU starvation, stragglers). Mode "numa-memory"
	// (Value: the share of the rank's host memory off its GPU's NUMA node)
	// or "numa-cpu" (Value: the share of its allowed CPUs off that node)
	// also says what the gpuchaos agent's NUMA alignment series show.
	EffectCompute EffectKind = "compute"
	// EffectRank: Mode "kill" (the rank's process dies, the job restarts)
	// or "hang" (the rank stops; collectives stall until the watchdog,
	// Value seconds, 600 by default as PyTorch's).
	EffectRank EffectKind = "rank"
	// EffectNode: Mode "cordon" (unschedulable), "drain" (cordon and
	// evict: the job's ranks there die), "device-plugin-kill" (the node's
	// allocatable GPUs drop to zero), "pod-kill" (the job's pod on the
	// node dies and restarts).
	EffectNode EffectKind = "node"
	// EffectHost: load on the rank's host that node-exporter sees, beside
	// what EffectCompute does to the rank. Mode "memory" (Value: the share
	// of the free memory of the NUMA node local to the GPU that a hog
	// takes) or "cpu" (Value: the share of that socket's CPUs kept busy).
	EffectHost EffectKind = "host"
)

// Effect is one change the twin plays. Fields unused by the kind are zero.
type Effect struct {
	Kind   EffectKind `json:"kind"`
	Mode   string     `json:"mode,omitempty"`
	Code   int        `json:"code,omitempty"`
	Value  float64    `json:"value,omitempty"`
	Factor float64    `json:"factor,omitempty"`
}
