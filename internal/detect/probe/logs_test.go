package probe_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
	"github.com/gpuchaos/gpuchaos/internal/model/series"
	"github.com/gpuchaos/gpuchaos/internal/model/xid"
)

func TestKmsgXID(t *testing.T) {
	t.Parallel()
	// Lines as the driver prints them, PCI given in DCGM's form so the
	// subject must come out in the kernel's.
	xid79 := xid.FormatLine("00000000:18:00.0", 79, -1, "", "")
	xid48 := xid.FormatLine("00000000:3B:00.0", 48, 4121, "python3", "")
	line := func(ago time.Duration, node, text string) series.LogLine {
		return series.LogLine{Time: now.Add(-ago), Node: node, Priority: 3, Text: text}
	}
	tests := []struct {
		name  string
		logs  []series.LogLine
		holds bool
		value float64
		want  []probe.Subject
	}{
		{
			name:  "one line",
			logs:  []series.LogLine{line(time.Minute, "n1", xid79)},
			holds: true, value: 79,
			want: []probe.Subject{{Node: "n1", PCI: "0000:18:00"}},
		},
		{
			name:  "dmesg stamp before the NVRM text",
			logs:  []series.LogLine{line(time.Minute, "n1", "[ 8312.004917] "+xid48)},
			holds: true, value: 48,
			want: []probe.Subject{{Node: "n1", PCI: "0000:3b:00"}},
		},
		{
			name:  "newest line first, value from the newest",
			logs:  []series.LogLine{line(5*time.Minute, "n1", xid79), line(2*time.Minute, "n2", "eth0: link up"), line(time.Minute, "n2", xid48)},
			holds: true, value: 48,
			want: []probe.Subject{{Node: "n2", PCI: "0000:3b:00"}, {Node: "n1", PCI: "0000:18:00"}},
		},
		{
			name:  "just inside the 10m window",
			logs:  []series.LogLine{line(10*time.Minute-time.Millisecond, "n1", xid79)},
			holds: true, value: 79,
			want: []probe.Subject{{Node: "n1", PCI: "0000:18:00"}},
		},
		{"exactly 10m old does not count", []series.LogLine{line(10*time.Minute, "n1", xid79)}, false, 0, nil},
		{"older than 10m does not count", []series.LogLine{line(11*time.Minute, "n1", xid79)}, false, 0, nil},
		{
			// The twin may hold lines past a probe's clock when they
			// share a log; a line from the future has not happened yet.
			name:  "line in the future of now does not count",
			logs:  []series.LogLine{line(2*time.Minute, "n1", xid79), line(-time.Second, "n2", xid48)},
			holds: true, value: 79,
			want: []probe.Subject{{Node: "n1", PCI: "0000:18:00"}},
		},
		{"only future lines", []series.LogLine{line(-time.Minute, "n1", xid79)}, false, 0, nil},
		{"other kernel lines", []series.LogLine{line(time.Minute, "n1", "NVRM: GPU at PCI:0000:18:00: GPU-3f1c"), line(time.Minute, "n1", "mlx5_core 0000:0c:00.0: link down")}, false, 0, nil},
		{
			// The rule is about NVRM Xid lines; NVSwitch SXids are a
			// different watcher's business and carry a switch's address,
			// not a GPU's.
			name:  "NVSwitch SXid line does not count",
			logs:  []series.LogLine{line(time.Minute, "n1", xid.FormatSXidLine(0, "0000:05:00.0", 12028, true, "Link 32 egress non-posted PRIV error"))},
			holds: false,
		},
		{"empty log", nil, false, 0, nil},
	}
	d, ok := probe.LookupDetector("kmsg-xid")
	if !ok {
		t.Fatal("no kmsg-xid detector")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			obs, err := d.Probe(&fakeSource{now: now, logs: tt.logs}).Observe(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if obs.Holds != tt.holds {
				t.Fatalf("holds = %v, want %v (%+v)", obs.Holds, tt.holds, obs)
			}
			if !slices.Equal(obs.Subjects, tt.want) {
				t.Errorf("subjects %+v, want %+v", obs.Subjects, tt.want)
			}
			if obs.Value != tt.value {
				t.Errorf("value %g, want %g", obs.Value, tt.value)
			}
			if tt.holds && obs.Detail == "" {
				t.Error("empty detail")
			}
		})
	}
}
