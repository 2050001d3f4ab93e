package xid

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestDesignActions pins the actions DESIGN.md §6 states.
func TestDesignActions(t *testing.T) {
	t.Parallel()
	want := map[Action][]int{
		ActionRestartApp:  {13, 31, 43},
		ActionResetGPU:    {48, 62, 64, 95, 109, 119, 120, 136, 140, 143},
		ActionReboot:      {79},
		ActionNone:        {63, 92, 94},
		ActionInvestigate: {74},
		ActionSeeText:     {154},
	}
	for act, codes := range want {
		for _, c := range codes {
			in, ok := Lookup(c)
			if !ok {
				t.Errorf("Lookup(%d): not in table", c)
				continue
			}
			if in.Action != act {
				t.Errorf("Lookup(%d).Action = %q, want %q", c, in.Action, act)
			}
		}
	}
}

func TestTable(t *testing.T) {
	t.Parallel()
	required := []int{8, 13, 31, 32, 38, 43, 45, 48, 56, 57, 58, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95,
		109, 110, 119, 120, 121, 136, 140, 143, 144, 145, 146, 147, 148, 149, 150, 154}
	codes := Codes()
	if !slices.IsSorted(codes) {
		t.Errorf("Codes() not sorted: %v", codes)
	}
	if len(slices.Compact(slices.Clone(codes))) != len(codes) {
		t.Errorf("Codes() has duplicates: %v", codes)
	}
	for _, c := range required {
		if !slices.Contains(codes, c) {
			t.Errorf("code %d missing from the table", c)
		}
	}
	valid := []Action{ActionNone, ActionRestartApp, ActionResetGPU, ActionReboot, ActionInvestigate, ActionSeeText}
	for _, in := range All() {
		if in.Name == "" || in.Text == "" || in.Description == "" {
			t.Errorf("code %d: empty Name, Text or Description: %+v", in.Code, in)
		}
		if !slices.Contains(valid, in.Action) {
			t.Errorf("code %d: action %q is not one of %v", in.Code, in.Action, valid)
		}
		if strings.ContainsAny(in.Text, "\n\r") {
			t.Errorf("code %d: Text spans lines", in.Code)
		}
	}
	if _, ok := Lookup(999999); ok {
		t.Error("Lookup(999999) found an entry")
	}
	// All hands out copies: changing one must not change the table.
	a := All()
	a[0].Action = "changed"
	if b := All(); b[0].Action == "changed" {
		t.Error("All() returned the table itself, not a copy")
	}
}

// TestCatalogue checks catalog.csv: it loads, holds NVIDIA's whole
// catalogue once per code with a mnemonic and a resolution on every row,
// maps each resolution bucket onto our actions as its header says, and
// keeps the actions the hand-written table of 39 codes had.
func TestCatalogue(t *testing.T) {
	t.Parallel()
	all := All()
	if len(all) < 172 {
		t.Errorf("table has %d codes, want NVIDIA's catalogue (172)", len(all))
	}
	for i, in := range all {
		if in.Code != i+1 {
			t.Fatalf("row %d has code %d: the catalogue runs 1..172 without gaps", i, in.Code)
		}
		if in.Mnemonic == "" || in.Resolution == "" {
			t.Errorf("code %d: no mnemonic or resolution: %+v", in.Code, in)
		}
	}
	bucket := map[string]Action{
		"IGNORE": ActionNone, "RESTART_APP": ActionRestartApp, "RESET_GPU": ActionResetGPU,
		"RESTART_BM": ActionReboot, "RESTART_VM": ActionReboot, "XID_154": ActionSeeText,
	}
	// Deliberate departures from the mapping, named in catalog.csv's header.
	departures := map[int]Action{43: ActionRestartApp, 48: ActionResetGPU, 94: ActionNone}
	for _, in := range all {
		want, ok := bucket[in.Resolution]
		if !ok {
			want = ActionInvestigate
		}
		if d, ok := departures[in.Code]; ok {
			if d == want {
				t.Errorf("code %d: listed as a departure but the mapping gives %q too", in.Code, want)
			}
			want = d
		}
		if in.Action != want {
			t.Errorf("code %d (%s): action %q, want %q", in.Code, in.Resolution, in.Action, want)
		}
	}
	// The hand-written table from before NVIDIA's catalogue was read in:
	// every code keeps its action.
	old := map[int]Action{
		8: ActionRestartApp, 13: ActionRestartApp, 31: ActionRestartApp, 32: ActionRestartApp, 38: ActionNone,
		43: ActionRestartApp, 45: ActionInvestigate, 46: ActionResetGPU, 48: ActionResetGPU, 56: ActionInvestigate,
		57: ActionInvestigate, 58: ActionInvestigate, 61: ActionInvestigate, 62: ActionResetGPU, 63: ActionNone,
		64: ActionResetGPU, 68: ActionRestartApp, 69: ActionRestartApp, 74: ActionInvestigate, 79: ActionReboot,
		92: ActionNone, 94: ActionNone, 95: ActionResetGPU, 109: ActionResetGPU, 110: ActionResetGPU,
		119: ActionResetGPU, 120: ActionResetGPU, 121: ActionNone, 136: ActionResetGPU, 140: ActionResetGPU,
		143: ActionResetGPU, 144: ActionInvestigate, 145: ActionInvestigate, 146: ActionInvestigate,
		147: ActionInvestigate, 148: ActionInvestigate, 149: ActionInvestigate, 150: ActionInvestigate,
		154: ActionSeeText,
	}
	if len(old) != 39 {
		t.Fatalf("old table has %d codes, want 39", len(old))
	}
	hand := handWritten()
	for c, act := range old {
		in, ok := Lookup(c)
		if !ok || in.Action != act {
			t.Errorf("code %d: action %q (found %v), want %q as before", c, in.Action, ok, act)
		}
		w, ok := hand[c]
		if !ok || in.Name != w.name || in.Text != w.text || in.Description != w.description {
			t.Errorf("code %d: our hand-written name, text or description was lost: %+v", c, in)
		}
	}
	if len(hand) != len(old) {
		t.Errorf("handWritten has %d codes, want the %d of the old table", len(hand), len(old))
	}
}

