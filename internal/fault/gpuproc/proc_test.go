package gpuproc

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// statLine is a /proc/PID/stat line with the given command name, state
// and start time (field 22).
func statLine(comm string, state byte, start uint64) string {
	// Fields 4 to 21 (18 of them), then 22, then the rest.
	return fmt.Sprintf("1234 (%s) %s 1 1234 1234 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 %d 12345678 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n", comm, []byte{state}, start)
}

func TestParseStat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    procStat
		wantErr string
	}{
		{name: "plain", in: statLine("gpuchaos", 'S', 987654), want: procStat{State: 'S', StartTicks: 987654}},
		{name: "zombie", in: statLine("gpuchaos", 'Z', 5), want: procStat{State: 'Z', StartTicks: 5}},
		{name: "spaces and parentheses in the name", in: statLine("a) S 1 (b", 'R', 42), want: procStat{State: 'R', StartTicks: 42}},
		{name: "empty", in: "", wantErr: "no command name"},
		{name: "truncated", in: "1234 (x) S 1 2 3", wantErr: "fields after the command name"},
		{name: "bad start time", in: strings.Replace(statLine("x", 'S', 7), " 7 ", " seven ", 1), wantErr: "start time"},
		{name: "state not a letter", in: strings.Replace(statLine("x", 'S', 7), ") S ", ") 9 ", 1), wantErr: "not one letter"},
		{name: "long state", in: strings.Replace(statLine("x", 'S', 7), ") S ", ") SS ", 1), wantErr: "not one letter"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseStat([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseStat = %+v, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseStat = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

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

func FuzzParseStat(f *testing.F) {
	f.Add(statLine("gpuchaos", 'S', 1))
	f.Add(statLine("x) y (z", 'Z', 99))
	f.Add("")
	f.Add("1 () S")
	f.Fuzz(func(t *testing.T, s string) {
		st, err := parseStat([]byte(s))
		if err != nil {
			return
		}
		// Whatever precedes the last ')' is the name; the state and the
		// start time must be what a line built from them says.
		end := strings.LastIndexByte(s, ')')
		again, err := parseStat([]byte(statLine(strings.ReplaceAll(s[:end], "\n", " "), st.State, st.StartTicks)))
		if err != nil || again != st {
			t.Fatalf("parseStat(%q) = %+v, but a line rebuilt from it reads %+v, %v", s, st, again, err)
		}
	})
}
