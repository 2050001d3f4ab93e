package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/gpuchaos/gpuchaos/internal/model/limitread"
)

// LoadRates reads a rates file: a mapping from class name to interruptions
// per GPU-hour, in YAML or JSON. Every name must be one of ClassNames and
// every rate finite and not negative; errors name the file and, where there
// is one, the class or line.
func LoadRates(path string) (map[string]float64, error) {
	data, err := limitread.File(path, MaxRatesFileBytes)
	if tl := (*limitread.TooLargeError)(nil); errors.As(err, &tl) {
		return nil, fmt.Errorf("rates file %s: larger than the limit of %d KiB", path, MaxRatesFileBytes>>10)
	}
	if err != nil {
		return nil, fmt.Errorf("read rates file: %w", err)
	}
	rates, err := ParseRates(data)
	if err != nil {
		return nil, fmt.Errorf("rates file %s: %w", path, err)
	}
	if _, err := WithRates(DefaultClasses(), rates); err != nil {
		return nil, fmt.Errorf("rates file %s: %w", path, err)
	}
	return rates, nil
}

// MaxRatesFileBytes bounds a rates file.
const MaxRatesFileBytes = 64 << 10

// errNoEntries is returned for a file that parses but names no class, which
// is more likely a mistake than a wish to change nothing.
var errNoEntries = errors.New("no entries: want a mapping of class name to rate per GPU-hour")

// ParseRates parses the text of a rates file: one YAML document (JSON is
// YAML too) holding a flat mapping of class name to number. Nested values,
// lists, non-numeric rates, duplicate names and further documents are
// errors that give the line. It checks only the form, not the class names
// or the range of the rates; see LoadRates.
func ParseRates(data []byte) (map[string]float64, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("empty: want a mapping of class name to rate per GPU-hour")
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errNoEntries // only comments or a bare "---"
		}
		return nil, fmt.Errorf("parse: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document: want one mapping")
	}
	if len(doc.Content) == 0 {
		return nil, errNoEntries
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		if m.Kind == yaml.ScalarNode && m.Tag == "!!null" {
			return nil, errNoEntries
		}
		return nil, fmt.Errorf("line %d: want a mapping of class name to rate per GPU-hour, got %s", m.Line, kindName(m))
	}
	out := make(map[string]float64, len(m.Content)/2)
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		for v.Kind == yaml.AliasNode && v.Alias != nil {
			v = v.Alias // "b: *x" takes the value anchored as x
		}
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			return nil, fmt.Errorf("line %d: class names must be plain strings", k.Line)
		}
		name := k.Value
		if name == "" {
			return nil, fmt.Errorf("line %d: empty class name", k.Line)
		}
		if !utf8.ValidString(name) {
			return nil, fmt.Errorf("line %d: class name %q is not valid UTF-8", k.Line, name)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("line %d: class %q appears twice", k.Line, name)
		}
		if v.Kind == yaml.ScalarNode && v.Tag != "!!null" && v.Tag != "!!int" && v.Tag != "!!float" {
			return nil, fmt.Errorf("line %d: class %q: rate %q is not a number", v.Line, name, v.Value)
		}
		if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
			return nil, fmt.Errorf("line %d: class %q: rate is %s, not a number", v.Line, name, kindName(v))
		}
		var f float64
		if err := v.Decode(&f); err != nil {
			return nil, fmt.Errorf("line %d: class %q: rate %q: %w", v.Line, name, v.Value, err)
		}
		out[name] = f
	}
	if len(out) == 0 {
		return nil, errNoEntries
	}
	return out, nil
}

// kindName describes a node for an error message.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "empty"
		}
		return fmt.Sprintf("the text %q", n.Value)
	}
	return "something else"
}
