package provision

import (
	"math"
	"time"
)

// Dispersion estimates c_a², the squared coefficient of variation of the
// inter-arrival times, from the arrival counts of successive ticks: for a
// renewal process the index of dispersion of counts, Var(N_τ)/E[N_τ], tends
// to c_a² (it is exactly 1 for Poisson arrivals at any τ, and 0 for evenly
// spaced ones over whole spacings).
//
// Decision: the variance is taken from successive differences of the rate
// samples N/τ (half the mean square of x_t − x_{t−1}, as the Allan
// variance does), not from their spread around a running mean. For
// counts that are independent from tick to tick both give Var(N/τ), but a
// change of the rate level adds one difference to the first and, to the
// second, the whole lag of the running mean for minutes: a step from 55
// to 165 req/s read as c_a² ≈ 37 with the spread and halved λ_in for a
// minute and more (the closed-loop autoscaling run, e2e/README.md), where
// the differences read ≈ 1.6 at the step and 1 soon after
// (TestDispersionLevelShift). Both the mean and the mean square are
// averaged with an exponential decay of time constant TimeConstant
// (default 60s). Not safe for concurrent use: its owner calls it once per
// tick.
type Dispersion struct {
	TimeConstant time.Duration

	n        int
	mean, m2 float64 // decayed mean of the rate samples, and half the decayed mean square of their successive differences
	last     float64 // the last rate sample, 1/s
	tau      float64 // decayed mean tick length, s
}

// minDispersionSamples is how many ticks Dispersion needs before it
// reports anything but Poisson (c_a² = 1).
const minDispersionSamples = 10

// Observe folds in count arrivals over the last dt.
func (d *Dispersion) Observe(count float64, dt time.Duration) {
	s := dt.Seconds()
	if !(s > 0) || count < 0 || math.IsNaN(count) {
		return
	}
	x := count / s
	if d.n == 0 {
		d.n, d.mean, d.m2, d.last, d.tau = 1, x, 0, x, s
		return
	}
	d.n++
	a := 1 - math.Exp(-s/orDefault(d.TimeConstant, 60*time.Second).Seconds())
	diff := x - d.last
	d.last = x
	d.mean += a * (x - d.mean)
	d.m2 += a * (diff*diff/2 - d.m2)
	d.tau += a * (s - d.tau)
}

// CA2 returns the estimate of c_a²: 1 (Poisson) until enough ticks have
// been seen or while nothing arrives.
func (d *Dispersion) CA2() float64 {
	if d.n < minDispersionSamples || d.mean <= 0 {
		return 1
	}
	return d.m2 * d.tau / d.mean
}
