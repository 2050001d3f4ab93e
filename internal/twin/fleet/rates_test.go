package fleet

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseRates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    map[string]float64
		wantErr string
	}{
		{name: "yaml", in: "faulty-gpu: 1e-5\nhbm3: 0.000002\n",
			want: map[string]float64{"faulty-gpu": 1e-5, "hbm3": 2e-6}},
		{name: "yaml with document marker, comments, blanks and CRLF",
			in:   "# fleet B\r\n---\r\n\r\nsoftware-bug: 0   # fixed in 2.3\r\n  # indented comment\r\nnic: 3e-7\r\n",
			want: map[string]float64{"software-bug": 0, "nic": 3e-7}},
		{name: "yaml quoted names", in: "\"hbm3\": 1e-6\n'sram': 2e-7\n",
			want: map[string]float64{"hbm3": 1e-6, "sram": 2e-7}},
		{name: "yaml hash inside a word is not a comment", in: "gsp: 1e-6#x\n", wantErr: `line 1: class "gsp": rate "1e-6#x" is not a number`},
		{name: "yaml flow mapping", in: "{hbm3: 1e-6, nic: 0}", want: map[string]float64{"hbm3": 1e-6, "nic": 0}},
		{name: "yaml special floats pass the parser", in: "hbm3: .inf\n", want: map[string]float64{"hbm3": math.Inf(1)}},
		{name: "json", in: ` {"faulty-gpu": 1e-5, "other": 0} `,
			want: map[string]float64{"faulty-gpu": 1e-5, "other": 0}},
		{name: "negative passes the parser", in: "hbm3: -1\n", want: map[string]float64{"hbm3": -1}},
		{name: "empty", in: " \n", wantErr: "empty"},
		{name: "only comments", in: "# nothing\n", wantErr: "no entries"},
		{name: "nested mapping", in: "rates:\n  hbm3: 1e-6\n", wantErr: `line 2: class "rates": rate is a mapping, not a number`},
		{name: "missing rate", in: "hbm3:\n", wantErr: `line 1: class "hbm3": rate is empty, not a number`},
		{name: "number as name", in: "42: 1\n", wantErr: "line 1: class names must be plain strings"},
		{name: "two documents", in: "hbm3: 1\n---\nnic: 2\n", wantErr: "more than one YAML document"},
		{name: "bare document marker", in: "---\n", wantErr: "no entries"},
		{name: "indented entry", in: "hbm3: 1\n  sram: 2\n", wantErr: "line 2"},
		{name: "list", in: "- hbm3: 1\n", wantErr: "line 1: want a mapping of class name to rate per GPU-hour, got a list"},
		{name: "no colon", in: "hbm3 1e-6\n", wantErr: `line 1: want a mapping of class name to rate per GPU-hour, got the text "hbm3 1e-6"`},
		{name: "not a number", in: "hbm3: often\n", wantErr: `line 1: class "hbm3": rate "often" is not a number`},
		{name: "duplicate", in: "hbm3: 1\nhbm3: 2\n", wantErr: `line 2: class "hbm3" appears twice`},
		{name: "unclosed flow mapping", in: `{"hbm3": 1`, wantErr: "parse: yaml: line 1"},
		{name: "json string rate", in: `{"hbm3": "1e-6"}`, wantErr: `class "hbm3": rate "1e-6" is not a number`},
		{name: "json trailing data", in: `{"hbm3": 1} {}`, wantErr: "more than one YAML document"},
		{name: "yaml alias", in: "hbm3: &r 1e-6\nsram: *r\n", want: map[string]float64{"hbm3": 1e-6, "sram": 1e-6}},
		{name: "json array", in: `{"hbm3": [1]}`, wantErr: `class "hbm3": rate is a list, not a number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseRates([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestLoadRates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name    string
		path    string
		want    map[string]float64
		wantErr []string // all must appear
	}{
		{name: "good yaml", path: write("good.yaml", "hbm3: 1e-6\n"), want: map[string]float64{"hbm3": 1e-6}},
		{name: "good json", path: write("good.json", `{"nic": 0}`), want: map[string]float64{"nic": 0}},
		{name: "unknown class", path: write("unknown.yaml", "hbm3: 1e-6\ncosmic-rays: 1e-7\n"),
			wantErr: []string{"unknown.yaml", `class "cosmic-rays" is unknown`, "faulty-gpu"}},
		{name: "negative rate", path: write("neg.json", `{"sram": -2e-7}`),
			wantErr: []string{"neg.json", `class "sram"`, "negative"}},
		{name: "syntax", path: write("bad.yaml", "sram 2\n"), wantErr: []string{"bad.yaml", "line 1"}},
		{name: "rate past the limit", path: write("big.yaml", "faulty-gpu: 1000\n"),
			wantErr: []string{"big.yaml", `class "faulty-gpu"`, "over the limit of 1"}},
		{name: "NaN rate", path: write("nan.yaml", "hbm3: .nan\n"), wantErr: []string{"nan.yaml", `class "hbm3"`, "not a finite number"}},
		{name: "missing file", path: filepath.Join(dir, "absent.yaml"), wantErr: []string{"absent.yaml", "read rates file"}},
		{name: "endless file", path: "/dev/zero", wantErr: []string{"/dev/zero", "larger than the limit of 64 KiB"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := LoadRates(tt.path)
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("no error, want one containing %q", tt.wantErr)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("err = %v, want it to contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// FuzzParseRates checks that the parser never panics, and that whatever it
// accepts survives a trip through JSON unchanged.
func FuzzParseRates(f *testing.F) {
	for _, s := range []string{
		"faulty-gpu: 1e-5\nhbm3: 2e-6\n",
		"---\n# c\nnic: 0 # x\n",
		"'sram': 1\n\"gsp\": 2\n",
		`{"hbm3": 1e-6}`,
		"rates:\n  hbm3: 1\n",
		"- a: 1\n",
		"a: b: c\n",
		"\"a#b\": 1\n",
		"{a: 1, b: [2]}",
		"a: &x 1\nb: *x\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParseRates(data)
		if err != nil {
			return
		}
		if len(got) == 0 {
			t.Fatal("accepted input with no entries")
		}
		js, err := json.Marshal(got)
		if err != nil {
			return // NaN or Inf from strconv: not representable in JSON
		}
		back, err := ParseRates(js)
		if err != nil {
			t.Fatalf("own JSON %s rejected: %v", js, err)
		}
		if !reflect.DeepEqual(back, got) {
			t.Fatalf("JSON round trip: %v became %v", got, back)
		}
	})
}
