package gpuproc

import (
	"os"
	"testing"
)

// The parser of /proc/PID/stat is tested and fuzzed in internal/procfind.

func TestReadStatOfThisProcess(t *testing.T) {
	t.Parallel()
	st, err := readStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.StartTicks == 0 || (st.State != 'R' && st.State != 'S') {
		t.Fatalf("readStat(self) = %+v", st)
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
