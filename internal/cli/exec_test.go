package cli

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
)

// envOf parses /usr/bin/env's output into a map and counts each name, so a
// test can tell "set once" from "set twice".
func envOf(out string) (map[string]string, map[string]int) {
	vals, counts := map[string]string{}, map[string]int{}
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if ok {
			vals[k] = v
			counts[k]++
		}
	}
	return vals, counts
}

func TestExecBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     []string
	}{
		{"bare exec", []string{"exec"}, 2, []string{"--fault is required"}},
		{"no command", []string{"exec", "--fault", "nccl.p2p-off"}, 2, []string{"no command to run"}},
		{"unknown fault with a typo", []string{"exec", "--fault", "nccl.p2p-of", "--", "/bin/true"}, 2, []string{"unknown fault", "nccl.p2p-off?"}},
		{"unknown fault", []string{"exec", "--fault", "nope.nothing", "--", "/bin/true"}, 2, []string{`unknown fault "nope.nothing"`}},
		{"fault without env mechanism", []string{"exec", "--fault", "hardware.xid", "--", "/bin/true"}, 2, []string{"hardware.xid has no env mechanism", "its mechanisms: kernel-log, dcgm-inject, twin", "exec runs nccl.algo"}},
		{"unknown parameter", []string{"exec", "--fault", "nccl.proto", "--param", "algo=Ring", "--", "/bin/true"}, 2, []string{"--param algo", "unknown parameter of nccl.proto", "known: proto"}},
		{"parameter on a fault without any", []string{"exec", "--fault", "nccl.p2p-off", "--param", "x=1", "--", "/bin/true"}, 2, []string{"--param x=1", "takes no parameters"}},
		{"enum value not allowed", []string{"exec", "--fault", "nccl.proto", "--param", "proto=ll", "--", "/bin/true"}, 2, []string{"--param proto", `"ll" is not one of LL, LL128, Simple`}},
		{"int above the maximum", []string{"exec", "--fault", "nccl.ib-timeout", "--param", "timeout=23", "--", "/bin/true"}, 2, []string{"--param timeout", "above the maximum 22"}},
		{"int below the minimum", []string{"exec", "--fault", "nccl.ib-timeout", "--param", "timeout=0", "--", "/bin/true"}, 2, []string{"--param timeout", "below the minimum 1"}},
		{"int not a number", []string{"exec", "--fault", "nccl.ib-timeout", "--param", "timeout=ten", "--", "/bin/true"}, 2, []string{"--param timeout", "not a valid int"}},
		{"param without =", []string{"exec", "--fault", "nccl.proto", "--param", "proto", "--", "/bin/true"}, 2, []string{`--param "proto": want KEY=VALUE`}},
		{"param given twice", []string{"exec", "--fault", "nccl.proto", "--param", "proto=LL", "--param", "proto=LL128", "--", "/bin/true"}, 2, []string{"--param proto: given twice"}},
		{"json without dry-run", []string{"exec", "--fault", "nccl.p2p-off", "--format", "json", "--", "/bin/true"}, 2, []string{"--format json applies to --dry-run and --list"}},
		{"bad format", []string{"exec", "--list", "--format", "xml"}, 2, []string{"--format"}},
		{"list with a command", []string{"exec", "--list", "--", "/bin/true"}, 2, []string{"--list takes no"}},
		{"command not found", []string{"exec", "--quiet", "--fault", "nccl.p2p-off", "--", "gpuchaos-no-such-command-xyz"}, 127, []string{"gpuchaos-no-such-command-xyz", "not found"}},
		{"command not executable", []string{"exec", "--quiet", "--fault", "nccl.p2p-off", "--", "/dev/null"}, 126, []string{"/dev/null", "permission denied"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, errs := runCLI(t, "", tc.args...)
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.wantCode, errs)
			}
			for _, w := range tc.want {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr %q lacks %q", errs, w)
				}
			}
			if n := strings.Count(errs, "\n"); n != 1 || out != "" {
				t.Errorf("want one line on stderr and nothing on stdout; got %q / %q", errs, out)
			}
		})
	}
}

