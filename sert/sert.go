package sert

import (
	"fmt"
	"math"
	"time"
)

// Defaults of the app-level parameters: the paper's settings (§3.2; Table 2
// of §5 for the interval).
const (
	DefaultAlpha     = 4.0
	DefaultLowWater  = 0.05
	DefaultHighWater = 0.15
	DefaultInterval  = 10 * time.Second
	// DefaultMinArrivals is the fewest arrivals of a class in one interval
	// for its threshold to be recomputed (see the package doc, Small
	// samples).
	DefaultMinArrivals = 100
	// DefaultMaxRise is the policy's bound on how much one update may
	// raise a threshold (×2; see the package doc, Rise). DefaultParams,
	// the paper's, has none.
	DefaultMaxRise = 2.0
)

// Params are the app-level parameters of the threshold controller.
type Params struct {
	// Alpha is the scaling factor α of F; > 0. Larger cuts nearer LB
	// sooner. Zero means DefaultAlpha.
	Alpha float64
	// LowWater is LW: at or below this loss fraction F = 1 (T = UB).
	// In [0, HighWater). Zero is a valid LW (any loss lowers T).
	LowWater float64
	// HighWater is HW: at or above this loss fraction F = 0 (T = LB).
	// In (LowWater, 1].
	HighWater float64
	// Interval is how often thresholds are recomputed; > 0.
	Interval time.Duration
	// MinArrivals is the fewest arrivals of a class in an interval for
	// its threshold to be recomputed; ≥ 1.
	MinArrivals uint64
	// MaxRise bounds how much one update may raise a class's threshold:
	// the new T is at most MaxRise × the T in force (a fall is never
	// bounded). Zero means no bound: the paper's rule, T = LB + F(p)·(UB
	// − LB) at every update whatever T was. Otherwise > 1.
	MaxRise float64
}

// DefaultParams returns the paper's parameters (no bound on a rise:
// MaxRise 0; the policy's default is DefaultMaxRise).
func DefaultParams() Params {
	return Params{Alpha: DefaultAlpha, LowWater: DefaultLowWater, HighWater: DefaultHighWater,
		Interval: DefaultInterval, MinArrivals: DefaultMinArrivals}
}

// Validate reports the first parameter out of range.
func (p Params) Validate() error {
	switch {
	case !(p.Alpha > 0) || math.IsInf(p.Alpha, 0):
		return fmt.Errorf("sert: alpha is %v, want a finite value > 0", p.Alpha)
	case !(p.LowWater >= 0 && p.LowWater < 1):
		return fmt.Errorf("sert: low water is %v, want a fraction in [0, 1)", p.LowWater)
	case !(p.HighWater > p.LowWater && p.HighWater <= 1):
		return fmt.Errorf("sert: high water is %v, want a fraction above low water (%v) and at most 1", p.HighWater, p.LowWater)
	case p.Interval <= 0:
		return fmt.Errorf("sert: interval is %v, want > 0", p.Interval)
	case p.MinArrivals < 1:
		return fmt.Errorf("sert: min arrivals is %d, want ≥ 1", p.MinArrivals)
	case p.MaxRise != 0 && !(p.MaxRise > 1 && !math.IsInf(p.MaxRise, 0)):
		return fmt.Errorf("sert: max rise is %v, want 0 (no bound) or a finite factor > 1", p.MaxRise)
	}
	return nil
}

// F is the paper's load function (§3.2): 1 for p ≤ lw,
// ((hw − p)/(hw − lw))^α for lw < p < hw, 0 for p ≥ hw. A NaN p counts as
// no loss.
func F(p, alpha, lw, hw float64) float64 {
	switch {
	case !(p > lw):
		return 1
	case p >= hw:
		return 0
	}
	return math.Pow((hw-p)/(hw-lw), alpha)
}

// Threshold is T = lb + f·(ub − lb), rounded to the nanosecond; f is
// clamped to [0, 1].
func Threshold(lb, ub time.Duration, f float64) time.Duration {
	f = min(max(f, 0), 1)
	return lb + time.Duration(math.Round(f*float64(ub-lb)))
}

// Sample is the time to report to the estimator for a request that ran
// elapsed at the backend (from dispatch): a terminated request counts as
// at least the threshold it was cut at, since its true cost is unknown
// and no smaller. Use it as the request's measured time; a terminated
// request has no Server-Timing of its own.
func Sample(elapsed, threshold time.Duration, terminated bool) time.Duration {
	if terminated && elapsed < threshold {
		return threshold
	}
	return elapsed
}
