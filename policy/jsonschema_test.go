package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v5"
	"gopkg.in/yaml.v3"
)

// These tests hold the JSON Schema to the decoder. The schema is written
// from the key tables, so they do not read the tables: they ask the
// decoder (Parse) and an independent validator (santhosh-tekuri/jsonschema)
// the same questions about the same documents.

// TestSchemaFileUpToDate: docs/policy.schema.json is what Schema writes.
func TestSchemaFileUpToDate(t *testing.T) {
	got, err := os.ReadFile(filepath.Join("..", SchemaFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, Schema()) {
		t.Fatalf("%s is stale: run `go run ./cmd/sentry schema > %s`", SchemaFile, SchemaFile)
	}
}

// TestExamplesNameTheSchema: every example carries the yaml-language-server
// line, pointing at the schema file.
func TestExamplesNameTheSchema(t *testing.T) {
	for _, f := range exampleFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(string(data), "\n")
		const prefix = "# yaml-language-server: $schema="
		rel, ok := strings.CutPrefix(first, prefix)
		if !ok {
			t.Errorf("%s: the first line is not %q", f, prefix+"...")
			continue
		}
		want, _ := filepath.Abs(filepath.Join("..", SchemaFile))
		if got, _ := filepath.Abs(filepath.Join(filepath.Dir(f), rel)); got != want {
			t.Errorf("%s names %s, not %s", f, rel, SchemaFile)
		}
	}
}

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft7
	if err := c.AddResource("policy.schema.json", bytes.NewReader(Schema())); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("policy.schema.json")
	if err != nil {
		t.Fatalf("the schema does not compile: %v", err)
	}
	return s
}

// asJSON turns a YAML document into the value a JSON Schema validator
// sees, as an editor's YAML language server does.
func asJSON(t *testing.T, data []byte) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSchemaAcceptsValidPolicies: every example, every dump and the
// every-key policy are valid under the schema.
func TestSchemaAcceptsValidPolicies(t *testing.T) {
	sch := compileSchema(t)
	for _, f := range exampleFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := sch.Validate(asJSON(t, data)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		s, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := Dump(s)
		if err := sch.Validate(asJSON(t, out)); err != nil {
			t.Errorf("dump of %s: %v", f, err)
		}
	}
	_, out := everyKey(t)
	if err := sch.Validate(asJSON(t, out)); err != nil {
		t.Errorf("every-key policy: %v", err)
	}
	if err := sch.Validate(asJSON(t, docsExample(t))); err != nil {
		t.Errorf("docs/policy.md's complete example: %v", err)
	}
}

// edit returns doc marshalled with the node at path (keys and list
// indexes) replaced by with, or removed when with is nil; doc is left as
// it was.
func edit(t *testing.T, doc *yaml.Node, path []string, with *yaml.Node) []byte {
	t.Helper()
	parent := nodeAt(doc, path[:len(path)-1])
	idx := childIndex(parent, path[len(path)-1])
	if idx < 0 {
		t.Fatalf("no %v in the every-key policy", path)
	}
	saved := parent.Content
	if with != nil {
		parent.Content = append([]*yaml.Node(nil), saved...)
		parent.Content[idx] = with
	} else if parent.Kind == yaml.MappingNode {
		parent.Content = append(append([]*yaml.Node(nil), saved[:idx-1]...), saved[idx+1:]...)
	}
	defer func() { parent.Content = saved }()
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// editJSON is edit on the JSON form of the document: a copy of v with the
// value at path replaced by with, or removed when remove.
func editJSON(v any, path []string, with any, remove bool) any {
	if len(path) == 0 {
		return with
	}
	switch x := v.(type) {
	case map[string]any:
		c := make(map[string]any, len(x))
		for k, e := range x {
			c[k] = e
		}
		if len(path) == 1 && remove {
			delete(c, path[0])
		} else {
			c[path[0]] = editJSON(x[path[0]], path[1:], with, remove)
		}
		return c
	case []any:
		c := append([]any(nil), x...)
		var i int
		fmt.Sscan(path[0], &i)
		c[i] = editJSON(x[i], path[1:], with, remove)
		return c
	}
	return v
}

// childIndex is the index in n.Content of the value at seg (a key, or a
// list index), or -1.
func childIndex(n *yaml.Node, seg string) int {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == seg {
				return i + 1
			}
		}
	case yaml.SequenceNode:
		i := -1
		fmt.Sscan(seg, &i)
		if i >= 0 && i < len(n.Content) {
			return i
		}
	}
	return -1
}

