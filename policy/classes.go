package policy

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/sentry-proxy/sentry/batchac"
	"github.com/sentry-proxy/sentry/classify"
	"gopkg.in/yaml.v3"
)

// DefaultClassName is the name of the one class of an app that gives no
// classes; it takes every request.
const DefaultClassName = "default"

// maxClasses bounds an app's classes: batch admission refuses more.
const maxClasses = batchac.MaxClasses

func defaultClasses() []classify.ClassConfig {
	return []classify.ClassConfig{{Name: DefaultClassName, Default: true}}
}

// classPos is where one class was written, for the checks across classes.
type classPos struct {
	path                 string // "apps[0].classes[2]"
	at, name, defaultPos pos
	// rulesOK: the rules decoded without error, so an empty Rules really
	// means the class has none.
	rulesOK bool
	// terminate is the class's termination range, nil when it has none.
	terminate *Terminate
}

// classes decodes an app's class list, with the position of each class.
// bad reports that anything in it was reported, so that compiling the
// classes (and the checks that need them) is skipped rather than adding
// follow-on errors; with bad, the returned list is nil. terms is each
// class's termination range (nil when no class declares one).
func (d *decoder) classes(n *yaml.Node, path string) (out []classify.ClassConfig, at []pos, terms []*Terminate, bad bool) {
	mark := d.reports
	r := resolve(n)
	switch {
	case isNull(r) || r.Kind == yaml.SequenceNode && len(r.Content) == 0:
		d.errorf(n, path, "empty; list at least one class, or leave classes out for one class %q that takes every request", DefaultClassName)
		return nil, nil, nil, true
	case r.Kind != yaml.SequenceNode:
		d.errorf(n, path, "expected a list of classes, got %s", describe(r))
		return nil, nil, nil, true
	case len(r.Content) > maxClasses:
		d.errorf(n, path, "%d classes; at most %d", len(r.Content), maxClasses)
		return nil, nil, nil, true
	}
	var ps []classPos
	for i, e := range r.Content {
		if !d.spend() {
			return nil, nil, nil, true
		}
		c, cp, ok := d.class(e, path+"["+strconv.Itoa(i)+"]")
		if ok {
			out = append(out, c)
			ps = append(ps, cp)
		}
	}
	// Names and default flags that decoded are checked even when something
	// else failed; a name or flag that failed was reported already.
	label := func(i int) string {
		if out[i].Name != "" {
			return fmt.Sprintf("class %q", out[i].Name)
		}
		return ps[i].path
	}
	names := map[string]int{}
	def := -1
	for i, c := range out {
		if first, dup := names[c.Name]; dup {
			d.add(ps[i].name, "%s.name: class name %q is used twice (first at line %d)", ps[i].path, c.Name, ps[first].name.line)
		} else if c.Name != "" {
			names[c.Name] = i
		}
		if c.Default {
			if def >= 0 {
				d.add(ps[i].defaultPos, "%s.default: %s is marked default, but so is %s (line %d); only one class may take unmatched requests",
					ps[i].path, label(i), label(def), ps[def].defaultPos.line)
				continue
			}
			def = i
		}
	}
	if d.reported(mark) {
		// Which class is the default may be unknown (a default: that did not
		// decode), and the list is not used.
		return nil, nil, nil, true
	}
	implicit := def < 0
	if implicit {
		def = len(out) - 1
	}
	for i, c := range out {
		if i == def || len(c.Rules) > 0 || !ps[i].rulesOK {
			continue
		}
		hint := fmt.Sprintf("the default class is %q, the last one, since none is marked default", out[def].Name)
		if !implicit {
			hint = fmt.Sprintf("the default class is %q (line %d)", out[def].Name, ps[def].defaultPos.line)
		}
		d.add(ps[i].at, "%s: class %q has no rules, so no request could reach it; give it rules, or make it the default class (%s)",
			ps[i].path, c.Name, hint)
	}
	if d.reported(mark) {
		return nil, nil, nil, true
	}
	any := false
	for _, p := range ps {
		at = append(at, p.at)
		terms = append(terms, p.terminate)
		any = any || p.terminate != nil
	}
	if !any {
		terms = nil
	}
	return out, at, terms, false
}

// class decodes one entry of classes; ok is false when it is not a mapping.
func (d *decoder) class(n *yaml.Node, path string) (c classify.ClassConfig, cp classPos, ok bool) {
	cp = classPos{path: path, at: posOf(n), rulesOK: true}
	if !d.mapping(n, path, d.classFields(&c, &cp)) {
		return c, cp, false
	}
	return c, cp, true
}