// TestExecEnvironment runs /usr/bin/env under each fault and checks what
// arrives: the fault's variables, set once each, the overlay winning over an
// inherited value, and the rest of the environment passed through. Not
// parallel: it sets variables of this process for the child to inherit.
func TestExecEnvironment(t *testing.T) {
	t.Setenv("NCCL_PROTO", "Simple")
	t.Setenv("NCCL_DEBUG", "INFO")
	t.Setenv("GPUCHAOS_EXEC_TEST", "inherited")
	tests := []struct {
		name       string
		args       []string
		wantSet    map[string]string
		wantBanner string
	}{
		{
			name:       "p2p off",
			args:       []string{"--fault", "nccl.p2p-off"},
			wantSet:    map[string]string{"NCCL_P2P_DISABLE": "1"},
			wantBanner: "gpuchaos: exec with NCCL_P2P_DISABLE=1 (nccl.p2p-off)\n",
		},
		{
			name:       "socket fallback sets three",
			args:       []string{"--fault", "nccl.socket-fallback"},
			wantSet:    map[string]string{"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1"},
			wantBanner: "gpuchaos: exec with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 (nccl.socket-fallback)\n",
		},
		{
			name:       "overlay wins over the inherited protocol",
			args:       []string{"--fault", "nccl.proto", "--param", "proto=LL128"},
			wantSet:    map[string]string{"NCCL_PROTO": "LL128"},
			wantBanner: "gpuchaos: exec with NCCL_PROTO=LL128 (nccl.proto; replaces inherited NCCL_PROTO=Simple)\n",
		},
		{
			name:       "default parameter",
			args:       []string{"--fault", "nccl.ib-timeout"},
			wantSet:    map[string]string{"NCCL_IB_TIMEOUT": "1"},
			wantBanner: "gpuchaos: exec with NCCL_IB_TIMEOUT=1 (nccl.ib-timeout)\n",
		},
		{
			name:       "int parameter",
			args:       []string{"--fault", "nccl.ib-timeout", "--param", "timeout=22"},
			wantSet:    map[string]string{"NCCL_IB_TIMEOUT": "22"},
			wantBanner: "gpuchaos: exec with NCCL_IB_TIMEOUT=22 (nccl.ib-timeout)\n",
		},
		{
			name:    "quiet",
			args:    []string{"--quiet", "--fault", "nccl.algo", "--param", "algo=Ring"},
			wantSet: map[string]string{"NCCL_ALGO": "Ring"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"exec"}, tc.args...), "--", "/usr/bin/env")
			code, out, errs := runCLI(t, "", args...)
			if code != 0 {
				t.Fatalf("exit %d, stderr %q", code, errs)
			}
			if errs != tc.wantBanner {
				t.Errorf("stderr %q, want %q", errs, tc.wantBanner)
			}
			vals, counts := envOf(out)
			for k, v := range tc.wantSet {
				if vals[k] != v || counts[k] != 1 {
					t.Errorf("child saw %s=%q %d times, want %q once", k, vals[k], counts[k], v)
				}
			}
			if vals["GPUCHAOS_EXEC_TEST"] != "inherited" || vals["NCCL_DEBUG"] != "INFO" || vals["PATH"] == "" {
				t.Errorf("inherited variables lost: GPUCHAOS_EXEC_TEST=%q NCCL_DEBUG=%q PATH=%q",
					vals["GPUCHAOS_EXEC_TEST"], vals["NCCL_DEBUG"], vals["PATH"])
			}
			if _, set := tc.wantSet["NCCL_PROTO"]; !set && vals["NCCL_PROTO"] != "Simple" {
				t.Errorf("NCCL_PROTO=%q; a fault that does not set it must leave the inherited value", vals["NCCL_PROTO"])
			}
		})
	}
}

