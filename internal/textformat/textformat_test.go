package textformat

import (
	"bytes"
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestEscaping(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, label, help string
	}{
		{"plain", "H200", "H200", "H200"},
		{"quote", `say "hi"`, `say \"hi\"`, `say "hi"`},
		{"backslash", `a\b`, `a\\b`, `a\\b`},
		{"line feed", "a\nb", `a\nb`, `a\nb`},
		{"escape-looking text", `\n`, `\\n`, `\\n`},
		{"unicode", "GPU-é", "GPU-é", "GPU-é"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := EscapeLabel(tc.in); got != tc.label {
				t.Errorf("EscapeLabel(%q) = %q, want %q", tc.in, got, tc.label)
			}
			if got := EscapeHelp(tc.in); got != tc.help {
				t.Errorf("EscapeHelp(%q) = %q, want %q", tc.in, got, tc.help)
			}
		})
	}
}

func TestFormatValue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   float64
		want string
	}{
		{0, "0"}, {65, "65"}, {1980, "1980"}, {98765432100, "98765432100"}, {-3, "-3"},
		{0.9731, "0.9731"}, {-2.5, "-2.5"}, {123.456, "123.456"}, {0.1, "0.1"},
		{1.23e21, "1.23e+21"}, {1e300, "1e+300"},
		{math.Inf(1), "+Inf"}, {math.Inf(-1), "-Inf"}, {math.NaN(), "NaN"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			got := FormatValue(tc.in)
			if got != tc.want {
				t.Errorf("FormatValue(%v) = %q, want %q", tc.in, got, tc.want)
			}
			if !math.IsNaN(tc.in) {
				back, err := strconv.ParseFloat(strings.TrimPrefix(got, "+"), 64)
				if err != nil || back != tc.in {
					t.Errorf("%q reads back as %v (%v)", got, back, err)
				}
			}
		})
	}
}

func TestWrite(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	WriteHeader(&b, "m", "gauge", "a\nhelp")
	WriteSample(&b, "m", Labels("gpu", "3", "modelName", `NVIDIA "H200"`), 61)
	WriteSample(&b, "m", Labels(), 0.5)
	want := "# HELP m a\\nhelp\n# TYPE m gauge\nm{gpu=\"3\",modelName=\"NVIDIA \\\"H200\\\"\"} 61\nm 0.5\n"
	if b.String() != want {
		t.Errorf("page:\n%s\nwant:\n%s", b.String(), want)
	}
}