// classFields is a class's key table; pos notes where keys were written
// and holds the class's terminate range.
func (d *decoder) classFields(c *classify.ClassConfig, cp *classPos) []field {
	name := d.textField(&c.Name, false, func(s string) (string, error) { return s, checkName(s) })
	setName := name.set
	name.set = func(v *yaml.Node, p string) { cp.name = posOf(v); setName(v, p) }
	name.kind = &kind{t: kString, pattern: "^[a-z0-9_-]{1,63}$"}
	def := d.boolField(&c.Default)
	setDef := def.set
	def.set = func(v *yaml.Node, p string) { cp.defaultPos = posOf(v); setDef(v, p) }
	return []field{
		{"name", name.need("")},
		{"period", d.durationField(&c.Period, 0)},
		{"default", def},
		{"rules", val{
			set: func(v *yaml.Node, p string) { c.Rules, cp.rulesOK = d.rules(v, p) },
			get: func() *yaml.Node {
				return emitList(len(c.Rules), true, func(i int) []field { return d.ruleFields(&c.Rules[i], new(ruleState)) })
			},
			kind: listOf(mapKind(func() []field { return d.ruleFields(&classify.Rule{}, new(ruleState)) }), 0, unbounded).orNull(),
		}},
		{"terminate", d.optional(func() bool { return cp.terminate != nil },
			func() []field { return d.terminateFields(orNew(cp.terminate, newTerminate), new(terminateState)) },
			func(v *yaml.Node, p string) { cp.terminate = d.terminate(v, p) })},
	}
}

// rules decodes a class's rules; ok is false when anything was reported.
// A null or empty list is no rules.
func (d *decoder) rules(n *yaml.Node, path string) (out []classify.Rule, ok bool) {
	mark := d.reports
	r := resolve(n)
	if isNull(r) {
		return nil, true
	}
	if r.Kind != yaml.SequenceNode {
		d.errorf(n, path, "expected a list of rules, got %s", describe(r))
		return nil, false
	}
	for i, e := range r.Content {
		if !d.spend() {
			return out, false
		}
		if ru, ok := d.rule(e, path+"["+strconv.Itoa(i)+"]"); ok {
			out = append(out, ru)
		}
	}
	return out, !d.reported(mark)
}

// ruleConditions lists the condition keys of a rule, for messages.
const ruleConditions = "path, path_prefix, path_glob, path_regexp, methods, hosts, headers, cookies, networks, grpc_service or grpc_method"

// ruleState is what a rule's keys note: how many conditions it has, and
// which path condition it took.
type ruleState struct {
	conds    int
	pathKey  string
	pathLine int
}

// rule decodes one rule. Each check here mirrors one of classify.Compile's,
// so that a problem is reported at the line of the value at fault.
func (d *decoder) rule(n *yaml.Node, path string) (ru classify.Rule, ok bool) {
	var st ruleState
	if !d.mapping(n, path, d.ruleFields(&ru, &st)) {
		return ru, false
	}
	if st.conds == 0 {
		d.errorf(n, path, "a rule needs at least one condition (%s); a class that takes every request is the default class, without rules", ruleConditions)
		return ru, false
	}
	return ru, true
}

