package scenario

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sentry-proxy/sentry/sim/farm"
	"github.com/sentry-proxy/sentry/sim/load"
)

// Scenario is one experiment: a farm, the traffic offered to it, and the
// sentry policy fragment used when the peer is sentry. It is decoded
// strictly from YAML by Parse or Load.
type Scenario struct {
	// Name names the output directory; 1–63 characters of a-z, 0-9, _ and
	// -. Required.
	Name string `yaml:"name"`
	// Description is free text, copied into summary.md.
	Description string `yaml:"description,omitempty"`
	// Duration is the scenario's length: the plots' time axis and the
	// denominator of the per-second rates. Default: the longest class
	// schedule. When given it must be at least that long.
	Duration time.Duration `yaml:"duration,omitempty"`
	// Seed seeds the load generator (arrivals, paths, think times). The
	// farm has its own seed (farm.seed). Zero is a valid seed.
	Seed uint64 `yaml:"seed,omitempty"`
	// Scale multiplies every load level (open-loop rates and closed-loop
	// users) after units are applied. Default 1; must be > 0.
	Scale float64 `yaml:"scale,omitempty"`
	// Farm is the simulated backend farm (package farm's Config).
	Farm farm.Config `yaml:"farm"`
	// Capacity says which request mix "capacity" means for levels given
	// with unit: capacity, and in the summary. Default: the mix of every
	// open-loop class's paths, weighted by the class's expected arrivals.
	Capacity CapacitySpec `yaml:"capacity,omitempty"`
	// Load holds the load generator's run-wide bounds.
	Load LoadOptions `yaml:"load,omitempty"`
	// Classes of traffic, in priority order (most important first); at
	// least one.
	Classes []Class `yaml:"classes"`
	// Sentry is a fragment of a sentry app policy (classes, sla,
	// admission, …) merged into the app the runner generates for the
	// sentry peer. The runner writes name, listen and backends itself, so
	// the fragment must not. Checked by `sentry check` when the peer runs.
	Sentry yaml.Node `yaml:"sentry,omitempty"`
	// Peers tunes the comparison peers.
	Peers PeerOptions `yaml:"peers,omitempty"`
	// Phases name windows of the run (the seconds at 3×, at 10×, …) that
	// the summary also reports on their own: per class admitted %, p95 of
	// admitted, goodput / capacity, the seconds within the SLA and the
	// priority check, counting the requests that arrived in the window.
	// Optional; none by default.
	Phases []Phase `yaml:"phases,omitempty"`
	// Events change the farm during the run: a route's costs or heavy
	// share, a server's speed, a server killed and restarted (events.go).
	// Optional; none by default.
	Events []Event `yaml:"events,omitempty"`
	// Fairness, when given, has the summary report how evenly the
	// classes (the clients) were admitted, and how consistently
	// (fairness.go). Optional.
	Fairness *FairnessSpec `yaml:"fairness,omitempty"`

	// Source is the file name errors refer to (not in YAML).
	Source string `yaml:"-"`
	// Raw is the file content as read (not in YAML); the runner copies it
	// next to the outputs.
	Raw []byte `yaml:"-"`
}

// Class is one class of traffic: the load generator's class plus the unit
// of its schedule's levels.
type Class struct {
	load.Class `yaml:",inline"`
	// Unit of the open-loop rate levels: "rps" (requests per second, the
	// default) or "capacity" (multiples of the scenario's capacity, so the
	// scenario scales with the farm). Closed-loop levels are users:
	// "users" (the default) is the only unit allowed.
	Unit Unit `yaml:"unit,omitempty"`
	// Clients, when > 1, makes the entry that many equal clients, each a
	// class of its own on its own source address: Parse replaces the
	// entry by classes NAME-001, NAME-002, … (ExpandClients) whose
	// sources are Source, Source+1, … (Source is required, in
	// 127.0.0.0/8), each with the entry's schedule divided by Clients, so
	// the entry's rate is the clients' total. Open loop only. Default 0
	// (or 1): the entry is one class.
	Clients int `yaml:"clients,omitempty"`
	// Group is the name of the entry a class was expanded from (set by
	// ExpandClients; not in YAML).
	Group string `yaml:"-"`
}

// Unit is the unit of a class's schedule levels.
type Unit string

// The units.
const (
	UnitRPS      Unit = "rps"
	UnitCapacity Unit = "capacity"
	UnitUsers    Unit = "users"
)

