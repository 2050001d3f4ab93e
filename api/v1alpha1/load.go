package v1alpha1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/gpuchaos/gpuchaos/internal/model/limitread"
	names "github.com/gpuchaos/gpuchaos/internal/model/suggest"
)

// maxYAMLNodes bounds the nodes Load visits with aliases expanded, so that a
// small file of nested aliases (a "billion laughs" document) cannot make the
// loader build an enormous value. Real experiments have a few hundred nodes.
const maxYAMLNodes = 1 << 16

// maxPathLen bounds the length of a field path, and so the nesting depth:
// a self-referencing alias (&a [*a]) nests without end, and building ever
// longer paths for it would cost quadratic time long before maxYAMLNodes
// ran out. Real paths are under 100 bytes.
const maxPathLen = 1024

// maxFileBytes bounds what LoadFile reads; an experiment is a few KiB, so a
// larger file is a mistake (a log, a binary) rather than an experiment.
const maxFileBytes = 4 << 20

// LoadError is a problem in an experiment file, located by line and field
// path. Its text is one line: "examples/bad.yaml:12: spec.faults[0].parms:
// unknown field (did you mean params?)".
// +kubebuilder:object:generate=false
type LoadError struct {
	// Source names the input, usually the file path given to LoadFile.
	Source string
	// Line is 1-based; zero when the problem has no single line (an empty
	// file).
	Line int
	// Path is the field path (spec.selector.mode); empty for problems with
	// the document as a whole.
	Path string
	// Msg says what is wrong, without the location.
	Msg string
	// Err is the underlying error, if any: the *FieldError Locate placed.
	Err error
}

// Error formats the problem as source:line: path: message.
func (e *LoadError) Error() string {
	var b strings.Builder
	b.WriteString(e.Source)
	if e.Line > 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the underlying error, so errors.As finds a *FieldError
// inside a located validation error.
func (e *LoadError) Unwrap() error { return e.Err }

// sourceMap remembers where Load found each field, so that validation
// errors, which only know field paths, can be reported with a line.
type sourceMap struct {
	source string
	lines  map[string]int
}

// line returns the line of path, or of its nearest ancestor that was
// written (a missing field is reported where its parent is).
func (m *sourceMap) line(path string) int {
	for {
		if l, ok := m.lines[path]; ok {
			return l
		}
		if path == "" {
			return 0
		}
		path = parentPath(path)
	}
}

// parentPath strips the last segment of a field path: ".name", "[3]" or
// ["quoted.key"].
func parentPath(path string) string {
	if strings.HasSuffix(path, `"]`) {
		if i := strings.LastIndex(path, `["`); i >= 0 {
			return path[:i]
		}
	}
	if strings.HasSuffix(path, "]") {
		if i := strings.LastIndexByte(path, '['); i >= 0 {
			return path[:i]
		}
	}
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i]
	}
	return ""
}

// Locate places an error from Validate or a catalogue check in the file
// that Load read: a *FieldError (wrapped or not) becomes a *LoadError with
// the file and the line where the field, or its nearest written ancestor,
// appears. Other errors, and errors about experiments not made by Load, are
// returned unchanged.
func (e *Experiment) Locate(err error) error {
	var fe *FieldError
	if e == nil || e.src == nil || !errors.As(err, &fe) {
		return err
	}
	return &LoadError{Source: e.src.source, Line: e.src.line(fe.Path), Path: fe.Path, Msg: fe.Msg, Err: err}
}

// LoadFile reads and strictly loads one experiment file; see Load.
func LoadFile(path string) (*Experiment, error) {
	data, err := limitread.File(path, maxFileBytes)
	if tl := (*limitread.TooLargeError)(nil); errors.As(err, &tl) {
		return nil, &LoadError{Source: path, Msg: fmt.Sprintf("file is larger than %d MiB; an experiment is a few KiB", maxFileBytes>>20)}
	}
	if err != nil {
		return nil, fmt.Errorf("load experiment: %w", err)
	}
	return Load(data, path)
}

