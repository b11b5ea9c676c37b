package classify

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"net/netip"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Request is the read-only view of a request the classifier needs. The proxy
// adapts *fasthttp.RequestHeader (plus the URI's path) to it. Returned slices
// are only read during Classify; the key Classify returns may alias Path().
type Request interface {
	// Method is the request method, e.g. "GET".
	Method() []byte
	// Path is the request path without the query string. (Classify cuts at
	// the first '?' anyway.)
	Path() []byte
	// Host is the Host header (or :authority); a port is allowed.
	Host() []byte
	// Peek returns the first value of the named header, nil or empty when
	// absent.
	Peek(header string) []byte
	// Cookie returns the named cookie's value, nil or empty when absent.
	Cookie(name string) []byte
}

// Class describes one compiled class.
type Class struct {
	Name    string
	Period  time.Duration
	Default bool // true for the class that takes unmatched requests
}

// Classifier maps a request to a class index and a history key. It is
// immutable after Compile and safe for concurrent use.
type Classifier struct {
	classes []Class
	names   []string
	rules   []rule // every class's rules, in class order then rule order
	def     int

	// The prefilter (see Classify), used when there are at most maxFiltered
	// rules: one necessary condition per rule in compact arrays.
	filtered bool
	prePath  []prePath
	preNet   []preNet
	always   [filterWords]uint64 // rules without a prefilter condition
}

const (
	filterWords = 4
	maxFiltered = 64 * filterWords
)

// prePath is a rule's path condition reduced to its first 8 bytes.
type prePath struct {
	word, mask uint64
	// The path's length minus n must be in [0, span]: span 0 for an exact
	// path, MaxUint32 for a prefix.
	n, span uint32
	rule    uint32
}

// preNet is one prefix of a rule's network condition.
type preNet struct {
	m    netMask
	rule uint32
}

type rule struct {
	class int
	key   []byte // nil: the request path
	conds []cond // cheapest first
}

type condKind uint8

// Kinds in evaluation order within a rule (cheap and selective first).
const (
	condPathExact condKind = iota
	condPathPrefix
	condNetwork
	condMethod
	condHost
	condHeaderPresent
	condHeaderEqual
	condCookiePresent
	condCookieEqual
	condGRPCService
	condGRPCMethod
	condPathGlob
	condHeaderRegexp
	condPathRegexp
)

// cond is one compiled condition. The common kinds keep their operand in
// val; the rest hang off ext so the rule table stays small.
type cond struct {
	kind condKind
	val  []byte // exact path, path prefix, header or cookie value
	// For path conditions: val's first (up to) 8 bytes as a little-endian
	// word and the mask of those bytes, to reject most paths with one compare.
	word, mask uint64
	name       string // header or cookie name
	ext        *condExt
}

// head returns b's first (up to) 8 bytes as a little-endian word, zero-padded.
func head(b []byte) uint64 {
	if len(b) >= 8 {
		return binary.LittleEndian.Uint64(b)
	}
	var w uint64
	for i := len(b) - 1; i >= 0; i-- {
		w = w<<8 | uint64(b[i])
	}
	return w
}

func pathCond(kind condKind, v string) cond {
	n := min(len(v), 8)
	mask := ^uint64(0)
	if n < 8 {
		mask = 1<<(8*n) - 1
	}
	return cond{kind: kind, val: []byte(v), word: head([]byte(v)), mask: mask}
}

type condExt struct {
	vals [][]byte  // methods; hosts (lower case; a leading '.' is a suffix)
	nets []netMask // networks
	re   *regexp.Regexp
	glob glob
}

// netMask is a prefix in the 128-bit IPv6 space (IPv4 as ::ffff:a.b.c.d).
type netMask struct{ hi, lo, mhi, mlo uint64 }

func toMask(p netip.Prefix) netMask {
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	a := p.Addr().As16()
	hi, lo := binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(a[8:])
	var mhi, mlo uint64
	switch {
	case bits >= 128:
		mhi, mlo = ^uint64(0), ^uint64(0)
	case bits > 64:
		mhi, mlo = ^uint64(0), ^uint64(0)<<(128-bits)
	case bits > 0:
		mhi = ^uint64(0) << (64 - bits)
	}
	return netMask{hi & mhi, lo & mlo, mhi, mlo}
}