// CapacitySpec chooses the capacity reference. At most one of Rate and
// Mix.
type CapacitySpec struct {
	// Rate is an explicit capacity in requests per second. Zero: computed
	// from the farm.
	Rate float64 `yaml:"rate,omitempty"`
	// Mix is the request mix the capacity is computed for: paths with
	// relative weights. Capacity = servers × slots / Σ wᵢ·Sᵢ, with Sᵢ the
	// mean service time of the route serving path i (farm.Config.Capacity
	// for a single path).
	Mix []load.Path `yaml:"mix,omitempty"`
	// Note is free text copied into summary.md.
	Note string `yaml:"note,omitempty"`
}

// LoadOptions are the load generator's run-wide bounds (package load's
// Config fields of the same names).
type LoadOptions struct {
	// Timeout bounds each request. Default 10s.
	Timeout time.Duration `yaml:"timeout,omitempty"`
	// MaxInFlight caps open-loop requests in flight (arrivals beyond are
	// generator overflow). Default 10000.
	MaxInFlight int `yaml:"max_in_flight,omitempty"`
	// MaxRequests bounds arrivals over the run. Default 1000000.
	MaxRequests int64 `yaml:"max_requests,omitempty"`
	// RetryAfter is a closed-loop user's back-off after a 503/429 without
	// Retry-After. Default 5s.
	RetryAfter time.Duration `yaml:"retry_after,omitempty"`
}

// PeerOptions tunes the comparison peers. Every field has a default
// derived from the farm and the classes.
type PeerOptions struct {
	// QueueTimeout is HAProxy's `timeout queue`. Default: the smallest
	// class SLA.
	QueueTimeout time.Duration `yaml:"queue_timeout,omitempty"`
	// ConnLimit is nginx's limit_conn and the total of HAProxy's per-server
	// maxconn. Default: farm servers × slots.
	ConnLimit int `yaml:"conn_limit,omitempty"`
	// ServerTimeout is the haproxy-timeout peer's `timeout server`: how
	// long HAProxy waits for a backend's response before it gives up (504)
	// and closes the connection. The haproxy peer keeps 30s. A value tuned
	// to the workload by hand is what the termination scenarios compare
	// with; the haproxy-timeout peer needs it.
	ServerTimeout time.Duration `yaml:"server_timeout,omitempty"`
	// PerSourceRate, when > 0, is a per-client-address request rate (req/s)
	// hand-set on the haproxy and nginx peers, as their users set one: a
	// stick table tracking each source's http_req_rate(1s) and denying
	// (503) above it, and limit_req with a burst of a tenth of a second
	// (503). The fair-share scenarios compare sentry's fair share, which
	// needs no such number, with it. Default 0: no per-source limit.
	PerSourceRate float64 `yaml:"per_source_rate,omitempty"`
}

// Phase is a named window [Start, End) of the run, in the file's time
// (the runner's time scale stretches it with the schedules).
type Phase struct {
	// Name is shown in summary.md; 1–63 characters of a-z, 0-9, _ and -,
	// unique. Required.
	Name string `yaml:"name"`
	// Start ≥ 0 and End > Start, at most the scenario's duration.
	// Required (a zero Start is the run's start).
	Start time.Duration `yaml:"start"`
	End   time.Duration `yaml:"end"`
	// Capacity is what the phase's goodput / capacity is measured
	// against: "" (default) the scenario's capacity, or "events" the
	// farm's capacity with every event at or before Start applied (a
	// route's new cost, a server's speed, a server killed): the "new
	// capacity" of a capacity-shift scenario.
	Capacity string `yaml:"capacity,omitempty"`
	// Recovery reports, for a phase that starts at a change (an event, a
	// load step), how many seconds after Start the admitted p95 was back
	// within the SLA for good: the first second from which every judged
	// second of the phase met it (PhaseSummary.Recovery).
	Recovery bool `yaml:"recovery,omitempty"`

	// rate, when > 0, replaces the capacity SummarizePhases is given for
	// this phase (the runner sets it from PhaseCapacities).
	rate float64
}

// The Phase.Capacity values.
const (
	PhaseCapacityScenario = ""
	PhaseCapacityEvents   = "events"
)

var nameRE = regexp.MustCompile(`^[a-z0-9_-]{1,63}$`)

// Load reads and parses a scenario file.
func Load(path string) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, b)
}

