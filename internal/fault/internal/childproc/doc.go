// Package childproc starts and stops the helper processes that some
// injectors hold a fault with (a GPU burner, a memory hog). Each child runs
// in a process group of its own, gets the write end of a ready pipe as
// descriptor 3, and dies with the injecting process through Pdeathsig. It
// is named by pid and start time (procfind.Proc), so a stop never signals a
// process that reused the pid, and can be stopped from a state file by a
// fresh process that never started it.
package childproc
