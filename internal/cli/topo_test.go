package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A real capture from a 2x H200 machine (driver 580), escapes included.
const topoH200 = "\t\x1b[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n" +
	"GPU0\t X \tNV18\t0-31\t0\t\tN/A\n" +
	"GPU1\tNV18\t X \t0-31\t0\t\tN/A\n" +
	"\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n"

func TestTopoParse(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "topo.txt")
	if err := os.WriteFile(file, []byte(topoH200), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"topo", "parse"}, {"topo", "parse", "-"}, {"topo", "parse", file, "--format", "json"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errs := runCLI(t, topoH200, args...)
			if code != 0 || errs != "" {
				t.Fatalf("exit %d, stderr %q", code, errs)
			}
			var m struct {
				GPUs []struct {
					Index       int    `json:"index"`
					CPUAffinity string `json:"cpu_affinity"`
					NUMANode    *int   `json:"numa_node"`
				} `json:"gpus"`
				Links map[string]string `json:"links"`
			}
			if err := json.Unmarshal([]byte(out), &m); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, out)
			}
			if len(m.GPUs) != 2 || m.Links["0-1"] != "NV18" || m.GPUs[1].Index != 1 ||
				m.GPUs[1].CPUAffinity != "0-31" || m.GPUs[1].NUMANode == nil || *m.GPUs[1].NUMANode != 0 {
				t.Errorf("parsed %+v", m)
			}
		})
	}
}

func TestTopoTable(t *testing.T) {
	t.Parallel()
	code, out, errs := runCLI(t, topoH200, "topo", "parse", "--format", "table")
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	want := "      GPU0  GPU1  CPU AFFINITY  NUMA\n" +
		"GPU0  X     NV18  0-31          0\n" +
		"GPU1  NV18  X     0-31          0\n"
	if out != want {
		t.Errorf("table:\n%s\nwant:\n%s", out, want)
	}
}

func TestTopoErrors(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nope.txt")
	tests := []struct {
		name  string
		stdin string
		args  []string
		want  string
	}{
		{"missing file", "", []string{"topo", "parse", missing}, "gpuchaos: open " + missing + ": no such file or directory\n"},
		{"not topo", "hello\n", []string{"topo", "parse"}, "gpuchaos: parse standard input: topo: no header line"},
		// A row may leave CPU and NUMA Affinity blank together (as real
		// pastes from containers do), not one of them.
		{"short row", "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV18\t0\nGPU1\tNV18\t X \t0-7\t0\n", []string{"topo", "parse"},
			"gpuchaos: parse standard input: topo: line 2: row GPU0 has 3 cells, header has 4\n"},
		{"bad format", topoH200, []string{"topo", "parse", "--format", "csv"}, "gpuchaos: --format: \"csv\" is not one of json or table\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := runCLI(t, tt.stdin, tt.args...)
			if code == 0 || out != "" || !strings.HasPrefix(errs, tt.want) || strings.Count(errs, "\n") != 1 {
				t.Errorf("exit %d, stdout %q, stderr %q; want non-zero and one line starting %q", code, out, errs, tt.want)
			}
		})
	}
}

func TestTopoHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"topo", "--help"}, {"topo", "parse", "--help"}, {"topo"}} {
		code, out, _ := runCLI(t, "", args...)
		if code != 0 || !strings.Contains(out, "Examples:") {
			t.Errorf("%v: exit %d, help without examples:\n%s", args, code, out)
		}
	}
}
