package batchac

import (
	"math"
	"time"
)

// model is the state one test (or one policer run) works with. Times are
// float64 nanoseconds; load is the integer η·n so that η grows by exactly
// β'/n as batches are admitted.
type model struct {
	n    int     // healthy backends (> 0)
	load int64   // inflight + admitted-but-not-yet-returned + admitted this run
	q    float64 // Q
	qNow float64 // State.QNow: the queue now (quiet)
	rsla float64 // R_sla
	p    float64 // P, parallel slots per backend (≥ 1)
	// qp is the rate, in requests per S per backend, at which the queue η
	// implies drains: max(P, State.Sustained()). 0 turns the implied
	// queue off (Config.NoImpliedQueue): Q alone, the paper's test.
	qp float64
	// floor is Config.ReserveFloor: each rank of the marginal tier past
	// the first holds its share of the room the rank before it leaves
	// (model.boundTier).
	floor float64
}

// tolerance absorbs float64 rounding so that hand-computed boundary cases
// (LHS exactly equal to R_sla − d) pass; half a nanosecond is meaningless
// physically.
const tolerance = 0.5

func (m *model) eta() float64 { return float64(m.load) / float64(m.n) }

// slowdown is the factor by which a request's inherent service time S is
// stretched on a backend that will run η + ⌈k/n⌉ requests on P slots:
// max(1, (η + ⌈k/n⌉)/P). With P = 1 and k ≥ 1 it is η + ⌈k/n⌉ exactly, the
// paper's factor.
func (m *model) slowdown(k int) float64 {
	f := m.fill(k) / m.p
	if f < 1 {
		return 1
	}
	return f
}

// fill is the load per backend once k more requests are in: η + ⌈k/n⌉.
func (m *model) fill(k int) float64 {
	return m.eta() + float64((k+m.n-1)/m.n)
}

// free reports whether k more requests each find a slot of their own:
// the load after them, η + ⌈k/n⌉ per backend, is at most P, so the
// stretch max(1, (η + ⌈k/n⌉)/P) stays 1 for every request in service and
// the queue η implies stays empty. It is the farm side of the
// work-conserving rule (doc.go, Work conservation): admitted there, the k
// requests slow down nobody already admitted, whatever their own size.
func (m *model) free(k int) bool { return m.slowdown(k) <= 1 }

// quietShare is the measured queue, as a share of a class's budget, that
// still counts as none for the work-conserving rule (model.quiet).
const quietShare = 0.1

// quiet reports whether the backends are not queueing now, for a class
// whose budget is own (R_sla − d): QNow ≤ own/10. Why a queue at all:
// the slot count sees only sentry's own requests, and the measured queue
// is the one signal of a backend that queues for another reason --
// another client, another sentry, a P set too high -- where a request on
// a "free" slot would delay the ones already waiting there. Why QNow and
// not Q: Q is a decayed mean over seconds weighted by completions, so
// after a load has gone (an overload cut to a few requests a second) it
// reads the queue of the busy seconds for many seconds more, and the rule
// would refuse requests on a farm that has not queued since. Why a tenth
// rather than 0: Server-Timing's service time leaves out the network and
// the backend's own overhead, so the queue is rarely exactly 0 on an idle
// farm.
func (m *model) quiet(own float64) bool { return m.qNow <= quietShare*own }

// qAt is the queueing delay the test charges a batch of k requests of
// inherent service time s: the estimate Q, but never less than the backend
// queue the in-flight count implies once the batch is in,
// max(0, η + ⌈k/n⌉ − P')/P' · s (that many requests on P' slots wait, and
// drain at P' per s; P' is qp, P or the work a backend has been seen to
// sustain). Q is a decayed mean of the queueing that finished requests
// met, so it lags a rising load by the queueing time itself plus its
// half-life; the implied queue follows η at once. In steady state the two
// agree for a sentry that is its backends' only client, and Q alone counts
// what others queue there. Charged at the load after admission, the test is
// one increasing function of that load for every class (only the budget
// differs), so a batch that fills the farm to a less important class's
// budget leaves the more important classes their margin. See doc.go, The
// queue at a load step.
func (m *model) qAt(k int, s float64) float64 {
	if m.qp <= 0 {
		return m.q
	}
	after := m.eta() + float64((k+m.n-1)/m.n)
	if w := (after - m.qp) / m.qp * s; w > m.q {
		return w
	}
	return m.q
}

// fits is the batch test (Cataclysm eq. 5, generalised to P slots) for k ≥ 1
// requests whose inherent service times sum to sum, against the limit lim
// (R_sla − d for the class's own test; less when room is held for more
// important classes, see limits):
//
//	Q' + max(1, (η + ⌈k/n⌉)/P) · S ≤ lim,   S = sum/k,
//	Q' = max(Q, max(0, η + ⌈k/n⌉ − P')/P' · S)   (qAt)
func (m *model) fits(k int, sum, lim float64) bool {
	s := sum / float64(k)
	return m.qAt(k, s)+m.slowdown(k)*s <= lim+tolerance
}

// bound is what a test of one class is checked against (model.bound).
type bound struct {
	own   float64 // R_sla − d: the class's own budget, ns
	lim   float64 // what the more important classes' demand leaves of theirs (≤ own)
	slack float64 // how far past one service time a batch may fill the farm
	sref  float64 // the largest mean S of the more important classes, ns
}

