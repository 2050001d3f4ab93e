// Package procfind reads what fault injectors need to know about local
// processes from /proc: a process's identity beyond pid reuse (its start
// time in /proc/PID/stat), its CPU time and threads, the ranks of a
// training job (found by the GPUCHAOS_JOB and RANK variables in
// /proc/PID/environ), and the files a process holds open for writing
// (/proc/PID/fd with the flags of /proc/PID/fdinfo/N).
//
// Every parser here is pure, takes the bytes of one /proc file and is
// fuzzed; the readers around them treat a process that exits between two
// reads as gone (os.ErrNotExist), never as an error of their own.
package procfind
