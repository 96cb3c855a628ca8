// Package strictyaml decodes a YAML document into a Go value strictly, and names every problem
// by its path in the document (rules[1].estimation.bytes_per_token) together with the fix.
//
// yaml.v3's own strict mode (KnownFields) reports only line numbers and stops at the first
// problem. Here the document is parsed into a yaml.Node tree once and then decoded by
// reflection from that tree, so the path is known at every step and all problems are collected.
// Strictness, beyond yaml.v3's defaults:
//   - unknown fields and duplicate keys are errors (with a "did you mean" suggestion);
//   - exactly one document; an empty document is an error;
//   - a key written without a value (null) is an error, so `match:` cannot silently mean
//     "no match";
//   - anchors and aliases are refused: a configuration has no need for them and expanding them
//     is how a small document becomes a huge one;
//   - numbers must have the right shape: "ten" or 1.5 is not a whole number, and integers that
//     overflow are reported rather than wrapped.
//
// Types implementing yaml.Unmarshaler still work; their errors are reported at their path, and
// if they return Errors or FieldError (for example after calling DecodeNode on a part of their
// node) those paths are appended to theirs.
package strictyaml

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// FieldError is one problem at one path of the document. An empty Path means the document as
// a whole.
type FieldError struct {
	Path string
	Msg  string
}

func (e FieldError) Error() string {
	if e.Path == "" {
		return "document: " + e.Msg
	}
	return e.Path + ": " + e.Msg
}

// Errors is every problem found, in document order.
type Errors []FieldError

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Prefix returns a copy with p prepended to every path, for callers that embed this document
// under a key of a larger one (the gateway config embeds the policy under "quota").
func (es Errors) Prefix(p string) Errors {
	out := make(Errors, len(es))
	for i, e := range es {
		out[i] = FieldError{Path: JoinPath(p, e.Path), Msg: e.Msg}
	}
	return out
}

// JoinPath joins a parent path and a child path: "rules[1]" + "name" = "rules[1].name",
// "rules" + "[1]" = "rules[1]", "" + "name" = "name".
func JoinPath(parent, child string) string {
	switch {
	case parent == "":
		return child
	case child == "":
		return parent
	case strings.HasPrefix(child, "["):
		return parent + child
	default:
		return parent + "." + child
	}
}

// Decode decodes exactly one YAML document strictly into v, which must be a non-nil pointer.
// The error, when not nil, is an Errors value listing every problem found.
func Decode(data []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return Errors{{Msg: "empty; write the configuration as a YAML mapping"}}
		}
		return Errors{{Msg: syntaxMsg(err)}}
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return Errors{{Msg: syntaxMsg(err)}}
	default:
		return Errors{{Msg: fmt.Sprintf("more than one YAML document (another starts at line %d); keep one and remove the --- separators", extra.Line)}}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return Errors{{Msg: "empty; write the configuration as a YAML mapping"}}
		}
		root = root.Content[0]
	}
	if isNull(root) {
		return Errors{{Msg: "empty; write the configuration as a YAML mapping"}}
	}
	return DecodeNode(root, v)
}

// DecodeNode decodes one node strictly into v with paths relative to the node. It is what a
// custom UnmarshalYAML calls to decode the rest of its node by the same rules.
func DecodeNode(n *yaml.Node, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return Errors{{Msg: fmt.Sprintf("strictyaml: decode target must be a non-nil pointer, not %T", v)}}
	}
	d := &decoder{}
	d.value("", n, rv.Elem())
	if len(d.errs) > 0 {
		return d.errs
	}
	return nil
}

// syntaxMsg turns a yaml.v3 parse error ("yaml: line 3: mapping values are not allowed in this
// context") into a message that points at the line.
func syntaxMsg(err error) string {
	return strings.TrimPrefix(err.Error(), "yaml: ") + "; fix the YAML syntax"
}

type decoder struct {
	errs Errors
}

