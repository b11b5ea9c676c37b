package load

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Segment is one piece of a Schedule: a level that moves linearly from
// From to To over Duration. For an open-loop class the level is an
// arrival rate in requests per second; for a closed-loop class it is a
// number of users.
type Segment struct {
	// Duration of the segment; must be > 0.
	Duration time.Duration `yaml:"duration"`
	// From is the level at the segment's start; ≥ 0.
	From float64 `yaml:"from"`
	// To is the level at its end. Nil (omitted) means constant at From.
	To *float64 `yaml:"to,omitempty"`
}

func (s Segment) to() float64 {
	if s.To == nil {
		return s.From
	}
	return *s.To
}

// Schedule is a piecewise-linear level over time, starting at 0. Build it
// in YAML as a list of segments or in Go with Constant, Ramp, Steps and
// Spike (append them to chain).
type Schedule []Segment

// Constant is level v for d.
func Constant(v float64, d time.Duration) Schedule {
	return Schedule{{Duration: d, From: v}}
}

// Ramp moves linearly from a to b over d.
func Ramp(a, b float64, d time.Duration) Schedule {
	return Schedule{{Duration: d, From: a, To: &b}}
}

// Steps holds each level for d in turn.
func Steps(d time.Duration, levels ...float64) Schedule {
	s := make(Schedule, len(levels))
	for i, v := range levels {
		s[i] = Segment{Duration: d, From: v}
	}
	return s
}

// Spike is base for before, peak for width, then base for after.
func Spike(base, peak float64, before, width, after time.Duration) Schedule {
	var s Schedule
	if before > 0 {
		s = append(s, Constant(base, before)...)
	}
	s = append(s, Constant(peak, width)...)
	if after > 0 {
		s = append(s, Constant(base, after)...)
	}
	return s
}

// Scale returns the schedule with every level multiplied by k (k× load).
func (s Schedule) Scale(k float64) Schedule {
	out := make(Schedule, len(s))
	for i, g := range s {
		out[i] = Segment{Duration: g.Duration, From: g.From * k}
		if g.To != nil {
			v := *g.To * k
			out[i].To = &v
		}
	}
	return out
}

// Validate checks every segment.
func (s Schedule) Validate() error {
	if len(s) == 0 {
		return fmt.Errorf("schedule is empty")
	}
	for i, g := range s {
		if g.Duration <= 0 {
			return fmt.Errorf("segment %d: duration must be > 0", i)
		}
		for _, v := range []float64{g.From, g.to()} {
			if !(v >= 0) || math.IsInf(v, 0) {
				return fmt.Errorf("segment %d: level must be finite and ≥ 0, got %v", i, v)
			}
		}
	}
	return nil
}

// Duration is the total length.
func (s Schedule) Duration() time.Duration {
	var d time.Duration
	for _, g := range s {
		d += g.Duration
	}
	return d
}

// Peak is the largest level.
func (s Schedule) Peak() float64 {
	p := 0.0
	for _, g := range s {
		p = max(p, g.From, g.to())
	}
	return p
}

// At is the level at t (0 outside the schedule).
func (s Schedule) At(t time.Duration) float64 {
	if t < 0 {
		return 0
	}
	for _, g := range s {
		if t < g.Duration {
			f := float64(t) / float64(g.Duration)
			return g.From + (g.to()-g.From)*f
		}
		t -= g.Duration
	}
	return 0
}

// Integral is ∫ level dt over [0, t], with the level per second: for a rate
// schedule, the expected number of arrivals by t.
func (s Schedule) Integral(t time.Duration) float64 {
	sum := 0.0
	for _, g := range s {
		if t <= 0 {
			break
		}
		d := min(t, g.Duration)
		end := g.From + (g.to()-g.From)*float64(d)/float64(g.Duration)
		sum += (g.From + end) / 2 * d.Seconds()
		t -= d
	}
	return sum
}

// Inverse returns the time at which Integral reaches x (x ≥ 0), or false
// when the schedule ends first. Arrivals of a non-homogeneous Poisson
// process are Inverse(E1), Inverse(E1+E2), … with Ek drawn from Exp(1)
// (time rescaling); Ek = 1 gives evenly spaced ("uniform") arrivals that
// follow the rate exactly. Accumulating x rather than stepping from the
// previous time keeps nanosecond rounding from drifting.
func (s Schedule) Inverse(x float64) (time.Duration, bool) {
	var start time.Duration // start of the current segment
	for _, g := range s {
		L := g.Duration.Seconds()
		area := (g.From + g.to()) / 2 * L
		if x > area {
			x -= area
			start += g.Duration
			continue
		}
		// Solve From·u + b·u²/2 = x for u in [0, L]; this form is stable
		// for a slope b of either sign and for b = 0.
		b := (g.to() - g.From) / L
		var u float64
		if x > 0 {
			u = 2 * x / (g.From + math.Sqrt(max(g.From*g.From+2*b*x, 0)))
		}
		d := time.Duration(u * float64(time.Second))
		return start + min(d, g.Duration), true
	}
	return 0, false
}

// Next returns the time at which the integral from t reaches e more, or
// false when the schedule ends first: Inverse(Integral(t) + e).
func (s Schedule) Next(t time.Duration, e float64) (time.Duration, bool) {
	return s.Inverse(s.Integral(t) + e)
}

// newRand returns a PCG generator for (seed, stream). Both are scrambled
// with splitmix64 first: PCG seeded with small raw values (0, 0) starts
// with outputs close to 1, which for a Pareto draw is a maximal sample.
func newRand(seed, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(splitmix64(seed), splitmix64(stream^0x6a09e667f3bcc909)))
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