func (d *decoder) ruleFields(ru *classify.Rule, st *ruleState) []field {
	// onePath admits the first path condition and refuses any other.
	onePath := func(key string, v *yaml.Node, p string) (string, bool) {
		st.conds++
		if st.pathKey != "" {
			d.errorf(v, p, "%s is already given (line %d); a rule takes at most one of path, path_prefix, path_glob and path_regexp", st.pathKey, st.pathLine)
			return "", false
		}
		st.pathKey, st.pathLine = key, line(v)
		return d.str(v, p)
	}
	pathField := func(key string, dst *string, check func(string) error) field {
		return field{key, val{
			set: func(v *yaml.Node, p string) {
				s, ok := onePath(key, v, p)
				if !ok {
					return
				}
				if err := check(s); err != nil {
					d.errorf(v, p, "%v", err)
					return
				}
				*dst = s
			},
			get:  optStr(dst),
			kind: kindString,
		}}
	}
	cond := func(v val) val { // a condition counts toward the rule's
		set := v.set
		v.set = func(n *yaml.Node, p string) { st.conds++; set(n, p) }
		return v
	}
	return []field{
		pathField("path", &ru.Path, func(s string) error { return checkRulePath(s, false) }),
		pathField("path_prefix", &ru.PathPrefix, func(s string) error { return checkRulePath(s, false) }),
		pathField("path_glob", &ru.PathGlob, func(s string) error { return checkRulePath(s, true) }),
		pathField("path_regexp", &ru.PathRegexp, func(s string) error {
			if s == "" {
				return fmt.Errorf("empty regexp")
			}
			if _, err := regexp.Compile(s); err != nil {
				return fmt.Errorf("invalid regexp %q: %v", s, strings.TrimPrefix(err.Error(), "error parsing regexp: "))
			}
			return nil
		}),
		{"methods", cond(val{
			set:  func(v *yaml.Node, p string) { ru.Methods = d.methods(v, p) },
			get:  optSeq(&ru.Methods),
			kind: listOf(kindString, 1, unbounded),
		})},
		{"hosts", cond(val{
			set:  func(v *yaml.Node, p string) { ru.Hosts = d.ruleHosts(v, p) },
			get:  optSeq(&ru.Hosts),
			kind: listOf(kindString, 1, unbounded),
		})},
		{"headers", cond(val{
			set: func(v *yaml.Node, p string) { ru.Headers = d.headerMatches(v, p) },
			get: func() *yaml.Node {
				return emitList(len(ru.Headers), true, func(i int) []field { return d.headerFields(&ru.Headers[i], new(headerState)) })
			},
			kind: listOf(mapKind(func() []field { return d.headerFields(&classify.HeaderMatch{}, new(headerState)) }), 1, unbounded),
		})},
		{"cookies", cond(val{
			set: func(v *yaml.Node, p string) { ru.Cookies = d.cookieMatches(v, p) },
			get: func() *yaml.Node {
				return emitList(len(ru.Cookies), true, func(i int) []field { return d.cookieFields(&ru.Cookies[i]) })
			},
			kind: listOf(mapKind(func() []field { return d.cookieFields(&classify.CookieMatch{}) }), 1, unbounded),
		})},
		{"networks", cond(val{
			set: func(v *yaml.Node, p string) {
				if d.nonEmpty(v, p, "networks") {
					ru.Networks = d.trustedProxies(v, p)
				}
			},
			get:  func() *yaml.Node { return prefixSeq(ru.Networks) },
			kind: listOf(kindString, 1, unbounded),
		})},
		{"grpc_service", cond(d.grpcName(&ru.GRPCService))},
		{"grpc_method", cond(d.grpcName(&ru.GRPCMethod))},
		{"key", d.textField(&ru.Key, true, func(s string) (string, error) {
			if s == "" {
				return "", errors.New("empty key; leave key out to key requests by their path")
			}
			return s, nil
		})},
	}
}

// optStr gets a string that is left out when empty.
func optStr(s *string) func() *yaml.Node {
	return func() *yaml.Node {
		if *s == "" {
			return nil
		}
		return strNode(*s)
	}
}

// optSeq gets a list of strings that is left out when empty.
func optSeq(ss *[]string) func() *yaml.Node {
	return func() *yaml.Node {
		if len(*ss) == 0 {
			return nil
		}
		return strSeq(*ss)
	}
}

// grpcName decodes a rule's grpc_service or grpc_method (checked as
// classify.Compile does: classify.CheckGRPCPattern).
func (d *decoder) grpcName(dst *string) val {
	return d.textField(dst, true, func(s string) (string, error) { return s, classify.CheckGRPCPattern(s) })
}

// nonEmpty reports an absent or empty list, which as a condition would be
// ambiguous (match nothing? everything?).
func (d *decoder) nonEmpty(n *yaml.Node, path, key string) bool {
	if r := resolve(n); isNull(r) || r.Kind == yaml.SequenceNode && len(r.Content) == 0 {
		d.errorf(n, path, "empty list; give at least one entry, or leave %s out", key)
		return false
	}
	return true
}

// methods decodes a rule's methods, upper-cased as classify compares them.
func (d *decoder) methods(n *yaml.Node, path string) []string {
	if !d.nonEmpty(n, path, "methods") {
		return nil
	}
	items, _ := d.strList(n, path, false)
	var out []string
	seen := map[string]int{}
	for _, it := range items {
		if !isToken(it.s) {
			d.errorf(it.node, it.path, "%q is not a method name", it.s)
			continue
		}
		m := strings.ToUpper(it.s)
		if first, dup := seen[m]; dup {
			d.errorf(it.node, it.path, "%s is listed twice (first at line %d)", m, first)
			continue
		}
		seen[m] = line(it.node)
		out = append(out, m)
	}
	return out
}

// ruleHosts decodes a rule's hosts (names, *.domain or IPs).
func (d *decoder) ruleHosts(n *yaml.Node, path string) []string {
	if !d.nonEmpty(n, path, "hosts") {
		return nil
	}
	items, _ := d.strList(n, path, false)
	var out []string
	seen := map[string]int{}
	for _, it := range items {
		h, err := parseRuleHost(it.s)
		if err != nil {
			d.errorf(it.node, it.path, "%v", err)
			continue
		}
		if first, dup := seen[h]; dup {
			d.errorf(it.node, it.path, "host %q is listed twice (first at line %d)", h, first)
			continue
		}
		seen[h] = line(it.node)
		out = append(out, h)
	}
	return out
}

