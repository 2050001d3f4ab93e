package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// With --log-level debug a run logs the engine's steps and the injector's
// on stderr, each with its component; --log-format json makes every line
// one JSON object; the default level adds nothing to a run's stderr.
func TestRunLogs(t *testing.T) {
	t.Parallel()
	run := func(args ...string) (stdout, stderr string, code int) {
		var out, errb bytes.Buffer
		code = Main(append(args, "run", "../../examples/xid-79-fallen-off-bus.yaml"), strings.NewReader(""), &out, &errb)
		return out.String(), errb.String(), code
	}

	_, text, code := run("--log-level", "debug")
	if code != 1 { // the example's dcgm-xid-errors misses on purpose
		t.Fatalf("exit %d, want 1:\n%s", code, text)
	}
	for _, want := range []string{
		"level=DEBUG msg=planned component=engine",
		"level=INFO msg=inject component=engine",
		"level=DEBUG msg=inject component=injector fault=hardware.xid mechanism=twin",
		"level=INFO msg=injected component=injector",
		"level=INFO msg=recovered component=injector",
		"level=DEBUG msg=observe component=engine expectation=kmsg-xid",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("debug log lacks %q:\n%s", want, text)
		}
	}

	_, js, _ := run("--log-level", "info", "--log-format", "json")
	lines := strings.Split(strings.TrimSpace(js), "\n")
	components := map[string]int{}
	for _, l := range lines[:len(lines)-1] { // the last is the run's one-line error
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("line %q is not one JSON object: %v", l, err)
		}
		c, _ := rec["component"].(string)
		components[c]++
	}
	if components["engine"] == 0 || components["injector"] == 0 {
		t.Errorf("json log components %v, want engine and injector lines:\n%s", components, js)
	}

	if _, quiet, _ := run(); strings.Contains(quiet, "level=") {
		t.Errorf("the default level logged:\n%s", quiet)
	}
	if _, bad, code := run("--log-format", "yaml"); code != 2 || !strings.Contains(bad, "--log-format") {
		t.Errorf("--log-format yaml: exit %d, %q; want 2 naming the flag", code, bad)
	}
}
