package load

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is one load run: the targets and the classes of traffic. It is
// plain data with yaml tags so a scenario file can embed it
// (`load: {...}`); decode it strictly with ParseConfig or a yaml.v3
// Decoder with KnownFields(true). Targets may be left empty in YAML and
// filled in by the scenario runner (it knows the proxy's address).
type Config struct {
	// Targets are base URLs ("http://127.0.0.1:8080"). Requests go to them
	// round-robin. Required by Run.
	Targets []string `yaml:"targets,omitempty"`
	// Seed seeds the arrival, path and think-time draws. Zero is a valid
	// seed; the same seed gives the same arrival times.
	Seed uint64 `yaml:"seed,omitempty"`
	// Timeout bounds each request, from send to the last body byte.
	// Default 10s.
	Timeout time.Duration `yaml:"timeout,omitempty"`
	// MaxRequests bounds the run's arrivals over all classes (generator
	// overflow included). When reached, no class starts another request.
	// Default 1000000.
	MaxRequests int64 `yaml:"max_requests,omitempty"`
	// MaxDuration bounds the whole run, drain included; requests still in
	// flight then are cancelled. Default: the longest class schedule plus
	// Timeout plus 1s.
	MaxDuration time.Duration `yaml:"max_duration,omitempty"`
	// MaxInFlight caps open-loop requests in flight at once (one goroutine
	// and, usually, one connection each). An arrival that finds the cap
	// full is not sent but recorded as generator overflow, never hidden.
	// It also caps each closed-loop class's users. Default 10000.
	MaxInFlight int `yaml:"max_in_flight,omitempty"`
	// RetryAfter is how long a closed-loop user backs off after a 503 or
	// 429 without a usable Retry-After header. Default 5s (SEDA's value).
	RetryAfter time.Duration `yaml:"retry_after,omitempty"`
	// Classes of traffic; at least one.
	Classes []Class `yaml:"classes"`
}

// Class is one kind of traffic: what its requests look like, how they
// arrive, and its response-time target.
type Class struct {
	// Name labels results and series; required, unique, not "all".
	Name string `yaml:"name"`
	// SLA is the response-time target: a 2xx within SLA counts as goodput.
	// Default 1s.
	SLA time.Duration `yaml:"sla,omitempty"`
	// Request is the template of the class's requests.
	Request Request `yaml:"request,omitempty"`
	// Open makes the class open loop; exactly one of Open and Closed.
	Open *Open `yaml:"open,omitempty"`
	// Closed makes the class closed loop.
	Closed *Closed `yaml:"closed,omitempty"`
	// Source is the local IP address the class's connections are made
	// from (a client of its own, e.g. 127.0.0.2: on Linux every address of
	// 127.0.0.0/8 is local). Default: the system's choice. The class then
	// has a connection pool of its own.
	Source string `yaml:"source,omitempty"`
}

// Request is a request template. Classes are told apart by what the
// classifier sees: path, method, headers, cookies, host.
type Request struct {
	// Method; default GET.
	Method string `yaml:"method,omitempty"`
	// Paths to request, drawn by weight. Default one path "/".
	Paths []Path `yaml:"paths,omitempty"`
	// Headers added to every request.
	Headers map[string]string `yaml:"headers,omitempty"`
	// Cookies sent in one Cookie header.
	Cookies map[string]string `yaml:"cookies,omitempty"`
	// Host overrides the Host header; default the target's.
	Host string `yaml:"host,omitempty"`
	// Body sent with every request; default none.
	Body string `yaml:"body,omitempty"`
}

// Path is a request path (query allowed) and its relative weight.
type Path struct {
	// Path starts with "/".
	Path string `yaml:"path"`
	// Weight is relative to the class's other paths; default 1.
	Weight float64 `yaml:"weight,omitempty"`
}

// Arrivals names an open-loop arrival process.
type Arrivals string

// The arrival processes.
const (
	// Poisson arrivals: exponential gaps at the scheduled rate.
	Poisson Arrivals = "poisson"
	// Uniform arrivals: evenly spaced at the scheduled rate.
	Uniform Arrivals = "uniform"
)

// Open is an open-loop class: arrivals follow the schedule whatever the
// responses do, so offered load can exceed capacity.
type Open struct {
	// Arrivals is poisson (default) or uniform.
	Arrivals Arrivals `yaml:"arrivals,omitempty"`
	// Rate is the arrival rate in requests per second over time.
	Rate Schedule `yaml:"rate"`
}

