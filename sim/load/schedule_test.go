package load

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestScheduleShapes(t *testing.T) {
	s := append(Steps(time.Second, 10, 20), Ramp(20, 0, 2*time.Second)...)
	if s.Duration() != 4*time.Second || s.Peak() != 20 {
		t.Fatalf("duration %v peak %v", s.Duration(), s.Peak())
	}
	for _, tc := range []struct {
		at   time.Duration
		want float64
	}{{0, 10}, {1500 * time.Millisecond, 20}, {3 * time.Second, 10}, {5 * time.Second, 0}, {-1, 0}} {
		if got := s.At(tc.at); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("At(%v) = %v, want %v", tc.at, got, tc.want)
		}
	}
	if got := s.Integral(4 * time.Second); math.Abs(got-50) > 1e-9 { // 10 + 20 + 20
		t.Errorf("Integral = %v, want 50", got)
	}
	sp := Spike(5, 50, time.Second, 500*time.Millisecond, time.Second)
	if sp.Duration() != 2500*time.Millisecond || sp.At(1200*time.Millisecond) != 50 || sp.Scale(2).At(0) != 10 {
		t.Errorf("spike: %+v", sp)
	}
	if err := (Schedule{{Duration: time.Second, From: -1}}).Validate(); err == nil {
		t.Error("negative level accepted")
	}
	if err := (Schedule{}).Validate(); err == nil {
		t.Error("empty schedule accepted")
	}
}

// Uniform arrivals (e = 1) land where the integral crosses each integer:
// their count per interval follows the rate exactly, ramps included.
func TestNextUniform(t *testing.T) {
	s := append(Constant(100, time.Second), append(Ramp(100, 300, time.Second), Ramp(300, 0, time.Second)...)...)
	var ts []time.Duration
	for n := 1; n < 10000; n++ {
		next, ok := s.Inverse(float64(n))
		if !ok {
			break
		}
		ts = append(ts, next)
	}
	if want := s.Integral(s.Duration()); math.Abs(float64(len(ts))-want) > 1 {
		t.Fatalf("%d arrivals, want %v", len(ts), want)
	}
	for i, next := range ts {
		if got := s.Integral(next); math.Abs(got-float64(i+1)) > 1e-6 {
			t.Fatalf("arrival %d at %v: integral %v", i, next, got)
		}
	}
}

// Exp(1) steps give a Poisson process: counts per second have mean and
// variance equal to the rate. Pure: seeded RNG, no clock.
func TestNextPoisson(t *testing.T) {
	const secs, rate = 2000, 50.0
	s := Constant(rate, secs*time.Second)
	r := rand.New(rand.NewPCG(1, 1))
	counts := make([]float64, secs)
	x := 0.0
	for n := 0; n < 2*secs*rate; n++ {
		x += r.ExpFloat64()
		next, ok := s.Inverse(x)
		if !ok {
			break
		}
		counts[int(next/time.Second)]++
	}
	var mean, sq float64
	for _, c := range counts {
		mean += c
	}
	mean /= secs
	for _, c := range counts {
		sq += (c - mean) * (c - mean)
	}
	variance := sq / (secs - 1)
	if math.Abs(mean-rate) > 0.01*rate || math.Abs(variance-rate) > 0.1*rate {
		t.Fatalf("mean %v variance %v, want both ≈ %v", mean, variance, rate)
	}
}

// Zero-rate gaps are skipped, not waited in.
func TestNextGap(t *testing.T) {
	s := Schedule{{Duration: time.Second, From: 1}, {Duration: time.Hour, From: 0}, {Duration: time.Second, From: 2}}
	a, ok := s.Next(0, 1)
	if !ok || a != time.Second {
		t.Fatalf("first = %v %v", a, ok)
	}
	b, ok := s.Next(a, 1)
	if !ok || b <= time.Hour+time.Second || b > time.Hour+2*time.Second {
		t.Fatalf("second = %v %v", b, ok)
	}
	if _, ok := s.Next(s.Duration()-time.Millisecond, 5); ok {
		t.Fatal("arrival past the end")
	}
}