// matchList walks a list of mappings (headers, cookies), calling each for
// every entry that is one.
func (d *decoder) matchList(n *yaml.Node, path, key string, each func(e *yaml.Node, p string)) {
	if !d.nonEmpty(n, path, key) {
		return
	}
	r := resolve(n)
	if r.Kind != yaml.SequenceNode {
		d.errorf(n, path, "expected a list of {name: ..., ...}, got %s", describe(r))
		return
	}
	for i, e := range r.Content {
		if !d.spend() {
			return
		}
		each(e, path+"["+strconv.Itoa(i)+"]")
	}
}

// headerState is which of a header condition's value and regexp were
// written.
type headerState struct{ value, regexp bool }

// headerMatches decodes a rule's header conditions.
func (d *decoder) headerMatches(n *yaml.Node, path string) []classify.HeaderMatch {
	var out []classify.HeaderMatch
	d.matchList(n, path, "headers", func(e *yaml.Node, p string) {
		var h classify.HeaderMatch
		var st headerState
		mark := d.reports
		if !d.mapping(e, p, d.headerFields(&h, &st)) {
			return
		}
		if st.value && st.regexp {
			d.errorf(e, p, "give value or regexp, not both")
		}
		if !d.reported(mark) {
			out = append(out, h)
		}
	})
	return out
}

func (d *decoder) headerFields(h *classify.HeaderMatch, st *headerState) []field {
	value := d.textField(&h.Value, true, func(s string) (string, error) {
		if s == "" {
			return "", errors.New("empty value; leave value out to require only that the header is present")
		}
		return s, nil
	})
	setValue := value.set
	value.set = func(v *yaml.Node, p string) { st.value = true; setValue(v, p) }
	re := d.textField(&h.Regexp, true, func(s string) (string, error) {
		if s == "" {
			return "", errors.New("empty regexp; leave regexp out to require only that the header is present")
		}
		if _, err := regexp.Compile(s); err != nil {
			return "", fmt.Errorf("invalid regexp %q: %v", s, strings.TrimPrefix(err.Error(), "error parsing regexp: "))
		}
		return s, nil
	})
	setRe := re.set
	re.set = func(v *yaml.Node, p string) { st.regexp = true; setRe(v, p) }
	return []field{
		{"name", d.textField(&h.Name, false, parseHeaderName).need("the header's name")},
		{"value", value},
		{"regexp", re},
	}
}

// cookieMatches decodes a rule's cookie conditions.
func (d *decoder) cookieMatches(n *yaml.Node, path string) []classify.CookieMatch {
	var out []classify.CookieMatch
	d.matchList(n, path, "cookies", func(e *yaml.Node, p string) {
		var c classify.CookieMatch
		mark := d.reports
		if d.mapping(e, p, d.cookieFields(&c)) && !d.reported(mark) {
			out = append(out, c)
		}
	})
	return out
}

// cookieFields is a cookie condition's key table.
func (d *decoder) cookieFields(c *classify.CookieMatch) []field {
	return []field{
		{"name", d.textField(&c.Name, false, func(s string) (string, error) {
			if !isToken(s) {
				return "", fmt.Errorf("%q is not a cookie name", s)
			}
			return s, nil
		}).need("the cookie's name")},
		{"value", d.textField(&c.Value, true, func(s string) (string, error) {
			if s == "" {
				return "", errors.New("empty value; leave value out to require only that the cookie is set")
			}
			return s, nil
		})},
	}
}

// compileClasses runs classify.Compile on classes that decoded cleanly,
// at holding each class's position. The decoder's own checks should leave it
// nothing to find; should it find something, the error goes to the line of
// the class it names, else to key (the classes key).
func (d *decoder) compileClasses(classes []classify.ClassConfig, at []pos, key *yaml.Node, path string) {
	_, err := classify.Compile(classes)
	if err == nil {
		return
	}
	msg := strings.TrimPrefix(err.Error(), "classify: ")
	where := posOf(key)
	// Compile stops at the first class at fault, and a name it repeats
	// belongs to the later class: search from the end.
	for i := min(len(classes), len(at)) - 1; i >= 0; i-- {
		if strings.HasPrefix(msg, fmt.Sprintf("class %q", classes[i].Name)) {
			where = at[i]
			break
		}
	}
	d.add(where, "%s: %s", path, msg)
}

// classNames lists the names of classes in order, as estimator.New takes
// them.
func classNames(classes []classify.ClassConfig) []string {
	names := make([]string, len(classes))
	for i, c := range classes {
		names[i] = c.Name
	}
	return names
}
