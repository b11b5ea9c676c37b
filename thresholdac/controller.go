package thresholdac

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sentry-proxy/sentry/admission"
)

// Inputs is what the controller reads once per recompute period. The
// estimator and the load balancer provide it; every method must be safe to
// call from the controller's goroutine while requests are being served.
type Inputs interface {
	// Rate is the measured arrival rate of class, in requests per second.
	Rate(class int) float64
	// MeanS is the mean inherent service time of class's requests. Zero
	// means unknown; such a class adds no work.
	MeanS(class int) time.Duration
	// Healthy is n, the number of healthy backends this sentry owns.
	Healthy() int
}

// CapacitySource gives the per-server capacity in server-seconds per second.
// ok is false while the capacity is unknown. *Learner implements it.
type CapacitySource interface {
	PerServer() (capacity float64, ok bool)
}

// DefaultPeriod is the default recompute period (docs/algorithms.md §3).
const DefaultPeriod = time.Second

// Config configures a Controller.
type Config struct {
	// Classes is L, the number of priority classes; at least 1. Requests
	// with a class outside [0, Classes) are treated as least important.
	Classes int
	// Inputs supplies λ_j, s_j and n. Required.
	Inputs Inputs
	// PerServer is the configured capacity of one backend, in
	// server-seconds per second (1 means one request-second of inherent
	// service time per second of wall time). Zero means "use Learned".
	PerServer float64
	// Learned supplies the per-server capacity when PerServer is zero,
	// usually a *Learner. Exactly one of PerServer and Learned must be set.
	Learned CapacitySource
	// Period is the recompute period. Zero means DefaultPeriod (1s).
	Period time.Duration
	// Rand returns uniformly random 64-bit values (Admit uses the high 32
	// bits); it must be safe for concurrent use when Admit is. Nil means
	// the runtime's per-thread wyrand (see fastrand.go): lock-free, no
	// shared writes, ~1 ns. math/rand/v2's Uint64 also works, at a higher
	// cost. Tests inject a seeded source such as (*CounterRand).Uint64.
	Rand func() uint64
	// Now is the clock Run stamps recomputations with. Nil means time.Now.
	Now func() time.Time
}

// Threshold is the outcome of one recomputation, for status pages and
// metrics. It is immutable once published.
type Threshold struct {
	Pair
	// At is the time passed to Recompute.
	At time.Time
	// Healthy is n at that time.
	Healthy int
	// PerServer is the per-server capacity used, in server-seconds/s.
	PerServer float64
	// K = Healthy × PerServer, in server-seconds per second.
	K float64
	// Offered is Σ_j λ_j·s_j, in server-seconds per second.
	Offered float64
	// CapacityKnown is false while a learned capacity has no data yet;
	// the controller then admits everything.
	CapacityKnown bool
}

// Controller is the threshold admission controller (Cataclysm §3.3). Admit
// is lock-free and allocation-free; Recompute and Run update the threshold.
type Controller struct {
	// state is the hot-path word: threshold class in the high 32 bits, the
	// admit threshold of that class (admit iff a uniform uint32 < it) in
	// the low 32 bits. stateAll means every class is admitted.
	state      atomic.Uint64
	rand       func() uint64
	retryAfter time.Duration

	classes   int
	period    time.Duration
	inputs    Inputs
	perServer float64
	learned   CapacitySource
	now       func() time.Time

	current atomic.Pointer[Threshold]

	// mu serialises Recompute calls; it guards work. Admit never takes it.
	mu struct {
		sync.Mutex
		work []float64
	}
}

const stateAll = math.MaxUint64

var _ admission.Admitter = (*Controller)(nil)