func (d *decoder) fail(path, format string, args ...any) {
	d.errs = append(d.errs, FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// value decodes n into out (settable) at path.
func (d *decoder) value(path string, n *yaml.Node, out reflect.Value) {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		d.fail(path, "anchors and aliases are not supported; write the value out")
		return
	}
	if isNull(n) {
		d.fail(path, "has no value; give it one or remove the key")
		return
	}
	if out.CanAddr() && out.Addr().Type().Implements(unmarshalerType) {
		d.custom(path, n, out)
		return
	}
	switch out.Kind() {
	case reflect.Pointer:
		elem := reflect.New(out.Type().Elem())
		d.value(path, n, elem.Elem())
		out.Set(elem)
	case reflect.Struct:
		d.structure(path, n, out)
	case reflect.Slice:
		d.sequence(path, n, out)
	case reflect.Map:
		d.mapping(path, n, out)
	case reflect.Interface:
		// A free-form value: let yaml.v3 build it, after refusing aliases anywhere inside.
		if hasAlias(n) {
			d.fail(path, "anchors and aliases are not supported; write the value out")
			return
		}
		var x any
		if err := n.Decode(&x); err != nil {
			d.fail(path, "%v", err)
			return
		}
		if x != nil {
			out.Set(reflect.ValueOf(x))
		}
	default:
		d.scalar(path, n, out)
	}
}

// custom hands n to the type's own UnmarshalYAML and reports its error at path.
func (d *decoder) custom(path string, n *yaml.Node, out reflect.Value) {
	err := out.Addr().Interface().(yaml.Unmarshaler).UnmarshalYAML(n)
	if err != nil {
		d.errs = append(d.errs, asErrors(err).Prefix(path)...)
	}
}

// asErrors flattens an error returned by a custom UnmarshalYAML: FieldError and Errors keep
// their relative paths, joined errors are flattened, anything else is a message at the root.
func asErrors(err error) Errors {
	switch e := err.(type) {
	case Errors:
		return e
	case FieldError:
		return Errors{e}
	case *FieldError:
		return Errors{*e}
	case interface{ Unwrap() []error }:
		var out Errors
		for _, inner := range e.Unwrap() {
			if inner != nil {
				out = append(out, asErrors(inner)...)
			}
		}
		return out
	}
	var es Errors
	if errors.As(err, &es) {
		return es
	}
	return Errors{{Msg: err.Error()}}
}

func (d *decoder) structure(path string, n *yaml.Node, out reflect.Value) {
	if n.Kind != yaml.MappingNode {
		d.fail(path, "must be a mapping of fields, not %s", describe(n))
		return
	}
	fields := fieldsOf(out.Type())
	d.pairs(path, n, func(key string, keyPath string, val *yaml.Node) {
		idx, ok := fields.index[key]
		if !ok {
			d.fail(keyPath, "unknown field; %s", fields.suggest(key))
			return
		}
		d.value(keyPath, val, out.FieldByIndex(idx))
	})
}

func (d *decoder) mapping(path string, n *yaml.Node, out reflect.Value) {
	if n.Kind != yaml.MappingNode {
		d.fail(path, "must be a mapping, not %s", describe(n))
		return
	}
	if out.Type().Key().Kind() != reflect.String {
		d.fail(path, "strictyaml: only maps with string keys are supported")
		return
	}
	m := reflect.MakeMapWithSize(out.Type(), len(n.Content)/2)
	d.pairs(path, n, func(key string, keyPath string, val *yaml.Node) {
		elem := reflect.New(out.Type().Elem()).Elem()
		d.value(keyPath, val, elem)
		m.SetMapIndex(reflect.ValueOf(key).Convert(out.Type().Key()), elem)
	})
	out.Set(m)
}

// pairs walks the key/value pairs of a mapping node, rejecting non-scalar, aliased and
// duplicate keys, and calls f for each remaining pair with the path of its value.
func (d *decoder) pairs(path string, n *yaml.Node, f func(key, keyPath string, val *yaml.Node)) {
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Anchor != "" || k.Tag == "!!merge" {
			d.fail(path, "line %d: keys must be plain names (no merge keys, anchors or complex keys)", k.Line)
			continue
		}
		keyPath := JoinPath(path, KeySegment(k.Value))
		if line, dup := seen[k.Value]; dup {
			d.fail(keyPath, "duplicate key (first at line %d, again at line %d); keep one", line, k.Line)
			continue
		}
		seen[k.Value] = k.Line
		f(k.Value, keyPath, val)
	}
}

// KeySegment renders a mapping key as a path segment: bare when it is a plain name, quoted in
// brackets when it would be ambiguous (model_multipliers["gpt-4.1"]).
func KeySegment(k string) string {
	for _, r := range k {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return "[" + strconv.Quote(k) + "]"
		}
	}
	if k == "" {
		return `[""]`
	}
	return k
}

func (d *decoder) sequence(path string, n *yaml.Node, out reflect.Value) {
	if n.Kind != yaml.SequenceNode {
		d.fail(path, "must be a list, not %s", describe(n))
		return
	}
	s := reflect.MakeSlice(out.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		d.value(fmt.Sprintf("%s[%d]", path, i), item, s.Index(i))
	}
	out.Set(s)
}

var textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()

func (d *decoder) scalar(path string, n *yaml.Node, out reflect.Value) {
	if n.Kind != yaml.ScalarNode {
		d.fail(path, "must be a single value, not %s", describe(n))
		return
	}
	tag := n.ShortTag()
	switch out.Kind() {
	case reflect.String:
		// Any plain scalar reads as text (a model named 4 or a subject named true is text).
		if tag == "!!binary" {
			d.fail(path, "binary values are not supported; write text")
			return
		}
		out.SetString(n.Value)
	case reflect.Bool:
		var b bool
		if tag != "!!bool" || n.Decode(&b) != nil {
			d.fail(path, "%s is not true or false", quoteValue(n))
			return
		}
		out.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		i, ok := d.integer(path, n, tag)
		if !ok {
			return
		}
		if out.OverflowInt(i) {
			d.fail(path, "%s is too large; the largest accepted is %d", n.Value, maxInt(out.Type().Bits()))
			return
		}
		out.SetInt(i)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		i, ok := d.integer(path, n, tag)
		if !ok {
			return
		}
		if i < 0 {
			d.fail(path, "%s is negative; write a positive whole number", n.Value)
			return
		}
		if out.OverflowUint(uint64(i)) {
			d.fail(path, "%s is too large", n.Value)
			return
		}
		out.SetUint(uint64(i))
	case reflect.Float32, reflect.Float64:
		var f float64
		if (tag != "!!float" && tag != "!!int") || n.Decode(&f) != nil {
			d.fail(path, "%s is not a number", quoteValue(n))
			return
		}
		out.SetFloat(f)
	default:
		if out.CanAddr() && out.Addr().Type().Implements(textUnmarshalerType) {
			if err := out.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(n.Value)); err != nil {
				d.fail(path, "%s", err.Error())
			}
			return
		}
		d.fail(path, "strictyaml: cannot decode into %s", out.Type())
	}
}

// integer reads a whole number, telling "not a whole number" apart from "too large".
func (d *decoder) integer(path string, n *yaml.Node, tag string) (int64, bool) {
	var i int64
	switch {
	case tag == "!!int":
		if err := n.Decode(&i); err != nil {
			d.fail(path, "%s is too large; the largest accepted is %d", n.Value, int64(math.MaxInt64))
			return 0, false
		}
		return i, true
	case tag == "!!float" && isDigits(n.Value):
		// yaml.v3 resolves integers beyond int64 as floats.
		d.fail(path, "%s is too large; the largest accepted is %d", n.Value, int64(math.MaxInt64))
		return 0, false
	default:
		d.fail(path, "%s is not a whole number", quoteValue(n))
		return 0, false
	}
}

func isDigits(s string) bool {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "-"), "+")
	if s == "" {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && r != '_' {
			return false
		}
	}
	return true
}

func maxInt(bits int) int64 { return int64(1)<<(bits-1) - 1 }

// quoteValue renders a scalar the way the user wrote it, quoted when it is text.
func quoteValue(n *yaml.Node) string {
	v := n.Value
	if len(v) > 64 {
		v = v[:64] + "…"
	}
	if n.ShortTag() == "!!str" {
		return strconv.Quote(v)
	}
	return v
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return "the value " + quoteValue(n)
	default:
		return "this"
	}
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func hasAlias(n *yaml.Node) bool {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return true
	}
	for _, c := range n.Content {
		if hasAlias(c) {
			return true
		}
	}
	return false
}

// structFields maps YAML names to struct field indexes.
type structFields struct {
	index map[string][]int
	names []string
}

func fieldsOf(t reflect.Type) structFields {
	fs := structFields{index: map[string][]int{}}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fs.index[name] = f.Index
		fs.names = append(fs.names, name)
	}
	sort.Strings(fs.names)
	return fs
}

// suggest says what to write instead of an unknown field: the closest known name when one is
// close, otherwise the whole list.
func (fs structFields) suggest(key string) string {
	best, bestDist := "", math.MaxInt
	for _, name := range fs.names {
		if dist := editDistance(strings.ToLower(key), name); dist < bestDist {
			best, bestDist = name, dist
		}
	}
	if best != "" && bestDist < len(best) && bestDist <= max(2, len(best)/3) {
		return fmt.Sprintf("did you mean %q?", best)
	}
	if len(fs.names) == 0 {
		return "remove it"
	}
	return "remove it; known fields are " + strings.Join(fs.names, ", ")
}

// editDistance is the Levenshtein distance, capped in cost by the short names it compares.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return math.MaxInt
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
