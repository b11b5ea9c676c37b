package batchac

import (
	"slices"
	"testing"
	"time"
)

// The admitted p95 at a load step (issue 15's closed loop): on the
// simulated farm of priority_test.go, with Q taken from the real estimator
// fed each completion's queueing delay at its backend (as sim/farm reports
// it in Server-Timing), as in production.

// p95 is the 95th percentile of ds (nearest rank), 0 for none.
func p95(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[max((len(s)*95+99)/100-1, 0)]
}

// stepCase is a farm at base× capacity for 20 s that steps to high× for
// 20 s; one class without a period (the policy's default class).
func stepCase(n, p int, s, rsla time.Duration, base, high float64, seed uint64) simCase {
	return simCase{n: n, p: p, s: s, exp: true, rsla: rsla,
		classes: []simClass{{name: "web", load: []simPhase{{20 * time.Second, base}, {20 * time.Second, high}}}},
		realQ:   true, seed: seed}
}

// stepFarms: issue 15's closed loop before any server is added (2 servers
// × 4 slots, exponential 40 ms: 200 req/s; 130 → 390 req/s; p95 target
// 500 ms), and step10x.yaml's farm (2 × 8, exponential 80 ms; 1× → 10×;
// 1 s).
var stepFarms = []struct {
	name       string
	n, p       int
	s, rsla    time.Duration
	base, high float64
}{
	{"issue15-3x", 2, 4, 40 * time.Millisecond, 500 * time.Millisecond, 0.65, 1.95},
	{"step10x", 2, 8, 80 * time.Millisecond, time.Second, 1, 10},
}

// worstAfterStep returns the worst per-second admitted p95 from the step on
// (by arrival second) and the goodput of those seconds as a share of the
// farm's capacity.
func worstAfterStep(r *simResult) (worst time.Duration, at int, goodput float64) {
	var good int
	for i := 20; i < len(r.lat); i++ {
		if q := p95(r.lat[i]); q > worst {
			worst, at = q, i-20
		}
		good += r.seconds[i].good[0]
	}
	return worst, at, float64(good) / float64(len(r.lat)-20) / r.capacity
}

// TestStepAdmittedP95 holds the admitted p95 within R_sla in every second
// of a step, the first ones included, with the farm busy at capacity. Q is
// a decayed mean of the queueing finished requests met: just after a step
// it still reads the light load before it, and the paper's test, Q + (η +
// 1)/P·S ≤ R_sla, admitted a queue whose wait alone was the budget: the p95
// of the step's first seconds was 500–640 ms for a 500 ms target (the e2e
// closed loop measured 515 and 759 ms). Charging at least the queue the
// in-flight count implies (doc.go, The queue at a load step) holds it.
func TestStepAdmittedP95(t *testing.T) {
	for _, f := range stepFarms {
		for seed := uint64(1); seed <= 3; seed++ {
			r := runSim(t, stepCase(f.n, f.p, f.s, f.rsla, f.base, f.high, seed))
			worst, at, good := worstAfterStep(r)
			t.Logf("%s seed %d: worst second p95 %v (second %d after the step), goodput %.3f× capacity; %v",
				f.name, seed, worst.Round(time.Millisecond), at, good, r)
			if worst > f.rsla {
				t.Errorf("%s seed %d: admitted p95 %v > R_sla %v in second %d after the step", f.name, seed, worst, f.rsla, at)
			}
			if good < 0.9 {
				t.Errorf("%s seed %d: goodput %.3f× capacity during the step, want ≥ 0.9", f.name, seed, good)
			}
		}
	}
}

// TestStepOvershootWithoutImpliedQueue is the reproduction: the same steps
// with the paper's test (Config.NoImpliedQueue) overshoot R_sla in the
// first seconds after the step, and only there.
func TestStepOvershootWithoutImpliedQueue(t *testing.T) {
	for _, f := range stepFarms {
		over := 0
		for seed := uint64(1); seed <= 3; seed++ {
			sc := stepCase(f.n, f.p, f.s, f.rsla, f.base, f.high, seed)
			sc.noImpliedQ = true
			r := runSim(t, sc)
			worst, at, _ := worstAfterStep(r)
			t.Logf("%s seed %d, no implied queue: worst second p95 %v (second %d after the step)", f.name, seed, worst.Round(time.Millisecond), at)
			if worst > f.rsla {
				over++
				if at > 3 {
					t.Errorf("%s seed %d: worst second %d after the step, want within the first 3", f.name, seed, at)
				}
			}
		}
		if over == 0 {
			t.Errorf("%s: no seed overshot without the implied queue; the reproduction no longer reproduces", f.name)
		}
	}
}

// TestStepKeepsGold is step10x.yaml whole: gold (no period) steady at 0.2×
// capacity beside bronze (period 250 ms) stepping from 0.8× to 9.8×. A
// batch of bronze must not leave a load that gold's own test, with its
// larger budget, then fails: the queue η implies is charged at the load
// with the batch in (model.qAt), the same function of the load after
// admission for every test.
func TestStepKeepsGold(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		sc := simCase{n: 2, p: 8, s: 80 * time.Millisecond, exp: true, rsla: time.Second, realQ: true, learnP: true, seed: seed,
			classes: twoClass(steady(0.2, 40*time.Second),
				[]simPhase{{20 * time.Second, 0.8}, {20 * time.Second, 9.8}}, 250*time.Millisecond)}
		r := runSim(t, sc)
		var worst time.Duration
		for i := 20; i < len(r.lat); i++ {
			worst = max(worst, p95(r.lat[i]))
		}
		t.Logf("seed %d: worst second p95 %v; %v", seed, worst.Round(time.Millisecond), r)
		if f := r.admittedFrac(0); f < 0.99 {
			t.Errorf("seed %d: gold admitted %.2f%%, want ≥ 99%%", seed, 100*f)
		}
		if worst > sc.rsla {
			t.Errorf("seed %d: admitted p95 %v > R_sla %v in a second of the step", seed, worst, sc.rsla)
		}
		if g := r.goodput(0, 1); g < 0.9 {
			t.Errorf("seed %d: goodput %.3f× capacity, want ≥ 0.9", seed, g)
		}
	}
}
