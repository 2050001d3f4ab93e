// Package textformat writes the Prometheus text exposition format (0.0.4):
// HELP and TYPE lines, label sets and values, escaped as the format
// requires. The agent's /metrics and the live twin's both write with it.
package textformat

import (
	"bytes"
	"math"
	"strconv"
	"strings"
)

var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

// EscapeLabel escapes a label value: backslash, double quote and line feed.
func EscapeLabel(s string) string { return labelEscaper.Replace(s) }

// EscapeHelp escapes a HELP text: backslash and line feed.
func EscapeHelp(s string) string { return helpEscaper.Replace(s) }

// Labels renders name, value pairs in the order given ({a="1",b="2"}),
// escaping the values; no pairs render as "".
func Labels(kv ...string) string {
	if len(kv) < 2 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(kv[i])
		b.WriteString(`="`)
		b.WriteString(labelEscaper.Replace(kv[i+1]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// WriteHeader writes a metric's HELP and TYPE lines.
func WriteHeader(b *bytes.Buffer, name, typ, help string) {
	b.WriteString("# HELP ")
	b.WriteString(name)
	b.WriteByte(' ')
	b.WriteString(helpEscaper.Replace(help))
	b.WriteString("\n# TYPE ")
	b.WriteString(name)
	b.WriteByte(' ')
	b.WriteString(typ)
	b.WriteByte('\n')
}

// WriteSample writes one sample line; labels is Labels' output or "".
func WriteSample(b *bytes.Buffer, name, labels string, v float64) {
	b.WriteString(name)
	b.WriteString(labels)
	b.WriteByte(' ')
	b.Write(AppendValue(b.AvailableBuffer(), v))
	b.WriteByte('\n')
}

// FormatValue writes a float so the format reads it back exactly; whole
// numbers print without an exponent, as dcgm-exporter prints its integer
// fields (an energy counter in mJ reaches 1e10 within days).
func FormatValue(v float64) string { return string(AppendValue(nil, v)) }

// AppendValue appends FormatValue's text to dst; writing a page through it
// into a buffer's spare room allocates nothing per sample.
func AppendValue(dst []byte, v float64) []byte {
	switch {
	case math.IsInf(v, 1):
		return append(dst, "+Inf"...)
	case math.IsInf(v, -1):
		return append(dst, "-Inf"...)
	case math.IsNaN(v):
		return append(dst, "NaN"...)
	case v == math.Trunc(v) && math.Abs(v) < 1<<53:
		return strconv.AppendInt(dst, int64(v), 10)
	}
	return strconv.AppendFloat(dst, v, 'g', -1, 64)
}
