package provision

import "math"

// Inputs are the measurements the model reads for one app (doc.go, "The
// model"). Times are in seconds, rates in requests per second.
type Inputs struct {
	// MeanS is E[S], the mean inherent service time, in seconds (> 0).
	MeanS float64
	// VarS is σ_b², the variance of the service times, in s².
	VarS float64
	// VarA is σ_a², the variance of the inter-arrival times seen at the
	// sentry, in s², measured while the arrival rate was Rate.
	VarA float64
	// Rate is the smoothed arrival rate at which VarA was measured, in 1/s.
	// With Rate ≤ 0 (nothing measured yet) arrivals are taken as Poisson
	// (c_a² = 1); VarA = 0 at a positive rate means evenly spaced arrivals.
	Rate float64
	// Target is E[R], the mean response time one server must keep, in
	// seconds.
	Target float64
	// Slots is P, the requests one server runs at full speed (≥ 1; less is
	// taken as 1).
	Slots float64
}

// Variability returns c_a² and c_s², the squared coefficients of variation
// of the inter-arrival and service times (doc.go: they survive the split of
// the arrivals across servers, variances do not).
func (in Inputs) Variability() (ca2, cs2 float64) {
	ca2 = 1
	if in.Rate > 0 {
		ca2 = max(in.VarA, 0) * in.Rate * in.Rate
	}
	cs2 = 0
	if in.MeanS > 0 && in.VarS > 0 {
		cs2 = in.VarS / (in.MeanS * in.MeanS)
	}
	return ca2, cs2
}

// ErlangC is the probability that an arrival waits in an M/M/c queue with c
// servers and offered load a = λ·E[S] (a < c); 1 when a ≥ c. c = 1 gives
// ρ = a.
func ErlangC(c int, a float64) float64 {
	if c < 1 {
		c = 1
	}
	if a <= 0 {
		return 0
	}
	if a >= float64(c) {
		return 1
	}
	// Erlang B by the stable recursion B(k) = a·B(k−1)/(k + a·B(k−1)).
	b := 1.0
	for k := 1; k <= c; k++ {
		b = a * b / (float64(k) + a*b)
	}
	rho := a / float64(c)
	return b / (1 - rho + rho*b)
}

// MeanResponse is the model's E[R] for one server taking rate lambda:
// E[S] plus the Allen–Cunneen G/G/P wait
//
//	W = C(P, λ·E[S]) / (P/E[S] − λ) · (c_a² + c_s²)/2
//
// which with P = 1 is Kingman's λ·(c_a²·E[S]² + σ_b²)/(2·(1 − ρ)), eq. 8
// with σ_a² read at the server's saturation rate (doc.go). It returns +Inf
// at or past saturation (λ ≥ P/E[S]).
func (in Inputs) MeanResponse(lambda float64) float64 {
	p := slotsOf(in.Slots)
	if in.MeanS <= 0 {
		return 0
	}
	cap := float64(p) / in.MeanS
	if lambda >= cap {
		return math.Inf(1)
	}
	if lambda <= 0 {
		return in.MeanS
	}
	ca2, cs2 := in.Variability()
	w := ErlangC(p, lambda*in.MeanS) / (cap - lambda) * (ca2 + cs2) / 2
	return in.MeanS + w
}

// slotsOf rounds P to whole slots (at least 1, at most maxSlots): Erlang C
// counts servers.
func slotsOf(p float64) int {
	if !(p >= 1) {
		return 1
	}
	if p > maxSlots {
		return maxSlots
	}
	return int(math.Round(p))
}

const maxSlots = 4096

// LambdaIn is λ_in (eq. 9): the largest arrival rate one server takes while
// its mean response time stays within Target. With P = 1 it is eq. 9 in
// closed form,
//
//	λ_in = [E[S] + (c_a²·E[S]² + σ_b²) / (2·(E[R] − E[S]))]⁻¹;
//
// with P > 1 it solves MeanResponse(λ) = Target by bisection (MeanResponse
// increases with λ). It is 0 when Target ≤ E[S] (no rate meets the target)
// or the inputs are unusable (E[S] ≤ 0).
func (in Inputs) LambdaIn() float64 {
	s, r := in.MeanS, in.Target
	if !(s > 0) || !(r > s) {
		return 0
	}
	p := slotsOf(in.Slots)
	if p == 1 {
		ca2, _ := in.Variability()
		return 1 / (s + (ca2*s*s+in.VarS)/(2*(r-s)))
	}
	lo, hi := 0.0, float64(p)/s
	for range 100 {
		mid := (lo + hi) / 2
		if in.MeanResponse(mid) <= r {
			lo = mid
		} else {
			hi = mid
		}
		if hi-lo <= hi*1e-12 {
			break
		}
	}
	return lo
}

// Needed returns ⌈λ_pred/λ_in⌉ bounded to [minServers, maxServers]
// (maxServers ≤ 0: no ceiling) and whether the bound decided it. With
// λ_in = 0 (the target cannot be met) it returns the ceiling, or
// minServers when there is none. A tiny relative slack (1e-9) keeps an exact
// multiple from rounding up on floating-point noise.
func Needed(lambdaPred, lambdaIn float64, minServers, maxServers int) int {
	var n int
	switch {
	case lambdaPred <= 0:
		n = 0
	case lambdaIn <= 0:
		if maxServers > 0 {
			return max(maxServers, minServers)
		}
		return minServers
	default:
		x := lambdaPred / lambdaIn
		n = int(math.Ceil(x - 1e-9*x))
	}
	n = max(n, minServers)
	if maxServers > 0 {
		n = min(n, maxServers)
	}
	return n
}