// Compile validates classes and compiles their rules. Errors name the class
// and rule, e.g. `class "gold" rules[1]: path_regexp: …`. Compile once per
// policy snapshot; the result is immutable.
func Compile(classes []ClassConfig) (*Classifier, error) {
	if len(classes) == 0 {
		return nil, errors.New("classify: no classes")
	}
	c := &Classifier{def: -1}
	seen := make(map[string]bool, len(classes))
	for i, cc := range classes {
		if cc.Name == "" {
			return nil, fmt.Errorf("classify: classes[%d]: empty name", i)
		}
		if seen[cc.Name] {
			return nil, fmt.Errorf("classify: class %q: duplicate name", cc.Name)
		}
		seen[cc.Name] = true
		if cc.Period < 0 {
			return nil, fmt.Errorf("classify: class %q: negative period %v", cc.Name, cc.Period)
		}
		if cc.Default {
			if c.def >= 0 {
				return nil, fmt.Errorf("classify: class %q: both %q and %q are marked default", cc.Name, classes[c.def].Name, cc.Name)
			}
			c.def = i
		}
		for j, rc := range cc.Rules {
			r, err := compileRule(i, rc)
			if err != nil {
				return nil, fmt.Errorf("classify: class %q rules[%d]: %w", cc.Name, j, err)
			}
			c.rules = append(c.rules, r)
		}
	}
	if c.def < 0 {
		c.def = len(classes) - 1
	}
	if len(c.rules) <= maxFiltered {
		c.filtered = true
		for i, r := range c.rules {
			// The first condition is the cheapest: a path or network one
			// when the rule has any.
			switch cd := &r.conds[0]; cd.kind {
			case condPathExact, condPathPrefix:
				p := prePath{word: cd.word, mask: cd.mask, n: uint32(len(cd.val)), rule: uint32(i)}
				if cd.kind == condPathPrefix {
					p.span = math.MaxUint32
				}
				c.prePath = append(c.prePath, p)
			case condNetwork:
				for _, m := range cd.ext.nets {
					c.preNet = append(c.preNet, preNet{m: m, rule: uint32(i)})
				}
			default:
				c.always[i/64] |= 1 << (i % 64)
			}
		}
	}
	for i, cc := range classes {
		if len(cc.Rules) == 0 && i != c.def {
			return nil, fmt.Errorf("classify: class %q: no rules, and it is not the default class (%q) so it could never match", cc.Name, classes[c.def].Name)
		}
		c.classes = append(c.classes, Class{Name: cc.Name, Period: cc.Period, Default: i == c.def})
		c.names = append(c.names, cc.Name)
	}
	return c, nil
}

func compileRule(class int, rc Rule) (rule, error) {
	r := rule{class: class}
	if rc.Key != "" {
		r.key = []byte(rc.Key)
	}
	npath := 0
	for _, s := range []string{rc.Path, rc.PathPrefix, rc.PathGlob, rc.PathRegexp} {
		if s != "" {
			npath++
		}
	}
	if npath > 1 {
		return r, errors.New("at most one of path, path_prefix, path_glob and path_regexp may be set")
	}
	switch {
	case rc.Path != "":
		r.conds = append(r.conds, pathCond(condPathExact, rc.Path))
	case rc.PathPrefix != "":
		r.conds = append(r.conds, pathCond(condPathPrefix, rc.PathPrefix))
	case rc.PathGlob != "":
		g, err := compileGlob(rc.PathGlob)
		if err != nil {
			return r, fmt.Errorf("path_glob %q: %v", rc.PathGlob, err)
		}
		r.conds = append(r.conds, cond{kind: condPathGlob, ext: &condExt{glob: g}})
	case rc.PathRegexp != "":
		re, err := regexp.Compile(rc.PathRegexp)
		if err != nil {
			return r, fmt.Errorf("path_regexp: %v", err)
		}
		r.conds = append(r.conds, cond{kind: condPathRegexp, ext: &condExt{re: re}})
	}
	if len(rc.Methods) > 0 {
		c := cond{kind: condMethod, ext: &condExt{}}
		for _, m := range rc.Methods {
			if !isToken(m) {
				return r, fmt.Errorf("methods: %q is not a method name", m)
			}
			c.ext.vals = append(c.ext.vals, []byte(strings.ToUpper(m)))
		}
		r.conds = append(r.conds, c)
	}
	if len(rc.Hosts) > 0 {
		c := cond{kind: condHost, ext: &condExt{}}
		for _, h := range rc.Hosts {
			lh := strings.TrimSuffix(strings.ToLower(h), ".")
			if a, err := netip.ParseAddr(strings.Trim(lh, "[]")); err == nil && a.Is6() {
				c.ext.vals = append(c.ext.vals, []byte(a.String())) // IPv6 literal
				continue
			}
			if rest, ok := strings.CutPrefix(lh, "*."); ok {
				lh = "." + rest
				if rest == "" {
					return r, fmt.Errorf("hosts: %q has an empty domain", h)
				}
			}
			if lh == "" || strings.ContainsAny(lh, "*:/ ") {
				return r, fmt.Errorf("hosts: %q is not a host name or *.domain", h)
			}
			c.ext.vals = append(c.ext.vals, []byte(lh))
		}
		r.conds = append(r.conds, c)
	}
	if len(rc.Networks) > 0 {
		c := cond{kind: condNetwork, ext: &condExt{}}
		for _, p := range rc.Networks {
			if !p.IsValid() {
				return r, errors.New("networks: invalid prefix")
			}
			c.ext.nets = append(c.ext.nets, toMask(p))
		}
		r.conds = append(r.conds, c)
	}
	for k, h := range rc.Headers {
		if !isToken(h.Name) {
			return r, fmt.Errorf("headers[%d]: %q is not a header name", k, h.Name)
		}
		switch {
		case h.Value != "" && h.Regexp != "":
			return r, fmt.Errorf("headers[%d] %q: set value or regexp, not both", k, h.Name)
		case h.Regexp != "":
			re, err := regexp.Compile(h.Regexp)
			if err != nil {
				return r, fmt.Errorf("headers[%d] %q: regexp: %v", k, h.Name, err)
			}
			r.conds = append(r.conds, cond{kind: condHeaderRegexp, name: h.Name, ext: &condExt{re: re}})
		case h.Value != "":
			r.conds = append(r.conds, cond{kind: condHeaderEqual, name: h.Name, val: []byte(h.Value)})
		default:
			r.conds = append(r.conds, cond{kind: condHeaderPresent, name: h.Name})
		}
	}
	if rc.GRPCService != "" {
		g, err := grpcPattern(rc.GRPCService)
		if err != nil {
			return r, fmt.Errorf("grpc_service: %v", err)
		}
		r.conds = append(r.conds, cond{kind: condGRPCService, ext: &condExt{glob: glob{segs: []globSeg{g}}}})
	}
	if rc.GRPCMethod != "" {
		g, err := grpcPattern(rc.GRPCMethod)
		if err != nil {
			return r, fmt.Errorf("grpc_method: %v", err)
		}
		r.conds = append(r.conds, cond{kind: condGRPCMethod, ext: &condExt{glob: glob{segs: []globSeg{g}}}})
	}
	for k, ck := range rc.Cookies {
		if !isToken(ck.Name) {
			return r, fmt.Errorf("cookies[%d]: %q is not a cookie name", k, ck.Name)
		}
		if ck.Value != "" {
			r.conds = append(r.conds, cond{kind: condCookieEqual, name: ck.Name, val: []byte(ck.Value)})
		} else {
			r.conds = append(r.conds, cond{kind: condCookiePresent, name: ck.Name})
		}
	}
	if len(r.conds) == 0 {
		return r, errors.New("no conditions (a rule that matches everything belongs in the default class, without rules)")
	}
	sort.SliceStable(r.conds, func(a, b int) bool { return r.conds[a].kind < r.conds[b].kind })
	return r, nil
}

