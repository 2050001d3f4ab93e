// Package launch starts a workload with a changed environment and stays
// between it and the signals meant for it, as `gpuchaos exec` needs for the
// NCCL environment faults: the fault is a set of variables, applied by
// starting the job with them and reverted by starting it without them.
//
// Run starts the command in its own process group with the overlay applied
// over the inherited environment, forwards SIGINT, SIGTERM and SIGHUP to
// that whole group (as a terminal delivers Ctrl-C to every process of a
// foreground job), and returns the child's exit status, 128+N when signal N
// killed it. torchrun starts each rank in a session of its own and passes
// the signal on to them itself.
//
// The child never outlives its launcher. A cancelled context sends SIGTERM
// to the group and SIGKILL after a grace period. A launcher that is itself
// SIGKILLed cannot forward anything, so the child is started with the
// kernel's parent-death signal (PR_SET_PDEATHSIG, SysProcAttr.Pdeathsig) set
// to SIGKILL: when the launcher dies, however it dies, the kernel kills the
// child. That reaches the direct child only; processes the child put in a
// session of their own (torchrun starts its ranks with start_new_session)
// are its to clean up, and a SIGKILLed torchrun cannot.
//
// Because the child runs in its own process group it is not the terminal's
// foreground job: a child that reads from the terminal is stopped
// (SIGTTIN). Training jobs do not read the terminal; interactive programs
// are not what this package is for.
package launch
