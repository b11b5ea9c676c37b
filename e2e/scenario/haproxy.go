package scenario

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// This file turns the scenario's sentry classes into HAProxy priority
// classes, so that the haproxy peer is the baseline an expert HAProxy user
// would write for the same policy: each request gets
// `http-request set-priority-class` by the same rules sentry classifies
// it with, and the backend queue (per-server maxconn = the farm's slots)
// serves the lowest class first, oldest first within a class.

// HAProxyClass is one sentry class as HAProxy sees it: its priority (the
// class's index: the most important, listed first, is 0 and is dequeued
// first) and one condition per rule (the rule's ACL names, all of which
// must hold).
type HAProxyClass struct {
	Name     string
	Priority int
	Default  bool
	// ACLs are "acl" lines (name and criterion).
	ACLs []string
	// Rules are the rules' conditions: ACL names joined by spaces
	// (HAProxy's AND); the rules are joined by "||" (OR).
	Rules []string
}

// Cond is the `if` condition of the class's set-priority-class line.
func (c HAProxyClass) Cond() string { return strings.Join(c.Rules, " || ") }

// fragClass and fragRule mirror the parts of the policy's classes that
// classify a request (docs/policy.md, apps[].classes). Other keys (period,
// key) are ignored here; `sentry check` validates the whole fragment.
type fragClass struct {
	Name    string     `yaml:"name"`
	Default bool       `yaml:"default"`
	Rules   []fragRule `yaml:"rules"`
}

type fragRule struct {
	Path       string      `yaml:"path"`
	PathPrefix string      `yaml:"path_prefix"`
	PathGlob   string      `yaml:"path_glob"`
	PathRegexp string      `yaml:"path_regexp"`
	Methods    []string    `yaml:"methods"`
	Hosts      []string    `yaml:"hosts"`
	Headers    []fragMatch `yaml:"headers"`
	Cookies    []fragMatch `yaml:"cookies"`
	Networks   []string    `yaml:"networks"`
}

type fragMatch struct {
	Name   string `yaml:"name"`
	Value  string `yaml:"value"`
	Regexp string `yaml:"regexp"`
}

// sentryClasses decodes the fragment's classes (nil when it has none).
func (sc *Scenario) sentryClasses() ([]fragClass, int, error) {
	n := &sc.Sentry
	if n.Kind != yaml.MappingNode {
		return nil, 0, nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value != "classes" {
			continue
		}
		var cs []fragClass
		if err := n.Content[i+1].Decode(&cs); err != nil {
			return nil, n.Content[i].Line, err
		}
		return cs, n.Content[i].Line, nil
	}
	return nil, 0, nil
}

// HAProxyClasses translates the scenario's sentry classes into HAProxy
// priority classes. With fewer than two classes it returns nil: there is
// nothing to order. A rule HAProxy cannot express is an error naming the
// file and line of the fragment's classes.
func HAProxyClasses(sc *Scenario) ([]HAProxyClass, error) {
	cs, line, err := sc.sentryClasses()
	if err != nil {
		return nil, &Error{File: sc.Source, Line: line, Msg: fmt.Sprintf("sentry.classes: %v", err)}
	}
	if len(cs) < 2 {
		return nil, nil
	}
	def := len(cs) - 1
	for i, c := range cs {
		if c.Default {
			def = i
		}
	}
	out := make([]HAProxyClass, len(cs))
	for i, c := range cs {
		hc := HAProxyClass{Name: c.Name, Priority: i, Default: i == def}
		for j, r := range c.Rules {
			acls, names, err := ruleACLs(fmt.Sprintf("c%d_%s_r%d", i, c.Name, j), r)
			if err != nil {
				return nil, &Error{File: sc.Source, Line: line, Msg: fmt.Sprintf("sentry.classes: class %q rule %d: %v (the haproxy peer cannot match it)", c.Name, j, err)}
			}
			hc.ACLs = append(hc.ACLs, acls...)
			hc.Rules = append(hc.Rules, strings.Join(names, " "))
		}
		out[i] = hc
	}
	return out, nil
}

// ruleACLs returns the ACL lines of one rule and the names whose AND is
// the rule. ACLs declared twice with one name are ORed by HAProxy, which
// is how a list (methods, hosts, networks) is any-of.
func ruleACLs(prefix string, r fragRule) (acls, names []string, err error) {
	add := func(kind, criterion string) {
		name := prefix + "_" + kind
		if len(names) == 0 || names[len(names)-1] != name {
			names = append(names, name)
		}
		acls = append(acls, name+" "+criterion)
	}
	switch {
	case r.Path != "":
		add("path", "path -m str "+quote(r.Path))
	case r.PathPrefix != "":
		add("path", "path -m beg "+quote(r.PathPrefix))
	case r.PathRegexp != "":
		add("path", "path -m reg "+quote(r.PathRegexp))
	case r.PathGlob != "":
		re, err := globRegexp(r.PathGlob)
		if err != nil {
			return nil, nil, err
		}
		add("path", "path -m reg "+quote(re))
	}
	if len(r.Methods) > 0 {
		ms := make([]string, len(r.Methods))
		for i, m := range r.Methods {
			ms[i] = strings.ToUpper(m)
		}
		add("method", "method "+strings.Join(ms, " "))
	}
	for _, h := range r.Hosts {
		h = strings.ToLower(h)
		// The Host header without its port, lower-cased. (IPv6
		// literals would need more; the scenarios do not use them.)
		crit := "req.hdr(host),field(1,:),lower"
		if rest, ok := strings.CutPrefix(h, "*."); ok {
			add("host", crit+" -m end "+quote("."+rest))
		} else {
			add("host", crit+" -m str "+quote(h))
		}
	}
	for k, h := range r.Headers {
		// req.fhdr: the header's first full value, commas included, as
		// sentry reads it.
		crit := fmt.Sprintf("req.fhdr(%s,1)", h.Name)
		kind := fmt.Sprintf("hdr%d", k)
		switch {
		case h.Value != "":
			add(kind, crit+" -m str "+quote(h.Value))
		case h.Regexp != "":
			add(kind, crit+" -m reg "+quote(h.Regexp))
		default:
			add(kind, crit+" -m len 1:")
		}
	}
	for k, c := range r.Cookies {
		crit := fmt.Sprintf("req.cook(%s)", c.Name)
		kind := fmt.Sprintf("cook%d", k)
		if c.Value != "" {
			add(kind, crit+" -m str "+quote(c.Value))
		} else {
			add(kind, crit+" -m len 1:")
		}
	}
	if len(r.Networks) > 0 {
		add("src", "src "+strings.Join(r.Networks, " "))
	}
	if len(names) == 0 {
		return nil, nil, fmt.Errorf("a rule with no condition")
	}
	return acls, names, nil
}

