package exhaustfault

import (
	"os"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// The parser of /proc/PID/stat is tested and fuzzed in internal/node/procfind.

func TestRunning(t *testing.T) {
	t.Parallel()
	st, err := procfind.ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// A live process reads as R or S, or D for a moment under I/O load;
	// only Z and X are dead.
	if st.StartTicks == 0 || st.State == 'Z' || st.State == 'X' {
		t.Fatalf("procfind.ReadStat(self) = %+v", st)
	}
	ok, err := running(childRecord{PID: os.Getpid(), StartTicks: st.StartTicks})
	if err != nil || !ok {
		t.Errorf("running(self) = %v, %v", ok, err)
	}
	ok, err = running(childRecord{PID: os.Getpid(), StartTicks: st.StartTicks + 1})
	if err != nil || ok {
		t.Errorf("running(self with another start time) = %v, %v; want false", ok, err)
	}
}

// running reports whether the recorded child still runs: the pid exists,
// has the recorded start time (so it was not reused) and is not a zombie
// (a zombie is dead; only its exit status waits for its parent).
func running(c childRecord) (bool, error) { return c.id().Alive() }
