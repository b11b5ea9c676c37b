package adaptive

import (
	"math"
	"testing"
	"time"
)

// TestLearnedRestore: a class's rate, smoothed percentile and error come
// back as they were, the rate clamped to the new controller's bounds;
// values no controller makes are refused.
func TestLearnedRestore(t *testing.T) {
	a, err := New(Config{Targets: []time.Duration{time.Second, time.Second}, RateMin: 1, RateMax: 1000})
	if err != nil {
		t.Fatal(err)
	}
	a.SetRate(1, 250)
	l := a.Learned(1)
	l.Cur, l.HasCur, l.Err = int64(700*time.Millisecond), true, -0.3
	b, _ := New(Config{Targets: []time.Duration{time.Second, time.Second}, RateMin: 1, RateMax: 200})
	if !b.Restore(0, l) {
		t.Fatal("refused")
	}
	if got := b.Learned(0); got.Rate != 200 || got.Cur != l.Cur || !got.HasCur || got.Err != -0.3 {
		t.Errorf("restored %+v from %+v", got, l)
	}
	for _, bad := range []Learned{{Rate: -1}, {Rate: math.Inf(1)}, {Rate: 1, Cur: -1}, {Rate: 1, Err: math.NaN()}} {
		if b.Restore(1, bad) {
			t.Errorf("took %+v", bad)
		}
	}
	if b.Restore(2, l) {
		t.Error("took a class out of range")
	}
}