// isToken reports whether s is a non-empty RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// Len is the number of classes.
func (c *Classifier) Len() int { return len(c.classes) }

// Class returns class i's description.
func (c *Classifier) Class(i int) Class { return c.classes[i] }

// Names returns the class names in index order (most important first), for
// estimator.New and metric labels. The slice must not be modified.
func (c *Classifier) Names() []string { return c.names }

// Default is the index of the class that takes unmatched requests.
func (c *Classifier) Default() int { return c.def }

// Classify returns the index of the first class with a matching rule (the
// default class when none matches) and the request's history key: the
// matching rule's Key, or else the path without its query. The key either
// aliases r.Path() or is shared by the classifier; callers must not modify
// it, and must copy it to keep it past the request. client is the resolved
// client address; the zero Addr matches no Networks condition.
// Classify does not allocate (unless a regexp's matcher pool is cold).
func (c *Classifier) Classify(r Request, client netip.Addr) (class int, key []byte) {
	q := reqState{r: r, path: r.Path()}
	if i := bytes.IndexByte(q.path, '?'); i >= 0 {
		q.path = q.path[:i]
	}
	q.pw = head(q.path)
	if client.Is4() {
		a := client.As4()
		q.hi, q.lo, q.ipOK = 0, 0xffff<<32|uint64(binary.BigEndian.Uint32(a[:])), true
	} else if client.IsValid() {
		a := client.As16()
		q.hi, q.lo, q.ipOK = binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(a[8:]), true
	}
	if !c.filtered {
		for i := range c.rules {
			if q.matchRule(&c.rules[i]) {
				return c.result(i, &q)
			}
		}
		return c.def, q.path
	}
	// Prefilter: mark the rules whose first condition can hold, with tight
	// loops over compact arrays, then test those rules in precedence order.
	cand := c.always
	pw, n := q.pw, uint32(len(q.path))
	for _, p := range c.prePath {
		if pw&p.mask == p.word && n-p.n <= p.span {
			cand[p.rule/64&(filterWords-1)] |= 1 << (p.rule % 64)
		}
	}
	if q.ipOK {
		hi, lo := q.hi, q.lo
		for _, p := range c.preNet {
			if hi&p.m.mhi == p.m.hi && lo&p.m.mlo == p.m.lo {
				cand[p.rule/64&(filterWords-1)] |= 1 << (p.rule % 64)
			}
		}
	}
	for w := range cand {
		for m := cand[w]; m != 0; m &= m - 1 {
			i := w*64 + bits.TrailingZeros64(m)
			if q.matchRule(&c.rules[i]) {
				return c.result(i, &q)
			}
		}
	}
	return c.def, q.path
}