// TestExecCatalogue holds every environment fault of the catalogue to what
// exec relies on: its variables are KEY=VALUE with a value, its description
// names each variable, the NCCL family is all environment faults, and a run
// of /usr/bin/env sees exactly those values.
func TestExecCatalogue(t *testing.T) {
	t.Parallel()
	faults := execEnvFaults()
	var ids []string
	for _, f := range faults {
		ids = append(ids, f.ID)
	}
	want := []string{"nccl.algo", "nccl.ib-timeout", "nccl.one-channel", "nccl.p2p-off", "nccl.proto", "nccl.shm-off", "nccl.socket-fallback"}
	if slices.Sort(ids); !slices.Equal(ids, want) {
		t.Errorf("environment faults %v, want %v", ids, want)
	}
	for _, f := range faults {
		t.Run(f.ID, func(t *testing.T) {
			t.Parallel()
			vals, err := f.Resolve(nil)
			if err != nil {
				t.Fatal(err)
			}
			m := execEnvMechanism(f)
			env := m.Env(vals)
			if len(env) == 0 {
				t.Fatal("sets no variable")
			}
			for _, kv := range env {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || !strings.HasPrefix(k, "NCCL_") || v == "" {
					t.Errorf("variable %q: want NCCL_NAME=VALUE with a value", kv)
				}
				if !strings.Contains(m.Description, k) {
					t.Errorf("description %q does not name %s", m.Description, k)
				}
			}
			code, out, errs := runCLI(t, "", "exec", "--quiet", "--fault", f.ID, "--", "/usr/bin/env")
			if code != 0 {
				t.Fatalf("exit %d, stderr %q", code, errs)
			}
			got, _ := envOf(out)
			for _, kv := range env {
				k, v, _ := strings.Cut(kv, "=")
				if got[k] != v {
					t.Errorf("child saw %s=%q, want %q", k, got[k], v)
				}
			}
		})
	}
	// Every value an enum parameter allows reaches the variable.
	for _, f := range faults {
		for _, p := range f.Params {
			for _, e := range p.Enum {
				vals, err := f.Resolve(map[string]string{p.Name: e})
				if err != nil {
					t.Fatalf("%s %s=%s: %v", f.ID, p.Name, e, err)
				}
				if env := execEnvMechanism(f).Env(vals); !slices.ContainsFunc(env, func(kv string) bool { return strings.HasSuffix(kv, "="+e) }) {
					t.Errorf("%s %s=%s sets %v", f.ID, p.Name, e, env)
				}
			}
		}
	}
}

func TestExecExitStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		script   string
		wantCode int
		wantLine string // the one line after the banner; empty for none
	}{
		{"success", "exit 0", 0, ""},
		{"exit 3 passes through", "exit 3", 3, "gpuchaos: exec: /bin/sh exited with status 3 (under nccl.one-channel)\n"},
		{"exit 2 passes through", "exit 2", 2, "gpuchaos: exec: /bin/sh exited with status 2 (under nccl.one-channel)\n"},
		{"killed by SIGTERM is 143", "kill -TERM $$", 143, "gpuchaos: exec: /bin/sh killed by signal 15 (terminated) (under nccl.one-channel)\n"},
		{"killed by SIGKILL is 137", "kill -KILL $$", 137, "gpuchaos: exec: /bin/sh killed by signal 9 (killed) (under nccl.one-channel)\n"},
		{"variable visible to the script", `test "$NCCL_MAX_NCHANNELS" = 1 || exit 9`, 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, _, errs := runCLI(t, "", "exec", "--fault", "nccl.one-channel", "--", "/bin/sh", "-c", tc.script)
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.wantCode, errs)
			}
			want := "gpuchaos: exec with NCCL_MAX_NCHANNELS=1 (nccl.one-channel)\n" + tc.wantLine
			if errs != want {
				t.Errorf("stderr %q, want %q", errs, want)
			}
		})
	}
}

// TestExecPassesStdio checks the command reads gpuchaos's stdin and writes
// its stdout, and that flags after the command are the command's.
func TestExecPassesStdio(t *testing.T) {
	t.Parallel()
	code, out, errs := runCLI(t, "ranks: 2\n", "exec", "-q", "--fault", "nccl.shm-off", "/bin/sh", "-c", `read x; echo "$x $1"`, "sh", "--format")
	if code != 0 || out != "ranks: 2 --format\n" || errs != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 0, %q and nothing", code, out, errs, "ranks: 2 --format\n")
	}
}

