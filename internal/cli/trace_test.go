package cli

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/node/colltrace"
)

func TestTraceCollectivesBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"nothing to trace", nil, "gpuchaos: trace collectives: give --lib PATH or --pid PID\n"},
		{"zero duration", []string{"--lib", "/bin/true", "--duration", "0s"}, "gpuchaos: --duration: 0s is not positive\n"},
		{"unknown symbol", []string{"--lib", "/bin/true", "--symbols", "ncclAllReduce,ncclFoo"}, "gpuchaos: --symbols: ncclFoo is not an NCCL function the tracer knows (ncclAllReduce, "},
		{"share above one", []string{"--pid", "1", "--last-share", "1.5"}, "gpuchaos: --last-share: 1.5 is not between 0 and 1\n"},
		{"pid not a number", []string{"--pid", "rank0"}, "gpuchaos: invalid argument \"rank0\" for \"--pid\""},
		{"bad format", []string{"--lib", "/bin/true", "--format", "csv"}, "gpuchaos: --format: \"csv\" is not one of table or json\n"},
		{"stray argument", []string{"--lib", "/bin/true", "extra"}, "gpuchaos: unknown command \"extra\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, out, errs := runCLI(t, "", append([]string{"trace", "collectives"}, tt.args...)...)
			if code != 2 || out != "" || !strings.HasPrefix(errs, tt.want) || strings.Count(errs, "\n") != 1 {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2, nothing, one line starting %q", code, out, errs, tt.want)
			}
		})
	}
}

// TestTraceCollectivesNoSymbols runs the real tracer on a file that
// exports no NCCL function: a failed run (exit 1), not bad input.
func TestTraceCollectivesNoSymbols(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("tracing needs root")
	}
	code, out, errs := runCLI(t, "", "trace", "collectives", "--lib", "/bin/true", "--duration", "50ms")
	if code != 1 || out != "" || !strings.Contains(errs, "is exported by [/bin/true]") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 1 and none exported", code, out, errs)
	}
}

func TestPrintTrace(t *testing.T) {
	t.Parallel()
	r0, r1 := colltrace.PIDRank(40), colltrace.RankFromEnv(41, map[string]string{"RANK": "1"})
	tests := []struct {
		name string
		out  traceOutput
		want []string
	}{
		{
			name: "straggler",
			out: traceOutput{Libs: []string{"/lib/libnccl.so.2"}, Attached: []string{"ncclAllReduce"}, Skipped: []string{"ncclBcast"}, Seconds: 2.5,
				Report: colltrace.Report{
					Ranks: []colltrace.RankReport{
						{Rank: r0, Calls: 86, Last: 12},
						{Rank: r1, Calls: 87, Last: 52, LastShare: 0.81, MedianLag: 29900 * time.Microsecond, MaxLag: 36400 * time.Microsecond, Straggler: true},
					},
					Collectives: 64, MedianSpread: 29900 * time.Microsecond, MaxSpread: 36400 * time.Microsecond,
					Findings: []colltrace.Finding{{Kind: colltrace.KindStraggler, Rank: r1, Detail: "rank 1 (pid 41) entered last in 52 of 64"}},
					Notes:    []string{"ncclAllReduce: shifted"},
				}},
			want: []string{
				"traced ncclAllReduce in /lib/libnccl.so.2 for 2.5 s",
				"not exported, skipped: ncclBcast",
				"RANK    PID  CALLS  LAST   MEDIAN LAG  MAX LAG  BEHIND  VERDICT",
				"pid 40  40   86     12/64  0.0 ms      0.0 ms   0       ok",
				"rank 1  41   87     52/64  29.9 ms     36.4 ms  0       straggler",
				"collectives judged: 64, spread median 29.9 ms, max 36.4 ms",
				"straggler: rank 1 (pid 41) entered last in 52 of 64",
				"note: ncclAllReduce: shifted",
			},
		},
		{
			name: "hung",
			out: traceOutput{Libs: []string{"/l"}, Attached: []string{"ncclAllGather"}, Seconds: 12,
				Report: colltrace.Report{Ranks: []colltrace.RankReport{{Rank: r0, Calls: 3}, {Rank: r1, Calls: 2, Behind: 1, BehindFor: 11500 * time.Millisecond, Hung: true}}}},
			want: []string{
				"traced ncclAllGather in /l for 12.0 s",
				"RANK    PID  CALLS  LAST  MEDIAN LAG  MAX LAG  BEHIND        VERDICT",
				"pid 40  40   3      0/0   0.0 ms      0.0 ms   0             ok",
				"rank 1  41   2      0/0   0.0 ms      0.0 ms   1 for 11.5 s  hung",
				"collectives judged: 0, spread median 0.0 ms, max 0.0 ms",
			},
		},
		{
			name: "nothing seen",
			out:  traceOutput{Libs: []string{"/l"}, Attached: []string{"ncclAllReduce"}, Seconds: 1},
			want: []string{"traced ncclAllReduce in /l for 1.0 s", "no traced process called a traced function"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var b bytes.Buffer
			if err := printTrace(&b, tt.out); err != nil {
				t.Fatal(err)
			}
			if got := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n"); strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("printed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}