// Load parses one YAML (or JSON) experiment document strictly. Unknown
// fields, values of the wrong type, duplicate keys, malformed YAML, empty
// input and more than one document are errors of type *LoadError naming
// source, line and field path. Field names come from the json tags of the
// Go types, and the value is finally decoded by encoding/json, so the file
// means exactly what the same object means to the Kubernetes API server.
// Load does not validate: call Default and Validate next.
func Load(data []byte, source string) (*Experiment, error) {
	if source == "" {
		source = "<input>"
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &LoadError{Source: source, Msg: "empty file; want one Experiment document"}
		}
		return nil, malformed(source, err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, &LoadError{Source: source, Line: extra.Line, Msg: "more than one YAML document; want exactly one Experiment"}
	case !errors.Is(err, io.EOF):
		return nil, malformed(source, err)
	}

	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) != 1 {
			return nil, &LoadError{Source: source, Msg: "empty document; want one Experiment"}
		}
		root = root.Content[0]
	}
	if isNull(root) {
		return nil, &LoadError{Source: source, Msg: "empty document; want one Experiment"}
	}
	if root.Kind != yaml.MappingNode {
		return nil, &LoadError{Source: source, Line: root.Line, Msg: fmt.Sprintf("document must be a mapping (an Experiment object), got %s", describe(root))}
	}

	if clusterSpecLike(root) {
		return nil, &LoadError{Source: source, Line: root.Line, Msg: "this is a twin cluster spec (nodes, jobs), not an Experiment: pass it with --cluster, and the experiment as the file"}
	}
	c := &converter{source: source, lines: map[string]int{"": root.Line}, budget: maxYAMLNodes}
	tree, err := c.convert(root, reflect.TypeFor[Experiment](), "")
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(tree)
	if err != nil {
		// The converter only builds JSON-representable values; reaching
		// this is a bug in it, reported rather than hidden.
		return nil, &LoadError{Source: source, Msg: fmt.Sprintf("convert to JSON: %v", err)}
	}
	exp := new(Experiment)
	jd := json.NewDecoder(bytes.NewReader(raw))
	// The converter already rejected unknown fields with a better message;
	// this keeps the decode strict should the two ever disagree.
	jd.DisallowUnknownFields()
	if err := jd.Decode(exp); err != nil {
		return nil, &LoadError{Source: source, Line: root.Line, Msg: fmt.Sprintf("decode: %v", err)}
	}
	exp.src = &sourceMap{source: source, lines: c.lines}
	return exp, nil
}

// clusterSpecLike reports whether a mapping without apiVersion and kind has
// the top-level keys of a twin cluster spec, the other YAML file gpuchaos
// reads and the one most often passed in the wrong place.
func clusterSpecLike(m *yaml.Node) bool {
	keys := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		keys[m.Content[i].Value] = true
	}
	return !keys["apiVersion"] && !keys["kind"] && (keys["nodes"] || keys["jobs"])
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// malformed turns a YAML syntax error into one line that starts with the
// file and line, as compilers print them.
func malformed(source string, err error) error {
	msg := strings.Join(strings.Fields(err.Error()), " ")
	line := 0
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	return &LoadError{Source: source, Line: line, Msg: "malformed YAML: " + msg}
}

// converter walks a YAML node tree beside the Go type it should fill,
// rejecting what encoding/json would silently drop or coerce, and builds a
// plain value (maps, slices, scalars) that encodes to the equivalent JSON.
type converter struct {
	source string
	// lines maps each field path seen to the line of its key.
	lines map[string]int
	// budget counts down the nodes still allowed; see maxYAMLNodes.
	budget int
}

func (c *converter) fail(n *yaml.Node, path, format string, args ...any) error {
	return &LoadError{Source: c.source, Line: n.Line, Path: path, Msg: fmt.Sprintf(format, args...)}
}

// spend charges one node against the budget and checks the nesting depth.
func (c *converter) spend(n *yaml.Node, path string) error {
	c.budget--
	if c.budget < 0 {
		return c.fail(n, path, "document too large: over %d YAML nodes once aliases are expanded", maxYAMLNodes)
	}
	if len(path) > maxPathLen {
		return c.fail(n, path[:64]+"…", "nested too deeply")
	}
	return nil
}

var jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()

