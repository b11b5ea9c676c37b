package provision

import (
	"math"
	"time"
)

// Dispersion estimates c_a², the squared coefficient of variation of the
// inter-arrival times, from the arrival counts of successive ticks: for a
// renewal process the index of dispersion of counts, Var(N_τ)/E[N_τ], tends
// to c_a² (it is exactly 1 for Poisson arrivals at any τ, and 0 for evenly
// spaced ones over whole spacings). The rate samples N/τ are averaged with
// an exponential decay of time constant TimeConstant (default 60s); changes
// of the rate itself add to the variance, which errs toward more servers.
// Not safe for concurrent use: its owner calls it once per tick.
type Dispersion struct {
	TimeConstant time.Duration

	n        int
	mean, m2 float64 // decayed mean and variance of the rate samples, 1/s
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
		d.n, d.mean, d.m2, d.tau = 1, x, 0, s
		return
	}
	d.n++
	a := 1 - math.Exp(-s/orDefault(d.TimeConstant, 60*time.Second).Seconds())
	diff := x - d.mean
	d.mean += a * diff
	d.m2 = (1 - a) * (d.m2 + a*diff*diff)
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
