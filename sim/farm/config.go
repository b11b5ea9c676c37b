package farm

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Limits checked by Validate.
const (
	MaxServers = 256
	MaxSlots   = 100000
	// MaxBytes is the largest response body a route may have (16 MiB).
	MaxBytes = 16 << 20
)

// Reserved paths, served by every server outside the slots.
const (
	HealthPath = "/healthz"
	StatsPath  = "/_farm/stats"
)

// Config describes a simulated farm. It is plain data with yaml tags so a
// scenario file can embed it (`farm: {...}`); decode it strictly with
// ParseConfig or a yaml.v3 Decoder with KnownFields(true).
type Config struct {
	// Listen is host:port of the first server. Default "127.0.0.1:0":
	// every server gets its own ephemeral port. With a fixed port p,
	// server i listens on p+i.
	Listen string `yaml:"listen,omitempty"`
	// Servers is the number of backend servers. Default 1; at most 256.
	Servers int `yaml:"servers,omitempty"`
	// Slots is the number of worker slots per server (Apache MaxClients):
	// requests in service at once. Requests beyond it wait, FIFO and
	// unbounded, inside the server. Default 8.
	Slots int `yaml:"slots,omitempty"`
	// Seed seeds each server's RNG (PCG(Seed, server index)). Zero is a
	// valid seed; runs with the same seed and arrival order draw the same
	// service times.
	Seed uint64 `yaml:"seed,omitempty"`
	// Routes maps paths to service models. An exact path wins over a
	// prefix; among prefixes the longest wins; no match answers 404 at
	// once without a slot. Default: one route, prefix "/", io fixed 20ms.
	Routes []Route `yaml:"routes,omitempty"`
	// AbortOnDisconnect stops a request's I/O wait when its client goes
	// away (the slot is freed early). Default false: like a PHP script
	// that runs to the end, the work is done and wasted. A request whose
	// client leaves while it still waits for a slot is always dropped.
	AbortOnDisconnect bool `yaml:"abort_on_disconnect,omitempty"`
	// NoServerTiming turns off the Server-Timing report, like a backend
	// that reports nothing (sentry then estimates from measured times).
	NoServerTiming bool `yaml:"no_server_timing,omitempty"`
}

// Route is the service model of one path or path prefix. A static file
// is a route with Bytes set and no service time.
type Route struct {
	// Path is the exact path, or the prefix when Prefix is set. It must
	// start with "/" and must not be /healthz or under /_farm/.
	Path string `yaml:"path"`
	// Prefix makes Path match every path that starts with it.
	Prefix bool `yaml:"prefix,omitempty"`
	// CPU is the part of the service time spent burning CPU (a spin
	// loop, wall-clock time). Default none. See the package doc before
	// using it on a small machine.
	CPU Dist `yaml:"cpu,omitempty"`
	// IO is the part spent waiting (a sleep) while holding the slot.
	// Default none.
	IO Dist `yaml:"io,omitempty"`
	// Degraded is a cheaper variant of the route, served instead of its
	// cost (heavy share included) when the request's load header (sentry's
	// degradation signal, docs/policy.md "degradation") reads above
	// Degraded.Above. Default none: the header is ignored.
	Degraded *Degraded `yaml:"degraded,omitempty"`
	// Heavy mixes a second cost under the same path: a request is heavy
	// with probability Heavy.Share and then draws Heavy's CPU and IO
	// instead of the route's, as a search whose cost the proxy cannot
	// tell from the URL. Default none (share 0).
	Heavy Heavy `yaml:"heavy,omitempty"`
	// Bytes is the response body size, 0 to 16 MiB. Default 0 (empty).
	Bytes int `yaml:"bytes,omitempty"`
	// Status is the response status. Default 200.
	Status int `yaml:"status,omitempty"`
	// ContentType of the response. Default "text/html; charset=utf-8"
	// when the route has service time, else "application/octet-stream".
	ContentType string `yaml:"content_type,omitempty"`
}

// DefaultLoadHeader is the header a Degraded route reads by default, the
// name sentry sends by default.
const DefaultLoadHeader = "Sentry-Load"

