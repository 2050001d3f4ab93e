package workload

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func parseEvents(t *testing.T, s string) []Event {
	t.Helper()
	var evs []Event
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("events line %q: %v", sc.Text(), err)
		}
		evs = append(evs, e)
	}
	return evs
}

func countEvents(evs []Event, kind string) int {
	n := 0
	for _, e := range evs {
		if e.Event == kind {
			n++
		}
	}
	return n
}

// shellRank is a stand-in rank for the supervisor's own tests: /bin/sh
// runs it as "python" runs train.py. $1 picks its behaviour; every rank
// records its environment first.
const shellRank = `#!/bin/sh
out=$2
env > "$out/rank-$RANK-attempt-$GPUCHAOS_RESTART.env"
case $1 in
ok) exit 0 ;;
rank1-fails-once)
  if [ "$RANK" = 1 ] && [ ! -e "$out/failed" ]; then : > "$out/failed"; exit 7; fi
  if [ "$GPUCHAOS_RESTART" = 0 ]; then exec sleep 30; fi
  exit 0 ;;
always-fails) [ "$RANK" = 0 ] && exit 9; exec sleep 30 ;;
ignore-term)
  # Rank 1 fails only once rank 0 ignores SIGTERM, however slowly the
  # shells start.
  if [ "$RANK" = 1 ]; then
    while [ ! -e "$out/trapped" ]; do sleep 0.01; done
    exit 1
  fi
  trap '' TERM
  : > "$out/trapped"
  while :; do sleep 0.05; done ;;
leave-child) sleep 30 & exit 0 ;;
forever) exec sleep 30 ;;
esac
exit 99
`

func TestSupervisor(t *testing.T) {
	t.Parallel()
	script := filepath.Join(t.TempDir(), "rank.sh")
	if err := os.WriteFile(script, []byte(shellRank), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		mode        string
		maxRestarts int
		cancelAfter time.Duration
		wantErr     error
		wantRestart int
		check       func(t *testing.T, out string, res Result, evs []Event)
	}{
		{name: "clean exit ends the run", mode: "ok", check: func(t *testing.T, out string, res Result, evs []Event) {
			for r := 0; r < 2; r++ {
				env := readEnv(t, filepath.Join(out, fmt.Sprintf("rank-%d-attempt-0.env", r)))
				want := map[string]string{
					"RANK": fmt.Sprint(r), "LOCAL_RANK": fmt.Sprint(r), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
					"MASTER_PORT": fmt.Sprint(res.Attempts[0].MasterPort), EnvJob: res.Job, EnvRun: res.RunID, EnvRestart: "0",
				}
				for k, v := range want {
					if env[k] != v {
						t.Errorf("rank %d: %s=%q, want %q", r, k, env[k], v)
					}
				}
			}
			if n := countEvents(evs, "start"); n != 2 {
				t.Errorf("%d start events, want 2", n)
			}
		}},
		{name: "failed rank restarts the whole group", mode: "rank1-fails-once", maxRestarts: 3, wantRestart: 1,
			check: func(t *testing.T, out string, res Result, evs []Event) {
				if len(res.Attempts) != 2 {
					t.Fatalf("%d attempts, want 2", len(res.Attempts))
				}
				a0 := res.Attempts[0]
				if a0.Exits[0].Rank != 1 || a0.Exits[0].Code != 7 || !a0.Exits[0].Failed() {
					t.Errorf("first exit of attempt 0 = %+v, want rank 1 with status 7", a0.Exits[0])
				}
				if a0.Exits[1].Rank != 0 || a0.Exits[1].Signal != syscall.SIGTERM || !a0.Exits[1].Stopped {
					t.Errorf("second exit of attempt 0 = %+v, want rank 0 stopped by SIGTERM", a0.Exits[1])
				}
				if res.Attempts[1].MasterPort == a0.MasterPort {
					t.Errorf("attempt 1 reused master port %d", a0.MasterPort)
				}
				env := readEnv(t, filepath.Join(out, "rank-0-attempt-1.env"))
				if env["MASTER_PORT"] != fmt.Sprint(res.Attempts[1].MasterPort) {
					t.Errorf("attempt 1 rank 0 MASTER_PORT=%s, want %d", env["MASTER_PORT"], res.Attempts[1].MasterPort)
				}
				if countEvents(evs, "restart") != 1 || countEvents(evs, "stop") != 1 || countEvents(evs, "start") != 4 {
					t.Errorf("events %v: want 4 starts, 1 stop, 1 restart", kinds(evs))
				}
			}},
		{name: "restarts run out", mode: "always-fails", maxRestarts: 2, wantErr: ErrRestartsExhausted, wantRestart: 2,
			check: func(t *testing.T, out string, res Result, evs []Event) {
				if len(res.Attempts) != 3 {
					t.Errorf("%d attempts, want 3", len(res.Attempts))
				}
				last := evs[len(evs)-1]
				if last.Event != "end" || !strings.Contains(last.Reason, "rank 0 exited with status 9") {
					t.Errorf("last event %+v, want end naming rank 0's status", last)
				}
			}},
		{name: "rank ignoring SIGTERM is killed after the grace", mode: "ignore-term", wantErr: ErrRestartsExhausted,
			check: func(t *testing.T, out string, res Result, evs []Event) {
				var e0 Exit
				for _, e := range res.Attempts[0].Exits {
					if e.Rank == 0 {
						e0 = e
					}
				}
				if e0.Signal != syscall.SIGKILL {
					t.Errorf("rank 0 ended %v, want SIGKILL after the grace", e0)
				}
			}},
		{name: "children of a finished rank are killed", mode: "leave-child"},
		{name: "cancel stops every rank", mode: "forever", cancelAfter: 300 * time.Millisecond, wantErr: context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := t.TempDir()
			job := "suptest-" + strings.ReplaceAll(tc.name, " ", "-")
			var events, output testutil.LockedBuffer
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancelAfter > 0 {
				time.AfterFunc(tc.cancelAfter, cancel)
			}
			res, err := Run(ctx, Options{
				Ranks: 2, Python: "/bin/sh", Script: script, Args: []string{tc.mode, out},
				Job: job, MaxRestarts: tc.maxRestarts, Grace: 300 * time.Millisecond,
				Events: &events, Output: &output,
			})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("Run error = %v, want %v", err, tc.wantErr)
			}
			if res.Restarts != tc.wantRestart {
				t.Errorf("Restarts = %d, want %d", res.Restarts, tc.wantRestart)
			}
			// The contract with fault injectors, used backwards: after Run
			// nothing with this job's environment may be alive.
			if left, err := procfind.Ranks(job); err != nil || len(left) > 0 {
				t.Errorf("after Run: processes of the job still alive: %+v, %v", left, err)
			}
			evs := parseEvents(t, events.String())
			if len(evs) == 0 || evs[len(evs)-1].Event != "end" {
				t.Errorf("events %v do not end with end", kinds(evs))
			}
			if tc.check != nil {
				tc.check(t, out, res, evs)
			}
		})
	}
}