// admits is the test with the reserve. k requests (service times summing to
// sum) must pass their class's own budget, and, when room is held for more
// important classes (lim < own), either leave the farm within lim as those
// classes see it, or only fill it for one service time plus slack:
//
//	Q + max(1, (η + ⌈k/n⌉)/P)·S  ≤ own                          and
//	Q + max(1, (η + ⌈k/n⌉)/P)·S' ≤ lim   or   max(1, (η + ⌈k/n⌉)/P)·S' ≤ S' + slack
//
// with S' = max(S, sref). The test counts requests in service (η), each at
// the size of the request being tested; a more important class sees each
// of them at its own size, so the reserve is judged at the larger of the
// two (sref), or a flood of small requests would fill the farm with a
// count the more important class's larger requests cannot pass.
//
// For a class without a period slack is 0: a free slot waits for the
// requests. For a class with period d, slack = d·min(1, 2·(1 − ρ)), where ρ
// is the more important classes' share of the farm: the time until the
// class's next run that their demand leaves idle, doubled for the
// burstiness of their arrivals, and 0 once they saturate the farm (so a
// long period never lets a less important class fill past a more important
// one). This keeps the farm work-conserving: refusing such requests would
// leave slots idle before the class could offer more, while a more
// important request that arrives after them waits at most that long. Q is
// left out of the fill test: a free slot has no queue in front of it.
func (m *model) admits(k int, sum float64, b bound) bool {
	if !m.fits(k, sum, b.own) {
		return false
	}
	if b.lim >= b.own {
		return true
	}
	r := max(sum/float64(k), b.sref)
	f := m.slowdown(k)
	return m.qAt(k, r)+f*r <= b.lim+tolerance || f*r <= r+b.slack+tolerance
}

// largestPrefix returns the largest k ≤ len(prefix) whose FIFO prefix passes
// the test (admits); prefix[i] is the sum of the first i+1 service times.
// The test is not monotone in k (the prefix mean changes), so every prefix
// is tried; the common case, the whole bucket passing, costs one test.
func (m *model) largestPrefix(prefix []float64, b bound) int {
	beta := len(prefix)
	if beta == 0 {
		return 0
	}
	if m.admits(beta, prefix[beta-1], b) {
		return beta
	}
	for k := beta - 1; k >= 1; k-- {
		if m.admits(k, prefix[k-1], b) {
			return k
		}
	}
	return 0
}

// drain predicts how long, in nanoseconds, until the farm has room for one
// request of inherent service time s under the limit lim (R_sla − d, or
// less with the reserve):
//
//   - If one request of size s would pass on an idle farm (s ≤ B, where
//     B = lim − Q), it passes once the per-backend load falls to
//     η_max = P·B/s − 1, and, with the queue η implies (qAt, draining at
//     P' = qp), once (η + 1 − P')/P'·s + (η + 1)/P·s ≤ lim as well:
//     η ≤ (lim/s + 1)/(1/P' + 1/P) − 1. The excess drains at P
//     requests of size s per s seconds per backend, so the wait is
//     max(0, η − η_max)·s/P.
//   - Otherwise shrinking η alone cannot help: the best prediction is that
//     the whole backlog drains, Q + η·s/P.
//
// η here includes the batches admitted earlier in the same run.
func (m *model) drain(s, lim float64) float64 {
	b := lim - m.q
	eta := m.eta()
	if s <= 0 || b < s {
		return m.q + eta*s/m.p
	}
	etaMax := m.p*b/s - 1
	if m.qp > 0 {
		etaMax = min(etaMax, (lim/s+1)/(1/m.qp+1/m.p)-1)
	}
	if eta <= etaMax {
		return 0
	}
	return (eta - etaMax) * s / m.p
}

// limits returns a class's two limits for its test: own = R_sla − d, the
// class's own SLA budget (its requests may wait d in a queue), and lim ≤ own,
// which also holds room for more important classes:
//
//	lim = min(own, (1 − ρ)·(R_sla − dAbove))
//
// where ρ is the reserve share (the more important classes' predicted share
// of the farm, at least the floor; 0 for the most important class) and
// dAbove the longest period among the more important classes. See doc.go,
// Priority.
func (m *model) limits(d, dAbove, rho float64) (own, lim float64) {
	own = m.rsla - d
	if rho <= 0 {
		return own, own
	}
	return own, min(own, (1-rho)*(m.rsla-dAbove))
}

// Retry-After bounds.
const (
	minRetryAfter = time.Second
	maxRetryAfter = 60 * time.Second
)

// retryAfter turns a predicted drain time in nanoseconds into a Retry-After:
// rounded up to whole seconds and clamped to [1s, 60s].
func retryAfter(ns float64) time.Duration {
	if !(ns > 0) { // also NaN
		return minRetryAfter
	}
	secs := math.Ceil((ns - tolerance) / float64(time.Second))
	if secs >= float64(maxRetryAfter/time.Second) {
		return maxRetryAfter
	}
	if secs < 1 {
		secs = 1
	}
	return time.Duration(secs) * time.Second
}
