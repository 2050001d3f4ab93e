// Package procfind reads what fault injectors need to know about local
// processes from /proc: a process's identity beyond pid reuse (its start
// time in /proc/PID/stat), its CPU time and threads, the ranks of a
// training job (found by the GPUCHAOS_JOB and RANK variables in
// /proc/PID/environ), and the files a process holds open for writing
// (/proc/PID/fd with the flags of /proc/PID/fdinfo/N). It is the one
// finder of ranks: injectors, the engine and the workload supervisor's
// tests all ask it.
//
// # Which process is the rank
//
// Every process a rank starts inherits its environment, and a launcher
// may carry it too, so several processes can name one rank. The rank is
// the process that runs the training loop: going down from the topmost
// process of the rank (whose parent does not carry it), follow children
// that were exec'd (a shell or torchrun launching the trainer) and stop
// at children that were forked without exec (data-loader workers, which
// share their parent's start of stack, field 28 of /proc/PID/stat). The
// process reached is the rank, and Ranks marks it Main; RankProcess
// returns it, and RankAmong does among a given set of processes (a pod's,
// found by its cgroup), where RANK alone marks a rank. A job whose rank
// starts its workers by exec (Python's spawn or forkserver start methods)
// makes the worker look like the rank; name the rank's pid for such a
// job.
//
// /proc/PID/stat and environ are read through github.com/prometheus/procfs.
// The fdinfo parser is ours: procfs returns its fields as the strings its
// regular expressions matched, so a pos it cannot match (a negative
// offset, which the kernel prints for some devices) reads the same as an
// absent line. That parser, and ParseStat for callers that hold the bytes
// of a stat file already, are pure and fuzzed. The readers treat a process
// that exits between two reads as gone (os.ErrNotExist), never as an
// error of their own.
package procfind
