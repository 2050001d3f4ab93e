// Package collbench measures NCCL collective bandwidth the way nccl-tests
// does, from Go: all-reduce, all-gather, reduce-scatter, broadcast and an
// all-to-all of grouped sends and receives, over a sweep of sizes, in
// bf16, fp16 or fp32.
//
// Timing: after warm-up iterations, CUDA events on each rank's stream
// bracket the timed iterations; a size's time is the slowest rank's mean
// per iteration, algbw is size/time and busbw applies nccl-tests' factor
// (doc/PERFORMANCE.md): 2(n−1)/n for all-reduce, (n−1)/n for all-gather,
// reduce-scatter and all-to-all, 1 for broadcast. The size is counted as
// nccl-tests counts it: the whole gathered or scattered array for
// all-gather and reduce-scatter, a rank's whole send buffer for
// all-to-all (see Shape).
//
// Correctness: inputs are small integers drawn from (rank, index) by a
// hash on the GPU (kernels.ptx), so every sum is exact in every type and
// the host knows each output element. Before the timed loop the output is
// filled with NaN, the operation runs once and every element is compared
// on the host; after the timed loop the last iteration's output is
// compared again. Wrong elements are counted per rank and size.
//
// Ranks: one process can drive every local GPU (one goroutine, locked to
// its OS thread, per GPU), or each rank runs in its own process and rank 0
// hands out the communicator id over a small TCP rendezvous (Listen,
// Admit, Gather; Join, Watch, SendReport) that also brings every rank's
// timings back to rank 0 for the table.
//
// NCCL never uses NVLink SHARP here: Run sets NCCL_NVLS_ENABLE=0 first.
package collbench