// Closed is a closed-loop class: users that send a request, wait for the
// answer, think, and send again.
type Closed struct {
	// Users is the number of active users over time (rounded to the
	// nearest integer). Users added start with a request at once; users
	// removed stop after their current request. Peak ≤ MaxInFlight.
	Users Schedule `yaml:"users"`
	// Think is the mean of the exponential think time between a response
	// and the user's next request. Zero means none (back to back).
	Think time.Duration `yaml:"think,omitempty"`
}

// ParseConfig decodes YAML strictly (unknown keys are errors, with line
// numbers), then fills defaults and validates. Targets may be empty.
func ParseConfig(b []byte) (Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("load config: %w", err)
	}
	return c.Normalize()
}

// Normalize returns c with defaults filled in, validated. Targets may be
// empty here (Run requires them). It does not modify c.
func (c Config) Normalize() (Config, error) {
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	if c.MaxRequests == 0 {
		c.MaxRequests = 1000000
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 10000
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = 5 * time.Second
	}
	if c.Timeout < 0 || c.MaxRequests < 0 || c.MaxInFlight < 0 || c.RetryAfter < 0 || c.MaxDuration < 0 {
		return c, fmt.Errorf("load: timeout, max_requests, max_in_flight, retry_after and max_duration must be ≥ 0")
	}
	for i, t := range c.Targets {
		u, err := url.Parse(t)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c, fmt.Errorf("load: target %d %q: want http://host:port", i, t)
		}
	}
	if len(c.Classes) == 0 {
		return c, fmt.Errorf("load: no classes")
	}
	c.Classes = append([]Class(nil), c.Classes...)
	names := map[string]bool{}
	var longest time.Duration
	for i := range c.Classes {
		k := &c.Classes[i]
		where := fmt.Sprintf("load: class %d (%q)", i, k.Name)
		if k.Name == "" || k.Name == TotalClass || strings.ContainsAny(k.Name, ",\"\n") {
			return c, fmt.Errorf("%s: name required, not %q, no commas or quotes", where, TotalClass)
		}
		if names[k.Name] {
			return c, fmt.Errorf("%s: duplicate name", where)
		}
		names[k.Name] = true
		if k.Source != "" {
			if _, err := netip.ParseAddr(k.Source); err != nil {
				return c, fmt.Errorf("%s: source %q is not an IP address", where, k.Source)
			}
		}
		if k.SLA == 0 {
			k.SLA = time.Second
		}
		if k.SLA < 0 {
			return c, fmt.Errorf("%s: sla must be > 0", where)
		}
		r := &k.Request
		if r.Method == "" {
			r.Method = http.MethodGet
		}
		if len(r.Paths) == 0 {
			r.Paths = []Path{{Path: "/"}}
		} else {
			r.Paths = append([]Path(nil), r.Paths...)
		}
		for j := range r.Paths {
			p := &r.Paths[j]
			if !strings.HasPrefix(p.Path, "/") {
				return c, fmt.Errorf("%s: path %q must start with /", where, p.Path)
			}
			if p.Weight == 0 {
				p.Weight = 1
			}
			if !(p.Weight > 0) || math.IsInf(p.Weight, 0) {
				return c, fmt.Errorf("%s: path %q: weight must be > 0", where, p.Path)
			}
		}
		switch {
		case (k.Open == nil) == (k.Closed == nil):
			return c, fmt.Errorf("%s: exactly one of open and closed", where)
		case k.Open != nil:
			o := *k.Open
			if o.Arrivals == "" {
				o.Arrivals = Poisson
			}
			if o.Arrivals != Poisson && o.Arrivals != Uniform {
				return c, fmt.Errorf("%s: arrivals %q: want poisson or uniform", where, o.Arrivals)
			}
			if err := o.Rate.Validate(); err != nil {
				return c, fmt.Errorf("%s: rate: %w", where, err)
			}
			k.Open = &o
			longest = max(longest, o.Rate.Duration())
		default:
			cl := *k.Closed
			if err := cl.Users.Validate(); err != nil {
				return c, fmt.Errorf("%s: users: %w", where, err)
			}
			if cl.Users.Peak() > float64(c.MaxInFlight) {
				return c, fmt.Errorf("%s: peak users %v > max_in_flight %d", where, cl.Users.Peak(), c.MaxInFlight)
			}
			if cl.Think < 0 {
				return c, fmt.Errorf("%s: think must be ≥ 0", where)
			}
			k.Closed = &cl
			longest = max(longest, cl.Users.Duration())
		}
	}
	if c.MaxDuration == 0 {
		c.MaxDuration = longest + c.Timeout + time.Second
	}
	return c, nil
}

// duration is the length of the class's schedule.
func (k *Class) duration() time.Duration {
	if k.Open != nil {
		return k.Open.Rate.Duration()
	}
	return k.Closed.Users.Duration()
}
