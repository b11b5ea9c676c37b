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
	rsla float64 // R_sla
	p    float64 // P, parallel slots per backend (≥ 1)
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
	perServer := (k + m.n - 1) / m.n // ⌈k/n⌉
	f := (m.eta() + float64(perServer)) / m.p
	if f < 1 {
		return 1
	}
	return f
}

// fits is the batch test (Cataclysm eq. 5, generalised to P slots) for k ≥ 1
// requests whose inherent service times sum to sum, in a class with period d:
//
//	Q + max(1, (η + ⌈k/n⌉)/P) · S ≤ R_sla − d,   S = sum/k
func (m *model) fits(k int, sum, d float64) bool {
	s := sum / float64(k)
	return m.q+m.slowdown(k)*s <= m.rsla-d+tolerance
}

// largestPrefix returns the largest k ≤ len(prefix) whose FIFO prefix passes
// the test; prefix[i] is the sum of the first i+1 service times. The test is
// not monotone in k (the prefix mean changes), so every prefix is tried;
// the common case, the whole bucket passing, costs one test.
func (m *model) largestPrefix(prefix []float64, d float64) int {
	beta := len(prefix)
	if beta == 0 {
		return 0
	}
	if m.fits(beta, prefix[beta-1], d) {
		return beta
	}
	for k := beta - 1; k >= 1; k-- {
		if m.fits(k, prefix[k-1], d) {
			return k
		}
	}
	return 0
}

// drain predicts how long, in nanoseconds, until the farm has room for one
// request of inherent service time s in a class with period d:
//
//   - If one request of size s would pass on an idle farm (s ≤ B, where
//     B = R_sla − d − Q), it passes once the per-backend load falls to
//     η_max = P·B/s − 1. The excess η − η_max drains at P requests of size s
//     per s seconds per backend, so the wait is max(0, η − η_max)·s/P.
//   - Otherwise shrinking η alone cannot help: the best prediction is that
//     the whole backlog drains, Q + η·s/P.
//
// η here includes the batches admitted earlier in the same run.
func (m *model) drain(s, d float64) float64 {
	b := m.rsla - d - m.q
	eta := m.eta()
	if s <= 0 || b < s {
		return m.q + eta*s/m.p
	}
	etaMax := m.p*b/s - 1
	if eta <= etaMax {
		return 0
	}
	return (eta - etaMax) * s / m.p
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