// TestParseCatalogue feeds parseCatalogue broken catalogues.
func TestParseCatalogue(t *testing.T) {
	t.Parallel()
	const head = "# comment\ncode,mnemonic,description,resolution,investigatory,action\n"
	for _, tc := range []struct{ name, text, want string }{
		{"duplicate", head + "1,A,a,IGNORE,,none\n1,B,b,IGNORE,,none\n", "appears twice"},
		{"no mnemonic", head + "1,,a,IGNORE,,none\n", "lacks a mnemonic"},
		{"no resolution", head + "1,A,a,,,none\n", "lacks a mnemonic"},
		{"bad code", head + "x,A,a,IGNORE,,none\n", "not a positive number"},
		{"bad action", head + "1,A,a,IGNORE,,unknown\n", "not one of the table's"},
		{"bad header", "code,name\n", "header"},
		{"short row", head + "1,A,a\n", "wrong number of fields"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseCatalogue(tc.text, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parseCatalogue: %v, want an error with %q", err, tc.want)
			}
		})
	}
	tab, err := parseCatalogue(head+"2,B,Unused,CONTACT_SUPPORT,,investigate\n1,A,Copy Engine Exception,RESTART_APP,CONTACT_SUPPORT,restart-app\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tab) != 2 || tab[0].Code != 1 || tab[0].Text != "Copy Engine Exception" || tab[1].Text != "B" ||
		tab[0].Description != "Copy Engine Exception (A) in NVIDIA's catalogue; its immediate action is RESTART_APP, then CONTACT_SUPPORT." {
		t.Errorf("parseCatalogue: %+v", tab)
	}
}