// quote writes s as one HAProxy word: single-quoted (no escapes, no
// environment variables expanded inside), a quote inside written as '\”
// as in a shell.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// globRegexp turns a policy path_glob (path.Match per segment; a whole
// segment ** is zero or more segments) into an anchored regular
// expression.
func globRegexp(g string) (string, error) {
	if !strings.HasPrefix(g, "/") {
		return "", fmt.Errorf("path_glob %q does not start with /", g)
	}
	var b strings.Builder
	b.WriteString("^")
	for _, seg := range strings.Split(g[1:], "/") {
		if seg == "**" {
			b.WriteString("(/[^/]*)*")
			continue
		}
		b.WriteString("/")
		for i := 0; i < len(seg); i++ {
			switch c := seg[i]; c {
			case '*':
				b.WriteString("[^/]*")
			case '?':
				b.WriteString("[^/]")
			case '\\':
				if i+1 < len(seg) {
					i++
					b.WriteString(regexp.QuoteMeta(seg[i : i+1]))
				}
			case '[':
				j := strings.IndexByte(seg[i:], ']')
				if j < 0 {
					return "", fmt.Errorf("path_glob %q: unclosed [", g)
				}
				cls := seg[i+1 : i+j]
				if strings.HasPrefix(cls, "^") {
					cls = "^/" + cls[1:]
				}
				b.WriteString("[" + cls + "]")
				i += j
			default:
				b.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
	}
	b.WriteString("$")
	re := b.String()
	if _, err := regexp.Compile(re); err != nil {
		return "", fmt.Errorf("path_glob %q: %v", g, err)
	}
	return re, nil
}

// HAProxyQueueTimeout is the haproxy peer's `timeout queue`: peers.
// queue_timeout when given, else the smallest class SLA minus the
// capacity mix's mean service time, so that a request still queued when
// it could no longer be served within the SLA is refused with a 503
// rather than served late (the service time still has to follow the
// wait). When the mean service time is unknown or not below the SLA: the
// SLA.
func HAProxyQueueTimeout(sc *Scenario) time.Duration {
	if sc.Peers.QueueTimeout > 0 {
		return sc.Peers.QueueTimeout
	}
	sla := sc.MinSLA()
	c, err := sc.ComputeCapacity()
	if err != nil || c.MeanService <= 0 || c.MeanService >= sla {
		return sla
	}
	return max((sla - c.MeanService).Round(time.Millisecond), time.Millisecond)
}

// HAProxyCheck is the haproxy peer's health checking, mirroring the
// sentry fragment's health.active (docs/policy.md, apps[].health): the
// same probe path, interval, timeout, rise and fall, and fastinter at a
// tenth of the interval, as sentry probes a backend in transition (lb's
// doc.go, "Health"). nil when the fragment has no active checks: the
// peer then has no health state, as before.
type HAProxyCheck struct {
	Path                 string
	Inter, Fast, Timeout time.Duration
	Rise, Fall           int
}

// haproxyCheck reads the fragment's health.active, with sentry's
// defaults for the keys it leaves out.
func haproxyCheck(sc *Scenario) (*HAProxyCheck, error) {
	var frag struct {
		Health struct {
			Active *struct {
				Path     string        `yaml:"path"`
				Interval time.Duration `yaml:"interval"`
				Timeout  time.Duration `yaml:"timeout"`
				Rise     int           `yaml:"rise"`
				Fall     int           `yaml:"fall"`
			} `yaml:"active"`
		} `yaml:"health"`
	}
	if sc.Sentry.Kind != yaml.MappingNode {
		return nil, nil
	}
	if err := sc.Sentry.Decode(&frag); err != nil {
		return nil, &Error{File: sc.Source, Line: sc.Sentry.Line, Msg: fmt.Sprintf("sentry.health: %v", err)}
	}
	a := frag.Health.Active
	if a == nil {
		return nil, nil
	}
	c := &HAProxyCheck{Path: a.Path, Inter: a.Interval, Timeout: a.Timeout, Rise: a.Rise, Fall: a.Fall}
	if c.Path == "" {
		c.Path = "/"
	}
	if c.Inter <= 0 {
		c.Inter = 5 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = time.Second
	}
	if c.Rise <= 0 {
		c.Rise = 2
	}
	if c.Fall <= 0 {
		c.Fall = 3
	}
	c.Fast = max(c.Inter/10, time.Millisecond)
	return c, nil
}

// hasKill tells whether the scenario kills a server.
func hasKill(sc *Scenario) bool {
	for _, e := range sc.Events {
		if e.Kill != nil {
			return true
		}
	}
	return false
}