// Error is a scenario error at a line of its file.
type Error struct {
	File string
	Line int // 0 when unknown
	Msg  string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

var yamlLineRE = regexp.MustCompile(`^line (\d+): (.*)$`)

// Parse decodes a scenario strictly: unknown keys are errors, every error
// carries the file name and line. It fills defaults and validates
// everything it can without running anything (the sentry fragment is
// checked by the sentry binary when that peer runs).
func Parse(source string, b []byte) (*Scenario, error) {
	sc := &Scenario{Source: source, Raw: append([]byte(nil), b...)}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(sc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: source, Msg: "empty file"}
		}
		return nil, yamlError(source, err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, yamlError(source, err)
	}
	var extra yaml.Node
	if dec.Decode(&extra) == nil {
		return nil, &Error{File: source, Line: extra.Line, Msg: "more than one YAML document; a scenario is one"}
	}
	if err := sc.validate(&root); err != nil {
		return nil, err
	}
	return sc, nil
}

// yamlError turns a yaml.v3 error into Errors with lines, one per line.
func yamlError(source string, err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		var errs []error
		for _, m := range te.Errors {
			errs = append(errs, lineMsg(source, m))
		}
		return errors.Join(errs...)
	}
	return lineMsg(source, strings.TrimPrefix(err.Error(), "yaml: "))
}

func lineMsg(source, m string) *Error {
	if s := yamlLineRE.FindStringSubmatch(m); s != nil {
		n, _ := strconv.Atoi(s[1])
		return &Error{File: source, Line: n, Msg: s[2]}
	}
	return &Error{File: source, Msg: m}
}

// lineOf returns the line of the node at path below root (mapping keys
// as strings, sequence indices as ints); the line of the deepest node
// found when the path does not exist all the way.
func lineOf(root *yaml.Node, path ...any) int {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := n.Line
	for _, p := range path {
		var next *yaml.Node
		switch k := p.(type) {
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == k {
						next = n.Content[i+1]
						line = n.Content[i].Line
						break
					}
				}
			}
		case int:
			if n.Kind == yaml.SequenceNode && k >= 0 && k < len(n.Content) {
				next = n.Content[k]
				line = next.Line
			}
		}
		if next == nil {
			return line
		}
		n = next
	}
	return line
}

func (sc *Scenario) errAt(root *yaml.Node, msg string, path ...any) error {
	return &Error{File: sc.Source, Line: lineOf(root, path...), Msg: msg}
}

