package procfind

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
)

func TestGone(t *testing.T) {
	t.Parallel()
	start := func(t *testing.T, role string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), roleEnv+"="+role)
		if role == "leaderless" {
			cmd.Env = append(cmd.Env, testutil.LeaderlessEnv+"=1")
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	identify := func(t *testing.T, pid int) Proc {
		p, err := Identify(pid)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name string
		// proc makes the process and returns its identity as recorded.
		proc  func(t *testing.T) Proc
		gone  bool
		proof string
	}{
		{"running", func(t *testing.T) Proc { return identify(t, start(t, "sleeper").Process.Pid) }, false, ""},
		{"exited and reaped", func(t *testing.T) Proc {
			cmd := start(t, "sleeper")
			p := identify(t, cmd.Process.Pid)
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return p
		}, true, "is absent"},
		{"a zombie", func(t *testing.T) Proc {
			cmd := start(t, "sleeper")
			p := identify(t, cmd.Process.Pid)
			_ = cmd.Process.Kill()
			testutil.Eventually(t, 10*time.Second, "the leader a zombie", func() bool { st, _ := ReadStat(p.PID); return st.State == 'Z' })
			return p
		}, true, "a zombie with no thread running"},
		{"pid reused", func(t *testing.T) Proc {
			p := identify(t, start(t, "sleeper").Process.Pid)
			p.StartTicks--
			return p
		}, true, "now names a process started at tick"},
		{"leader thread exited, threads live on", func(t *testing.T) Proc {
			cmd := start(t, "leaderless")
			p := identify(t, cmd.Process.Pid)
			testutil.Eventually(t, 10*time.Second, "the leader a zombie", func() bool { st, _ := ReadStat(p.PID); return st.State == 'Z' })
			return p
		}, false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := tc.proc(t)
			proof, gone, err := p.Gone()
			if err != nil || gone != tc.gone || !strings.Contains(proof, tc.proof) {
				t.Fatalf("Gone = %q, %v, %v; want gone %v with %q", proof, gone, err, tc.gone, tc.proof)
			}
		})
	}
}