func kinds(evs []Event) []string {
	var k []string
	for _, e := range evs {
		k = append(k, e.Event)
	}
	return k
}

func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			env[k] = v
		}
	}
	return env
}

func TestSupervisorBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		o       Options
		wantErr string
	}{
		{name: "no ranks", o: Options{}, wantErr: "at least 1"},
		{name: "negative restarts", o: Options{Ranks: 1, MaxRestarts: -1}, wantErr: "negative"},
		{name: "interpreter missing", o: Options{Ranks: 2, Python: "/nonexistent/python3"}, wantErr: "start rank 0"},
		{name: "bad environment overlay", o: Options{Ranks: 1, Python: "/bin/true", Env: []string{"NOEQUALS"}}, wantErr: "KEY=VALUE"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Run(context.Background(), tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Run error = %v, want one saying %q", err, tc.wantErr)
			}
		})
	}
}

// TestSupervisorMetrics scrapes the supervisor's own endpoint while a
// group runs and after it has been restarted.
func TestSupervisorMetrics(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := filepath.Join(dir, "rank.sh")
	// Rank 1 fails on the first attempt; the second attempt runs until
	// the test cancels it.
	body := "#!/bin/sh\nif [ \"$RANK\" = 1 ] && [ \"$GPUCHAOS_RESTART\" = 0 ]; then sleep 0.2; exit 1; fi\nexec sleep 30\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	addr := testutil.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, Options{Ranks: 2, Python: "/bin/sh", Script: script, Job: "metrics-job", MaxRestarts: 1,
			Grace: 200 * time.Millisecond, MetricsAddr: addr})
		done <- err
	}()
	want := `gpuchaos_job_restarts_total{job="metrics-job"} 1`
	deadline := time.Now().Add(10 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		last = scrape(addr)
		if strings.Contains(last, want) && strings.Contains(last, `gpuchaos_job_up{job="metrics-job"} 1`) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run error = %v, want context.Canceled", err)
	}
	if !strings.Contains(last, want) || !strings.Contains(last, `gpuchaos_job_up{job="metrics-job"} 1`) {
		t.Errorf("metrics never showed one restart with the job up:\n%s", last)
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Errorf("metrics endpoint %s still open after Run returned", addr)
	}
}

func scrape(addr string) string {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestLinePrefixer(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var out bytes.Buffer
	lp := &linePrefixer{mu: &mu, w: &out, prefix: "[rank 3] "}
	for _, chunk := range []string{"a", "b\nc", "\n\nd"} {
		if _, err := lp.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	lp.flush()
	if want := "[rank 3] ab\n[rank 3] c\n[rank 3] \n[rank 3] d\n"; out.String() != want {
		t.Errorf("output %q, want %q", out.String(), want)
	}
}
