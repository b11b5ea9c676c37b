package policy

import (
	"math"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// This file holds the key tables' vocabulary. A section of the policy is a
// table of fields; each field knows how its key is read (set), written
// back (get: Dump) and described (kind: Schema). The decoder, the dump and
// the schema all walk the same tables, so a key cannot be accepted by one
// and unknown to another (policy/doc.go, "One table per section").

// field is one key of a mapping section.
type field struct {
	key string
	val
}

// val is how one key's value is read, written back and described.
type val struct {
	// set decodes the value, found at path (for messages), into the
	// section. It leaves the default in place when the value is invalid,
	// after reporting why.
	set func(v *yaml.Node, path string)
	// get returns the value in force, in the policy's own words, or nil
	// to leave the key out (an optional section that is off, an empty
	// optional value). A value that may hold a credential is masked here,
	// in a form that still reads back (webhookFields: the URL's password
	// and query become xxxxx): the dump is served on /config.
	get func() *yaml.Node
	// kind describes what the key accepts.
	kind *kind
	// required: leaving the key out is an error, "KEY is required (why)".
	required bool
	why      string
}

// need marks v required; why, if not empty, is said in the message.
func (v val) need(why string) val {
	v.required, v.why = true, why
	return v
}

// kindType is what sort of value a key takes.
type kindType int

const (
	kAny      kindType = iota // anything (x-* keys)
	kString                   // a string (a number is taken as its text)
	kInt                      // an integer in [lo, hi], or one of ints
	kNumber                   // a number in the range lo..hi
	kBool                     // true or false
	kDuration                 // a Go duration string; 0 if minDur is 0
	kSize                     // a byte count: an integer or "64KiB"
	kEnum                     // one of enum
	kMap                      // a mapping of fields
	kList                     // a list of elem, lo to hi entries
	kUnion                    // any of alts
)

// kind describes the values a key accepts, for the schema.
type kind struct {
	t              kindType
	enum           []string // kEnum
	ints           []int    // kInt: the only values allowed, if any
	lo, hi         float64  // kInt, kNumber, kSize: value range; kList: entries
	loOpen, hiOpen bool     // kNumber: bounds excluded
	minDur         time.Duration
	pattern        string         // kString: a regular expression it matches
	fields         func() []field // kMap: the section's keys, bound to a default value
	elem           *kind          // kList
	alts           []*kind        // kUnion
	// null: a null value is accepted (a list read as empty). A kMap
	// without required keys always accepts null.
	null bool
}

var (
	kindString = &kind{t: kString}
	kindBool   = &kind{t: kBool}
)

func listOf(elem *kind, lo, hi float64) *kind {
	return &kind{t: kList, elem: elem, lo: lo, hi: hi}
}

func (k *kind) orNull() *kind {
	c := *k
	c.null = true
	return &c
}

func mapKind(fields func() []field) *kind { return &kind{t: kMap, fields: fields} }

// Nodes for get.

func strNode(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}

func intNode(i int64) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(i, 10)}
}

func boolNode(b bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(b)}
}

// numNode writes a finite number in plain decimal, as an integer when it
// is one (95, 0.85, 0.000000001).
func numNode(f float64) *yaml.Node {
	s := strconv.FormatFloat(f, 'f', -1, 64)
	tag := "!!float"
	if !strings.ContainsAny(s, ".") {
		tag = "!!int"
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: s}
}

// durNode writes a duration as the policy does: "250ms", "5m", "1h30m".
func durNode(x time.Duration) *yaml.Node { return strNode(fmtDuration(x)) }

func fmtDuration(x time.Duration) string {
	s := x.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// sizeNode writes a byte count in the largest binary unit that divides
// it ("1MiB", "16KiB"), else as an integer.
func sizeNode(n int64) *yaml.Node {
	for _, u := range []struct {
		s string
		m int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.m && n%u.m == 0 {
			return strNode(strconv.FormatInt(n/u.m, 10) + u.s)
		}
	}
	return intNode(n)
}

func seqNode(items ...*yaml.Node) *yaml.Node {
	return &yaml.Node{Kind: yaml.SequenceNode, Content: items}
}

// strSeq writes a list of strings on one line: [a, b].
func strSeq(ss []string) *yaml.Node {
	n := seqNode()
	n.Style = yaml.FlowStyle
	for _, s := range ss {
		n.Content = append(n.Content, strNode(s))
	}
	return n
}

// emitList writes a list of sections: fields(i) is entry i's table. An
// empty list is left out when optional.
func emitList(n int, optional bool, fields func(i int) []field) *yaml.Node {
	if n == 0 && optional {
		return nil
	}
	s := seqNode()
	for i := 0; i < n; i++ {
		s.Content = append(s.Content, emit(fields(i)))
	}
	return s
}

// emit writes a section: each field's key and value, in table order,
// leaving out the fields whose get returns nil.
func emit(fields []field) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode}
	for _, f := range fields {
		if f.get == nil {
			continue
		}
		if v := f.get(); v != nil {
			n.Content = append(n.Content, strNode(f.key), v)
		}
	}
	return n
}

// absPath writes a file name the policy resolved (against its own
// directory) as an absolute path, so that the dump means the same file
// wherever it is saved.
func absPath(s string) *yaml.Node {
	if s == "" {
		return nil
	}
	if a, err := filepath.Abs(s); err == nil {
		s = a
	}
	return strNode(s)
}

