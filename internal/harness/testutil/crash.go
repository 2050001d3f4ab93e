package testutil

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault"
)

// StartingLine is what an injecting child prints right before it starts
// to inject, so that Spawner.KillAt can time its kill from that moment.
const StartingLine = "starting"

// readyLine is what a child Spawner started prints once it is up and
// waiting for its go-ahead.
const readyLine = "ready"

// goEnv, set in a child's environment, makes Starting wait for the
// go-ahead: one line on stdin of tab-separated NAME=VALUE pairs, set in
// the child's environment before it goes on.
const goEnv = "GPUCHAOS_TEST_AWAIT_GO"

// Starting is the child's side of Spawner.KillAt: the injection begins
// now. A child that a Spawner started ahead first waits for its go-ahead,
// whose variables it then reads from its environment; one whose parent
// went away instead (stdin closed) exits without injecting.
func Starting() {
	if os.Getenv(goEnv) != "" {
		fmt.Println(readyLine)
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if err != nil {
			os.Exit(0)
		}
		for kv := range strings.SplitSeq(strings.TrimSuffix(line, "\n"), "\t") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				os.Setenv(k, v)
			}
		}
	}
	fmt.Println(StartingLine)
}

// CrashRounds is how many times a SIGKILL property test kills an
// injector.
const CrashRounds = 50

// SeedEnv, set to a number, replays a property test's rounds with that
// seed instead of a fresh one.
const SeedEnv = "GPUCHAOS_TEST_SEED"

// Rand returns the generator of a property test, seeded from SeedEnv or
// else from the clock, and logs the seed so a failure can be replayed.
func Rand(t testing.TB) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(SeedEnv); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", SeedEnv, s, err)
		}
		seed = v
	}
	t.Logf("seed %d (replay with %s=%d)", seed, SeedEnv, seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// Moment draws when a kill lands after the child said StartingLine: at
// once one time in ten, else half the time log-uniform between 10 µs and
// max, so that as many kills land in the first microseconds of an
// injection (before its record is written) as in any later decade, and
// half the time uniform up to max, so that many land after an injection
// of some milliseconds is complete, long after it in max's terms.
func Moment(r *rand.Rand, max time.Duration) time.Duration {
	const min = 10 * time.Microsecond
	switch {
	case r.IntN(10) == 0 || max <= min:
		return 0
	case r.IntN(2) == 0:
		return time.Duration(r.Int64N(int64(max)))
	}
	return time.Duration(float64(min) * math.Pow(float64(max)/float64(min), r.Float64()))
}

// Spawner runs a property test's injecting children one round ahead: each
// is started (the test binary again, with run as its -test.run pattern and
// env added) while the round before it runs, and waits in Starting for
// the go-ahead KillAt gives, so that no round waits for a process to
// start. It is for one goroutine; the spare child is killed when the test
// ends.
type Spawner struct {
	run  string
	env  []string
	next []*child
}

// spawnAhead is how many children a Spawner keeps starting: a child
// takes longer to start (a race-enabled test binary, a loaded machine)
// than most rounds take.
const spawnAhead = 2

// NewSpawner starts the first children.
func NewSpawner(t testing.TB, run string, env ...string) *Spawner {
	t.Helper()
	s := &Spawner{run: run, env: append(env, goEnv+"=1")}
	for range spawnAhead {
		s.next = append(s.next, start(t, run, s.env, true))
	}
	t.Cleanup(func() {
		for _, c := range s.next {
			c.abandon()
		}
	})
	return s
}

// KillAt lets the waiting child inject with env added to its environment
// (NAME=VALUE, without tabs or newlines), starts the next one, waits for
// the first's StartingLine, SIGKILLs it d later wherever it got to, and
// reaps it. It reports whether the child had said InjectedLine by then. A
// child that ended by itself (its injection failed) fails the test with
// what it printed.
func (s *Spawner) KillAt(t testing.TB, d time.Duration, env ...string) (injected bool) {
	t.Helper()
	for _, kv := range env {
		if strings.ContainsAny(kv, "\t\n") {
			t.Fatalf("variable %q holds a tab or a newline", kv)
		}
	}
	c := s.next[0]
	s.next = append(s.next[1:], start(t, s.run, s.env, true))
	return c.killAt(t, d, env)
}

// Settle waits until no process that a killed child forked is still
// between its fork and its exec: until the exec such a process shows the
// child's environment, not its own, so nothing can tell what it will
// become. A test calls it before recovering after a kill that may have
// caught a child starting a process without Pdeathsig (which would have
// ended it), so that recovery looks at processes that are what they will
// be. It fails the test after 10 s.
func (s *Spawner) Settle(t testing.TB) {
	t.Helper()
	marker := []byte(goEnv + "=1\x00")
	cmdline := []byte(os.Args[0] + "\x00-test.run=" + s.run + "\x00")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		forking := forkedUnexeced(marker, cmdline)
		if len(forking) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pids %v forked by a killed child have not exec'd within 10 s", forking)
		}
	}
}

