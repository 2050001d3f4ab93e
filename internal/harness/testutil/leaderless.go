package testutil

import (
	"os"
	"runtime"
	"syscall"
	"time"
)

// LeaderlessEnv, set in a test binary's environment, makes its TestMain
// call Leaderless.
const LeaderlessEnv = "GPUCHAOS_TEST_LEADERLESS"

// The main goroutine of a leaderless process must run on the thread
// group's leader, so that Leaderless can end that thread alone; locked
// only there, so no other test binary's threads change.
func init() {
	if os.Getenv(LeaderlessEnv) != "" {
		runtime.LockOSThread()
	}
}

// Leaderless ends the calling process's leader thread and nothing else,
// as a C program whose main calls pthread_exit does: /proc shows the
// process as a zombie while another thread runs on for a minute (a
// goroutine sleeping, then exiting the process). It never returns.
func Leaderless() {
	if syscall.Gettid() != os.Getpid() {
		os.Exit(3) // not on the leader: nothing to show
	}
	go func() {
		time.Sleep(time.Minute)
		os.Exit(0)
	}()
	time.Sleep(50 * time.Millisecond) // the goroutine's thread is up
	syscall.RawSyscall(syscall.SYS_EXIT, 0, 0, 0)
	select {}
}