// redactURL masks a URL's password and query, which may carry a token.
// The result is still a URL of the same scheme and host, so a dump stays
// a valid policy.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return s
	}
	if u.RawQuery != "" {
		u.RawQuery = "xxxxx"
	}
	return u.Redacted()
}

// Value fields: the common kinds of key, each storing a decoded value in
// place and leaving the default when the value is invalid (the error is
// already reported).

func (d *decoder) durationField(dst *time.Duration, lo time.Duration) val {
	return val{
		set: func(v *yaml.Node, p string) {
			if x, ok := d.duration(v, p, lo); ok {
				*dst = x
			}
		},
		get:  func() *yaml.Node { return durNode(*dst) },
		kind: &kind{t: kDuration, minDur: lo},
	}
}

func (d *decoder) intField(dst *int, lo, hi int64) val {
	return val{
		set: func(v *yaml.Node, p string) {
			if x, ok := d.integer(v, p, lo, hi); ok {
				*dst = int(x)
			}
		},
		get:  func() *yaml.Node { return intNode(int64(*dst)) },
		kind: &kind{t: kInt, lo: float64(lo), hi: float64(hi)},
	}
}

func (d *decoder) sizeField(dst *int64, lo, hi int64) val {
	return val{
		set: func(v *yaml.Node, p string) {
			if x, ok := d.size(v, p, lo, hi); ok {
				*dst = x
			}
		},
		get:  func() *yaml.Node { return sizeNode(*dst) },
		kind: &kind{t: kSize, lo: float64(lo), hi: float64(hi)},
	}
}

func (d *decoder) intSizeField(dst *int, lo, hi int64) val {
	return val{
		set: func(v *yaml.Node, p string) {
			if x, ok := d.size(v, p, lo, hi); ok {
				*dst = int(x)
			}
		},
		get:  func() *yaml.Node { return sizeNode(int64(*dst)) },
		kind: &kind{t: kSize, lo: float64(lo), hi: float64(hi)},
	}
}

func numKind(r numRange) *kind {
	return &kind{t: kNumber, lo: r.lo, hi: r.hi, loOpen: r.loOpen, hiOpen: r.hiOpen}
}

func (d *decoder) numField(dst *float64, r numRange) val {
	return val{
		set: func(v *yaml.Node, p string) {
			if x, ok := d.numberIn(v, p, r); ok {
				*dst = x
			}
		},
		get:  func() *yaml.Node { return numNode(*dst) },
		kind: numKind(r),
	}
}

func (d *decoder) boolField(dst *bool) val {
	return val{
		set: func(v *yaml.Node, p string) {
			if x, ok := d.boolean(v, p); ok {
				*dst = x
			}
		},
		get:  func() *yaml.Node { return boolNode(*dst) },
		kind: kindBool,
	}
}

func (d *decoder) enumField(dst *string, values ...string) val {
	return val{
		set: func(v *yaml.Node, p string) {
			if x, ok := d.enum(v, p, values...); ok {
				*dst = x
			}
		},
		get:  func() *yaml.Node { return strNode(*dst) },
		kind: &kind{t: kEnum, enum: values},
	}
}

// textField is a string key whose value check accepts (and may put in a
// canonical form); an error from check is reported at the value. With
// optional, an empty value (the default: none) is left out of the dump.
func (d *decoder) textField(dst *string, optional bool, check func(string) (string, error)) val {
	return val{
		set: func(v *yaml.Node, p string) {
			s, ok := d.str(v, p)
			if !ok {
				return
			}
			if check != nil {
				var err error
				if s, err = check(s); err != nil {
					d.errorf(v, p, "%v", err)
					return
				}
			}
			*dst = s
		},
		get: func() *yaml.Node {
			if optional && *dst == "" {
				return nil
			}
			return strNode(*dst)
		},
		kind: kindString,
	}
}

// section is a key whose value is a mapping with keys of its own: fields
// lists them, bound to the section in force. decode reads the value; nil
// means the fields alone (a section with no checks across its keys).
func (d *decoder) section(fields func() []field, decode func(v *yaml.Node, p string)) val {
	if decode == nil {
		decode = func(v *yaml.Node, p string) { d.mapping(v, p, fields()) }
	}
	return val{
		set:  decode,
		get:  func() *yaml.Node { return emit(fields()) },
		kind: mapKind(fields),
	}
}

// optional is section for a section that may be off (a nil pointer):
// present says whether it is on; fields must bind to the section in force,
// or to a fresh one with its defaults when it is off (for the schema).
func (d *decoder) optional(present func() bool, fields func() []field, decode func(v *yaml.Node, p string)) val {
	v := d.section(fields, decode)
	v.get = func() *yaml.Node {
		if !present() {
			return nil
		}
		return emit(fields())
	}
	return v
}

// noting wraps v's set to note where the key was written.
func noting(at **yaml.Node, v val) val {
	set := v.set
	v.set = func(n *yaml.Node, p string) { *at = n; set(n, p) }
	return v
}

// orNew returns p, or a fresh value from mk when p is nil.
func orNew[T any](p *T, mk func() *T) *T {
	if p != nil {
		return p
	}
	return mk()
}

// unbounded is the hi of a range with no upper bound.
var unbounded = math.Inf(1)
