package batchac

import (
	"math"
	"sync/atomic"
	"time"
)

// maxParallelism bounds configured and learned P.
const maxParallelism = 4096

// Learning constants (see doc.go, "Parallelism").
const (
	// learnWeight is the EWMA weight of one informative sample.
	learnWeight = 1.0 / 32
	// saturatedRatio: a request whose service took at least this multiple of
	// its inherent time ran on a saturated backend (m > P), so m·S/T
	// estimates P.
	saturatedRatio = 1.25
	// fullSpeedRatio: a request that took at most this multiple of its
	// inherent time ran at full speed next to m−1 others, so P ≥ m.
	fullSpeedRatio = 1.05
)

// The probe (see doc.go, "The probe").
const (
	// probeFactor: while P is learned, the work-conserving rule fills up
	// to probeFactor·P requests per backend (TCP's slow start doubles its
	// window each round trip; here a round trip is a service time).
	probeFactor = 2
	// probeHold is how long a ceiling holds: the probe stays under the
	// concurrency that came back saturated for that long, then tries
	// again (the estimator's half-life for S: the time sentry already
	// takes a farm's properties to hold).
	probeHold = 30 * time.Second
)

// parEstimate is the learned P, a float64 in an atomic word, and the
// probe's ceiling.
type parEstimate struct {
	bits atomic.Uint64
	// ceil is the smallest per-backend concurrency at which a request the
	// work-conserving rule admitted came back saturated (0: none);
	// ceilUntil (unix ns) is when it lapses. Read as a pair without a
	// lock: a torn read costs one decision a ceiling a moment early or
	// late.
	ceil, ceilUntil atomic.Int64
}

func (e *parEstimate) load() float64   { return math.Float64frombits(e.bits.Load()) }
func (e *parEstimate) store(p float64) { e.bits.Store(math.Float64bits(p)) }

// observe folds one sample into the estimate; see ObserveService.
func (e *parEstimate) observe(m, s, t float64) {
	for {
		old := e.bits.Load()
		cur := math.Float64frombits(old)
		ratio := t / s
		var sample float64
		switch {
		case ratio >= saturatedRatio:
			sample = m / ratio
		case ratio <= fullSpeedRatio && m > cur:
			sample = m
		default:
			return // uninformative: unsaturated, or too close to the knee
		}
		sample = min(max(sample, 1), maxParallelism)
		next := cur + learnWeight*(sample-cur)
		if e.bits.CompareAndSwap(old, math.Float64bits(next)) {
			return
		}
	}
}

// raise sets the estimate to at least p.
func (e *parEstimate) raise(p float64) {
	for {
		old := e.bits.Load()
		if math.Float64frombits(old) >= p || e.bits.CompareAndSwap(old, math.Float64bits(p)) {
			return
		}
	}
}

// probeCap is the per-backend count the work-conserving rule may fill
// while P is learned (doc.go, "The probe"): probeFactor·p, under the
// ceiling while one holds at now (unix ns), never under p.
func (e *parEstimate) probeCap(p float64, now int64) float64 {
	c := probeFactor * p
	if m := e.ceil.Load(); m > 0 && now < e.ceilUntil.Load() {
		c = min(c, float64(m-1))
	}
	return max(c, p)
}

// ObserveSpare feeds the learner a finished request that the
// work-conserving rule admitted (Decision.OverTarget), with the same
// arguments as ObserveService: the probe's evidence (doc.go, "The
// probe"). Such a request was admitted while the backends were not
// queueing and nothing waited, at inService requests on its backend, so
// its time is a clean measurement of that concurrency:
//
//   - service ≤ 1.05·s (full speed) with inService above the estimate:
//     the backend ran inService requests at full speed, so P ≥ inService
//     and the estimate is raised to it at once (not by the EWMA's 1/32: a
//     bound proven, not a sample to average), and a ceiling at or under
//     inService is lifted;
//   - service ≥ 1.25·s (saturated): the EWMA takes the sample as
//     ObserveService does, and inService becomes the probe's ceiling (the
//     smallest such, for probeHold).
//
// A no-op unless Config.LearnParallelism is set. Lock-free and
// allocation-free.
func (c *Controller) ObserveSpare(inService int, s, service time.Duration) {
	if !c.snap.Load().learn || inService < 1 || s <= 0 || service <= 0 {
		return
	}
	m, ratio := float64(inService), float64(service)/float64(s)
	switch {
	case ratio <= fullSpeedRatio:
		c.par.raise(min(m, maxParallelism))
		if ce := c.par.ceil.Load(); ce > 0 && int64(inService) >= ce {
			c.par.ceil.CompareAndSwap(ce, 0)
		}
	case ratio >= saturatedRatio:
		c.par.observe(m, float64(s), float64(service))
		now := c.now().UnixNano()
		for {
			ce := c.par.ceil.Load()
			if ce > 0 && ce <= int64(inService) && now < c.par.ceilUntil.Load() {
				break // a lower ceiling holds
			}
			if c.par.ceil.CompareAndSwap(ce, int64(inService)) {
				c.par.ceilUntil.Store(now + int64(probeHold))
				break
			}
		}
	}
}

// ObserveService feeds the parallelism learner one finished request: inService
// is the number of requests the backend had in service while this one ran
// (counting itself; the proxy's per-backend in-flight count at dispatch is a
// good proxy), s its estimated inherent service time and service the measured
// time it spent in service (response time minus the backend queueing delay).
// It is a no-op unless Config.LearnParallelism is set. Safe for concurrent
// use; lock-free and allocation-free.
//
// The model is service ≈ max(1, inService/P)·s. A sample with
// service ≥ 1.25·s came from a saturated backend and estimates
// P ≈ inService·s/service; a sample with service ≤ 1.05·s and
// inService > P shows P is at least inService. Other samples carry no
// information about P and are ignored. Estimates are clamped to [1, 4096] and
// smoothed with an EWMA of weight 1/32.
func (c *Controller) ObserveService(inService int, s, service time.Duration) {
	if !c.snap.Load().learn || inService < 1 || s <= 0 || service <= 0 {
		return
	}
	c.par.observe(float64(inService), float64(s), float64(service))
}

// Parallelism returns the P the test currently uses: the configured value, or
// the learned one when Config.LearnParallelism is set.
func (c *Controller) Parallelism() float64 {
	s := c.snap.Load()
	if s.learn {
		return c.par.load()
	}
	return s.parallelism
}