func TestNormalizePCI(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
		ok             bool
	}{
		{"driver form", "0000:3b:00", "0000:3b:00", true},
		{"dcgm form", "00000000:3B:00.0", "0000:3b:00", true},
		{"with function", "0000:3b:00.1", "0000:3b:00", true},
		{"PCI prefix", "PCI:0004:01:00", "0004:01:00", true},
		{"non-zero domain", "0018:01:00", "0018:01:00", true},
		{"spaces", "  0000:05:00.0 ", "0000:05:00", true},
		{"wide non-zero domain", "00010000:3b:00.0", "", false},
		{"too wide", "000000000:3b:00", "", false},
		{"short bus", "0000:3:00", "", false},
		{"no domain", "3b:00.0", "", false},
		{"not hex", "0000:3g:00", "", false},
		{"bad function", "0000:3b:00.10", "", false},
		{"empty", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := NormalizePCI(tt.in)
			if got != tt.want || ok != tt.ok {
				t.Errorf("NormalizePCI(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestFormatLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		pci     string
		code    int
		pid     int
		process string
		text    string
		want    string
	}{
		{"known process", "0000:3b:00", 79, 1234, "python3", "GPU has fallen off the bus.",
			"NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."},
		{"unknown pid", "00000000:3B:00.0", 48, -1, "ignored", "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 4, subpartition 1.",
			"NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 4, subpartition 1."},
		{"empty process", "0000:3b:00", 13, 7, "", "x",
			"NVRM: Xid (PCI:0000:3b:00): 13, pid=7, name=<unknown>, x"},
		{"catalogue text", "0000:3b:00", 154, -1, "", "",
			"NVRM: Xid (PCI:0000:3b:00): 154, pid='<unknown>', name=<unknown>, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"},
		{"unreadable pci kept", "gpu3", 79, 1, "p", "t",
			"NVRM: Xid (PCI:gpu3): 79, pid=1, name=p, t"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FormatLine(tt.pci, tt.code, tt.pid, tt.process, tt.text); got != tt.want {
				t.Errorf("FormatLine() =\n  %s\nwant\n  %s", got, tt.want)
			}
		})
	}
}

func TestFormatSXidLine(t *testing.T) {
	t.Parallel()
	got := FormatSXidLine(0, "00000000:05:00.0", 12028, false, "Link 32 egress non-posted PRIV error (First)")
	want := "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)"
	if got != want {
		t.Errorf("FormatSXidLine() = %q, want %q", got, want)
	}
	ev, ok := ParseLine(FormatSXidLine(3, "0000:C2:00.1", 20034, true, "Link 46 LTSSM Fault Up"))
	if !ok || ev.Kind != KindSXID || ev.Code != 20034 || ev.PCI != "0000:c2:00" || ev.Action != ActionResetGPU {
		t.Errorf("fatal SXid round trip = %+v, %v", ev, ok)
	}
}

// TestRoundTrip formats every code in the table and parses it back.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, in := range All() {
		for _, pid := range []int{-1, 0, 4242} {
			line := FormatLine("00000000:3B:00.0", in.Code, pid, "python3", "")
			ev, ok := ParseLine("[ 12.000001] " + line)
			if !ok {
				t.Errorf("code %d pid %d: ParseLine(%q) not ok", in.Code, pid, line)
				continue
			}
			want := in.Action
			if in.Code == 154 {
				want = ActionResetGPU // the catalogue text announces a reset
			}
			if ev.Kind != KindXID || ev.Code != in.Code || ev.PCI != "0000:3b:00" || ev.Action != want ||
				ev.Message != in.Text || ev.Time != "12.000001" {
				t.Errorf("code %d pid %d: got %+v", in.Code, pid, ev)
			}
			switch {
			case pid < 0 && (ev.PID != nil || ev.Process != nil):
				t.Errorf("code %d: unknown pid came back as %v/%v", in.Code, ev.PID, ev.Process)
			case pid >= 0 && (ev.PID == nil || *ev.PID != pid || ev.Process == nil || *ev.Process != "python3"):
				t.Errorf("code %d pid %d: pid/process came back as %v/%v", in.Code, pid, ev.PID, ev.Process)
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestParseLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		line string
		want *Event // nil: not an XID
	}{
		{"bare driver line", "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
			&Event{Kind: "xid", Code: 79, PCI: "0000:3b:00", PID: ptr(1234), Process: ptr("python3"), Message: "GPU has fallen off the bus.", Action: ActionReboot}},
		{"dmesg stamp and caller tag", "[ 130.456250] [ T1946] NVRM: Xid (PCI:0000:2b:00): 31, pid=1942, name=llama-bench, channel 0x00000002",
			&Event{Kind: "xid", Code: 31, PCI: "0000:2b:00", PID: ptr(1942), Process: ptr("llama-bench"), Message: "channel 0x00000002", Action: ActionRestartApp, Time: "130.456250"}},
		{"dmesg -T", "[Mon Nov 30 02:27:31 2026] NVRM: Xid (PCI:0000:3b:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: x",
			&Event{Kind: "xid", Code: 63, PCI: "0000:3b:00", Message: "Row Remapper: x", Action: ActionNone, Time: "Mon Nov 30 02:27:31 2026"}},
		{"journalctl short", "Nov 30 02:27:31 host kernel: NVRM: Xid (PCI:0000:3b:00): 94, pid=12, name=Web Content, Contained: SM (0x1). RST: No, D-RST: No",
			&Event{Kind: "xid", Code: 94, PCI: "0000:3b:00", PID: ptr(12), Process: ptr("Web Content"), Message: "Contained: SM (0x1). RST: No, D-RST: No", Action: ActionNone, Time: "Nov 30 02:27:31"}},
		{"kmsg record", "3,1201,6085126134786,-;NVRM: Xid (PCI:0000:3b:00): 95, pid=1, name=a, Uncontained: FBHUB. RST: Yes, D-RST: No",
			&Event{Kind: "xid", Code: 95, PCI: "0000:3b:00", PID: ptr(1), Process: ptr("a"), Message: "Uncontained: FBHUB. RST: Yes, D-RST: No", Action: ActionResetGPU, Time: "6085126134786"}},
		{"syslog priority", "<3>NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=a, b",
			&Event{Kind: "xid", Code: 13, PCI: "0000:3b:00", PID: ptr(1), Process: ptr("a"), Message: "b", Action: ActionRestartApp}},
		{"old format without PCI", "NVRM: Xid (0000:03:00): 13, Channel 00000001",
			&Event{Kind: "xid", Code: 13, PCI: "0000:03:00", Message: "Channel 00000001", Action: ActionRestartApp}},
		{"no pid", "NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.",
			&Event{Kind: "xid", Code: 79, PCI: "0000:06:00", Message: "GPU has fallen off the bus.", Action: ActionReboot}},
		{"truncated after pid", "NVRM: Xid (PCI:0000:01:00): 38, pid=1659,",
			&Event{Kind: "xid", Code: 38, PCI: "0000:01:00", PID: ptr(1659), Action: ActionNone}},
		{"MIG attribution", "NVRM: Xid (PCI:0000:01:00 GPU-I:05 GPU-CI:01): 94, pid=7194, name=python, Contained: CE User Channel (0x9). RST: No, D-RST: No",
			&Event{Kind: "xid", Code: 94, PCI: "0000:01:00", PID: ptr(7194), Process: ptr("python"), Message: "Contained: CE User Channel (0x9). RST: No, D-RST: No", Action: ActionNone}},
		{"154 reset", "NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
			&Event{Kind: "xid", Code: 154, PCI: "0008:01:00", Message: "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", Action: ActionResetGPU}},
		{"154 reboot", "NVRM: Xid (PCI:0000:02:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
			&Event{Kind: "xid", Code: 154, PCI: "0000:02:00", Message: "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", Action: ActionReboot}},
		{"154 drain and reset", "NVRM: Xid (PCI:0000:02:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)",
			&Event{Kind: "xid", Code: 154, PCI: "0000:02:00", Message: "GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)", Action: ActionResetGPU}},
		{"154 number only", "NVRM: Xid (PCI:0000:02:00): 154, GPU recovery action changed from 0x0 to 0x2",
			&Event{Kind: "xid", Code: 154, PCI: "0000:02:00", Message: "GPU recovery action changed from 0x0 to 0x2", Action: ActionReboot}},
		{"154 back to none", "NVRM: Xid (PCI:0000:02:00): 154, GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)",
			&Event{Kind: "xid", Code: 154, PCI: "0000:02:00", Message: "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", Action: ActionNone}},
		{"unknown code", "NVRM: Xid (PCI:0000:02:00): 999, pid=1, name=a, b",
			&Event{Kind: "xid", Code: 999, PCI: "0000:02:00", PID: ptr(1), Process: ptr("a"), Message: "b", Action: ActionUnknown}},
		{"code newer than the catalogue", "NVRM: Xid (PCI:0000:02:00): 185, pid=1, name=a, b",
			&Event{Kind: "xid", Code: 185, PCI: "0000:02:00", PID: ptr(1), Process: ptr("a"), Message: "b", Action: ActionUnknown}},
		{"catalogue-only code", "NVRM: Xid (PCI:0000:02:00): 161, pid=1, name=a, b",
			&Event{Kind: "xid", Code: 161, PCI: "0000:02:00", PID: ptr(1), Process: ptr("a"), Message: "b", Action: ActionNone}},
		{"sxid non-fatal", "nvidia-nvswitch3: SXid (PCI:0000:4e:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)",
			&Event{Kind: "sxid", Code: 12028, PCI: "0000:4e:00", Message: "Non-fatal, Link 32 egress non-posted PRIV error (First)", Action: ActionNone}},
		// Shapes from pastes in public threads (testdata/pastes.log says where each is from).
		{"talosctl dmesg", "mc-pt1-pkp-srv-1a: kern:     err: [2025-09-13T20:46:45.810476849Z]: NVRM: Xid (PCI:0000:01:00): 43, pid=80798, name=llama-server, Ch 00000008",
			&Event{Kind: "xid", Code: 43, PCI: "0000:01:00", PID: ptr(80798), Process: ptr("llama-server"), Message: "Ch 00000008", Action: ActionRestartApp, Time: "2025-09-13T20:46:45.810476849Z"}},
		{"talosctl dmesg, one node", "kern: warning: [2025-09-13T20:46:46.000000849Z]: NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.",
			&Event{Kind: "xid", Code: 79, PCI: "0000:01:00", Message: "GPU has fallen off the bus.", Action: ActionReboot, Time: "2025-09-13T20:46:46.000000849Z"}},
		{"journalctl pl_PL", "kwi 15 07:56:59 stacja kernel: NVRM: Xid (PCI:0000:00:07): 43, pid=1, name=a, Ch 00000008",
			&Event{Kind: "xid", Code: 43, PCI: "0000:00:07", PID: ptr(1), Process: ptr("a"), Message: "Ch 00000008", Action: ActionRestartApp, Time: "kwi 15 07:56:59"}},
		{"journalctl fr_FR", "oct. 11 09:53:05 alexv-pop-s76 kernel: NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.",
			&Event{Kind: "xid", Code: 79, PCI: "0000:01:00", Message: "GPU has fallen off the bus.", Action: ActionReboot, Time: "oct. 11 09:53:05"}},
		{"journalctl zh_CN", "11月 15 14:15:47 leon-NF5468M6 kernel: NVRM: Xid (PCI:0000:dc:00): 79, GPU has fallen off the bus.",
			&Event{Kind: "xid", Code: 79, PCI: "0000:dc:00", Message: "GPU has fallen off the bus.", Action: ActionReboot, Time: "11月 15 14:15:47"}},
		{"wrapping tool's tag before dmesg stamp", "[pod/gpu-node-agent-7x2kq/agent] [ 1305.001007] NVRM: Xid (PCI:0000:b3:00): 79, GPU has fallen off the bus.",
			&Event{Kind: "xid", Code: 79, PCI: "0000:b3:00", Message: "GPU has fallen off the bus.", Action: ActionReboot, Time: "1305.001007"}},
		{"wrapping tool's tag before journalctl stamp", "[node-07] Nov 30 02:27:31 node-07 kernel: NVRM: Xid (PCI:0000:c1:00): 79, GPU has fallen off the bus.",
			&Event{Kind: "xid", Code: 79, PCI: "0000:c1:00", Message: "GPU has fallen off the bus.", Action: ActionReboot, Time: "Nov 30 02:27:31"}},
		{"wrapping tool's tag, no stamp", "[node-07] NVRM: Xid (PCI:0000:c1:00): 79, GPU has fallen off the bus.",
			&Event{Kind: "xid", Code: 79, PCI: "0000:c1:00", Message: "GPU has fallen off the bus.", Action: ActionReboot}},
		{"redacted pci xx", "NVRM: Xid (PCI:0000:xx:00): 109, ... errorString CTX SWITCH TIMEOUT",
			&Event{Kind: "xid", Code: 109, Message: "... errorString CTX SWITCH TIMEOUT", Action: ActionResetGPU}},
		{"redacted pci stars", "[Fri Aug  9 13:32:56 2024] NVRM: Xid (PCI:****): 94, pid='<unknown>', name=<unknown>, Contained: SM (0x1). RST: No, D-RST: No",
			&Event{Kind: "xid", Code: 94, Message: "Contained: SM (0x1). RST: No, D-RST: No", Action: ActionNone, Time: "Fri Aug  9 13:32:56 2024"}},
		{"quoted line in a list", `  "NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.",`,
			&Event{Kind: "xid", Code: 79, PCI: "0000:06:00", Message: "GPU has fallen off the bus.", Action: ActionReboot}},
		{"quoted line with stamp", `"[Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): 43, pid=1, name=a, Ch 00000008"`,
			&Event{Kind: "xid", Code: 43, PCI: "0000:cb:00", PID: ptr(1), Process: ptr("a"), Message: "Ch 00000008", Action: ActionRestartApp, Time: "Fri Aug 30 11:43:14 2024"}},
		{"markdown quote", "> [Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 43, pid=1, name=a, Ch 00000008",
			&Event{Kind: "xid", Code: 43, PCI: "0000:cb:00", PID: ptr(1), Process: ptr("a"), Message: "Ch 00000008", Action: ActionRestartApp, Time: "Fri Aug 30 11:43:09 2024"}},
		{"message ending in a quote keeps it", `NVRM: Xid (PCI:0000:06:00): 13, pid=1, name=a, Exception "x"`,
			&Event{Kind: "xid", Code: 13, PCI: "0000:06:00", PID: ptr(1), Process: ptr("a"), Message: `Exception "x"`, Action: ActionRestartApp}},
		// Real pastes: util-linux dmesg -x --time-format iso
		// (leptonai/gpud#870), NVIDIA's own Xid page with the stamp elided
		// as "[…]", and the same dmesg -x line inside a JSON log field
		// (leptonai/gpud#338).
		{"dmesg -x iso", "syslog:err   : 2025-05-27T04:18:56,089671+00:00 NVRM: Xid (PCI:0000:04:00): 79, GPU has fallen off the bus",
			&Event{Kind: "xid", Code: 79, PCI: "0000:04:00", Message: "GPU has fallen off the bus", Action: ActionReboot, Time: "2025-05-27T04:18:56,089671+00:00"}},
		{"dmesg -x with dmesg stamp", "kern  :err   : [ 1305.001007] NVRM: Xid (PCI:0000:b3:00): 79, GPU has fallen off the bus.",
			&Event{Kind: "xid", Code: 79, PCI: "0000:b3:00", Message: "GPU has fallen off the bus.", Action: ActionReboot, Time: "1305.001007"}},
		{"elided stamp", "[…] NVRM: Xid (0000:03:00): 14, Channel 00000001",
			&Event{Kind: "xid", Code: 14, PCI: "0000:03:00", Message: "Channel 00000001", Action: ActionNone}},
		{"dmesg -x line in a JSON field", `{"msg":"known xid","line":"kern  :err   : 2025-05-27T04:18:56,089671+00:00 NVRM: Xid (PCI:0000:04:00): 79, GPU has fallen off the bus"}`,
			&Event{Kind: "xid", Code: 79, PCI: "0000:04:00", Message: "GPU has fallen off the bus", Action: ActionReboot}},
		{"sxid in a JSON field", `{"line":"kern  :err   : 2025-01-25T10:34:54,859532+00:00 nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Non-fatal, Link 32"}`,
			&Event{Kind: "sxid", Code: 12028, PCI: "0000:84:00", Message: "Non-fatal, Link 32", Action: ActionNone}},
		{"garbled pci is not redacted", "NVRM: Xid (PCI:zz00:3b:00): 79, GPU has fallen off the bus.", nil},
		{"sxid detail line", "nvidia-nvswitch3: SXid (PCI:0000:4e:00.0): 12028, Severity 0 Engine instance 32 Sub-engine instance 00", nil},
		{"kmsg continuation", " DEVICE=+pci:0000:3b:00.0", nil},
		{"other NVRM line", "NVRM: GPU 0000:06:00.0: GPU has fallen off the bus.", nil},
		{"code zero", "NVRM: Xid (PCI:0000:3b:00): 0, x", nil},
		{"bad pci", "NVRM: Xid (PCI:0000:3b): 79, x", nil},
		{"empty", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseLine(tt.line)
			if tt.want == nil {
				if ok {
					t.Errorf("ParseLine(%q) = %+v, want no event", tt.line, got)
				}
				return
			}
			if !ok {
				t.Fatalf("ParseLine(%q): no event", tt.line)
			}
			if !reflect.DeepEqual(got, *tt.want) {
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(tt.want)
				t.Errorf("ParseLine(%q) =\n  %s\nwant\n  %s", tt.line, g, w)
			}
		})
	}
}

