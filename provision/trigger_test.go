package provision

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// feed advances a manual clock in 1 s ticks for d, offering rate requests per
// second of which the share drop are dropped, and returns the new clock and
// counters.
type feeder struct {
	tr               *Trigger
	now              time.Time
	offered, dropped uint64
}

func (f *feeder) run(d time.Duration, rate uint64, drop float64) {
	for end := f.now.Add(d); f.now.Before(end); {
		f.now = f.now.Add(time.Second)
		f.offered += rate
		f.dropped += uint64(math.Round(float64(rate) * drop))
		f.tr.Observe(f.now, f.offered, f.dropped)
	}
}

func TestTriggerWindow(t *testing.T) {
	f := &feeder{tr: NewTrigger(TriggerConfig{}), now: t0}
	f.tr.Observe(f.now, 0, 0)
	f.run(4*time.Minute, 100, 0.8)
	if frac, full := f.tr.DropFraction(); full || math.Abs(frac-0.8) > 1e-9 {
		t.Fatalf("after 4m: fraction %v full %v, want 0.8 and not full", frac, full)
	}
	if n := f.tr.Ask(f.now, 3, 10, 0); n != 0 {
		t.Fatalf("asked %d before the window was covered", n)
	}
	f.run(time.Minute, 100, 0.8)
	if frac, full := f.tr.DropFraction(); !full || math.Abs(frac-0.8) > 1e-9 {
		t.Fatalf("after 5m: fraction %v full %v", frac, full)
	}
	if n := f.tr.Ask(f.now, 3, 10, 0); n != 1 {
		t.Fatalf("ask = %d, want 1 (default max_step)", n)
	}
	// The window slides: 5 minutes without drops bring the fraction to 0.
	f.run(5*time.Minute, 100, 0)
	if frac, _ := f.tr.DropFraction(); frac != 0 {
		t.Fatalf("fraction after a clean window = %v", frac)
	}
	// Half the window at 100% drops: 0.5, not above f_drop.
	f.run(150*time.Second, 100, 1)
	if frac, _ := f.tr.DropFraction(); math.Abs(frac-0.5) > 1e-9 {
		t.Fatalf("fraction = %v, want 0.5", frac)
	}
	if n := f.tr.Ask(f.now, 3, 10, 0); n != 0 {
		t.Fatalf("asked %d at exactly f_drop", n)
	}
}

func TestTriggerSpacingAndStep(t *testing.T) {
	f := &feeder{tr: NewTrigger(TriggerConfig{Window: time.Minute, FDrop: 0.3, Spacing: 2 * time.Minute, MaxStep: 3}), now: t0}
	f.tr.Observe(f.now, 0, 0)
	f.run(time.Minute, 50, 0.9)
	if n := f.tr.Ask(f.now, 2, 10, 0); n != 3 {
		t.Fatalf("ask = %d, want max_step 3", n)
	}
	var asks []time.Duration
	for i := 0; i < 600; i++ {
		f.run(time.Second, 50, 0.9)
		if n := f.tr.Ask(f.now, 2, 3, 0); n > 0 {
			if n != 1 {
				t.Fatalf("ask = %d, want needed − current = 1", n)
			}
			asks = append(asks, f.now.Sub(t0))
		}
	}
	want := []time.Duration{3 * time.Minute, 5 * time.Minute, 7 * time.Minute, 9 * time.Minute, 11 * time.Minute}
	if len(asks) != len(want) {
		t.Fatalf("asks at %v, want %v", asks, want)
	}
	for i := range want {
		if asks[i] != want[i] {
			t.Fatalf("asks at %v, want %v", asks, want)
		}
	}
	// The ceiling caps the ask; at the ceiling nothing is asked.
	f.run(3*time.Minute, 50, 0.9)
	if n := f.tr.Ask(f.now, 8, 20, 9); n != 1 {
		t.Fatalf("ask under a ceiling of 9 from 8 = %d, want 1", n)
	}
	f.run(3*time.Minute, 50, 0.9)
	if n := f.tr.Ask(f.now, 9, 20, 9); n != 0 {
		t.Fatalf("ask at the ceiling = %d", n)
	}
	// The model saying enough does not silence the drops: at least 1.
	if n := f.tr.Ask(f.now, 4, 2, 0); n != 1 {
		t.Fatalf("ask with needed < current = %d, want 1", n)
	}
}