// TestExecDryRun checks the printed delta; not parallel (sets a variable
// to show as inherited).
func TestExecDryRun(t *testing.T) {
	t.Setenv("NCCL_SHM_DISABLE", "0")
	t.Setenv("NCCL_IB_DISABLE", "1")
	t.Run("table", func(t *testing.T) {
		code, out, errs := runCLI(t, "", "exec", "--dry-run", "--fault", "nccl.socket-fallback", "--", "torchrun", "--nproc-per-node", "2", "x.py")
		if code != 0 || errs != "" {
			t.Fatalf("exit %d, stderr %q", code, errs)
		}
		for _, w := range []string{"nccl.socket-fallback sets:", "NCCL_SHM_DISABLE=1", `(now "0")`, "(already 1)", "(unset now)", "command: torchrun --nproc-per-node 2 x.py"} {
			if !strings.Contains(out, w) {
				t.Errorf("dry run %q lacks %q", out, w)
			}
		}
	})
	t.Run("json", func(t *testing.T) {
		code, out, errs := runCLI(t, "", "exec", "--dry-run", "--format", "json", "--fault", "nccl.proto", "--param", "proto=LL128")
		if code != 0 || errs != "" {
			t.Fatalf("exit %d, stderr %q", code, errs)
		}
		var got struct {
			Fault   string            `json:"fault"`
			Params  map[string]string `json:"params"`
			Command []string          `json:"command"`
			Set     []struct {
				Name      string  `json:"name"`
				Value     string  `json:"value"`
				Inherited *string `json:"inherited"`
			} `json:"set"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%v in %q", err, out)
		}
		if got.Fault != "nccl.proto" || got.Params["proto"] != "LL128" || len(got.Command) != 0 ||
			len(got.Set) != 1 || got.Set[0].Name != "NCCL_PROTO" || got.Set[0].Value != "LL128" || got.Set[0].Inherited != nil {
			t.Errorf("dry run JSON %+v", got)
		}
	})
	t.Run("json shows the inherited value", func(t *testing.T) {
		_, out, _ := runCLI(t, "", "exec", "--dry-run", "--format", "json", "--fault", "nccl.shm-off")
		if !strings.Contains(out, `"inherited": "0"`) {
			t.Errorf("dry run JSON %q does not show the inherited 0", out)
		}
	})
}

func TestExecList(t *testing.T) {
	t.Parallel()
	code, out, errs := runCLI(t, "", "exec", "--list")
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, w := range []string{
		"nccl.p2p-off", "NCCL_P2P_DISABLE=1",
		"NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1",
		"NCCL_PROTO=LL", "proto=LL (LL|LL128|Simple)",
		"NCCL_IB_TIMEOUT=1", "timeout=1 [1, 22]",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("list lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "hardware.") {
		t.Errorf("list shows a fault without an env mechanism:\n%s", out)
	}
	code, out, _ = runCLI(t, "", "exec", "--list", "--format", "json")
	var rows []struct {
		ID     string          `json:"id"`
		Env    []string        `json:"env"`
		Params []catalog.Param `json:"params"`
	}
	if err := json.Unmarshal([]byte(out), &rows); code != 0 || err != nil {
		t.Fatalf("exit %d, %v in %q", code, err, out)
	}
	byID := map[string][]string{}
	for _, r := range rows {
		byID[r.ID] = r.Env
	}
	if len(rows) != 7 || !slices.Equal(byID["nccl.one-channel"], []string{"NCCL_MAX_NCHANNELS=1"}) {
		t.Errorf("list JSON: %v", slices.Collect(maps.Keys(byID)))
	}
}

func TestParseExecParams(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      []string
		want    map[string]string
		wantErr string
	}{
		{"none", nil, map[string]string{}, ""},
		{"one", []string{"proto=LL"}, map[string]string{"proto": "LL"}, ""},
		{"value keeps = and spaces", []string{"x=a=b c"}, map[string]string{"x": "a=b c"}, ""},
		{"empty value", []string{"x="}, map[string]string{"x": ""}, ""},
		{"key trimmed", []string{" proto =LL"}, map[string]string{"proto": "LL"}, ""},
		{"no =", []string{"proto"}, nil, "want KEY=VALUE"},
		{"empty key", []string{"=LL"}, nil, "want KEY=VALUE"},
		{"twice", []string{"a=1", "a=2"}, nil, "given twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseExecParams(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !maps.Equal(got, tc.want) {
				t.Errorf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// FuzzParseExecParams: any accepted input round-trips — every key is
// non-empty, and re-joining KEY=VALUE parses to the same map.
func FuzzParseExecParams(f *testing.F) {
	f.Add("proto=LL\ntimeout=3")
	f.Add("=x\na")
	f.Add("a=b=c\n a =1")
	f.Fuzz(func(t *testing.T, text string) {
		got, err := parseExecParams(strings.Split(text, "\n"))
		if err != nil {
			return
		}
		var again []string
		for k, v := range got {
			if k == "" || strings.TrimSpace(k) != k {
				t.Fatalf("key %q not trimmed or empty", k)
			}
			again = append(again, k+"="+v)
		}
		back, err := parseExecParams(again)
		if err != nil || !maps.Equal(back, got) {
			t.Fatalf("round trip %v -> %v, %v", got, back, err)
		}
	})
}
