// Package colltrace traces NCCL collectives with eBPF uprobes and names the
// rank that holds a job back: a straggler that enters collectives late, or
// a hung (or dead) rank that stops entering them.
//
// # What is traced
//
// One uprobe per NCCL entry point (by default ncclAllReduce, ncclAllGather,
// ncclReduceScatter, ncclBroadcast, ncclReduce and ncclBcast) runs a small
// BPF program, written with cilium/ebpf's assembler, that pushes
// {entry time, thread id, process id, symbol id, count argument} into a
// BPF ring buffer; a Go reader drains it. Only entries are traced, and only
// the host-side call: NCCL collectives are stream-ordered, so a call's
// entry time is when that rank's host thread enqueued the collective, not
// when the GPU ran it. That is what reveals a straggler whose host is late
// (slow data loading, a busy CPU, a slow rank's previous kernel it waited
// on). A rank stuck inside a GPU kernel is seen indirectly: the other ranks
// enter the next collective and it does not, once its host thread blocks.
//
// # How calls become collectives
//
// NCCL requires every rank of a communicator to call collectives in the
// same order, so the k-th call of a symbol in each process is the same
// collective. Each traced process is one rank, labelled from RANK or
// LOCAL_RANK in /proc/PID/environ when set. When tracing starts while some
// ranks have entered a collective and others have not, the ranks' traces
// start one collective apart; the count arguments (the same on every rank
// for the same collective) show by how much, and the Tracker shifts the
// trace under which they agree. When counts never vary (a benchmark
// looping over one size) a shift cannot be seen; start the tracer before
// the job, or between steps, for exact pairing.
//
// For each collective every rank entered, the Tracker has each rank's
// entry time, the spread (last minus first) and the last rank. A straggler
// is a rank that entered last in at least AnalysisOptions.LastShare of the
// newest Window collectives with a median lag behind the first rank of at
// least LagThreshold (5 ms by default). A hung or missing rank is one whose
// call count has stayed behind another rank's for HangTimeout while that
// rank entered newer collectives.
//
// # What it needs
//
// Root, or CAP_BPF with CAP_PERFMON, and a kernel with uprobes
// (CONFIG_UPROBE_EVENTS; the uprobe PMU or tracefs) and BPF ring buffers
// (5.8 or later). No compiler: the programs are assembled in Go.
//
// Uprobes attach to a file's inode, not to a path or a process. Every
// process that maps the same libnccl.so.2 file is probed by one uprobe, so
// tracing by library path sees every process on the node that uses that
// file, unrelated jobs included; give the job's pids to keep only its
// ranks. Processes that load different copies (each container image
// carries its own) have different inodes: with pids, the tracer finds each
// process's library through /proc/PID/maps and /proc/PID/root and probes
// every distinct inode once.
//
// # What it cannot see
//
// GPU-side progress (a collective enqueued on time but slow on the wire
// shows up in no entry time), which communicator a call belongs to (ranks
// in several communicators, say tensor- and data-parallel groups, are
// matched per symbol regardless; trace one job's data-parallel peers, or
// read the notes when counts disagree), a statically linked NCCL whose
// symbols were stripped (NCCL's p-prefixed aliases such as pncclAllReduce
// share the address and are seen), ranks on other nodes (run one tracer per node and
// compare), and events dropped when the ring buffer is full (counted and
// reported as Lost, since they shift a rank's call count).
package colltrace
