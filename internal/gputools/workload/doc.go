// Package workload ships gpuchaos's reference training job and the
// supervisor that keeps it running, so checkpoint, rank and NUMA faults
// have a real job to hit and recovery can be measured.
//
// # The training script
//
// train.py (embedded; Script returns it) trains a small MLP on synthetic
// data with PyTorch DistributedDataParallel: gloo on CPU, or nccl with one
// GPU per rank (cuda:LOCAL_RANK). It needs only Python 3 and torch 1.13 or
// newer; Debian's python3-torch, installed for /usr/bin/python3, runs it in
// CI. The batch of step s on rank r is drawn from a generator seeded with
// (seed, s, r), so a resumed run recomputes exactly what an uninterrupted
// one would have: both end with the same parameters, whose SHA-256 the
// final "done" line carries.
//
// # Checkpoints
//
// Only rank 0 writes. After every optimiser step the DDP replicas hold the
// same parameters and optimiser state, so one copy is the whole job's
// state, and one writer means one file per checkpoint and no coordination
// between writers. On resume rank 0 chooses the checkpoint and broadcasts
// its step; every rank then reads it, so the directory must be shared by
// the ranks (it is, on one node).
//
// A checkpoint of step N is two files in the checkpoint directory:
//
//	ckpt-N.pt    torch.save of {"format", "step", "world_size", "config",
//	             "model", "optim"}, a zip archive holding data.pkl;
//	ckpt-N.json  its manifest (Manifest): {"format": "gpuchaos-ckpt/1",
//	             "step": N, "file": "ckpt-N.pt", "size", "sha256", "time",
//	             "world_size", "mode"}.
//
// Each is written as NAME.tmp, fsynced, renamed to NAME, and the directory
// fsynced; the manifest only after the data file is in place. So a writer
// killed at any moment leaves either a *.tmp file, or a data file without
// its manifest, and neither is ever loaded: a checkpoint is valid only when
// its manifest parses, names it, and the data file's size and SHA-256 match
// (Verify also checks the zip holds data.pkl). A failed write removes its
// temporary files. On start rank 0 removes leftover *.tmp files, takes the
// newest valid checkpoint, and logs every file it rejects with the reason
// (a "checkpoint_rejected" line). After each save only the newest --keep
// checkpoints remain. Verify, Scan and Newest read the same format from Go.
//
// --ckpt-mode sync writes on the training thread, and the step stalls for
// the write. async copies every tensor to host memory on the training
// thread (a consistent snapshot) and writes from a background thread while
// training goes on; one write is in flight at a time, and a checkpoint that
// falls due while the previous is still being written waits for it. A
// failed write is counted (gpuchaos_job_checkpoint_failures_total) and then
// follows --on-save-error: continue trains on; exit ends rank 0 with
// ExitSaveFailed, and the supervisor restarts the group.
//
// # The environment contract
//
// Run starts every rank with torchrun's variables — RANK, LOCAL_RANK,
// WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR=127.0.0.1 and a
// MASTER_PORT that is new for every attempt — and three of its own:
//
//	GPUCHAOS_JOB      the job name (Options.Job)
//	GPUCHAOS_RUN      an id of this supervisor run (Options.RunID)
//	GPUCHAOS_RESTART  the attempt the rank belongs to, 0 for the first
//
// and, when the command line names a checkpoint directory,
// GPUCHAOS_CKPT_DIR (set by gpuchaos workload run), where checkpoint faults
// look when an experiment names no path.
//
// A fault injector finds the ranks of job J by reading /proc/*/environ for
// GPUCHAOS_JOB=J and a numeric RANK (internal/node/procfind.Ranks, whose Env
// holds the run and attempt too). Processes a rank starts inherit the
// variables; the supervisor execs each rank itself, so the rank's own
// process is the topmost one with them (procfind marks it Main: its
// workers are forks of it), and the process-group leader of its group,
// since every rank runs in a process group of its own.
//
// # Metrics
//
// Rank r serves the Prometheus text format on 127.0.0.1:(--metrics-port +
// r) with the names and labels of the twin (internal/twin): job series
// labelled {job} — gpuchaos_job_step_total, gpuchaos_job_steps_per_second,
// gpuchaos_job_up, gpuchaos_job_resumed_from_step and, from rank 0, which
// alone writes checkpoints, gpuchaos_job_last_checkpoint_step,
// gpuchaos_job_last_checkpoint_timestamp_seconds,
// gpuchaos_job_last_checkpoint_duration_seconds,
// gpuchaos_job_checkpoints_total and gpuchaos_job_checkpoint_failures_total
// — and gpuchaos_rank_step_seconds labelled {job, rank, Hostname} plus gpu
// on GPUs. The supervisor serves gpuchaos_job_restarts_total and
// gpuchaos_job_up {job} on Options.MetricsAddr. Each rank also prints one
// JSON object per line on stdout ("start", "step", "checkpoint_saved",
// "checkpoint_failed", "checkpoint_rejected", "done"...).
//
// # Supervision
//
// Run restarts the whole group when any rank fails, as torchelastic does:
// the survivors of a collective cannot go on without the lost rank. It
// stops them with SIGTERM (the script removes a temporary file it was
// writing), then SIGKILL after a grace, and starts every rank again; they
// resume from the newest valid checkpoint. Every start, exit, stop and
// restart is an Event line with its time, so time to restart is measured
// from the log. Each rank runs in its own process group with SIGKILL as its
// parent-death signal, so nothing survives Run, even a Run whose process is
// killed.
package workload
