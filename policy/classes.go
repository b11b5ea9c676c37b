package policy

import (
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
	path                        string // "apps[0].classes[2]"
	line, nameLine, defaultLine int
	// rulesOK: the rules decoded without error, so an empty Rules really
	// means the class has none.
	rulesOK bool
	// terminate is the class's termination range, nil when it has none.
	terminate *Terminate
}

// classes decodes an app's class list, with the line of each class. bad
// reports that anything in it was reported, so that compiling the classes
// (and the checks that need them) is skipped rather than adding follow-on
// errors; with bad, the returned list is nil. terms is each class's
// termination range (nil when no class declares one).
func (d *decoder) classes(n *yaml.Node, path string) (out []classify.ClassConfig, lines []int, terms []*Terminate, bad bool) {
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
	var pos []classPos
	for i, e := range r.Content {
		if !d.spend() {
			return nil, nil, nil, true
		}
		c, cp, ok := d.class(e, path+"["+strconv.Itoa(i)+"]")
		if ok {
			out = append(out, c)
			pos = append(pos, cp)
		}
	}
	// Names and default flags that decoded are checked even when something
	// else failed; a name or flag that failed was reported already.
	label := func(i int) string {
		if out[i].Name != "" {
			return fmt.Sprintf("class %q", out[i].Name)
		}
		return pos[i].path
	}
	names := map[string]int{}
	def := -1
	for i, c := range out {
		if first, dup := names[c.Name]; dup {
			d.add(pos[i].nameLine, "%s.name: class name %q is used twice (first at line %d)", pos[i].path, c.Name, pos[first].nameLine)
		} else if c.Name != "" {
			names[c.Name] = i
		}
		if c.Default {
			if def >= 0 {
				d.add(pos[i].defaultLine, "%s.default: %s is marked default, but so is %s (line %d); only one class may take unmatched requests",
					pos[i].path, label(i), label(def), pos[def].defaultLine)
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
		if i == def || len(c.Rules) > 0 || !pos[i].rulesOK {
			continue
		}
		hint := fmt.Sprintf("the default class is %q, the last one, since none is marked default", out[def].Name)
		if !implicit {
			hint = fmt.Sprintf("the default class is %q (line %d)", out[def].Name, pos[def].defaultLine)
		}
		d.add(pos[i].line, "%s: class %q has no rules, so no request could reach it; give it rules, or make it the default class (%s)",
			pos[i].path, c.Name, hint)
	}
	if d.reported(mark) {
		return nil, nil, nil, true
	}
	any := false
	for _, p := range pos {
		lines = append(lines, p.line)
		terms = append(terms, p.terminate)
		any = any || p.terminate != nil
	}
	if !any {
		terms = nil
	}
	return out, lines, terms, false
}

// class decodes one entry of classes; ok is false when it is not a mapping.
func (d *decoder) class(n *yaml.Node, path string) (c classify.ClassConfig, pos classPos, ok bool) {
	pos = classPos{path: path, line: line(n), rulesOK: true}
	sawName := false
	if !d.mapping(n, path, []field{
		{"name", func(v *yaml.Node, p string) {
			sawName = true
			pos.nameLine = line(v)
			if s, ok := d.str(v, p); ok {
				if err := checkName(s); err != nil {
					d.errorf(v, p, "%v", err)
					return
				}
				c.Name = s
			}
		}},
		{"period", d.durationField(&c.Period, 0)},
		{"default", func(v *yaml.Node, p string) {
			pos.defaultLine = line(v)
			d.boolField(&c.Default)(v, p)
		}},
		{"rules", func(v *yaml.Node, p string) { c.Rules, pos.rulesOK = d.rules(v, p) }},
		{"terminate", func(v *yaml.Node, p string) { pos.terminate = d.terminate(v, p) }},
	}) {
		return c, pos, false
	}
	if !sawName {
		d.errorf(n, path, "name is required")
	}
	return c, pos, true
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

// rule decodes one rule. Each check here mirrors one of classify.Compile's,
// so that a problem is reported at the line of the value at fault.
func (d *decoder) rule(n *yaml.Node, path string) (ru classify.Rule, ok bool) {
	conds := 0
	var pathKey string
	var pathLine int
	// onePath admits the first path condition and refuses any other.
	onePath := func(key string, v *yaml.Node, p string) (string, bool) {
		conds++
		if pathKey != "" {
			d.errorf(v, p, "%s is already given (line %d); a rule takes at most one of path, path_prefix, path_glob and path_regexp", pathKey, pathLine)
			return "", false
		}
		pathKey, pathLine = key, line(v)
		return d.str(v, p)
	}
	pathField := func(key string, dst *string, check func(string) error) field {
		return field{key, func(v *yaml.Node, p string) {
			s, ok := onePath(key, v, p)
			if !ok {
				return
			}
			if err := check(s); err != nil {
				d.errorf(v, p, "%v", err)
				return
			}
			*dst = s
		}}
	}
	if !d.mapping(n, path, []field{
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
		{"methods", func(v *yaml.Node, p string) { conds++; ru.Methods = d.methods(v, p) }},
		{"hosts", func(v *yaml.Node, p string) { conds++; ru.Hosts = d.ruleHosts(v, p) }},
		{"headers", func(v *yaml.Node, p string) { conds++; ru.Headers = d.headerMatches(v, p) }},
		{"cookies", func(v *yaml.Node, p string) { conds++; ru.Cookies = d.cookieMatches(v, p) }},
		{"networks", func(v *yaml.Node, p string) {
			conds++
			if d.nonEmpty(v, p, "networks") {
				ru.Networks = d.trustedProxies(v, p)
			}
		}},
		{"grpc_service", d.grpcName(&ru.GRPCService, &conds)},
		{"grpc_method", d.grpcName(&ru.GRPCMethod, &conds)},
		{"key", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok {
				if s == "" {
					d.errorf(v, p, "empty key; leave key out to key requests by their path")
					return
				}
				ru.Key = s
			}
		}},
	}) {
		return ru, false
	}
	if conds == 0 {
		d.errorf(n, path, "a rule needs at least one condition (%s); a class that takes every request is the default class, without rules", ruleConditions)
		return ru, false
	}
	return ru, true
}

// grpcName decodes a rule's grpc_service or grpc_method (checked as
// classify.Compile does: classify.CheckGRPCPattern).
func (d *decoder) grpcName(dst *string, conds *int) func(*yaml.Node, string) {
	return func(v *yaml.Node, p string) {
		*conds++
		s, ok := d.str(v, p)
		if !ok {
			return
		}
		if err := classify.CheckGRPCPattern(s); err != nil {
			d.errorf(v, p, "%v", err)
			return
		}
		*dst = s
	}
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

// headerMatches decodes a rule's header conditions.
func (d *decoder) headerMatches(n *yaml.Node, path string) []classify.HeaderMatch {
	var out []classify.HeaderMatch
	d.matchList(n, path, "headers", func(e *yaml.Node, p string) {
		var h classify.HeaderMatch
		var sawName, sawValue, sawRegexp, bad bool
		if !d.mapping(e, p, []field{
			{"name", func(v *yaml.Node, p string) {
				sawName = true
				s, ok := d.str(v, p)
				if !ok {
					bad = true
					return
				}
				name, err := parseHeaderName(s)
				if err != nil {
					d.errorf(v, p, "%v", err)
					bad = true
					return
				}
				h.Name = name
			}},
			{"value", func(v *yaml.Node, p string) {
				sawValue = true
				s, ok := d.str(v, p)
				switch {
				case !ok:
					bad = true
				case s == "":
					d.errorf(v, p, "empty value; leave value out to require only that the header is present")
					bad = true
				default:
					h.Value = s
				}
			}},
			{"regexp", func(v *yaml.Node, p string) {
				sawRegexp = true
				s, ok := d.str(v, p)
				if !ok {
					bad = true
					return
				}
				if s == "" {
					d.errorf(v, p, "empty regexp; leave regexp out to require only that the header is present")
					bad = true
					return
				}
				if _, err := regexp.Compile(s); err != nil {
					d.errorf(v, p, "invalid regexp %q: %v", s, strings.TrimPrefix(err.Error(), "error parsing regexp: "))
					bad = true
					return
				}
				h.Regexp = s
			}},
		}) {
			return
		}
		if !sawName {
			d.errorf(e, p, "name is required (the header's name)")
			bad = true
		}
		if sawValue && sawRegexp {
			d.errorf(e, p, "give value or regexp, not both")
			bad = true
		}
		if !bad {
			out = append(out, h)
		}
	})
	return out
}

// cookieMatches decodes a rule's cookie conditions.
func (d *decoder) cookieMatches(n *yaml.Node, path string) []classify.CookieMatch {
	var out []classify.CookieMatch
	d.matchList(n, path, "cookies", func(e *yaml.Node, p string) {
		var c classify.CookieMatch
		var sawName, bad bool
		if !d.mapping(e, p, []field{
			{"name", func(v *yaml.Node, p string) {
				sawName = true
				s, ok := d.str(v, p)
				switch {
				case !ok:
					bad = true
				case !isToken(s):
					d.errorf(v, p, "%q is not a cookie name", s)
					bad = true
				default:
					c.Name = s
				}
			}},
			{"value", func(v *yaml.Node, p string) {
				s, ok := d.str(v, p)
				switch {
				case !ok:
					bad = true
				case s == "":
					d.errorf(v, p, "empty value; leave value out to require only that the cookie is set")
					bad = true
				default:
					c.Value = s
				}
			}},
		}) {
			return
		}
		if !sawName {
			d.errorf(e, p, "name is required (the cookie's name)")
			bad = true
		}
		if !bad {
			out = append(out, c)
		}
	})
	return out
}

// compileClasses runs classify.Compile on classes that decoded cleanly,
// pos holding each class's line. The decoder's own checks should leave it
// nothing to find; should it find something, the error goes to the line of
// the class it names, else to at (the classes key).
func (d *decoder) compileClasses(classes []classify.ClassConfig, pos []int, at *yaml.Node, path string) {
	_, err := classify.Compile(classes)
	if err == nil {
		return
	}
	msg := strings.TrimPrefix(err.Error(), "classify: ")
	ln := line(at)
	// Compile stops at the first class at fault, and a name it repeats
	// belongs to the later class: search from the end.
	for i := min(len(classes), len(pos)) - 1; i >= 0; i-- {
		if strings.HasPrefix(msg, fmt.Sprintf("class %q", classes[i].Name)) {
			ln = pos[i]
			break
		}
	}
	d.add(ln, "%s: %s", path, msg)
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