// convert checks node n against Go type t and returns its JSON-ready value.
func (c *converter) convert(n *yaml.Node, t reflect.Type, path string) (any, error) {
	if err := c.spend(n, path); err != nil {
		return nil, err
	}
	if _, ok := c.lines[path]; !ok {
		c.lines[path] = n.Line
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			return nil, c.fail(n, path, "alias *%s has no anchor", n.Value)
		}
		return c.convert(n.Alias, t, path)
	}
	// Types with their own JSON decoding (Duration, ParamValue) get the
	// generic value and their own error message, so the file is read by
	// the same code that reads the object from the API server.
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		v, err := c.generic(n, path)
		if err != nil {
			return nil, err
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, c.fail(n, path, "cannot be represented in JSON: %v", err)
		}
		if err := json.Unmarshal(raw, reflect.New(t).Interface()); err != nil {
			return nil, c.fail(n, path, "%s", strings.TrimPrefix(err.Error(), "json: "))
		}
		return json.RawMessage(raw), nil
	}
	if isNull(n) {
		// null leaves the field at its zero value, as in encoding/json and
		// kubectl; Validate reports required fields left empty.
		return nil, nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		return c.convert(n, t.Elem(), path)
	case reflect.Struct:
		return c.object(n, t, path)
	case reflect.Map:
		return c.mapping(n, t, path)
	case reflect.Slice:
		return c.sequence(n, t, path)
	case reflect.Interface:
		return c.generic(n, path)
	case reflect.String:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
			if n.Kind == yaml.ScalarNode {
				return nil, c.fail(n, path, "must be a string, got %s (quote it: %q)", describe(n), n.Value)
			}
			return nil, c.fail(n, path, "must be a string, got %s", describe(n))
		}
		return n.Value, nil
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
			return nil, c.fail(n, path, "must be true or false, got %s", describe(n))
		}
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, c.fail(n, path, "must be true or false, got %s", describe(n))
		}
		return b, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		var i int64
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&i) != nil {
			return nil, c.fail(n, path, "must be an integer, got %s", describe(n))
		}
		if reflect.Zero(t).OverflowInt(i) {
			return nil, c.fail(n, path, "integer %s is out of range", n.Value)
		}
		return i, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		var u uint64
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&u) != nil {
			return nil, c.fail(n, path, "must be a non-negative integer, got %s", describe(n))
		}
		if reflect.Zero(t).OverflowUint(u) {
			return nil, c.fail(n, path, "integer %s is out of range", n.Value)
		}
		return u, nil
	case reflect.Float32, reflect.Float64:
		var f float64
		tag := n.ShortTag()
		if n.Kind != yaml.ScalarNode || (tag != "!!int" && tag != "!!float") || n.Decode(&f) != nil {
			return nil, c.fail(n, path, "must be a number, got %s", describe(n))
		}
		if math.IsInf(f, 0) || math.IsNaN(f) || reflect.Zero(t).OverflowFloat(f) {
			return nil, c.fail(n, path, "must be a finite number, got %s", n.Value)
		}
		return f, nil
	}
	return nil, c.fail(n, path, "internal error: the loader cannot fill Go type %s", t)
}

// object checks a mapping against the json fields of struct type t.
func (c *converter) object(n *yaml.Node, t reflect.Type, path string) (any, error) {
	if n.Kind != yaml.MappingNode {
		return nil, c.fail(n, path, "must be a mapping of fields, got %s", describe(n))
	}
	fields := map[string]reflect.Type{}
	var names []string
	jsonFields(t, fields, &names)
	if path == "" && t == reflect.TypeFor[Experiment]() {
		// The controller writes status; a file a person writes has none.
		delete(fields, "status")
		names = slices.DeleteFunc(names, func(s string) bool { return s == "status" })
	}
	out := make(map[string]any, len(n.Content)/2)
	return out, c.pairs(n, path, func(k, v *yaml.Node, key string) error {
		ft, ok := fields[key]
		if !ok {
			// joinKey quotes a key with odd characters (a newline), so the
			// error stays on one line.
			return c.fail(k, joinKey(path, key), "unknown field%s", suggest(key, names))
		}
		p := joinField(path, key)
		c.lines[p] = k.Line
		val, err := c.convert(v, ft, p)
		if err != nil {
			return err
		}
		out[key] = val
		return nil
	})
}

// mapping checks a mapping whose keys are free-form (labels, params).
func (c *converter) mapping(n *yaml.Node, t reflect.Type, path string) (any, error) {
	if n.Kind != yaml.MappingNode {
		return nil, c.fail(n, path, "must be a mapping, got %s", describe(n))
	}
	if t.Key().Kind() != reflect.String {
		return nil, c.fail(n, path, "internal error: the loader cannot fill map keys of Go type %s", t.Key())
	}
	out := make(map[string]any, len(n.Content)/2)
	return out, c.pairs(n, path, func(k, v *yaml.Node, key string) error {
		p := joinKey(path, key)
		c.lines[p] = k.Line
		val, err := c.convert(v, t.Elem(), p)
		if err != nil {
			return err
		}
		out[key] = val
		return nil
	})
}

