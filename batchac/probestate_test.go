package batchac

import (
	"testing"
	"time"
)

// TestProbeCeilingCarried: the probe's ceiling goes to another process
// with the learned P (ProbeCeiling, RestoreProbeCeiling), so the new
// process does not probe again, for the rest of the hold, a concurrency
// the old one found saturated; a ceiling that has lapsed is dropped, and
// one from a controller that does not learn P, or out of range, is not
// taken.
func TestProbeCeilingCarried(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	cfg := Config{Classes: []ClassConfig{{Name: "gold"}}, LearnParallelism: true, Now: clock}
	mk := func(cfg Config) *Controller {
		c, err := New(newFakeState(1, 0, 0, time.Second), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c1 := mk(cfg)
	s := 100 * time.Millisecond
	c1.ObserveSpare(8, s, s)    // full speed beside 8: P = 8
	c1.ObserveSpare(10, s, 2*s) // saturated beside 10: the ceiling
	m, until, ok := c1.ProbeCeiling()
	if !ok || m != 10 || until != now.Add(probeHold).UnixNano() {
		t.Fatalf("ProbeCeiling = %d, %d, %v", m, until, ok)
	}
	p := c1.Parallelism()
	want := c1.par.probeCap(p, now.UnixNano())
	if want >= probeFactor*p {
		t.Fatalf("the ceiling does not bind (cap %v, P %v)", want, p)
	}

	now = now.Add(10 * time.Second)
	c2 := mk(cfg)
	if !c2.RestoreParallelism(p) || !c2.RestoreProbeCeiling(m, until) {
		t.Fatal("not restored")
	}
	if got := c2.par.probeCap(c2.Parallelism(), now.UnixNano()); got != want {
		t.Errorf("the new controller probes up to %v, the old one up to %v", got, want)
	}
	if m2, u2, ok := c2.ProbeCeiling(); !ok || m2 != m || u2 != until {
		t.Errorf("the new controller's ceiling %d, %d, %v", m2, u2, ok)
	}

	// Lapsed by the time it is restored: dropped, as in the old process.
	now = now.Add(probeHold)
	c3 := mk(cfg)
	if !c3.RestoreProbeCeiling(m, until) {
		t.Error("a lapsed ceiling refused")
	}
	if _, _, ok := c3.ProbeCeiling(); ok {
		t.Error("a lapsed ceiling holds")
	}
	// Out of range, or P configured: not taken.
	for _, bad := range [][2]int64{{0, now.UnixNano() + 1}, {maxParallelism + 1, now.UnixNano() + 1}, {5, now.Add(2 * probeHold).UnixNano()}} {
		if c3.RestoreProbeCeiling(bad[0], bad[1]) {
			t.Errorf("took %v", bad)
		}
	}
	fixed := cfg
	fixed.LearnParallelism, fixed.Parallelism = false, 4
	if mk(fixed).RestoreProbeCeiling(m, now.UnixNano()+1) {
		t.Error("a controller with a configured P took a ceiling")
	}
}