// New validates cfg and returns a controller that admits everything until
// the first Recompute.
func New(cfg Config) (*Controller, error) {
	if cfg.Classes < 1 {
		return nil, fmt.Errorf("thresholdac: Classes is %d, want at least 1", cfg.Classes)
	}
	if cfg.Classes >= math.MaxUint32 {
		return nil, fmt.Errorf("thresholdac: Classes is %d, too many", cfg.Classes)
	}
	if cfg.Inputs == nil {
		return nil, errors.New("thresholdac: Inputs is required")
	}
	switch {
	case math.IsNaN(cfg.PerServer) || math.IsInf(cfg.PerServer, 0) || cfg.PerServer < 0:
		return nil, fmt.Errorf("thresholdac: PerServer is %v, want a finite value ≥ 0", cfg.PerServer)
	case cfg.PerServer > 0 && cfg.Learned != nil:
		return nil, errors.New("thresholdac: set PerServer or Learned, not both")
	case cfg.PerServer == 0 && cfg.Learned == nil:
		return nil, errors.New("thresholdac: one of PerServer and Learned is required")
	}
	if cfg.Period < 0 {
		return nil, fmt.Errorf("thresholdac: Period is %v, want ≥ 0", cfg.Period)
	}
	if cfg.Period == 0 {
		cfg.Period = DefaultPeriod
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Controller{
		rand:       cfg.Rand,
		retryAfter: RetryAfter(cfg.Period),
		classes:    cfg.Classes,
		period:     cfg.Period,
		inputs:     cfg.Inputs,
		perServer:  cfg.PerServer,
		learned:    cfg.Learned,
		now:        cfg.Now,
	}
	c.mu.work = make([]float64, cfg.Classes)
	c.state.Store(stateAll)
	c.current.Store(&Threshold{Pair: Pair{Class: cfg.Classes, P: 1, All: true}})
	return c, nil
}

// RetryAfter is the Retry-After a threshold rejection carries: the
// recompute period rounded up to whole seconds, and at least one second.
// The threshold cannot change before the next recompute, so an earlier
// retry would meet the same (i, p); the header has one-second resolution.
func RetryAfter(period time.Duration) time.Duration {
	s := (period + time.Second - 1) / time.Second
	if s < 1 {
		s = 1
	}
	return s * time.Second
}

// Within tells, with one atomic load, whether class is at or above the
// threshold class i (admitted, or drawn with p): the classes the pair does
// not shed outright.
func (c *Controller) Within(class int) bool {
	w := c.state.Load()
	return w == stateAll || uint64(class) <= w>>32
}

// Admit decides r with one atomic load and at most one random draw: r is
// admitted when its class is more important than the threshold class, with
// probability p when it is the threshold class, and rejected otherwise with
// RejectThreshold and RetryAfter(period). It never blocks or allocates.
func (c *Controller) Admit(r *admission.Request) admission.Decision {
	w := c.state.Load()
	cls := uint64(r.Class) // a negative class becomes huge: least important
	cut := w >> 32
	if cls < cut || w == stateAll {
		return admission.Decision{Verdict: admission.Admit}
	}
	if t := uint32(w); cls == cut && t != 0 {
		var x uint32 // the draw, inlined to save a call
		if c.rand == nil {
			x = cheaprand()
		} else {
			x = uint32(c.rand() >> 32)
		}
		if x < t {
			return admission.Decision{Verdict: admission.Admit}
		}
	}
	return admission.Decision{Verdict: admission.RejectThreshold, RetryAfter: c.retryAfter}
}

// pack encodes a pair as the hot-path state word.
func pack(p Pair) uint64 {
	if p.All {
		return stateAll
	}
	return uint64(uint32(p.Class))<<32 | uint64(admitThreshold(p.P))
}

// admitThreshold maps an admit probability to t such that a uniform uint32
// x admits iff x < t, i.e. with probability t/2³².
func admitThreshold(p float64) uint32 {
	if !(p > 0) {
		return 0
	}
	t := p * (1 << 32)
	if t >= math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(t)
}

// Recompute reads the inputs and the capacity, computes the threshold pair
// for time now and publishes it atomically. It is deterministic given its
// inputs and safe to call concurrently with Admit and with itself.
//
// K = n × per-server capacity. With n = 0 every request is rejected (there
// is no capacity, whatever the rates). While a learned capacity is unknown
// every request is admitted: threshold mode has nothing to enforce yet.
func (c *Controller) Recompute(now time.Time) Threshold {
	c.mu.Lock()
	defer c.mu.Unlock()

	th := Threshold{At: now, Healthy: c.inputs.Healthy()}
	var offered float64
	for j := range c.mu.work {
		w := work(c.inputs.Rate(j), c.inputs.MeanS(j))
		c.mu.work[j] = w
		offered += w
	}
	th.Offered = offered

	th.PerServer, th.CapacityKnown = c.perServer, true
	if c.learned != nil {
		th.PerServer, th.CapacityKnown = c.learned.PerServer()
		if !(th.PerServer > 0) || math.IsInf(th.PerServer, 0) {
			th.PerServer, th.CapacityKnown = 0, false
		}
	}
	switch {
	case th.Healthy <= 0:
		th.Healthy = max(th.Healthy, 0)
		th.Pair = Pair{Class: 0, P: 0}
	case !th.CapacityKnown:
		th.Pair = Pair{Class: c.classes, P: 1, All: true}
	default:
		th.K = float64(th.Healthy) * th.PerServer
		th.Pair = Compute(th.K, c.mu.work)
	}
	c.state.Store(pack(th.Pair))
	c.current.Store(&th)
	return th
}

// work returns λ·s in server-seconds per second, with unusable inputs
// (negative, NaN, unknown s) counting as zero.
func work(rate float64, s time.Duration) float64 {
	if !(rate > 0) || s <= 0 {
		return 0
	}
	return rate * s.Seconds()
}

// Current returns the last published threshold. Before the first Recompute
// it is "admit all" with a zero At.
func (c *Controller) Current() Threshold { return *c.current.Load() }

// Period returns the recompute period.
func (c *Controller) Period() time.Duration { return c.period }

// Run recomputes at once and then every period until ctx is done. It is
// the controller's only goroutine; the caller owns it.
func (c *Controller) Run(ctx context.Context) {
	t := time.NewTicker(c.period)
	defer t.Stop()
	c.Recompute(c.now())
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.Recompute(c.now())
		}
	}
}
