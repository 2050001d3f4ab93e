package live

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The Prometheus server parses what Runner serves in the end-to-end test
// (internal/harness/e2e); this strict reader of the text format (version 0.0.4)
// lets the unit tests check the page line by line without a dependency.

// expSample is one sample line.
type expSample struct {
	labels map[string]string
	value  float64
}

// expFamily is one metric with its HELP, TYPE and samples.
type expFamily struct {
	help, typ string
	samples   []expSample
}

var (
	expName  = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*`)
	expLabel = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*`)
)

// parseExposition reads a page strictly: every sample's metric must have
// had its HELP and TYPE lines first, a metric's lines must be contiguous,
// label values must be properly escaped and no label set may repeat. It
// returns the families by name and the names in page order.
func parseExposition(r io.Reader) (map[string]*expFamily, []string, error) {
	fams := map[string]*expFamily{}
	var order []string
	cur := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		fail := func(format string, a ...any) error {
			return fmt.Errorf("line %d %q: %s", n, line, fmt.Sprintf(format, a...))
		}
		switch {
		case line == "":
			return nil, nil, fail("empty line")
		case strings.HasPrefix(line, "# HELP "), strings.HasPrefix(line, "# TYPE "):
			kind, rest := line[2:6], line[7:]
			name := expName.FindString(rest)
			if name == "" || len(rest) == len(name) || rest[len(name)] != ' ' {
				return nil, nil, fail("bad %s line", kind)
			}
			text := rest[len(name)+1:]
			f := fams[name]
			if f == nil {
				if cur != "" && fams[cur] != nil && len(fams[cur].samples) == 0 {
					return nil, nil, fail("metric %s has no samples", cur)
				}
				f = &expFamily{}
				fams[name] = f
				order = append(order, name)
				cur = name
			} else if name != cur || len(f.samples) > 0 {
				return nil, nil, fail("%s of %s after its samples or away from its family", kind, name)
			}
			if kind == "HELP" {
				if f.help != "" {
					return nil, nil, fail("second HELP")
				}
				h, err := unescape(text, false)
				if err != nil {
					return nil, nil, fail("%v", err)
				}
				f.help = h
			} else {
				if f.typ != "" {
					return nil, nil, fail("second TYPE")
				}
				if !slices.Contains([]string{"counter", "gauge", "untyped", "summary", "histogram"}, text) {
					return nil, nil, fail("unknown type %q", text)
				}
				f.typ = text
			}
		case strings.HasPrefix(line, "#"):
			return nil, nil, fail("unexpected comment")
		default:
			name := expName.FindString(line)
			if name == "" {
				return nil, nil, fail("no metric name")
			}
			f := fams[name]
			if f == nil || name != cur || f.help == "" || f.typ == "" {
				return nil, nil, fail("sample of %s without HELP and TYPE just before", name)
			}
			rest := line[len(name):]
			labels := map[string]string{}
			if strings.HasPrefix(rest, "{") {
				var err error
				labels, rest, err = parseLabels(rest[1:])
				if err != nil {
					return nil, nil, fail("%v", err)
				}
			}
			if !strings.HasPrefix(rest, " ") || strings.Contains(rest[1:], " ") {
				return nil, nil, fail("want one value and no timestamp")
			}
			v, err := parseValue(rest[1:])
			if err != nil {
				return nil, nil, fail("%v", err)
			}
			for _, s := range f.samples {
				if mapsEqual(s.labels, labels) {
					return nil, nil, fail("duplicate label set")
				}
			}
			f.samples = append(f.samples, expSample{labels, v})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	if cur != "" && len(fams[cur].samples) == 0 {
		return nil, nil, fmt.Errorf("metric %s has no samples", cur)
	}
	return fams, order, nil
}

// parseLabels reads name="value",… up to the closing brace.
func parseLabels(s string) (map[string]string, string, error) {
	out := map[string]string{}
	for {
		if strings.HasPrefix(s, "}") {
			return out, s[1:], nil
		}
		name := expLabel.FindString(s)
		if name == "" || !strings.HasPrefix(s[len(name):], `="`) {
			return nil, "", fmt.Errorf("bad label at %q", s)
		}
		s = s[len(name)+2:]
		end := -1
		for i := 0; i < len(s); i++ {
			if s[i] == '\\' {
				i++
				continue
			}
			if s[i] == '"' {
				end = i
				break
			}
		}
		if end < 0 {
			return nil, "", fmt.Errorf("unterminated value of label %s", name)
		}
		v, err := unescape(s[:end], true)
		if err != nil {
			return nil, "", fmt.Errorf("label %s: %w", name, err)
		}
		if _, dup := out[name]; dup {
			return nil, "", fmt.Errorf("label %s twice", name)
		}
		out[name] = v
		s = s[end+1:]
		switch {
		case strings.HasPrefix(s, ","):
			s = s[1:]
		case !strings.HasPrefix(s, "}"):
			return nil, "", fmt.Errorf("want , or } after label %s", name)
		}
	}
}

// unescape undoes the text format's escapes: \\ and \n, and \" in label
// values. Any other escape, a raw line feed or (in a label value) a bare
// double quote is an error.
func unescape(s string, label bool) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\n':
			return "", fmt.Errorf("raw line feed")
		case c == '"' && label:
			return "", fmt.Errorf("unescaped double quote")
		case c != '\\':
			b.WriteByte(c)
			continue
		}
		if i+1 == len(s) {
			return "", fmt.Errorf("trailing backslash")
		}
		i++
		switch s[i] {
		case '\\':
			b.WriteByte('\\')
		case 'n':
			b.WriteByte('\n')
		case '"':
			if !label {
				return "", fmt.Errorf(`\" in HELP`)
			}
			b.WriteByte('"')
		default:
			return "", fmt.Errorf("unknown escape \\%c", s[i])
		}
	}
	return b.String(), nil
}

func parseValue(s string) (float64, error) {
	switch s {
	case "+Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	case "NaN":
		return math.NaN(), nil
	}
	return strconv.ParseFloat(s, 64)
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