// TestGolden parses every testdata/*.log and compares the JSON lines with
// testdata/*.golden.jsonl; go test -update rewrites them.
func TestGolden(t *testing.T) {
	t.Parallel()
	logs, err := filepath.Glob("testdata/*.log")
	if err != nil || len(logs) == 0 {
		t.Fatalf("no testdata logs: %v", err)
	}
	for _, path := range logs {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var out bytes.Buffer
			enc := json.NewEncoder(&out)
			if _, err := Parse(f, func(ev Event) error { return enc.Encode(ev) }); err != nil {
				t.Fatalf("Parse: %v", err)
			}
			golden := strings.TrimSuffix(path, ".log") + ".golden.jsonl"
			if *update {
				if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(out.Bytes(), want) {
				t.Errorf("%s differs from %s:\n got:\n%s\nwant:\n%s", path, golden, out.Bytes(), want)
			}
		})
	}
}

// TestParseSXidDetail checks that Parse folds an SXid's detail lines into
// it, and turns a run of detail lines whose SXid line was lost into one
// event.
func TestParseSXidDetail(t *testing.T) {
	t.Parallel()
	const (
		head = "nvidia-nvswitch3: SXid (PCI:0000:4e:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)\n"
		sev  = "nvidia-nvswitch3: SXid (PCI:0000:4e:00.0): 12028, Severity 0 Engine instance 32 Sub-engine instance 00\n"
		data = "nvidia-nvswitch3: SXid (PCI:0000:4e:00.0): 12028, Data {0x00000000, 0x00000000, 0x00000000, 0x00000000}\n"
		sev2 = "nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): 20034, Severity 1 Engine instance 46 Sub-engine instance 00\n"
		xid  = "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
		// From https://github.com/leptonai/gpud/pull/338 (testdata/pastes.log).
		gpudData = "kern  :err   : 2025-01-25T10:34:54,859532+00:00 nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Data {0x000001c0, 0x00bd5c8a, 0x00000500, 0x00000064, 0x00000000, 0x40008000, 0x5a001100, 0x00000000, 0x00000000}"
		gpudJSON = `{"level":"warn","ts":"2025-01-28T06:47:16Z","caller":"diagnose/scan.go:263","msg":"known sxid","line":"` + gpudData + `"}`
	)
	tests := []struct {
		name string
		in   string
		want []string // "kind code action message"
	}{
		{"whole report", head + sev + data, []string{"sxid 12028 none Non-fatal, Link 32 egress non-posted PRIV error (First)"}},
		{"header lost", sev + data, []string{"sxid 12028 investigate Severity 0 Engine instance 32 Sub-engine instance 00"}},
		{"only Data left", data, []string{"sxid 12028 investigate Data {0x00000000, 0x00000000, 0x00000000, 0x00000000}"}},
		{"two switches, headers lost", sev + data + sev2, []string{
			"sxid 12028 investigate Severity 0 Engine instance 32 Sub-engine instance 00",
			"sxid 20034 investigate Severity 1 Engine instance 46 Sub-engine instance 00"}},
		// A real Data line whose SXid line was not in the paste
		// (leptonai/gpud#338), as dmesg -x printed it and as gpud logged it
		// inside a JSON field: one event, without the JSON's closing "}.
		{"real Data line, then the same in JSON", gpudData + "\n" + gpudJSON + "\n", []string{
			"sxid 12028 investigate Data {0x000001c0, 0x00bd5c8a, 0x00000500, 0x00000064, 0x00000000, 0x40008000, 0x5a001100, 0x00000000, 0x00000000}"}},
		{"real Data line in JSON alone", gpudJSON + "\n", []string{
			"sxid 12028 investigate Data {0x000001c0, 0x00bd5c8a, 0x00000500, 0x00000064, 0x00000000, 0x40008000, 0x5a001100, 0x00000000, 0x00000000}"}},
		{"an XID between", head + xid + data, []string{
			"sxid 12028 none Non-fatal, Link 32 egress non-posted PRIV error (First)",
			"xid 79 reboot GPU has fallen off the bus.",
			"sxid 12028 investigate Data {0x00000000, 0x00000000, 0x00000000, 0x00000000}"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			_, err := Parse(strings.NewReader(tt.in), func(ev Event) error {
				got = append(got, fmt.Sprintf("%s %d %s %s", ev.Kind, ev.Code, ev.Action, ev.Message))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("events:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestNotXIDProducesNothing(t *testing.T) {
	t.Parallel()
	f, err := os.Open("testdata/notxid.log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = Parse(f, func(ev Event) error {
		t.Errorf("unexpected event %+v", ev)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestParseStream(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", MaxLine-100) // longer than bufio's default buffer, within the bound
	huge := strings.Repeat("y", MaxLine+10)
	in := strings.Join([]string{
		"[ 1.0] " + long,
		"[ 2.0] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=a, " + long,
		huge + " NVRM: Xid (PCI:0000:3b:00): 79, past the line bound",
		"[ 3.0] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\r",
		"[ 4.0] NVRM: Xid (PCI:0000:3b:00): 48, no trailing newline",
	}, "\n")
	var got []Event
	st, err := Parse(strings.NewReader(in), func(ev Event) error { got = append(got, ev); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if st != (Stats{Lines: 5, Cut: 1}) {
		t.Errorf("stats = %+v, want 5 lines, 1 cut", st)
	}
	var codes []int
	for _, ev := range got {
		codes = append(codes, ev.Code)
	}
	if !slices.Equal(codes, []int{13, 79, 48}) {
		t.Fatalf("codes = %v, want [13 79 48]", codes)
	}
	if len(got[0].Message) != len(long) {
		t.Errorf("long message cut to %d bytes", len(got[0].Message))
	}
	if got[1].Message != "GPU has fallen off the bus." {
		t.Errorf("CR not trimmed: %q", got[1].Message)
	}

	stop := errors.New("stop")
	_, err = Parse(strings.NewReader(in), func(Event) error { return stop })
	if !errors.Is(err, stop) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("emit error = %v, want it wrapped with line 2", err)
	}
	_, err = Parse(iotestErrReader{}, func(Event) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "read line 1") {
		t.Errorf("read error = %v", err)
	}
}

// TestParseCutsLongLines checks where the line bound falls and what a cut
// line still yields: the XID in its first MaxLine bytes, nothing after.
func TestParseCutsLongLines(t *testing.T) {
	t.Parallel()
	const xidLine = "NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=a, "
	pad := func(n int) string { return strings.Repeat("z", n) }
	tests := []struct {
		name  string
		in    string
		codes []int
		want  Stats
	}{
		{name: "exactly MaxLine", in: xidLine + pad(MaxLine-len(xidLine)) + "\n", codes: []int{13}, want: Stats{Lines: 1}},
		{name: "exactly MaxLine, no newline", in: xidLine + pad(MaxLine-len(xidLine)), codes: []int{13}, want: Stats{Lines: 1}},
		{name: "one byte over", in: xidLine + pad(MaxLine-len(xidLine)+1) + "\n", codes: []int{13}, want: Stats{Lines: 1, Cut: 1}},
		{name: "XID past the bound is not seen", in: pad(MaxLine) + xidLine + "\n", want: Stats{Lines: 1, Cut: 1}},
		{name: "XID straddling the bound is not seen", in: pad(MaxLine-10) + xidLine + "\n", want: Stats{Lines: 1, Cut: 1}},
		{name: "the line after a cut one is whole", in: pad(3*MaxLine) + "\n" + xidLine + "\n", codes: []int{13}, want: Stats{Lines: 2, Cut: 1}},
		{name: "three cut lines", in: strings.Repeat(pad(MaxLine+1)+"\n", 3), want: Stats{Lines: 3, Cut: 3}},
		{name: "NUL bytes are not newlines", in: strings.Repeat("\x00", 5*MaxLine), want: Stats{Lines: 1, Cut: 1}},
		{name: "empty lines count", in: "\n\n" + xidLine + "\n", codes: []int{13}, want: Stats{Lines: 3}},
		{name: "empty input", want: Stats{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var codes []int
			st, err := Parse(strings.NewReader(tt.in), func(ev Event) error { codes = append(codes, ev.Code); return nil })
			if err != nil {
				t.Fatal(err)
			}
			if st != tt.want || !slices.Equal(codes, tt.codes) {
				t.Errorf("Parse = %+v, codes %v; want %+v, codes %v", st, codes, tt.want, tt.codes)
			}
		})
	}
}

// TestParseEndlessLine reads 256 MiB of one line of NUL bytes, as from
// /dev/zero, and checks that Parse keeps no more than about one line of it
// and stops with the reader's error, counting the line as cut.
func TestParseEndlessLine(t *testing.T) {
	t.Parallel()
	errGaveUp := errors.New("gave up")
	r := &zeroReader{left: 256 << 20, err: errGaveUp}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	st, err := Parse(r, func(ev Event) error { t.Errorf("event %+v from zeros", ev); return nil })
	runtime.ReadMemStats(&after)
	if !errors.Is(err, errGaveUp) || !strings.Contains(err.Error(), "read line 1") {
		t.Errorf("Parse = %v, want the reader's error at line 1", err)
	}
	if st != (Stats{Lines: 1, Cut: 1}) {
		t.Errorf("stats = %+v, want 1 line, 1 cut", st)
	}
	// TotalAlloc only grows; other tests running in parallel can add to
	// it, but not 256 MiB worth.
	if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
		t.Errorf("Parse allocated %d bytes over an endless line; want about one line's worth (%d)", got, MaxLine)
	}
}

// zeroReader returns left NUL bytes, then err.
type zeroReader struct {
	left int
	err  error
}

func (z *zeroReader) Read(p []byte) (int, error) {
	if z.left == 0 {
		return 0, z.err
	}
	n := min(len(p), z.left)
	clear(p[:n])
	z.left -= n
	return n, nil
}

type iotestErrReader struct{}

func (iotestErrReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestEventJSON(t *testing.T) {
	t.Parallel()
	ev, _ := ParseLine("NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"kind":"xid","code":79,"pci":"0000:3b:00","pid":null,"process":null,"message":"GPU has fallen off the bus.","action":"reboot"}`
	if string(b) != want {
		t.Errorf("JSON = %s\nwant   %s", b, want)
	}
	// A redacted address is null, not "": there is no address to give.
	ev, _ = ParseLine("[ 1.5] NVRM: Xid (PCI:0000:xx:00): 79, GPU has fallen off the bus.")
	b, err = json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	want = `{"kind":"xid","code":79,"pci":null,"pid":null,"process":null,"message":"GPU has fallen off the bus.","action":"reboot","time":"1.5"}`
	if string(b) != want {
		t.Errorf("JSON = %s\nwant   %s", b, want)
	}
}

// BenchmarkParse measures a kernel log where one line in ten is an XID,
// about what a busy node's dmesg looks like after a bad day.
func BenchmarkParse(b *testing.B) {
	var sb strings.Builder
	for i := range 10000 {
		if i%10 == 0 {
			sb.WriteString("[ 1305.001007] " + FormatLine("0000:b3:00", 48, -1, "", "") + "\n")
			continue
		}
		sb.WriteString("[ 1305.001090] pcieport 0000:00:01.0: AER: Corrected error received: 0000:00:01.0\n")
	}
	in := sb.String()
	b.SetBytes(int64(len(in)))
	b.ResetTimer()
	for b.Loop() {
		n := 0
		if _, err := Parse(strings.NewReader(in), func(Event) error { n++; return nil }); err != nil || n != 1000 {
			b.Fatalf("n=%d err=%v", n, err)
		}
	}
}