// leaves lists the path of every key in the document, with list indexes.
func leaves(n *yaml.Node, prefix []string, out *[][]string) {
	switch n.Kind {
	case yaml.DocumentNode:
		leaves(n.Content[0], prefix, out)
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := append(append([]string(nil), prefix...), n.Content[i].Value)
			*out = append(*out, p)
			leaves(n.Content[i+1], p, out)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			leaves(c, append(append([]string(nil), prefix...), fmt.Sprint(i)), out)
		}
	}
}

// errorAt returns the decoder's errors whose message is about the key at
// path (its dotted form, with [i] for list indexes).
func errorsAt(err error, path []string) []string {
	var b strings.Builder
	for _, seg := range path {
		if seg != "" && seg[0] >= '0' && seg[0] <= '9' {
			b.WriteString("[" + seg + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(seg)
	}
	at := b.String() + ": "
	if len(path) == 0 {
		at = ""
	}
	var out []string
	if es, ok := err.(Errors); ok {
		for _, e := range es {
			if strings.HasPrefix(e.Msg, at) {
				out = append(out, strings.TrimPrefix(e.Msg, at))
			}
		}
	}
	return out
}

// TestSchemaMatchesDecoder: the schema and the decoder agree, key by key,
// on the every-key policy:
//   - the keys: an unknown key added to each mapping makes the decoder
//     list the keys it knows there, which must be the schema's;
//   - the types: each key set in turn to values of every JSON type (and
//     to each of an enum's values): whatever the decoder accepts, the
//     schema accepts, and what the schema accepts the decoder refuses
//     for no wrong type ("expected ...") nor, for an enum's value, as
//     not one of its values;
//   - the required keys: leaving one out is an error for both.
func TestSchemaMatchesDecoder(t *testing.T) {
	sch := compileSchema(t)
	_, full := everyKey(t)
	dir := t.TempDir()
	var doc yaml.Node
	if err := yaml.Unmarshal(full, &doc); err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(Schema(), &schema); err != nil {
		t.Fatal(err)
	}
	parse := func(data []byte) error {
		_, err := Parse(filepath.Join(dir, "p.yaml"), data)
		return err
	}
	valid := func(data []byte) bool { return sch.Validate(asJSON(t, data)) == nil }
	base := asJSON(t, full)

	var paths [][]string
	leaves(&doc, nil, &paths)
	mappings := [][]string{nil}
	for _, p := range paths {
		if n := nodeAt(&doc, p); n.Kind == yaml.MappingNode {
			mappings = append(mappings, p)
		}
		if n := nodeAt(&doc, p); n.Kind == yaml.SequenceNode {
			for i, c := range n.Content {
				if c.Kind == yaml.MappingNode {
					mappings = append(mappings, append(append([]string(nil), p...), fmt.Sprint(i)))
				}
			}
		}
	}

	// The keys.
	known := regexp.MustCompile(`unknown key "zz_unknown" \(known keys: ([^)]*)\)`)
	for _, m := range mappings {
		data := addKey(t, &doc, m, "zz_unknown")
		if valid(data) {
			t.Errorf("%v: the schema accepts an unknown key", m)
		}
		err := parse(data)
		var got []string
		if es, ok := err.(Errors); ok {
			for _, e := range es {
				if k := known.FindStringSubmatch(e.Msg); k != nil {
					got = strings.Split(k[1], ", ")
				}
			}
		}
		if got == nil {
			t.Errorf("%v: the decoder did not list its keys: %v", m, err)
			continue
		}
		want := schemaKeys(schemaAt(t, schema, m))
		sort.Strings(got)
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%v: the decoder knows %v, the schema %v", m, got, want)
		}
	}

	// The types, once per key (the first place it is set). Each probe is
	// made in a policy of the key's app alone (the first app's for the
	// keys outside apps), which judges the key as the whole policy does
	// and costs half the parsing.
	var slim []*yaml.Node
	var slimJSON []any
	for i := range nodeAt(&doc, []string{"apps"}).Content {
		one := copyNode(&doc)
		apps := nodeAt(one, []string{"apps"})
		apps.Content = apps.Content[i : i+1]
		slim = append(slim, one)
		out, err := yaml.Marshal(one)
		if err != nil {
			t.Fatal(err)
		}
		slimJSON = append(slimJSON, asJSON(t, out))
	}
	probes := []string{"true", "7", "2.5", "text", "250ms", "64KiB", "[]", "[a]", "{}", "null"}
	probed := map[string]bool{}
	for _, p := range paths {
		key := regexp.MustCompile(`\.[0-9]+`).ReplaceAllString(strings.Join(p, "."), "[]")
		if probed[key] {
			continue
		}
		probed[key] = true
		vals := probes
		enum := map[string]bool{}
		if e, ok := schemaAt(t, schema, p)["enum"].([]any); ok {
			for _, v := range e {
				vals = append(vals, fmt.Sprint(v))
				enum[fmt.Sprint(v)] = true
			}
			vals = append(vals, "bogus_value")
		}
		app, at := 0, p
		if len(p) > 1 && p[0] == "apps" {
			fmt.Sscan(p[1], &app)
			at = append([]string{"apps", "0"}, p[2:]...)
		}
		for _, v := range vals {
			var n yaml.Node
			if err := yaml.Unmarshal([]byte(v), &n); err != nil {
				t.Fatal(err)
			}
			data := edit(t, slim[app], at, n.Content[0])
			err := parse(data)
			verr := sch.Validate(editJSON(slimJSON[app], at, asJSON(t, []byte(v)), false))
			ok := verr == nil
			if err == nil && !ok {
				t.Errorf("%v: %s: the decoder accepts it, the schema does not: %v", p, v, verr)
			}
			if ok {
				for _, msg := range errorsAt(err, at) {
					if strings.HasPrefix(msg, "expected ") || enum[v] && strings.HasPrefix(msg, "invalid value") {
						t.Errorf("%v: %s: the schema accepts it, the decoder says %s", p, v, msg)
					}
				}
			}
		}
	}

	// The required keys.
	for _, m := range mappings {
		req, _ := schemaAt(t, schema, m)["required"].([]any)
		for _, r := range req {
			key := r.(string)
			data := edit(t, &doc, append(append([]string(nil), m...), key), nil)
			if sch.Validate(editJSON(base, append(append([]string(nil), m...), key), nil, true)) == nil {
				t.Errorf("%v: the schema does not require %s", m, key)
			}
			found := false
			for _, msg := range errorsAt(parse(data), m) {
				found = found || strings.HasPrefix(msg, key+" is required")
			}
			if !found {
				t.Errorf("%v: the decoder does not require %s: %v", m, key, parse(data))
			}
		}
	}
}

// nodeAt is the node at path in doc (a document node), or nil.
func nodeAt(doc *yaml.Node, path []string) *yaml.Node {
	n := doc.Content[0]
	for _, seg := range path {
		i := childIndex(n, seg)
		if i < 0 {
			return nil
		}
		n = n.Content[i]
	}
	return n
}

// addKey returns doc with key: 1 added to the mapping at path.
func addKey(t *testing.T, doc *yaml.Node, path []string, key string) []byte {
	t.Helper()
	var buf bytes.Buffer
	root := copyNode(doc)
	m := nodeAt(root, path)
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, &yaml.Node{Kind: yaml.ScalarNode, Value: "1"})
	enc := yaml.NewEncoder(&buf)
	if err := enc.Encode(root); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func copyNode(n *yaml.Node) *yaml.Node {
	c := *n
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, x := range n.Content {
		c.Content[i] = copyNode(x)
	}
	return &c
}

// schemaAt is the schema of the value at path, following properties and
// items, and into the anyOf branch that is an object or a list.
func schemaAt(t *testing.T, s map[string]any, path []string) map[string]any {
	t.Helper()
	pick := func(s map[string]any, want string) map[string]any {
		alts, ok := s["anyOf"].([]any)
		if !ok {
			return s
		}
		for _, a := range alts {
			am := a.(map[string]any)
			if _, ok := am[want]; ok {
				return am
			}
		}
		return s
	}
	for _, seg := range path {
		if seg != "" && seg[0] >= '0' && seg[0] <= '9' {
			s = pick(s, "items")["items"].(map[string]any)
			continue
		}
		props, _ := pick(s, "properties")["properties"].(map[string]any)
		next, ok := props[seg].(map[string]any)
		if !ok {
			t.Fatalf("the schema has no %v", path)
		}
		s = next
	}
	return s
}

// schemaKeys lists the keys a schema object allows: its properties, and
// PREFIX* for each pattern ^PREFIX.
func schemaKeys(s map[string]any) []string {
	var out []string
	obj := s
	if alts, ok := s["anyOf"].([]any); ok {
		for _, a := range alts {
			if am := a.(map[string]any); am["properties"] != nil {
				obj = am
			}
		}
	}
	for k := range obj["properties"].(map[string]any) {
		out = append(out, k)
	}
	if pp, ok := obj["patternProperties"].(map[string]any); ok {
		for k := range pp {
			out = append(out, strings.TrimPrefix(k, "^")+"*")
		}
	}
	sort.Strings(out)
	return out
}
