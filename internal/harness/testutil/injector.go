package testutil

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// InjectedLine is what an injecting child prints once its fault is in.
const InjectedLine = "injected"

// StartInjector runs the test binary again, with run as its -test.run
// pattern and env added to its environment, for the copy to inject a fault
// (its TestMain or a helper test reads env), print InjectedLine and wait
// to be killed: the way the crash-recovery tests get an injector that dies
// mid-fault. It returns once the line came, and fails the test with what
// the child printed instead.
func StartInjector(t testing.TB, run string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+run)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(out)
	line, err := r.ReadString('\n')
	for err == nil && strings.TrimSpace(line) == StartingLine {
		line, err = r.ReadString('\n') // a child that also serves Spawner.KillAt
	}
	if err != nil || strings.TrimSpace(line) != InjectedLine {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the injecting child said %q, %v; want %q", line, err, InjectedLine)
	}
	return cmd
}

// KillInjector SIGKILLs a child StartInjector started and checks that it
// died of it, so that whatever it injected is left for recovery to find.
func KillInjector(t testing.TB, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the injecting child ended with %v, want killed by SIGKILL", err)
	}
}

// Injected is the child's side: it tells the parent the fault is in, then
// waits to be killed.
func Injected() {
	fmt.Println(InjectedLine)
	for {
		time.Sleep(time.Hour)
	}
}