// pairs calls fn for each key and value of mapping n, after checking that
// the key is a plain scalar written once.
func (c *converter) pairs(n *yaml.Node, path string, fn func(k, v *yaml.Node, key string) error) error {
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		for k.Kind == yaml.AliasNode && k.Alias != nil {
			k = k.Alias
		}
		if k.Kind != yaml.ScalarNode {
			return c.fail(k, path, "mapping keys must be plain scalars, got %s", describe(k))
		}
		if k.ShortTag() == "!!merge" {
			return c.fail(k, path, "YAML merge keys (<<) are not supported; write the fields out")
		}
		key := k.Value
		if first, dup := seen[key]; dup {
			return c.fail(k, joinKey(path, key), "duplicate key (first at line %d)", first)
		}
		seen[key] = k.Line
		if err := fn(k, v, key); err != nil {
			return err
		}
	}
	return nil
}

// sequence checks a list whose items are of t's element type.
func (c *converter) sequence(n *yaml.Node, t reflect.Type, path string) (any, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, c.fail(n, path, "must be a list, got %s", describe(n))
	}
	out := make([]any, len(n.Content))
	for i, item := range n.Content {
		v, err := c.convert(item, t.Elem(), path+"["+strconv.Itoa(i)+"]")
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// generic converts a node whose Go type does not constrain it (an
// interface, or input to a type's own UnmarshalJSON).
func (c *converter) generic(n *yaml.Node, path string) (any, error) {
	if err := c.spend(n, path); err != nil {
		return nil, err
	}
	switch n.Kind {
	case yaml.AliasNode:
		if n.Alias == nil {
			return nil, c.fail(n, path, "alias *%s has no anchor", n.Value)
		}
		return c.generic(n.Alias, path)
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		return out, c.pairs(n, path, func(_, v *yaml.Node, key string) error {
			val, err := c.generic(v, joinKey(path, key))
			out[key] = val
			return err
		})
	case yaml.SequenceNode:
		out := make([]any, len(n.Content))
		for i, item := range n.Content {
			v, err := c.generic(item, path+"["+strconv.Itoa(i)+"]")
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case yaml.ScalarNode:
		switch tag := n.ShortTag(); tag {
		case "!!null":
			return nil, nil
		case "!!bool", "!!int":
			var v any
			if err := n.Decode(&v); err != nil {
				return nil, c.fail(n, path, "bad %s value %q", strings.TrimPrefix(tag, "!!"), n.Value)
			}
			return v, nil
		case "!!float":
			var f float64
			if err := n.Decode(&f); err != nil {
				return nil, c.fail(n, path, "bad float value %q", n.Value)
			}
			if math.IsInf(f, 0) || math.IsNaN(f) {
				return nil, c.fail(n, path, "must be a finite number, got %s", n.Value)
			}
			return f, nil
		case "!!str", "!!timestamp", "!!binary":
			// Kept as written: JSON has no timestamp or binary type, and
			// the consuming type parses the text itself.
			return n.Value, nil
		default:
			return nil, c.fail(n, path, "unsupported YAML tag %s", tag)
		}
	}
	return nil, c.fail(n, path, "unexpected YAML node")
}

// jsonFields collects the JSON names of struct t's fields as encoding/json
// sees them, descending into embedded structs without a name (TypeMeta's
// `json:",inline"`).
func jsonFields(t reflect.Type, into map[string]reflect.Type, names *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				jsonFields(ft, into, names)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, dup := into[name]; !dup {
			into[name] = f.Type
			*names = append(*names, name)
		}
	}
}

var simpleKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func joinField(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// joinKey adds a free-form map key to a path, quoting keys that would make
// the path ambiguous (label keys such as nvidia.com/gpu.product).
func joinKey(path, key string) string {
	if simpleKey.MatchString(key) {
		return joinField(path, key)
	}
	return path + "[" + strconv.Quote(key) + "]"
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names what a node is, for "must be X, got Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return "string " + strconv.Quote(n.Value)
		case "!!int", "!!float":
			return "number " + n.Value
		case "!!bool":
			return "boolean " + n.Value
		case "!!null":
			return "null"
		}
		return n.ShortTag() + " " + strconv.Quote(n.Value)
	}
	return "an empty node"
}

// suggest returns " (did you mean X?)" for the known name closest to an
// unknown one, or the list of known names when none is close.
func suggest(name string, known []string) string {
	if best, ok := closest(name, known); ok {
		return " (did you mean " + best + "?)"
	}
	sorted := slices.Clone(known)
	slices.Sort(sorted)
	return " (known: " + strings.Join(sorted, ", ") + ")"
}

// closest returns the candidate nearest to s by edit distance, if it is
// close enough to be a likely typo: a case difference, or at most a third
// of the name's letters (minimum two) changed.
func closest(s string, candidates []string) (string, bool) {
	best, d := names.Closest(s, candidates)
	return best, best != "" && d <= max(2, len(s)/3)
}