// Degraded is a route's cheaper variant: a request whose load header
// parses as a number above Above draws CPU and IO from here (then
// divided by the server's speed, as any draw). A missing or unparsable
// header serves the full variant.
type Degraded struct {
	// Above is the load above which the variant is served, ≥ 0 (0.9: when
	// sentry says the farm is more than 90% loaded).
	Above float64 `yaml:"above"`
	// Header is the request header read. Default "Sentry-Load". Its value
	// is a decimal number, optionally followed by ';' and parameters.
	Header string `yaml:"header,omitempty"`
	// CPU and IO are the variant's parts, as the route's; at least one.
	CPU Dist `yaml:"cpu,omitempty"`
	IO  Dist `yaml:"io,omitempty"`
}

// Heavy is the costly share of a route's requests.
type Heavy struct {
	// Share is the probability that a request is heavy, in [0, 1]. Zero
	// (the default) means none; the dists may still be given, so that a
	// scenario event can raise the share later.
	Share float64 `yaml:"share,omitempty"`
	// CPU and IO are a heavy request's parts, as the route's.
	CPU Dist `yaml:"cpu,omitempty"`
	IO  Dist `yaml:"io,omitempty"`
}

// IsZero reports whether h is "no heavy requests" with nothing given.
func (h Heavy) IsZero() bool { return h.Share == 0 && h.CPU.IsZero() && h.IO.IsZero() }

// MeanService is the route's mean service time as drawn: the CPU part
// plus the I/O part, truncation included, and with Heavy the mix
// (1 − share)·light + share·heavy. r must be normalized.
func (r Route) MeanService() time.Duration {
	light := r.CPU.EffectiveMean() + r.IO.EffectiveMean()
	if r.Heavy.Share == 0 {
		return light
	}
	heavy := r.Heavy.CPU.EffectiveMean() + r.Heavy.IO.EffectiveMean()
	return time.Duration((1-r.Heavy.Share)*float64(light) + r.Heavy.Share*float64(heavy))
}

// ParseConfig decodes YAML strictly (unknown keys are errors, with line
// numbers), then fills defaults and validates.
func ParseConfig(b []byte) (Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("farm config: %w", err)
	}
	return c.Normalize()
}

// Normalize returns c with defaults filled in, validated. It does not
// modify c. Start calls it; calling it twice is harmless.
func (c Config) Normalize() (Config, error) {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:0"
	}
	if c.Servers == 0 {
		c.Servers = 1
	}
	if c.Slots == 0 {
		c.Slots = 8
	}
	if len(c.Routes) == 0 {
		c.Routes = []Route{{Path: "/", Prefix: true, IO: Dist{Kind: Fixed, Mean: 20 * time.Millisecond}}}
	} else {
		c.Routes = append([]Route(nil), c.Routes...)
	}
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return c, fmt.Errorf("farm: listen %q: %w", c.Listen, err)
	}
	if host == "" {
		return c, fmt.Errorf("farm: listen %q: host required (use 127.0.0.1)", c.Listen)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return c, fmt.Errorf("farm: listen %q: bad port", c.Listen)
	}
	if c.Servers < 1 || c.Servers > MaxServers {
		return c, fmt.Errorf("farm: servers must be 1..%d, got %d", MaxServers, c.Servers)
	}
	if p != 0 && p+c.Servers-1 > 65535 {
		return c, fmt.Errorf("farm: ports %d+%d exceed 65535", p, c.Servers)
	}
	if c.Slots < 1 || c.Slots > MaxSlots {
		return c, fmt.Errorf("farm: slots must be 1..%d, got %d", MaxSlots, c.Slots)
	}
	seen := map[string]bool{}
	for i := range c.Routes {
		r := &c.Routes[i]
		where := fmt.Sprintf("farm: route %d (%q)", i, r.Path)
		if !strings.HasPrefix(r.Path, "/") {
			return c, fmt.Errorf("%s: path must start with /", where)
		}
		// The handler answers reserved paths before routing, so a prefix
		// such as "/" that covers them is harmless.
		if r.Path == HealthPath || r.Path == "/_farm" || strings.HasPrefix(r.Path, "/_farm/") {
			return c, fmt.Errorf("%s: path is reserved", where)
		}
		key := strconv.FormatBool(r.Prefix) + r.Path
		if seen[key] {
			return c, fmt.Errorf("%s: duplicate path", where)
		}
		seen[key] = true
		if r.CPU, err = r.CPU.normalize(); err != nil {
			return c, fmt.Errorf("%s: cpu: %w", where, err)
		}
		if r.IO, err = r.IO.normalize(); err != nil {
			return c, fmt.Errorf("%s: io: %w", where, err)
		}
		if err := r.Heavy.normalize(); err != nil {
			return c, fmt.Errorf("%s: heavy: %w", where, err)
		}
		if r.Degraded != nil {
			d := *r.Degraded
			if err := d.normalize(); err != nil {
				return c, fmt.Errorf("%s: degraded: %w", where, err)
			}
			r.Degraded = &d
		}
		if r.Bytes < 0 || r.Bytes > MaxBytes {
			return c, fmt.Errorf("%s: bytes must be 0..%d, got %d", where, MaxBytes, r.Bytes)
		}
		if r.Status == 0 {
			r.Status = 200
		}
		if r.Status < 200 || r.Status > 599 {
			return c, fmt.Errorf("%s: status must be 200..599, got %d", where, r.Status)
		}
		if r.ContentType == "" {
			if r.CPU.IsZero() && r.IO.IsZero() && r.Heavy.CPU.IsZero() && r.Heavy.IO.IsZero() {
				r.ContentType = "application/octet-stream"
			} else {
				r.ContentType = "text/html; charset=utf-8"
			}
		}
	}
	return c, nil
}

