package adaptive

import (
	"slices"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/admission"
)

// farm is a deterministic FIFO farm of k workers with a fixed service
// time: capacity k/service requests per second. A request admitted at t
// starts when the earliest worker is free and completes service later;
// completions come in admission order.
type farm struct {
	free    []time.Time
	service time.Duration
	pending []done // completions not yet observed, in time order
}

type done struct {
	class       int
	arrive, end time.Time
}

func (f *farm) admit(class int, at time.Time) {
	i := 0
	for j := range f.free {
		if f.free[j].Before(f.free[i]) {
			i = j
		}
	}
	start := at
	if f.free[i].After(at) {
		start = f.free[i]
	}
	end := start.Add(f.service)
	f.free[i] = end
	f.pending = append(f.pending, done{class, at, end})
}

// simResult is what a priority simulation measured after settling.
type simResult struct {
	share      [3]float64 // admitted / offered, by class
	goldP90    time.Duration
	metSeconds float64 // share of seconds whose gold p90 met the target
	admitted   float64 // requests per second, all classes
}

// simulate drives a controller with three classes of equal target
// against the farm: gold and silver offered half the farm's capacity
// each, bronze twice it (3× capacity in all), for simLen; it measures
// after settle.
func simulate(t *testing.T, cutAll, scaled bool) simResult {
	return simulateWith(t, Config{CutAllLower: cutAll, Scaled: scaled})
}

// simulateWith is simulate with any configuration (the targets are set
// here).
func simulateWith(t *testing.T, cfg Config) simResult {
	const (
		workers = 10
		service = 100 * time.Millisecond // capacity 100/s
		target  = 500 * time.Millisecond
		simLen  = 180 * time.Second
		settle  = 60 * time.Second
	)
	cfg.Targets = []time.Duration{target, target, target}
	c, ck := newCtl(t, cfg)
	f := &farm{service: service, free: make([]time.Time, workers)}
	for i := range f.free {
		f.free[i] = ck.now()
	}
	// Gold 50/s, silver 50/s, bronze 200/s, interleaved deterministically:
	// one arrival every 1/300 s, classes in the pattern g s b b b b.
	pattern := []int{0, 1, 2, 2, 2, 2}
	step := time.Second / 300
	start := ck.now()
	var offered, admitted [3]int
	var goldLat []time.Duration
	perSec := map[int][]time.Duration{}
	lastTick := start
	for n := 0; ; n++ {
		now := start.Add(time.Duration(n) * step)
		if now.Sub(start) >= simLen {
			break
		}
		// Completions up to now, each observed at its own time.
		for len(f.pending) > 0 && !f.pending[0].end.After(now) {
			d := f.pending[0]
			f.pending = f.pending[1:]
			ck.add(d.end.Sub(ck.now()))
			rt := d.end.Sub(d.arrive)
			c.Observe(d.class, rt)
			if d.class == 0 && d.arrive.Sub(start) >= settle {
				goldLat = append(goldLat, rt)
				s := int(d.arrive.Sub(start) / time.Second)
				perSec[s] = append(perSec[s], rt)
			}
		}
		ck.add(now.Sub(ck.now()))
		if now.Sub(lastTick) >= 250*time.Millisecond {
			c.Tick(now)
			lastTick = now
		}
		cl := pattern[n%len(pattern)]
		settled := now.Sub(start) >= settle
		if settled {
			offered[cl]++
		}
		if c.Admit(&admission.Request{Class: cl}).Verdict == admission.Admit {
			f.admit(cl, now)
			if settled {
				admitted[cl]++
			}
		}
	}
	p90 := func(d []time.Duration) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[(len(s)*9+9)/10-1]
	}
	var r simResult
	for i := range r.share {
		r.share[i] = float64(admitted[i]) / float64(offered[i])
	}
	r.goldP90 = p90(goldLat)
	met := 0
	for _, lat := range perSec {
		if p90(lat) <= target {
			met++
		}
	}
	r.metSeconds = float64(met) / float64(len(perSec))
	r.admitted = float64(admitted[0]+admitted[1]+admitted[2]) / (simLen - settle).Seconds()
	t.Logf("scaled=%v cut_all_lower=%v shared=%v: admitted gold %.3f silver %.3f bronze %.3f (%.0f/s of 100/s); gold p90 %v, met in %.0f%% of seconds",
		cfg.Scaled, cfg.CutAllLower, cfg.Shared, r.share[0], r.share[1], r.share[2], r.admitted, r.goldP90, 100*r.metSeconds)
	return r
}

