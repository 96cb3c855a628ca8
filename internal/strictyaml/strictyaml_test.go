package strictyaml

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

type level string

// UnmarshalYAML stands in for a custom scalar type such as ledger.Duration.
func (l *level) UnmarshalYAML(n *yaml.Node) error {
	if n.Value != "low" && n.Value != "high" {
		return fmt.Errorf("%q is not a level; write low or high", n.Value)
	}
	*l = level(n.Value)
	return nil
}

type inner struct {
	Count    int64              `yaml:"count"`
	Ratio    *float64           `yaml:"ratio"`
	Level    level              `yaml:"level"`
	Tags     []string           `yaml:"tags"`
	Weights  map[string]float64 `yaml:"weights"`
	Enabled  bool               `yaml:"enabled"`
	Small    int8               `yaml:"small"`
	internal int
}

type doc struct {
	Name    string  `yaml:"name"`
	Items   []inner `yaml:"items"`
	Nested  *inner  `yaml:"nested"`
	Ignored string  `yaml:"-"`
}

// withErrors decodes its own node partly and reports paths relative to itself.
type withErrors struct{ A, B int }

func (w *withErrors) UnmarshalYAML(n *yaml.Node) error {
	type plain withErrors
	err := DecodeNode(n, (*plain)(w))
	return errors.Join(Errors{{Path: "extra", Msg: "checked by the type"}}, err)
}

func TestDecodeAcceptsAWellFormedDocument(t *testing.T) {
	src := `
name: x
items:
  - count: 3
    ratio: 1.5
    level: high
    tags: [a, "b"]
    weights: {gpt-4.1: 2, m: 1}
    enabled: true
    small: 7
nested: {count: 0x10}
`
	var d doc
	if err := Decode([]byte(src), &d); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	it := d.Items[0]
	if d.Name != "x" || it.Count != 3 || *it.Ratio != 1.5 || it.Level != "high" || len(it.Tags) != 2 ||
		it.Weights["gpt-4.1"] != 2 || !it.Enabled || it.Small != 7 || d.Nested.Count != 16 {
		t.Fatalf("decoded wrongly: %+v nested %+v", d, d.Nested)
	}
}

func TestDecodeReportsPathAndFix(t *testing.T) {
	cases := []struct {
		name string
		src  string
		want []string // every line of the error, in order
	}{
		{"unknown field close to a known one suggests it", "items: [{cont: 1}]",
			[]string{`items[0].cont: unknown field; did you mean "count"?`}},
		{"unknown field far from every known one lists them", "nested: {zzzzzzzz: 1}",
			[]string{`nested.zzzzzzzz: unknown field; remove it; known fields are count, enabled, level, ratio, small, tags, weights`}},
		{"field tagged - is unknown", "Ignored: x",
			[]string{`Ignored: unknown field; remove it; known fields are items, name, nested`}},
		{"duplicate key names both lines", "name: a\nname: b",
			[]string{`name: duplicate key (first at line 1, again at line 2); keep one`}},
		{"text for a whole number", "nested: {count: ten}",
			[]string{`nested.count: "ten" is not a whole number`}},
		{"fraction for a whole number", "nested: {count: 1.5}",
			[]string{`nested.count: 1.5 is not a whole number`}},
		{"integer beyond int64", "nested: {count: 99999999999999999999}",
			[]string{`nested.count: 99999999999999999999 is too large; the largest accepted is 9223372036854775807`}},
		{"integer beyond a small int", "nested: {small: 300}",
			[]string{`nested.small: 300 is too large; the largest accepted is 127`}},
		{"text for a number", "nested: {ratio: lots}",
			[]string{`nested.ratio: "lots" is not a number`}},
		{"text for a bool", "nested: {enabled: maybe}",
			[]string{`nested.enabled: "maybe" is not true or false`}},
		{"key without a value", "nested:",
			[]string{`nested: has no value; give it one or remove the key`}},
		{"list where a mapping belongs", "nested: [1]",
			[]string{`nested: must be a mapping of fields, not a list`}},
		{"scalar where a list belongs", "items: 3",
			[]string{`items: must be a list, not the value 3`}},
		{"mapping where a scalar belongs", "name: {a: 1}",
			[]string{`name: must be a single value, not a mapping`}},
		{"custom unmarshaler error gets the path", "items: [{}, {level: medium}]",
			[]string{`items[1].level: "medium" is not a level; write low or high`}},
		{"map key with a dot is quoted in the path", `nested: {weights: {"gpt-4.1": x}}`,
			[]string{`nested.weights["gpt-4.1"]: "x" is not a number`}},
		{"aliases are refused", "name: &a x\nitems: [{level: *a}]",
			[]string{`name: anchors and aliases are not supported; write the value out`,
				`items[0].level: anchors and aliases are not supported; write the value out`}},
		{"merge keys are refused", "nested: {<<: {count: 1}}",
			[]string{`nested: line 1: keys must be plain names (no merge keys, anchors or complex keys)`}},
		{"every problem is reported, in document order", "name: [x]\nitems: [{count: a}, {bogus: 1}]",
			[]string{`name: must be a single value, not a list`, `items[0].count: "a" is not a whole number`,
				`items[1].bogus: unknown field; remove it; known fields are count, enabled, level, ratio, small, tags, weights`}},
		{"empty input", "", []string{"document: empty; write the configuration as a YAML mapping"}},
		{"only comments", "# nothing\n", []string{"document: empty; write the configuration as a YAML mapping"}},
		{"explicit null document", "~", []string{"document: empty; write the configuration as a YAML mapping"}},
		{"two documents", "name: a\n---\nname: b\n",
			[]string{"document: more than one YAML document (another starts at line 2); keep one and remove the --- separators"}},
		{"syntax error names the line", "name: a\n  b: c\n",
			[]string{"document: line 2: mapping values are not allowed in this context; fix the YAML syntax"}},
		{"scalar document where a mapping belongs", "hello",
			[]string{`document: must be a mapping of fields, not the value "hello"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var d doc
			err := Decode([]byte(tc.src), &d)
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("want Errors, got %T %v", err, err)
			}
			if got := strings.Split(es.Error(), "\n"); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("got\n%s\nwant\n%s", es.Error(), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestUnmarshalerReturningErrorsHasItsPathsPrefixed(t *testing.T) {
	var v struct {
		W withErrors `yaml:"w"`
	}
	err := Decode([]byte("w: {a: 1, c: 2}"), &v)
	want := "w.extra: checked by the type\nw.c: unknown field; remove it; known fields are a, b"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want\n%s", err, want)
	}
}

func TestErrorsPrefixEmbedsADocument(t *testing.T) {
	es := Errors{{Path: "rules[1].name", Msg: "m1"}, {Path: "", Msg: "m2"}, {Path: "[0]", Msg: "m3"}}
	got := es.Prefix("quota").Error()
	want := "quota.rules[1].name: m1\nquota: m2\nquota[0]: m3"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if es[0].Path != "rules[1].name" {
		t.Fatalf("Prefix modified its receiver")
	}
}

func TestDecodeRefusesANonPointerTarget(t *testing.T) {
	var d doc
	if err := Decode([]byte("name: x"), d); err == nil {
		t.Fatal("want an error for a non-pointer target")
	}
}

func TestDecodeIntoInterfaceKeepsStrictness(t *testing.T) {
	var v struct {
		Any any `yaml:"any"`
	}
	if err := Decode([]byte("any: {a: [1, 2]}"), &v); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if err := Decode([]byte("any: {a: &x 1, b: *x}"), &v); err == nil {
		t.Fatal("want aliases refused inside a free-form value")
	}
}
