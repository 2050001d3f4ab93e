// Package procfault injects the workload faults on ranks of a training job
// running on this node: workload.kill-rank and workload.hang-rank
// (mechanism signal) and workload.straggler (mechanisms cgroup-cpu and
// duty-cycle).
//
// A rank is found by scanning /proc/*/environ for GPUCHAOS_JOB and RANK
// (target.Ref's Job and Rank), or named directly by the pid parameter for
// a job gpuchaos did not launch. It is always held as a pid together with
// its start time in /proc/PID/stat, so that a pid the kernel has since
// given to another process is never signalled or moved.
//
// Before it acts, Inject records the key's state under the state directory
// (internal/fault/internal/statedir); Recover reads only that record, so a fresh
// injector in a fresh process recovers what a SIGKILLed one injected:
//
//   - kill-rank sends its signal to the rank (or, with group, to the
//     process group the rank leads, its data-loader workers included).
//     Recover has nothing to undo: restarting a killed rank is its
//     supervisor's job. The record says what was killed until Recover.
//   - hang-rank sends SIGSTOP, which stops every thread of the rank;
//     Recover sends SIGCONT.
//   - straggler measures the CPU the rank uses over a short window (or
//     takes the cpus parameter), creates a cpu cgroup of its own (see
//     internal/node/cgroup), gives it a CFS quota of that CPU divided by the
//     slowdown, and moves the rank's threads in. A rank that was
//     CPU-bound on k CPUs gets k/slowdown, so its steps take slowdown
//     times as long. Recover moves the threads back to the groups they
//     came from and removes ours. With Options.PodCgroups (the node
//     agent's) a rank in a Kubernetes pod's container group stays there:
//     the container group's own quota (cpu.max, or cpu.cfs_quota_us and
//     cpu.cfs_period_us on v1) is recorded, set from the CPU the
//     container's processes use, and written back exactly on recovery; a
//     container group that is gone is reported gone with that proof.
//   - straggler by duty-cycle starts a pacer, the hidden command
//     `gpuchaos pace` (RunPace), that sends the rank SIGSTOP at the start
//     of every 100 ms period and SIGCONT 1-1/slowdown of it later, on
//     deadlines counted from its start. Stopped, the rank launches no
//     CUDA work and joins no collective, so it slows by the slowdown
//     whether it is CPU- or GPU-bound (GPU work already queued still
//     runs). The pacer dies with gpuchaos (Pdeathsig SIGTERM) and ends by
//     itself after the hold time, continuing the rank on every way out
//     but SIGKILL; Recover stops it (SIGTERM, then SIGKILL) and sends the
//     rank SIGCONT itself, since a SIGKILLed pacer may have left it
//     stopped. The pacer carries the key's mark in its environment
//     (childproc.Spec.Mark), so Recover also stops one that its injector
//     was killed too early to record.
//
// A rank is reported gone (fault.ErrTargetGone) only with the proof of its
// end in the error (procfind.Proc.Gone: its pid absent, another process's,
// or a zombie with no thread left running); a rank whose leader thread
// exited while its other threads run on is continued, not called gone.
package procfault