// TestPriorityGuarantee is the paper's comparison (§3.3, and issue 13's
// target): three classes offered together 3× the farm's capacity. With a
// controller per class and the multiclass rules, gold keeps its target
// and is admitted almost whole, and the rejections fall in priority
// order: bronze, the least important, absorbs most of them. Time is
// simulated on the controller's manual clock and the run is
// deterministic; the assertions are on behaviour, with margins.
//
// What it also shows (logged): with the paper's constants the farm is
// not kept full. A cut divides a rate by adj_lo = 10 at each over-target
// run while the smoothed percentile lags the drained queue, and a class
// at the minimum climbs back by about adj_i·0.7 per run: the rates of the
// lower classes cycle over tens of seconds. Cutting the least important
// class first (the default) leaves silver more than the paper's rule
// (CutAllLower) does.
func TestPriorityGuarantee(t *testing.T) {
	r := simulate(t, false, false)
	if r.share[0] < 0.95 {
		t.Errorf("gold admitted %.3f of its requests, want ≥ 0.95", r.share[0])
	}
	if r.goldP90 > 500*time.Millisecond {
		t.Errorf("gold p90 %v over the target 500ms", r.goldP90)
	}
	if r.metSeconds < 0.85 {
		t.Errorf("gold met its target in %.0f%% of seconds, want ≥ 85%%", 100*r.metSeconds)
	}
	if r.share[2] > 0.1 || !(r.share[2] < r.share[1] && r.share[1] < r.share[0]) {
		t.Errorf("admitted shares gold %.3f silver %.3f bronze %.3f: want priority order, bronze ≤ 0.1",
			r.share[0], r.share[1], r.share[2])
	}
	paper := simulate(t, true, false)
	if paper.share[0] < 0.95 {
		t.Errorf("paper's rule: gold admitted %.3f, want ≥ 0.95", paper.share[0])
	}
	if r.share[1] <= paper.share[1] {
		t.Errorf("silver admitted %.3f cutting the lowest class first, %.3f with the paper's rule: want more", r.share[1], paper.share[1])
	}
}

// TestPriorityGuaranteeScaled: the same comparison with the scaled rule
// (doc.go), sentry's default. Gold is admitted almost whole and the
// rejections fall in priority order, and the farm is kept fuller than
// with the paper's constants (100/s of 100/s against 70/s). This farm is
// a hard case (gold and silver alone offer exactly its capacity, so any
// bronze admitted builds a queue only a cut of silver drains); with the
// backlog drain gold's p90 is within its target in every second (before
// it, about three quarters of them, at 92/s): pinned with margins, p90
// over the run within the target, met in ≥ 90% of seconds, ≥ 95/s.
func TestPriorityGuaranteeScaled(t *testing.T) {
	r := simulate(t, false, true)
	if r.share[0] < 0.95 {
		t.Errorf("gold admitted %.3f of its requests, want ≥ 0.95", r.share[0])
	}
	if r.goldP90 > 500*time.Millisecond {
		t.Errorf("gold p90 %v over the target 500ms", r.goldP90)
	}
	if r.metSeconds < 0.9 {
		t.Errorf("gold met its target in %.0f%% of seconds, want ≥ 90%%", 100*r.metSeconds)
	}
	if r.admitted < 95 {
		t.Errorf("admitted %.0f/s of the farm's 100/s, want ≥ 95", r.admitted)
	}
	if !(r.share[2] < r.share[1] && r.share[1] <= r.share[0]) {
		t.Errorf("admitted shares gold %.3f silver %.3f bronze %.3f: want priority order", r.share[0], r.share[1], r.share[2])
	}
	paper := simulate(t, false, false)
	if r.admitted <= paper.admitted {
		t.Errorf("scaled rule admitted %.0f/s, the paper's %.0f/s: want more", r.admitted, paper.admitted)
	}
}

// TestSharedBaseline is the other side of the paper's comparison: one
// controller for the three classes (Config.Shared, the policy's
// admission.adaptive.shared) keeps the pooled p90 near the target, but
// admits from one bucket whatever the class, so gold is rejected as
// much as the others (how the rejections split between classes follows
// the simulation's fixed arrival pattern against the bucket's refills:
// gold 0.19, silver 0.63, bronze 0.30 with the scaled rule, about 0.15
// each with the paper's); with a controller per class (TestPriorityGuaranteeScaled) gold is
// admitted whole and bronze absorbs the rejections.
func TestSharedBaseline(t *testing.T) {
	for _, scaled := range []bool{true, false} {
		sh := simulateWith(t, Config{Scaled: scaled, Shared: true})
		per := simulate(t, false, scaled)
		if sh.share[0] > 0.7 {
			t.Errorf("scaled=%v shared: gold admitted %.3f: want well under whole (one bucket for all)", scaled, sh.share[0])
		}
		if per.share[0] < 0.95 || per.share[0]-sh.share[0] < 0.3 {
			t.Errorf("scaled=%v: gold admitted %.3f per class, %.3f shared: want per class ≥ 0.95 and far above shared", scaled, per.share[0], sh.share[0])
		}
	}
}

// TestPriorityGuaranteeInFlightLimit: the same comparison with the
// in-flight limit (Config.InFlightLimit; doc.go, "The in-flight limit")
// on top of the scaled rule, as sentry runs by default. The limit holds
// the queue where the percentile stays under the target, so the
// percentile alone would no longer cut bronze; the room the limit keeps
// for the more important classes, and its refusals of them, keep the
// order: gold admitted almost whole and within its target, bronze below
// silver, and the farm full.
func TestPriorityGuaranteeInFlightLimit(t *testing.T) {
	r := simulateWith(t, Config{Scaled: true, InFlightLimit: true})
	if r.share[0] < 0.95 {
		t.Errorf("gold admitted %.3f of its requests, want ≥ 0.95", r.share[0])
	}
	if r.goldP90 > 500*time.Millisecond || r.metSeconds < 0.9 {
		t.Errorf("gold p90 %v, met its 500ms target in %.0f%% of seconds; want within it, ≥ 90%%", r.goldP90, 100*r.metSeconds)
	}
	if r.admitted < 95 {
		t.Errorf("admitted %.0f/s of the farm's 100/s, want ≥ 95", r.admitted)
	}
	if !(r.share[2] < r.share[1] && r.share[1] <= r.share[0]) {
		t.Errorf("admitted shares gold %.3f silver %.3f bronze %.3f: want priority order", r.share[0], r.share[1], r.share[2])
	}
}
