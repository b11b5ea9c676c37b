package lb

import (
	"context"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Algorithm names a backend selection algorithm.
type Algorithm string

const (
	// LeastLoaded picks the healthy backend with the fewest in-flight
	// requests (Cataclysm §3); ties are broken by a rotating start index so
	// equal loads spread evenly. The default.
	LeastLoaded Algorithm = "least_loaded"
	// RoundRobin cycles through the healthy backends in membership order.
	RoundRobin Algorithm = "round_robin"
	// P2C draws two distinct healthy backends at random and takes the one
	// with fewer in-flight requests (power of two choices).
	P2C Algorithm = "p2c"
)

// Default values used when an Options field is zero.
const (
	DefaultActiveInterval  = 5 * time.Second
	DefaultActiveTimeout   = 1 * time.Second
	DefaultResolveInterval = 5 * time.Second
)

// The return of an ejected backend (doc.go, "Health").
const (
	// TrialWait is the trial wait after a first ejection: the backend is
	// not tried again before it (nor after a failed trial before twice
	// its last wait), whatever Reach or the active probes say.
	TrialWait = time.Second
	// ReachInterval is how often Run calls Reach for each ejected
	// backend whose trial wait is over.
	ReachInterval = time.Second
	// FastDivisor: a backend whose active checks are counting towards a
	// change (rise successes while down, fall failures while up) is
	// probed every Interval/FastDivisor until the change is made or the
	// count breaks (HAProxy's fastinter).
	FastDivisor = 10
)

// Active configures active health checks.
type Active struct {
	// Interval between two probe rounds. Zero means DefaultActiveInterval.
	Interval time.Duration
	// Timeout bounds each probe through its context. Zero means
	// DefaultActiveTimeout.
	Timeout time.Duration
	// Rise is the number of consecutive successful probes that mark a down
	// backend up. Zero or less means 1.
	Rise int
	// Fall is the number of consecutive failed probes that mark an up
	// backend down. Zero or less means 1.
	Fall int
	// Probe checks one backend; nil error means healthy. It must return
	// soon after ctx is done: Run waits for every probe it started.
	Probe func(ctx context.Context, addr string) error
}

// Partition assigns this sentry a share of the backends when several
// sentries guard one app (docs/algorithms.md §5): rendezvous hashing of
// the backend address with a quota per sentry (Filter), so the split is
// disjoint, covers every backend, is even and moves few backends on a
// change. Count 0 or 1 means this sentry owns every backend.
type Partition struct {
	Index int // 0 ≤ Index < Count
	Count int
}

// Options configures a Pool. The zero value is a usable least-loaded pool
// without health checks.
type Options struct {
	// App names the app, for logs.
	App string
	// Algorithm selects backends; "" means LeastLoaded. An unknown name is
	// logged at error level and LeastLoaded is used (policy validates it).
	Algorithm Algorithm

	// Failures is the number of consecutive failed relays (Release with
	// ok=false) that eject a backend. Zero disables passive health
	// checking.
	Failures int
	// Cooldown is the longest an ejected backend stays out (doc.go,
	// "Health"). It is tried again after its trial wait -- TrialWait
	// after a first ejection, twice its last wait after each failed
	// trial, at most Cooldown -- at the first Reach or active probe that
	// succeeds after the wait, or when the wait ends if the pool has
	// neither; at the latest when Cooldown ends. Tried, it is half-open:
	// pickable, and its next failure ejects it again while its next
	// success clears the ejection. Zero means the backend is pickable
	// again at once (but still half-open).
	Cooldown time.Duration
	// Reach, when set, tests whether an ejected backend answers again (a
	// connection to it, as relaying makes one): Run calls it every
	// ReachInterval for each ejected backend whose trial wait is over, and
	// the first success ends the ejection. It must return soon after ctx
	// is done (its deadline is ReachInterval). Optional.
	Reach func(ctx context.Context, addr string) error

	// Active, when non-nil, enables active health checks run by Run.
	Active *Active

	// Resolve, when non-nil, makes the membership follow Resolve(): Run
	// calls it at start, after every Reconfigure and every ResolveInterval.
	// An error, or an empty result, keeps the current set and is logged.
	// Each call gets a context bounded by ResolveInterval.
	Resolve func(ctx context.Context) ([]string, error)
	// ResolveInterval is the re-resolution period. Zero means
	// DefaultResolveInterval.
	ResolveInterval time.Duration

	// Partition restricts the pool to this sentry's share of the addresses
	// given to SetAddrs or returned by Resolve. The zero value owns all.
	Partition Partition

	// Attach is called once when a backend address joins the pool; its
	// result is kept in Backend.Attachment (for example the per-backend
	// HTTP client). Optional. It is called without any lock held, but must
	// not call SetAddrs, Reconfigure or Close on the same pool.
	Attach func(addr string) any
	// Detach is called when a backend leaves the pool (it may still have
	// requests in flight). Every Attach is matched by exactly one Detach.
	// Optional; same restrictions as Attach.
	Detach func(addr string, attachment any)
	// Quiesce is told when the operator takes a backend out of rotation
	// or puts it back (SetState): out is true when it is set Draining or
	// Disabled -- and again each time its last request in flight is
	// released while it is out -- and false when it is Enabled again.
	// The owner closes its idle connections to an out backend and keeps
	// none. Optional. It is called with no lock held, on the goroutine
	// that set the state or released the request (the request path), so
	// it must not block.
	Quiesce func(addr string, attachment any, out bool)

	// Now is the clock; default time.Now.
	Now func() time.Time
	// Rand returns uniformly random 64-bit values and must be safe for
	// concurrent use; default math/rand/v2.Uint64 (lock-free).
	Rand func() uint64
	// Logger receives health and membership events. The pool names it "lb"
	// and adds app=App, unless the logger already carries that name or an
	// "app" pair. Default hclog.NewNullLogger().
	Logger hclog.Logger
}

// config is the immutable, defaulted form of Options that the hot path
// reads through one atomic load.
type config struct {
	alg             Algorithm
	failures        int64
	cooldown        int64 // nanoseconds
	reach           func(ctx context.Context, addr string) error
	active          *Active
	resolve         func(ctx context.Context) ([]string, error)
	resolveInterval time.Duration
	part            Partition
	attach          func(addr string) any
	detach          func(addr string, attachment any)
	quiesce         func(addr string, attachment any, out bool)
	now             func() time.Time
	rand            func() uint64
	log             hclog.Logger
}

func newConfig(o Options) *config {
	c := &config{
		alg:             o.Algorithm,
		failures:        int64(o.Failures),
		cooldown:        int64(o.Cooldown),
		reach:           o.Reach,
		resolve:         o.Resolve,
		resolveInterval: o.ResolveInterval,
		part:            o.Partition,
		attach:          o.Attach,
		detach:          o.Detach,
		quiesce:         o.Quiesce,
		now:             o.Now,
		rand:            o.Rand,
		log:             o.Logger,
	}
	c.log = packageLogger(o.Logger, o.App)
	if c.now == nil {
		c.now = time.Now
	}
	if c.rand == nil {
		c.rand = rand.Uint64
	}
	switch c.alg {
	case "":
		c.alg = LeastLoaded
	case LeastLoaded, RoundRobin, P2C:
	default:
		c.log.Error("unknown balancing algorithm; using least_loaded", "algorithm", string(o.Algorithm))
		c.alg = LeastLoaded
	}
	if c.failures < 0 {
		c.failures = 0
	}
	if c.cooldown < 0 {
		c.cooldown = 0
	}
	if c.resolveInterval <= 0 {
		c.resolveInterval = DefaultResolveInterval
	}
	if o.Active != nil {
		if o.Active.Probe == nil {
			c.log.Error("active health checks configured without a probe; disabled")
		} else {
			a := *o.Active
			if a.Interval <= 0 {
				a.Interval = DefaultActiveInterval
			}
			if a.Timeout <= 0 {
				a.Timeout = DefaultActiveTimeout
			}
			a.Rise = max(a.Rise, 1)
			a.Fall = max(a.Fall, 1)
			c.active = &a
		}
	}
	if p := c.part; p.Count > 1 && (p.Index < 0 || p.Index >= p.Count) {
		c.log.Error("partition index out of range; owning every backend", "index", p.Index, "count", p.Count)
		c.part = Partition{}
	}
	return c
}

// packageLogger names l "lb" and adds app=app, skipping either if the
// caller already did.
func packageLogger(l hclog.Logger, app string) hclog.Logger {
	if l == nil {
		return hclog.NewNullLogger()
	}
	if n := l.Name(); n != "lb" && !strings.HasSuffix(n, ".lb") {
		l = l.Named("lb")
	}
	if app == "" {
		return l
	}
	implied := l.ImpliedArgs()
	for i := 0; i+1 < len(implied); i += 2 {
		if k, _ := implied[i].(string); k == "app" {
			return l
		}
	}
	return l.With("app", app)
}
