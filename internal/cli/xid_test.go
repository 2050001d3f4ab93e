package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// wantBadInput runs args and checks the exit code and that stderr is one
// line containing want.
func wantBadInput(t *testing.T, args []string, wantCode int, want string) {
	t.Helper()
	code, _, errs := runCLI(t, "", args...)
	if code != wantCode || !strings.Contains(errs, want) {
		t.Fatalf("exit %d, stderr %q; want %d and %q", code, errs, wantCode, want)
	}
	if n := strings.Count(errs, "\n"); n != 1 {
		t.Errorf("stderr has %d lines; want one", n)
	}
}

func runCLI(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

const kernelLog = `[  612.440113] NVRM: Xid (PCI:0000:3b:00): 13, pid=20417, name=python3, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address
[  613.000000] usb 1-1: new high-speed USB device number 2 using xhci_hcd
[155044.078590] NVRM: Xid (PCI:0000:06:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
[155044.081230] NVRM: Xid (PCI:0000:06:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)
`

func TestXIDParse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "kern.log")
	if err := os.WriteFile(file, []byte(kernelLog), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"xid", "parse"}, {"xid", "parse", "-"}, {"xid", "parse", file}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errs := runCLI(t, kernelLog, args...)
			if code != 0 || errs != "" {
				t.Fatalf("exit %d, stderr %q", code, errs)
			}
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != 3 {
				t.Fatalf("%d lines, want 3:\n%s", len(lines), out)
			}
			var evs []map[string]any
			for _, l := range lines {
				var m map[string]any
				if err := json.Unmarshal([]byte(l), &m); err != nil {
					t.Fatalf("line %q is not JSON: %v", l, err)
				}
				evs = append(evs, m)
			}
			wantCodes := []float64{13, 79, 154}
			wantActions := []string{"restart-app", "reboot", "reboot"}
			for i, m := range evs {
				if m["kind"] != "xid" || m["code"] != wantCodes[i] || m["action"] != wantActions[i] {
					t.Errorf("event %d = %v", i, m)
				}
			}
			if evs[0]["pid"] != float64(20417) || evs[0]["process"] != "python3" || evs[0]["pci"] != "0000:3b:00" {
				t.Errorf("event 0 = %v", evs[0])
			}
			if v, ok := evs[1]["pid"]; !ok || v != nil {
				t.Errorf("unknown pid should be null, got %v (present %v)", v, ok)
			}
		})
	}
}

func TestXIDParseNothing(t *testing.T) {
	t.Parallel()
	code, out, errs := runCLI(t, "hello\nworld\n", "xid", "parse")
	if code != 0 || out != "" || errs != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 0 and nothing", code, out, errs)
	}
}

func TestXIDErrors(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nope.log")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"missing file", []string{"xid", "parse", missing}, "gpuchaos: open " + missing + ": no such file or directory\n"},
		{"two files", []string{"xid", "parse", "a", "b"}, "gpuchaos: accepts at most 1 arg(s), received 2\n"},
		{"bad format", []string{"xid", "codes", "--format", "yaml"}, "gpuchaos: --format: \"yaml\" is not one of table or json\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := runCLI(t, "", tt.args...)
			if code == 0 || out != "" || errs != tt.want {
				t.Errorf("exit %d, stdout %q, stderr %q; want non-zero and %q", code, out, errs, tt.want)
			}
		})
	}
}

func TestXIDCodes(t *testing.T) {
	t.Parallel()
	code, out, errs := runCLI(t, "", "xid", "codes")
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	if !strings.HasPrefix(out, "CODE") || !strings.Contains(out, "\n79  ") || !strings.Contains(out, "reboot") {
		t.Errorf("table output:\n%s", out)
	}

	code, out, errs = runCLI(t, "", "xid", "codes", "--format", "json")
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	var list []struct {
		Code   int    `json:"code"`
		Action string `json:"action"`
		Text   string `json:"text"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	got := map[int]string{}
	for _, in := range list {
		got[in.Code] = in.Action
	}
	// 41 and 160 come from NVIDIA's catalogue (internal/model/xid's
	// catalog.csv), not the hand-written table.
	for c, a := range map[int]string{13: "restart-app", 48: "reset-gpu", 79: "reboot", 63: "none", 74: "investigate", 154: "see-text",
		41: "restart-app", 160: "none"} {
		if got[c] != a {
			t.Errorf("code %d action %q, want %q", c, got[c], a)
		}
	}
}

func TestXIDHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"xid", "--help"}, {"xid", "parse", "--help"}, {"xid", "codes", "--help"}, {"xid"}} {
		code, out, _ := runCLI(t, "", args...)
		if code != 0 || !strings.Contains(out, "Examples:") {
			t.Errorf("%v: exit %d, help without examples:\n%s", args, code, out)
		}
	}
}