// forkedUnexeced lists the live processes that look like a Spawner's
// child (marker in their environment, its command line) but whose parent
// is not this process: forks of a child that died, not exec'd yet. What
// they exec has another command line.
func forkedUnexeced(marker, cmdline []byte) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Equal(cmd, cmdline) {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(env, marker) {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command name: state, then the parent's pid.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) > 1 && f[0] != "Z" && f[1] != strconv.Itoa(os.Getpid()) {
			out = append(out, pid)
		}
	}
	return out
}

// child is one injecting child and what it said.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	said  []string
}

// start runs the test binary again with run as its -test.run pattern and
// env added, reading what it prints; with await, its stdin is the pipe
// the go-ahead goes through.
func start(t testing.TB, run string, env []string, await bool) *child {
	t.Helper()
	c := &child{cmd: exec.Command(os.Args[0], "-test.run="+run), lines: make(chan string, 16)}
	c.cmd.Env = append(os.Environ(), env...)
	c.cmd.Stderr = os.Stderr
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if await {
		if c.stdin, err = c.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.lines)
		s := bufio.NewScanner(out)
		for s.Scan() {
			c.lines <- strings.TrimSpace(s.Text())
		}
	}()
	return c
}

// abandon kills a child that was never given its go-ahead.
func (c *child) abandon() {
	_ = c.cmd.Process.Kill()
	for range c.lines {
	}
	_ = c.cmd.Wait()
}

// killAt gives the go-ahead (when the child awaits one), waits for
// StartingLine, then kills the child d later and reaps it.
func (c *child) killAt(t testing.TB, d time.Duration, env []string) bool {
	t.Helper()
	if c.stdin != nil {
		if _, err := io.WriteString(c.stdin, strings.Join(env, "\t")+"\n"); err != nil {
			c.abandon()
			t.Fatalf("go-ahead to the injecting child: %v", err)
		}
	}
	timeout := time.After(30 * time.Second)
	for started := false; !started; {
		select {
		case l, ok := <-c.lines:
			if !ok {
				_ = c.cmd.Wait()
				t.Fatalf("the injecting child ended before it started: %v, said %q", c.cmd.ProcessState, c.said)
			}
			c.said = append(c.said, l)
			started = l == StartingLine
		case <-timeout:
			c.abandon()
			t.Fatalf("the injecting child did not say %q within 30 s; said %q", StartingLine, c.said)
		}
	}
	time.Sleep(d)
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for l := range c.lines {
		c.said = append(c.said, l)
	}
	err := c.cmd.Wait()
	if ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the injecting child ended with %v before the kill, saying %q", err, c.said)
	}
	return slices.Contains(c.said, InjectedLine)
}

// Verdict names what a recovery said: "recovered" (nil), "gone"
// (fault.ErrTargetGone) or "pending" (any other error, fault.ErrUnproven
// among them).
func Verdict(err error) string {
	switch {
	case err == nil:
		return "recovered"
	case errors.Is(err, fault.ErrTargetGone) && !errors.Is(err, fault.ErrUnproven):
		return "gone"
	}
	return "pending"
}

// CheckRecovery asserts the SIGKILL property of one recovery, named what
// in failures: recovered or gone only over a system in the state
// expected (diff says what differs, "" when nothing does), gone only with
// its proof (one of proofs in the error's text), pending only with a
// reason and the record kept for the next try (kept reports it). It
// returns the verdict.
func CheckRecovery(t testing.TB, what string, err error, diff func() string, kept func() bool, proofs ...string) string {
	t.Helper()
	v := Verdict(err)
	switch v {
	case "pending":
		if strings.TrimSpace(err.Error()) == "" {
			t.Errorf("%s: pending without a reason", what)
		}
		if !kept() {
			t.Errorf("%s: pending (%v), but its record is gone: nothing would try again", what, err)
		}
		return v
	case "gone":
		if !slices.ContainsFunc(proofs, func(p string) bool { return strings.Contains(err.Error(), p) }) {
			t.Errorf("%s: gone without a proof (%q in it): %v", what, proofs, err)
		}
	}
	if d := diff(); d != "" {
		t.Errorf("%s: %s (%v) over a leftover: %s", what, v, err, d)
	}
	if kept() {
		t.Errorf("%s: %s (%v), but its record remains", what, v, err)
	}
	return v
}

// Tally counts outcomes of a property test's rounds, for its log.
type Tally map[string]int

// Add counts one outcome.
func (c Tally) Add(outcome string) { c[outcome]++ }

func (c Tally) String() string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(c)) {
		fmt.Fprintf(&b, " %s:%d", k, c[k])
	}
	return strings.TrimSpace(b.String())
}