func (sc *Scenario) validate(root *yaml.Node) error {
	if !nameRE.MatchString(sc.Name) {
		return sc.errAt(root, fmt.Sprintf("name %q: want 1–63 characters of a-z, 0-9, _ and -", sc.Name), "name")
	}
	if sc.Scale == 0 {
		sc.Scale = 1
	}
	if !(sc.Scale > 0) || math.IsInf(sc.Scale, 0) {
		return sc.errAt(root, fmt.Sprintf("scale must be > 0, got %v", sc.Scale), "scale")
	}
	fc, err := sc.Farm.Normalize()
	if err != nil {
		path := []any{"farm"}
		var i int
		if _, e := fmt.Sscanf(err.Error(), "farm: route %d", &i); e == nil {
			path = append(path, "routes", i)
		}
		return sc.errAt(root, err.Error(), path...)
	}
	sc.Farm = fc
	if sc.Farm.Listen != "127.0.0.1:0" && !strings.HasPrefix(sc.Farm.Listen, "127.0.0.1:") {
		return sc.errAt(root, "farm.listen must be on 127.0.0.1 (loads stay on this machine)", "farm", "listen")
	}
	l := sc.Load
	if l.Timeout < 0 || l.MaxInFlight < 0 || l.MaxRequests < 0 || l.RetryAfter < 0 {
		return sc.errAt(root, "load: values must be ≥ 0", "load")
	}
	if len(sc.Classes) == 0 {
		return sc.errAt(root, "classes: at least one class", "classes")
	}
	classes, origin, err := ExpandClients(sc.Classes)
	if err != nil {
		var ce *clientsError
		if errors.As(err, &ce) {
			return sc.errAt(root, ce.msg, "classes", ce.index, ce.key)
		}
		return sc.errAt(root, err.Error(), "classes")
	}
	sc.Classes = classes
	names := map[string]bool{}
	var longest time.Duration
	for i := range sc.Classes {
		c := &sc.Classes[i]
		at := func(msg string, path ...any) error {
			return sc.errAt(root, fmt.Sprintf("class %q: %s", c.Name, msg), append([]any{"classes", origin[i]}, path...)...)
		}
		if names[c.Name] {
			return at("duplicate name", "name")
		}
		names[c.Name] = true
		switch {
		case c.Closed != nil && c.Unit == "":
			c.Unit = UnitUsers
		case c.Unit == "":
			c.Unit = UnitRPS
		}
		switch {
		case c.Closed != nil && c.Unit != UnitUsers:
			return at(fmt.Sprintf("unit %q: a closed-loop class counts users (unit: users)", c.Unit), "unit")
		case c.Open != nil && c.Unit != UnitRPS && c.Unit != UnitCapacity:
			return at(fmt.Sprintf("unit %q: want rps or capacity", c.Unit), "unit")
		}
		// The load package validates a class; run it on this one alone so
		// the error gets this class's line.
		one := load.Config{MaxInFlight: l.MaxInFlight, Classes: []load.Class{c.Class}}
		nc, err := one.Normalize()
		if err != nil {
			msg := err.Error()
			if j := strings.Index(msg, "): "); j >= 0 && strings.HasPrefix(msg, "load: class 0") {
				msg = msg[j+3:]
			}
			return at(msg)
		}
		for _, p := range nc.Classes[0].Request.Paths {
			if _, ok := sc.Farm.Route(pathOnly(p.Path)); !ok {
				return at(fmt.Sprintf("path %q: no farm route serves it (it would be a 404)", p.Path), "request")
			}
		}
		longest = max(longest, classDuration(&nc.Classes[0]))
	}
	if sc.Duration == 0 {
		sc.Duration = longest
	}
	if sc.Duration < longest {
		return sc.errAt(root, fmt.Sprintf("duration %v is shorter than the longest class schedule (%v)", sc.Duration, longest), "duration")
	}
	cs := sc.Capacity
	if cs.Rate < 0 || math.IsInf(cs.Rate, 0) || math.IsNaN(cs.Rate) {
		return sc.errAt(root, "capacity.rate must be ≥ 0", "capacity", "rate")
	}
	if cs.Rate > 0 && len(cs.Mix) > 0 {
		return sc.errAt(root, "capacity: give rate or mix, not both", "capacity")
	}
	for j, p := range cs.Mix {
		if p.Weight < 0 || math.IsNaN(p.Weight) || math.IsInf(p.Weight, 0) {
			return sc.errAt(root, "capacity.mix: weight must be ≥ 0", "capacity", "mix", j)
		}
		if _, ok := sc.Farm.Route(pathOnly(p.Path)); !ok {
			return sc.errAt(root, fmt.Sprintf("capacity.mix: path %q has no farm route", p.Path), "capacity", "mix", j)
		}
	}
	capa, err := sc.ComputeCapacity()
	if err != nil {
		return sc.errAt(root, err.Error(), "capacity")
	}
	for i, c := range sc.Classes {
		if c.Unit == UnitCapacity && (math.IsInf(capa.Rate, 0) || capa.Rate <= 0) {
			return sc.errAt(root, fmt.Sprintf("class %q: unit capacity, but the capacity is %v (routes without service time); give capacity.rate", c.Name, capa.Rate), "classes", origin[i], "unit")
		}
	}
	phases := map[string]bool{}
	for i, ph := range sc.Phases {
		at := func(msg string, key string) error {
			return sc.errAt(root, fmt.Sprintf("phase %q: %s", ph.Name, msg), "phases", i, key)
		}
		switch {
		case !nameRE.MatchString(ph.Name):
			return at("name: want 1–63 characters of a-z, 0-9, _ and -", "name")
		case phases[ph.Name]:
			return at("duplicate name", "name")
		case ph.Start < 0:
			return at("start must be ≥ 0", "start")
		case ph.End <= ph.Start:
			return at(fmt.Sprintf("end %v must be after start %v", ph.End, ph.Start), "end")
		case ph.End > sc.Duration:
			return at(fmt.Sprintf("end %v is after the scenario's duration %v", ph.End, sc.Duration), "end")
		case ph.Capacity != PhaseCapacityScenario && ph.Capacity != PhaseCapacityEvents:
			return at(fmt.Sprintf("capacity %q: want %q or nothing", ph.Capacity, PhaseCapacityEvents), "capacity")
		}
		phases[ph.Name] = true
	}
	if err := sc.validateEvents(root); err != nil {
		return err
	}
	if err := sc.validateFairness(root); err != nil {
		return err
	}
	if _, err := sc.PhaseCapacities(capa.Rate); err != nil {
		return sc.errAt(root, err.Error(), "phases")
	}
	if sc.Peers.QueueTimeout < 0 || sc.Peers.ConnLimit < 0 || sc.Peers.ServerTimeout < 0 || !(sc.Peers.PerSourceRate >= 0) || math.IsInf(sc.Peers.PerSourceRate, 0) {
		return sc.errAt(root, "peers: values must be ≥ 0", "peers")
	}
	if err := sc.checkFragment(root); err != nil {
		return err
	}
	return nil
}

