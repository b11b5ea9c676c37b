package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// This file is the generic half of the decoder: it walks a yaml.Node tree,
// checks kinds and keys, and turns scalars into typed values, reporting every
// problem with its line. The schema (which keys exist, what they mean) is in
// schema.go and app.go.

// nodeBudget bounds the work done on one document. Merge keys can expand a
// small file exponentially ("billion laughs"); a real policy is a few hundred
// nodes.
const nodeBudget = 1 << 20

type decoder struct {
	collector
	// baseDir is where relative file names (TLS) are resolved.
	baseDir string
	budget  int
	// merging holds the mappings being merged (<<), to stop cycles.
	merging map[*yaml.Node]bool
	// merged caches the pairs of each mapping used as a merge source, so a
	// chain of merges costs its size, not 2^depth.
	merged map[*yaml.Node][]pair
	// hostname reads the host name, for partition.index_from_hostname.
	hostname func() (string, error)
}

func newDecoder(file, baseDir string, budget int) *decoder {
	return &decoder{
		collector: collector{file: file},
		baseDir:   baseDir,
		budget:    budget,
		merging:   map[*yaml.Node]bool{},
		merged:    map[*yaml.Node][]pair{},
		hostname:  os.Hostname,
	}
}

// errorf reports a problem at n's position, prefixed with path.
func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	d.hintf(n, path, "", format, args...)
}

// hintf is errorf with a suggestion (Error.Suggest): the word to write
// instead, which the message also names.
func (d *decoder) hintf(n *yaml.Node, path, suggest, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	d.addHint(posOf(n), suggest, "%s", msg)
}

func line(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	return n.Line
}

// pos is where something was written: 1-based line and column, 0 when
// not known.
type pos struct{ line, col int }

func posOf(n *yaml.Node) pos {
	if n == nil {
		return pos{}
	}
	return pos{n.Line, n.Column}
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// spend charges one node against the budget, reporting once when it runs out.
func (d *decoder) spend() bool {
	if d.budget <= 0 {
		return false
	}
	d.budget--
	if d.budget == 0 {
		d.add(pos{}, "policy is too large or too deeply aliased; stopped reading")
		// What was not read would only produce follow-on errors.
		d.full = true
		return false
	}
	return true
}

// resolve follows aliases to the anchored node.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && n.Alias != nil && i < 64; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names what a node is, for "expected X, got Y" messages.
func describe(n *yaml.Node) string {
	switch {
	case isNull(n):
		return "nothing (null)"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.AliasNode:
		return "an alias"
	case n.Kind == yaml.DocumentNode:
		return "a document"
	}
	switch n.ShortTag() {
	case "!!str":
		return fmt.Sprintf("the string %q", n.Value)
	case "!!int":
		return "the integer " + n.Value
	case "!!float":
		return "the number " + n.Value
	case "!!bool":
		return "the boolean " + n.Value
	case "!!timestamp":
		return "the timestamp " + n.Value
	}
	return fmt.Sprintf("a value tagged %s", n.Tag)
}

type pair struct {
	key, value *yaml.Node
}

// mapping walks the mapping n, calling each field's set for the keys
// present, and reports unknown and duplicate keys, and required keys that
// are missing. A null n (a key written with nothing after it) is taken as
// an empty mapping. It reports false when n is not a mapping at all.
func (d *decoder) mapping(n *yaml.Node, path string, fields []field) bool {
	r := resolve(n)
	if isNull(r) {
		d.missing(n, path, fields, nil)
		return true
	}
	if r.Kind != yaml.MappingNode {
		d.errorf(n, path, "expected a mapping, got %s", describe(r))
		return false
	}
	var seen map[string]bool
	for _, p := range d.pairs(r, path) {
		key := p.key.Value
		f := lookupField(fields, key)
		if f == nil {
			hint, suggest := keyHint(key, fields)
			d.hintf(p.key, path, suggest, "unknown key %q%s", key, hint)
			continue
		}
		if f.required {
			if seen == nil {
				seen = map[string]bool{}
			}
			seen[f.key] = true
		}
		// Problems with the value as a whole (wrong kind, a required key
		// missing inside it) are reported at the key: a block mapping or
		// list starts on the line after its key.
		v := *p.value
		if v.Line != p.key.Line {
			v.Line, v.Column = p.key.Line, p.key.Column
		}
		f.set(&v, joinPath(path, key))
	}
	d.missing(n, path, fields, seen)
	return true
}

// missing reports the required fields not in seen, at n.
func (d *decoder) missing(n *yaml.Node, path string, fields []field, seen map[string]bool) {
	for _, f := range fields {
		if !f.required || seen[f.key] {
			continue
		}
		if f.why == "" {
			d.errorf(n, path, "%s is required", f.key)
		} else {
			d.errorf(n, path, "%s is required (%s)", f.key, f.why)
		}
	}
}

// lookupField finds key's field. A field key ending in '*' matches every key
// with that prefix (the top level's "x-*").
func lookupField(fields []field, key string) *field {
	for i := range fields {
		k := fields[i].key
		if k == key || strings.HasSuffix(k, "*") && strings.HasPrefix(key, k[:len(k)-1]) {
			return &fields[i]
		}
	}
	return nil
}

// keyHint suggests the nearest known key, or lists them all. suggest is
// the key suggested, if any.
func keyHint(key string, fields []field) (hint, suggest string) {
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.key
	}
	if best := nearest(strings.ToLower(key), names); best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best), best
	}
	sort.Strings(names)
	return " (known keys: " + strings.Join(names, ", ") + ")", ""
}