func TestTriggerCounterReset(t *testing.T) {
	f := &feeder{tr: NewTrigger(TriggerConfig{Window: time.Minute}), now: t0}
	f.tr.Observe(f.now, 0, 0)
	f.run(2*time.Minute, 10, 1)
	f.offered, f.dropped = 0, 0 // the app was rebuilt
	f.run(30*time.Second, 10, 0)
	if frac, full := f.tr.DropFraction(); full || frac != 0 {
		t.Fatalf("after a reset: fraction %v full %v", frac, full)
	}
}

func TestTriggerBounded(t *testing.T) {
	f := &feeder{tr: NewTrigger(TriggerConfig{Window: time.Hour}), now: t0}
	for i := 0; i < 3*maxSamples; i++ {
		f.now = f.now.Add(100 * time.Millisecond)
		f.offered++
		f.tr.Observe(f.now, f.offered, 0)
	}
	if len(f.tr.hist) > maxSamples {
		t.Fatalf("history holds %d samples, cap %d", len(f.tr.hist), maxSamples)
	}
}

func TestPredictor(t *testing.T) {
	var p Predictor
	now := t0
	for i := 0; i < 600; i++ {
		now = now.Add(time.Second)
		p.Observe(now, 200)
	}
	if math.Abs(p.Predict()-200) > 1e-6 || math.Abs(p.Slope()) > 1e-6 {
		t.Fatalf("steady 200/s: predict %v slope %v", p.Predict(), p.Slope())
	}
	// A ramp of +2/s per second: the slope converges to 2, and λ_pred
	// leads the current rate by about Horizon·2 = 60/s.
	rate := 200.0
	for i := 0; i < 900; i++ {
		now = now.Add(time.Second)
		rate += 2
		p.Observe(now, rate)
	}
	if math.Abs(p.Slope()-2) > 0.05 {
		t.Fatalf("slope %v, want 2", p.Slope())
	}
	if got := p.Predict(); got < rate || got > rate+70 {
		t.Fatalf("predict %v with the rate at %v", got, rate)
	}
	// A fall to 0 never predicts a negative rate.
	for i := 0; i < 60; i++ {
		now = now.Add(time.Second)
		p.Observe(now, 0)
	}
	if p.Predict() < 0 {
		t.Fatalf("negative prediction %v", p.Predict())
	}
}

func TestAllocate(t *testing.T) {
	apps := []AppUtility{
		{Name: "a", Current: 2, LambdaIn: 100, LambdaPred: 450, Revenue: 1, TProv: 60},        // gains 6000 ×2, then 3000
		{Name: "b", Current: 1, LambdaIn: 50, LambdaPred: 400, Revenue: 3, TProv: 60, Max: 3}, // 9000 ×2, then ceiling
		{Name: "c", Current: 5, LambdaIn: 80, LambdaPred: 100, Revenue: 10, TProv: 60},        // has enough: 0
	}
	if g := apps[0].Gain(4); g != 3000 {
		t.Fatalf("gain of a's 5th server = %v, want 3000 (only 50/s left)", g)
	}
	got := Allocate(apps, 10)
	want := []int{3, 2, 0}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Allocate = %v, want %v", got, want)
		}
	}
	got = Allocate(apps, 3)
	if got[0] != 1 || got[1] != 2 || got[2] != 0 {
		t.Fatalf("Allocate(3) = %v, want [1 2 0]", got)
	}
}