// reservedAppKeys are written by the runner, never by the fragment.
var reservedAppKeys = map[string]bool{"name": true, "listen": true, "backends": true, "hosts": true, "tls": true}

func (sc *Scenario) checkFragment(root *yaml.Node) error {
	n := &sc.Sentry
	if n.Kind == 0 {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return &Error{File: sc.Source, Line: n.Line, Msg: "sentry: expected a mapping of app policy keys (classes, sla, admission, …)"}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if reservedAppKeys[k.Value] {
			return &Error{File: sc.Source, Line: k.Line, Msg: fmt.Sprintf("sentry.%s: the runner sets it (listen and backends come from the farm)", k.Value)}
		}
	}
	return nil
}

// MaxClients bounds Class.Clients: each client is a class of the load
// generator with a connection pool of its own.
const MaxClients = 1000

type clientsError struct {
	index int    // the entry in the file's classes
	key   string // its key at fault
	msg   string
}

func (e *clientsError) Error() string { return e.msg }

// ExpandClients replaces every class with Clients > 1 by that many
// classes, one per client: NAME-001, NAME-002, … (zero-padded to the
// width of Clients, so they sort in order), with sources Source,
// Source+1, … and the entry's open-loop schedule divided by Clients
// (the entry's rate is the clients' total). Each expanded class has
// Group set to the entry's name and Clients 0. origin[i] is the index
// in classes of the entry output class i came from. Classes without
// Clients are copied as they are.
func ExpandClients(classes []Class) (out []Class, origin []int, err error) {
	for i, c := range classes {
		if c.Clients == 0 || c.Clients == 1 {
			c.Clients = 0
			out, origin = append(out, c), append(origin, i)
			continue
		}
		fail := func(key, msg string) ([]Class, []int, error) {
			return nil, nil, &clientsError{index: i, key: key, msg: fmt.Sprintf("class %q: %s", c.Name, msg)}
		}
		switch {
		case c.Clients < 0 || c.Clients > MaxClients:
			return fail("clients", fmt.Sprintf("clients %d: want 1–%d", c.Clients, MaxClients))
		case c.Open == nil:
			return fail("clients", "clients: open-loop classes only (a closed loop's users are not split)")
		case c.Source == "":
			return fail("source", "clients: give the first client's source address (127.0.0.x)")
		}
		first, perr := netip.ParseAddr(c.Source)
		if perr != nil || !first.Is4() || first.As4()[0] != 127 {
			return fail("source", fmt.Sprintf("source %q: clients need an IPv4 loopback address (127.0.0.0/8)", c.Source))
		}
		base := binary.BigEndian.Uint32(first.AsSlice())
		if last := uint64(base) + uint64(c.Clients) - 1; last >= 0x7fffffff { // 127.255.255.255 is the broadcast address
			return fail("source", fmt.Sprintf("source %q: %d clients run past 127.255.255.254", c.Source, c.Clients))
		}
		width := len(strconv.Itoa(c.Clients))
		rate := c.Open.Rate.Scale(1 / float64(c.Clients))
		for j := range c.Clients {
			k := c
			k.Name = fmt.Sprintf("%s-%0*d", c.Name, width, j+1)
			k.Group, k.Clients = c.Name, 0
			var a [4]byte
			binary.BigEndian.PutUint32(a[:], base+uint32(j))
			k.Source = netip.AddrFrom4(a).String()
			o := *c.Open
			o.Rate = rate
			k.Open = &o
			out, origin = append(out, k), append(origin, i)
		}
	}
	return out, origin, nil
}

// pathOnly strips a query.
func pathOnly(p string) string {
	if i := strings.IndexByte(p, '?'); i >= 0 {
		return p[:i]
	}
	return p
}

func classDuration(c *load.Class) time.Duration {
	if c.Open != nil {
		return c.Open.Rate.Duration()
	}
	return c.Closed.Users.Duration()
}

// MinSLA is the smallest class SLA (default 1s per class).
func (sc *Scenario) MinSLA() time.Duration {
	m := time.Duration(0)
	for _, c := range sc.Classes {
		s := c.SLA
		if s == 0 {
			s = time.Second
		}
		if m == 0 || s < m {
			m = s
		}
	}
	return m
}

// SLA returns class i's SLA with the load package's default.
func (sc *Scenario) SLA(i int) time.Duration {
	if s := sc.Classes[i].SLA; s > 0 {
		return s
	}
	return time.Second
}