func (c *Classifier) result(i int, q *reqState) (int, []byte) {
	ru := &c.rules[i]
	if ru.key != nil {
		return ru.class, ru.key
	}
	return ru.class, q.path
}

// reqState is Classify's view of the request. Method and host are read on
// first use; the client is kept as a 128-bit number (IPv4 as
// ::ffff:a.b.c.d, like the masks).
type reqState struct {
	r            Request
	path         []byte
	pw           uint64 // the path's first 8 bytes
	method, host []byte
	hi, lo       uint64
	ipOK         bool
	haveM, haveH bool
	// The path split as gRPC's "/Service/Method", on first use.
	svc, meth     []byte
	haveG, grpcOK bool
}

func (q *reqState) matchRule(ru *rule) bool {
	for i := range ru.conds {
		if !q.match(&ru.conds[i]) {
			return false
		}
	}
	return true
}

func (q *reqState) match(cd *cond) bool {
	switch cd.kind {
	case condPathExact:
		return q.pw&cd.mask == cd.word && string(q.path) == string(cd.val)
	case condPathPrefix:
		return q.pw&cd.mask == cd.word && bytes.HasPrefix(q.path, cd.val)
	case condNetwork:
		return q.ipOK && anyNet(cd.ext.nets, q.hi, q.lo)
	case condMethod:
		if !q.haveM {
			q.method, q.haveM = q.r.Method(), true
		}
		return anyEqual(cd.ext.vals, q.method)
	case condHost:
		if !q.haveH {
			q.host, q.haveH = hostOnly(q.r.Host()), true
		}
		return anyHost(cd.ext.vals, q.host)
	case condHeaderPresent:
		return len(q.r.Peek(cd.name)) > 0
	case condHeaderEqual:
		return string(q.r.Peek(cd.name)) == string(cd.val)
	case condHeaderRegexp:
		v := q.r.Peek(cd.name)
		return len(v) > 0 && cd.ext.re.Match(v)
	case condCookiePresent:
		return len(q.r.Cookie(cd.name)) > 0
	case condCookieEqual:
		return string(q.r.Cookie(cd.name)) == string(cd.val)
	case condGRPCService, condGRPCMethod:
		if !q.haveG {
			q.svc, q.meth, q.grpcOK = SplitGRPCPath(q.path)
			q.haveG = true
		}
		if !q.grpcOK {
			return false
		}
		if cd.kind == condGRPCService {
			return cd.ext.glob.segs[0].match(q.svc)
		}
		return cd.ext.glob.segs[0].match(q.meth)
	case condPathGlob:
		return cd.ext.glob.match(q.path)
	case condPathRegexp:
		return cd.ext.re.Match(q.path)
	}
	return false
}

func anyNet(nets []netMask, hi, lo uint64) bool {
	for _, n := range nets {
		if hi&n.mhi == n.hi && lo&n.mlo == n.lo {
			return true
		}
	}
	return false
}

func anyEqual(vals [][]byte, v []byte) bool {
	for _, m := range vals {
		if string(v) == string(m) {
			return true
		}
	}
	return false
}

func anyHost(pats [][]byte, host []byte) bool {
	for _, h := range pats {
		if hostMatch(host, h) {
			return true
		}
	}
	return false
}

// hostOnly strips a port and one trailing dot from a Host value.
func hostOnly(h []byte) []byte {
	if len(h) > 0 && h[0] == '[' { // [v6]:port
		if i := bytes.IndexByte(h, ']'); i > 0 {
			return h[1:i]
		}
		return h
	}
	if i := bytes.LastIndexByte(h, ':'); i >= 0 && bytes.IndexByte(h[:i], ':') < 0 {
		h = h[:i]
	}
	if n := len(h); n > 0 && h[n-1] == '.' {
		h = h[:n-1]
	}
	return h
}

// hostMatch compares host (any case) with pat (lower case); a pat starting
// with '.' matches any proper subdomain.
func hostMatch(host, pat []byte) bool {
	if pat[0] == '.' {
		return len(host) > len(pat) && equalFold(host[len(host)-len(pat):], pat)
	}
	return len(host) == len(pat) && equalFold(host, pat)
}

// equalFold compares s (any ASCII case) with lower-case t of the same length.
func equalFold(s, t []byte) bool {
	for i := range s {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != t[i] {
			return false
		}
	}
	return true
}