func (h *Heavy) normalize() error {
	if !(h.Share >= 0 && h.Share <= 1) {
		return fmt.Errorf("share must be in [0, 1], got %v", h.Share)
	}
	var err error
	if h.CPU, err = h.CPU.normalize(); err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	if h.IO, err = h.IO.normalize(); err != nil {
		return fmt.Errorf("io: %w", err)
	}
	return nil
}

func (d *Degraded) normalize() error {
	if d.Header == "" {
		d.Header = DefaultLoadHeader
	}
	if !(d.Above >= 0) || math.IsInf(d.Above, 0) {
		return fmt.Errorf("above must be a load of 0 or more, got %v", d.Above)
	}
	var err error
	if d.CPU, err = d.CPU.normalize(); err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	if d.IO, err = d.IO.normalize(); err != nil {
		return fmt.Errorf("io: %w", err)
	}
	if d.CPU.IsZero() && d.IO.IsZero() {
		return errors.New("cpu or io required (the cheaper variant's cost)")
	}
	return nil
}

// Route returns the route serving path, or false for a 404. c must be
// normalized.
func (c Config) Route(path string) (Route, bool) {
	r := newRouter(c.Routes).match(path)
	if r == nil {
		return Route{}, false
	}
	return *r, true
}

// Capacity is the throughput in requests/s the farm can sustain when every
// request goes to path: Servers × Slots / MeanService. It ignores the time
// to write the response, so it is an upper bound for large bodies. It is
// +Inf for a route without service time. c must be normalized.
func (c Config) Capacity(path string) (float64, error) {
	r, ok := c.Route(path)
	if !ok {
		return 0, fmt.Errorf("farm: no route for %q", path)
	}
	s := r.MeanService()
	if s <= 0 {
		return math.Inf(1), nil
	}
	return float64(c.Servers*c.Slots) / s.Seconds(), nil
}

// router matches exact paths first, then the longest prefix.
type router struct {
	exact  map[string]*Route
	prefix []*Route // longest first
}

func newRouter(routes []Route) *router {
	rt := &router{exact: map[string]*Route{}}
	for i := range routes {
		r := &routes[i]
		if r.Prefix {
			rt.prefix = append(rt.prefix, r)
		} else {
			rt.exact[r.Path] = r
		}
	}
	sort.SliceStable(rt.prefix, func(i, j int) bool { return len(rt.prefix[i].Path) > len(rt.prefix[j].Path) })
	return rt
}

func (rt *router) match(path string) *Route {
	if r, ok := rt.exact[path]; ok {
		return r
	}
	for _, r := range rt.prefix {
		if strings.HasPrefix(path, r.Path) {
			return r
		}
	}
	return nil
}