// nearest returns the word of words closest to s by edit distance, when
// it is close enough to be a likely slip, or "".
func nearest(s string, words []string) string {
	best, bestD := "", math.MaxInt
	for _, w := range words {
		if dist := editDistance(s, w); dist < bestD {
			best, bestD = w, dist
		}
	}
	if best != "" && bestD <= max(1, min(3, len(best)/3)) {
		return best
	}
	return ""
}

// pairs lists a mapping's key/value pairs with merge keys (<<) expanded:
// explicit keys win over merged ones and earlier merges over later ones, as
// YAML specifies. Duplicate explicit keys are errors.
func (d *decoder) pairs(m *yaml.Node, path string) []pair {
	var out []pair
	seen := map[string]*yaml.Node{}
	var merges []*yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		if !d.spend() {
			return out
		}
		k, v := m.Content[i], m.Content[i+1]
		rk := resolve(k)
		if rk == nil || rk.Kind != yaml.ScalarNode {
			d.errorf(k, path, "keys must be plain words, got %s", describe(rk))
			continue
		}
		if rk.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if first, dup := seen[rk.Value]; dup {
			d.errorf(k, path, "duplicate key %q (first at line %d)", rk.Value, line(first))
			continue
		}
		seen[rk.Value] = k
		out = append(out, pair{k, v})
	}
	for _, mv := range merges {
		rv := resolve(mv)
		var srcs []*yaml.Node
		switch {
		case rv != nil && rv.Kind == yaml.MappingNode:
			srcs = []*yaml.Node{rv}
		case rv != nil && rv.Kind == yaml.SequenceNode:
			for _, e := range rv.Content {
				re := resolve(e)
				if re == nil || re.Kind != yaml.MappingNode {
					d.errorf(e, path, "merge (<<) needs a mapping or a list of mappings, got %s", describe(re))
					continue
				}
				srcs = append(srcs, re)
			}
		default:
			d.errorf(mv, path, "merge (<<) needs a mapping or a list of mappings, got %s", describe(rv))
		}
		for _, src := range srcs {
			if d.merging[src] {
				d.errorf(mv, path, "merge (<<) includes itself")
				continue
			}
			sp, cached := d.merged[src]
			if !cached {
				d.merging[src] = true
				sp = d.pairs(src, path)
				delete(d.merging, src)
				d.merged[src] = sp
			}
			for _, p := range sp {
				if _, dup := seen[p.key.Value]; !dup {
					seen[p.key.Value] = p.key
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// item is one decoded entry of a list of strings.
type item struct {
	s    string
	node *yaml.Node
	path string
}

// strList decodes a list of strings. With single, a lone string is taken as
// a list of one. A null value is an empty list.
func (d *decoder) strList(n *yaml.Node, path string, single bool) ([]item, bool) {
	r := resolve(n)
	switch {
	case isNull(r):
		return nil, true
	case single && r.Kind == yaml.ScalarNode:
		s, ok := d.str(n, path)
		if !ok {
			return nil, false
		}
		return []item{{s, n, path}}, true
	case r.Kind != yaml.SequenceNode:
		want := "a list"
		if single {
			want = "a string or a list"
		}
		d.errorf(n, path, "expected %s, got %s", want, describe(r))
		return nil, false
	}
	out := make([]item, 0, len(r.Content))
	ok := true
	for i, e := range r.Content {
		if !d.spend() {
			return out, false
		}
		p := path + "[" + strconv.Itoa(i) + "]"
		s, good := d.str(e, p)
		if !good {
			ok = false
			continue
		}
		out = append(out, item{s, e, p})
	}
	return out, ok
}

// scalar resolves n and checks that it is a non-null scalar.
func (d *decoder) scalar(n *yaml.Node, path, want string) (*yaml.Node, bool) {
	r := resolve(n)
	if r == nil || r.Kind != yaml.ScalarNode || isNull(r) {
		d.errorf(n, path, "expected %s, got %s", want, describe(r))
		return nil, false
	}
	return r, true
}

// str decodes a string. Numbers are taken as their text; booleans are
// refused, since "body: yes" is more likely a slip than a wish for "true".
func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	r, ok := d.scalar(n, path, "a string")
	if !ok {
		return "", false
	}
	switch r.ShortTag() {
	case "!!str", "!!int", "!!float", "!!timestamp":
		return r.Value, true
	}
	d.errorf(n, path, "expected a string, got %s (quote it if you mean the text)", describe(r))
	return "", false
}

func rangeMsg(lo, hi int64) string {
	if hi == math.MaxInt64 {
		return fmt.Sprintf("must be at least %d", lo)
	}
	return fmt.Sprintf("must be from %d to %d", lo, hi)
}

// integer decodes an integer within [lo, hi].
func (d *decoder) integer(n *yaml.Node, path string, lo, hi int64) (int64, bool) {
	r, ok := d.scalar(n, path, "an integer")
	if !ok {
		return 0, false
	}
	if r.ShortTag() != "!!int" {
		d.errorf(n, path, "expected an integer, got %s", describe(r))
		return 0, false
	}
	var v int64
	if err := r.Decode(&v); err != nil {
		d.errorf(n, path, "integer %s is out of range", r.Value)
		return 0, false
	}
	if v < lo || v > hi {
		d.errorf(n, path, "%d is out of range; %s", v, rangeMsg(lo, hi))
		return 0, false
	}
	return v, true
}

// size decodes a byte count (an integer or a string such as "64KiB") within
// [lo, hi].
func (d *decoder) size(n *yaml.Node, path string, lo, hi int64) (int64, bool) {
	r, ok := d.scalar(n, path, "a byte count")
	if !ok {
		return 0, false
	}
	var v int64
	switch r.ShortTag() {
	case "!!int":
		if err := r.Decode(&v); err != nil {
			d.errorf(n, path, "integer %s is out of range", r.Value)
			return 0, false
		}
	case "!!str":
		var err error
		if v, err = parseSize(r.Value); err != nil {
			d.errorf(n, path, "%v", err)
			return 0, false
		}
	default:
		d.errorf(n, path, "expected a byte count such as 65536 or 64KiB, got %s", describe(r))
		return 0, false
	}
	if v < lo || v > hi {
		d.errorf(n, path, "%d bytes is out of range; %s", v, rangeMsg(lo, hi))
		return 0, false
	}
	return v, true
}

// duration decodes a Go duration string of at least lo.
func (d *decoder) duration(n *yaml.Node, path string, lo time.Duration) (time.Duration, bool) {
	r, ok := d.scalar(n, path, "a duration such as 250ms")
	if !ok {
		return 0, false
	}
	switch r.ShortTag() {
	case "!!str", "!!int", "!!float":
	default:
		d.errorf(n, path, "expected a duration such as 250ms, got %s", describe(r))
		return 0, false
	}
	v, err := parseDuration(r.Value)
	if err != nil {
		d.errorf(n, path, "%v", err)
		return 0, false
	}
	if v < lo {
		switch lo {
		case 0:
			d.errorf(n, path, "%v must not be negative", v)
		case time.Nanosecond:
			d.errorf(n, path, "%v must be positive", v)
		default:
			d.errorf(n, path, "%v is too short; must be at least %v", v, lo)
		}
		return 0, false
	}
	return v, true
}

// number decodes a finite number, written as an integer or a decimal
// (95, 0.85, 1e3). A quoted number is refused, as a quoted bool is.
func (d *decoder) number(n *yaml.Node, path string) (float64, bool) {
	r, ok := d.scalar(n, path, "a number")
	if !ok {
		return 0, false
	}
	if t := r.ShortTag(); t != "!!int" && t != "!!float" {
		d.errorf(n, path, "expected a number, got %s", describe(r))
		return 0, false
	}
	var v float64
	if err := r.Decode(&v); err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		d.errorf(n, path, "expected a finite number, got %s", r.Value)
		return 0, false
	}
	return v, true
}

// numRange is the allowed range of a number: lo and hi are the bounds
// (hi +Inf for none), each included unless its Open flag is set.
type numRange struct {
	lo, hi         float64
	loOpen, hiOpen bool
}

// atLeast and above are the common one-sided ranges.
func atLeast(lo float64) numRange { return numRange{lo: lo, hi: math.Inf(1)} }
func above(lo float64) numRange   { return numRange{lo: lo, hi: math.Inf(1), loOpen: true} }

func (r numRange) contains(v float64) bool {
	return (v > r.lo || !r.loOpen && v == r.lo) && (v < r.hi || !r.hiOpen && v == r.hi)
}

func (r numRange) String() string {
	lo := "at least " + fmtNum(r.lo)
	if r.loOpen {
		lo = "greater than " + fmtNum(r.lo)
	}
	switch {
	case math.IsInf(r.hi, 1):
		return lo
	case r.hiOpen:
		return lo + " and less than " + fmtNum(r.hi)
	}
	return lo + " and at most " + fmtNum(r.hi)
}

func fmtNum(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// numberIn decodes a number within r.
func (d *decoder) numberIn(n *yaml.Node, path string, r numRange) (float64, bool) {
	v, ok := d.number(n, path)
	if !ok {
		return 0, false
	}
	if !r.contains(v) {
		d.errorf(n, path, "%s is out of range; must be %v", fmtNum(v), r)
		return 0, false
	}
	return v, true
}

// boolean decodes true or false (YAML 1.2: not yes/no/on/off).
func (d *decoder) boolean(n *yaml.Node, path string) (bool, bool) {
	r, ok := d.scalar(n, path, "true or false")
	if !ok {
		return false, false
	}
	var v bool
	if r.ShortTag() != "!!bool" || r.Decode(&v) != nil {
		d.errorf(n, path, "expected true or false, got %s", describe(r))
		return false, false
	}
	return v, true
}

// enum decodes a string that must be one of values.
func (d *decoder) enum(n *yaml.Node, path string, values ...string) (string, bool) {
	s, ok := d.str(n, path)
	if !ok {
		return "", false
	}
	for _, v := range values {
		if s == v {
			return s, true
		}
	}
	if best := nearest(strings.ToLower(s), values); best != "" {
		d.hintf(n, path, best, "invalid value %q; valid: %s (did you mean %q?)", s, strings.Join(values, ", "), best)
		return "", false
	}
	d.errorf(n, path, "invalid value %q; valid: %s", s, strings.Join(values, ", "))
	return "", false
}

// yamlLine matches the position yaml.v3 puts in its syntax errors.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseYAML reads exactly one YAML document into a node tree. A syntax error
// becomes one Error at the line yaml reports.
func parseYAML(file string, data []byte) (doc *yaml.Node, perr *Error) {
	defer func() {
		// yaml.v3 recovers its own errors; anything else is a parser bug,
		// which must not take the process down on a reload.
		if r := recover(); r != nil {
			doc, perr = nil, &Error{File: file, Msg: fmt.Sprintf("invalid YAML: parser failed: %v", r)}
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	doc = &yaml.Node{}
	if err := dec.Decode(doc); err != nil {
		if errors.Is(err, io.EOF) {
			return &yaml.Node{}, nil
		}
		return nil, yamlError(file, data, err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		ln := extra.Line
		if len(extra.Content) > 0 {
			ln = extra.Content[0].Line
		}
		return nil, &Error{File: file, Line: ln, Msg: "a second YAML document; a policy file holds exactly one (remove the ---)"}
	case !errors.Is(err, io.EOF):
		return nil, yamlError(file, data, err)
	}
	return doc, nil
}

// parserProblems are yaml.v3's parser (not scanner) errors. For these,
// yaml.v3 reports a zero-based line (and none at all for the first line);
// scanner errors are reported one-based. See yaml.v3 decode.go, parser.fail.
var parserProblems = map[string]bool{
	"did not find expected <stream-start>":   true,
	"did not find expected <document start>": true,
	"did not find expected node content":     true,
	"did not find expected '-' indicator":    true,
	"did not find expected key":              true,
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"found undefined tag handle":             true,
	"found duplicate %YAML directive":        true,
	"found incompatible YAML document":       true,
	"found duplicate %TAG directive":         true,
}

func yamlError(file string, data []byte, err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	ln := 0
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		ln, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	switch {
	case parserProblems[msg]:
		ln++
	case ln > 0:
	case strings.HasPrefix(msg, "unknown anchor '"):
		// yaml.v3 gives no position; the first use of the alias is it.
		name := strings.TrimSuffix(strings.TrimPrefix(msg, "unknown anchor '"), "' referenced")
		if i := bytes.Index(data, []byte("*"+name)); i >= 0 {
			ln = 1 + bytes.Count(data[:i], []byte("\n"))
		}
	case strings.Contains(msg, "UTF-8") || strings.Contains(msg, "UTF-16") ||
		strings.Contains(msg, "Unicode") || strings.Contains(msg, "control characters"):
		// A reader error: yaml.v3 keeps only a byte offset, which it does
		// not report. Find the first byte YAML refuses.
		ln = badCharLine(data)
	default:
		// Scanner and parser errors on the first line carry no line.
		ln = 1
	}
	return &Error{File: file, Line: ln, Msg: "invalid YAML: " + msg}
}

// badCharLine returns the line of the first byte sequence YAML does not
// accept (invalid UTF-8, or a control character other than tab, CR, LF),
// or 0 if there is none.
func badCharLine(data []byte) int {
	ln := 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			return ln
		case r == '\n':
			ln++
		case r == '\t' || r == '\r' || r == 0x85 || r == 0xFEFF:
		case r < 0x20 || r >= 0x7f && r < 0xa0 || r >= 0xfffe && r <= 0xffff:
			return ln
		}
		i += size
	}
	return 0
}
