package cli

import (
	"context"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/model/xid"
	"github.com/gpuchaos/gpuchaos/internal/node/kmsg"
)

// startTwinAgent runs 'agent --twin' with extra flags until the test ends
// and returns a func that fetches its /metrics page, and its stderr.
func startTwinAgent(t *testing.T, extra ...string) (page func() string, stderr *testutil.LockedBuffer) {
	t.Helper()
	addr := testutil.FreeAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	var out, errb testutil.LockedBuffer
	root := newRoot(strings.NewReader(""), &out, &errb)
	root.SetArgs(append([]string{"agent", "--twin", "--twin-gpus", "2", "--listen", addr, "--interval", "100ms"}, extra...))
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	client := &http.Client{Timeout: 5 * time.Second}
	t.Cleanup(func() {
		cancel()
		client.CloseIdleConnections()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agent returned %v after cancel", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("agent did not stop within 10s of cancel")
		}
	})
	page = func() string {
		resp, err := client.Get("http://" + addr + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	waitFor(t, page, `DCGM_FI_DEV_XID_ERRORS{gpu="1"`, 30*time.Second)
	return page, &errb
}

// waitFor polls page until it contains want and returns that page; the
// last page it saw is logged should it wait in vain.
func waitFor(t *testing.T, page func() string, want string, within time.Duration) string {
	t.Helper()
	var p string
	found := false
	defer func() {
		if !found {
			t.Logf("the last page:\n%s", p)
		}
	}()
	testutil.Eventually(t, within, want+" on /metrics", func() bool {
		p = page()
		return strings.Contains(p, want)
	})
	found = true
	return p
}

// writeXID logs an XID line for the GPU gpu of a page's series, as the
// driver would, and returns the GPU's bus id as the page labels it.
func writeXID(t *testing.T, page, gpu string, code int) {
	t.Helper()
	m := regexp.MustCompile(`DCGM_FI_DEV_XID_ERRORS\{gpu="` + gpu + `",[^}]*pci_bus_id="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("page has no XID series for gpu %s", gpu)
	}
	pci, ok := xid.NormalizePCI(m[1])
	if !ok {
		t.Fatalf("bus id %q does not normalise", m[1])
	}
	if err := (kmsg.Writer{}).Write(kmsg.LevelErr, xid.FormatLine(pci, code, -1, "", "")); err != nil {
		t.Fatal(err)
	}
}

func TestAgentWatchesKernelLogXIDs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the test writes to and reads the real /dev/kmsg")
	}
	page, errb := startTwinAgent(t)
	writeXID(t, page(), "1", 48)
	p := waitFor(t, page, `gpuchaos_xid_events_total{gpu="1",`, 5*time.Second)
	if !regexp.MustCompile(`(?m)^DCGM_FI_DEV_XID_ERRORS\{gpu="1",[^}]*\} 48$`).MatchString(p) {
		t.Errorf("DCGM_FI_DEV_XID_ERRORS of gpu 1 is not 48:\n%s", p)
	}
	if !regexp.MustCompile(`(?m)^gpuchaos_xid_events_total\{gpu="1",UUID="GPU-[^"]+",code="48"\} 1$`).MatchString(p) {
		t.Errorf("gpuchaos_xid_events_total of gpu 1, code 48 is not 1:\n%s", p)
	}
	if !regexp.MustCompile(`(?m)^DCGM_FI_DEV_XID_ERRORS\{gpu="0",[^}]*\} 0$`).MatchString(p) {
		t.Errorf("DCGM_FI_DEV_XID_ERRORS of gpu 0 moved; the line named gpu 1:\n%s", p)
	}
	if s := errb.String(); strings.Contains(s, "warning") {
		t.Errorf("unexpected warning: %s", s)
	}
}

func TestAgentWithoutXIDWatch(t *testing.T) {
	tests := []struct {
		name        string
		flags       []string
		wantWarning bool
	}{
		{name: "no-xid-watch", flags: []string{"--no-xid-watch"}},
		{name: "no kernel log", flags: []string{"--kmsg", "/nonexistent/kmsg"}, wantWarning: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			page, errb := startTwinAgent(t, tc.flags...)
			if got := strings.Count(errb.String(), "warning: not watching for XIDs"); got != map[bool]int{true: 1}[tc.wantWarning] {
				t.Errorf("stderr %q: %d warnings, want one only when the log cannot be read", errb.String(), got)
			}
			if os.Geteuid() != 0 {
				return // cannot write a line to show it is not seen
			}
			writeXID(t, page(), "1", 48)
			// A watching agent shows the XID within milliseconds (see
			// TestAgentWatchesKernelLogXIDs); give this one ample time.
			time.Sleep(500 * time.Millisecond)
			if p := page(); strings.Contains(p, "gpuchaos_xid_events_total") {
				t.Errorf("an agent not watching the kernel log counted an XID:\n%s", p)
			}
		})
	}
}
