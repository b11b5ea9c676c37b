package adaptive

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/admission"
)

// expFarm is a FIFO farm of k workers with exponential service times
// drawn from a seeded source (deterministic), whose mean can change
// mid-run: a request admitted at t starts when a worker is free.
type expFarm struct {
	free    []time.Time
	mean    time.Duration
	rnd     *rand.Rand
	pending endHeap
}

type endHeap []done

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i].end.Before(h[j].end) }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(done)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (f *expFarm) admit(class int, at time.Time) {
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
	end := start.Add(time.Duration(f.rnd.ExpFloat64() * float64(f.mean)))
	f.free[i] = end
	heap.Push(&f.pending, done{class, at, end})
}

// shiftResult is what a capacity-shift simulation measured.
type shiftResult struct {
	// recovery: seconds after the shift to the first second from which
	// every second's p95 (by arrival, ≥ 20 samples) met the target; -1:
	// never.
	recovery int
	// back: seconds after the shift to the first of three judged
	// seconds in a row whose p95 met the target (as the scenario's "back within
	// SLA", but by arrival); -1: never.
	back int
	// goodput over the new capacity, from 5 s after the shift to the end:
	// responses within the target per second / the new capacity.
	goodput float64
	// before: the same over the 10× seconds before the shift, against
	// the old capacity.
	before float64
	p95    []time.Duration // per second, by arrival
}

// simulateShift is issue 13's capacity shift on the controller's manual
// clock: 16 workers, exponential service of mean 80 ms (200/s); offered
// 1× for 10 s, then 10× (2,000/s, Poisson) to 45 s; at 20 s the mean
// service becomes 240 ms (66.7/s). The percentile is the 95th. (e2e/scenarios/
// shift.yaml is the same shape against the real proxy.) seed picks the
// service times and the arrivals (1: the seeds the single-run tests use).
func simulateShift(t *testing.T, cfg Config, target time.Duration, seed uint64) shiftResult {
	const (
		workers = 16
		simLen  = 45 * time.Second
		shiftAt = 20 * time.Second
	)
	cfg.Targets = []time.Duration{target}
	cfg.Percentile = 95
	c, ck := newCtl(t, cfg)
	f := &expFarm{mean: 80 * time.Millisecond, rnd: rand.New(rand.NewPCG(13*seed, 13)), free: make([]time.Time, workers)}
	arr := rand.New(rand.NewPCG(14*seed, 14))
	for i := range f.free {
		f.free[i] = ck.now()
	}
	start := ck.now()
	lat := map[int][]time.Duration{}
	good := map[int]int{}
	lastTick := start
	observe := func(upTo time.Time) {
		for f.pending.Len() > 0 && !f.pending[0].end.After(upTo) {
			d := heap.Pop(&f.pending).(done)
			ck.add(d.end.Sub(ck.now()))
			rt := d.end.Sub(d.arrive)
			c.Observe(d.class, rt)
			s := int(d.arrive.Sub(start) / time.Second)
			lat[s] = append(lat[s], rt)
			if rt <= target {
				good[s]++
			}
			for ck.now().Sub(lastTick) >= 250*time.Millisecond {
				lastTick = lastTick.Add(250 * time.Millisecond)
				c.Tick(lastTick)
			}
		}
	}
	now := start
	lastSec := -1
	var rates, toks []int
	for {
		rate := 200.0
		if now.Sub(start) >= 10*time.Second {
			rate = 2000
		}
		now = now.Add(time.Duration(arr.ExpFloat64() / rate * 1e9))
		if now.Sub(start) >= simLen {
			break
		}
		if now.Sub(start) >= shiftAt {
			f.mean = 240 * time.Millisecond
		}
		observe(now)
		ck.add(now.Sub(ck.now()))
		for now.Sub(lastTick) >= 250*time.Millisecond {
			lastTick = lastTick.Add(250 * time.Millisecond)
			c.Tick(lastTick)
		}
		if c.Admit(&admission.Request{Class: 0}).Verdict == admission.Admit {
			f.admit(0, now)
		}
		if sec := int(now.Sub(start) / time.Second); sec != lastSec {
			lastSec = sec
			st := c.State(0)
			rates = append(rates, int(st.Rate))
			toks = append(toks, int(st.Tokens))
		}
	}
	observe(now.Add(time.Minute))
	r := shiftResult{recovery: -1, p95: make([]time.Duration, int(simLen/time.Second))}
	lastMiss := int(shiftAt/time.Second) - 1
	for s := range r.p95 {
		l := slices.Clone(lat[s])
		if len(l) < 20 {
			continue
		}
		slices.Sort(l)
		r.p95[s] = l[int(math.Ceil(0.95*float64(len(l))))-1]
		if s >= int(shiftAt/time.Second) && r.p95[s] > target {
			lastMiss = s
		}
	}
	if lastMiss < len(r.p95)-1 {
		r.recovery = lastMiss + 1 - int(shiftAt/time.Second)
	}
	r.back = -1
	for s, run := int(shiftAt/time.Second), 0; s < len(r.p95); s++ {
		switch {
		case r.p95[s] == 0: // fewer than 20 samples: not judged
			continue
		case r.p95[s] > target:
			run = 0
			continue
		}
		if run++; run == 3 {
			r.back = s - 2 - int(shiftAt/time.Second)
			break
		}
	}
	sum := func(from, to int) int {
		n := 0
		for s := from; s < to; s++ {
			n += good[s]
		}
		return n
	}
	r.goodput = float64(sum(25, 45)) / 20 / (workers / 0.240)
	r.before = float64(sum(12, 20)) / 8 / (workers / 0.080)
	ms := make([]int, len(r.p95))
	for i, d := range r.p95 {
		ms[i] = int(d / time.Millisecond)
	}
	t.Logf("rate by second %v; tokens %v", rates, toks)
	t.Logf("target %v: back within target %d s after the shift, for good %d s; goodput %.2f× the new capacity (%.2f× the old before it); p95 ms by second %v",
		target, r.back, r.recovery, r.goodput, r.before, ms)
	return r
}

// TestCapacityShift is issue 13's capacity shift for adaptive mode: at
// 10× the offered load every worker becomes 3× slower and nothing is
// re-tuned. The target is back within the target in ≤ 3 s and
// ≥ 0.9× the new capacity as goodput.
//
// Judged over shiftSeeds seeded runs, not one: a single trajectory is
// chaotic after the shift (a rule's input moved by one completion sends
// it elsewhere), and "for good" breaks on any one late second. Over the
// 20 seeds, with a target of 2 s, 15 runs are back for good within 3 s
// (median 2 s; the others miss a second or two late on, after a band
// increase; 12 before the backlog rules measured over a longer window,
// doneOver) and the mean goodput is 0.95×. With 1 s the new service
// time alone has a p95 of 720 ms, and a rate (not a concurrency limit)
// cannot fill the farm without queueing past it: about 0.86× on average,
// the p95 over the target in some seconds to the end; pinned against the
// collapse the backlog rules fixed (the rate ratcheted down to RateMin:
// 0.00×).
func TestCapacityShift(t *testing.T) {
	const shiftSeeds = 20
	var g1, g2 float64
	var rec []int
	for seed := uint64(1); seed <= shiftSeeds; seed++ {
		r1 := simulateShift(t, Config{Scaled: true}, time.Second, seed)
		r2 := simulateShift(t, Config{Scaled: true}, 2*time.Second, seed)
		if r1.goodput < 0.7 || r2.goodput < 0.8 {
			t.Errorf("seed %d: goodput %.2f× (1 s) and %.2f× (2 s) the new capacity, want ≥ 0.7 and 0.8 in every run", seed, r1.goodput, r2.goodput)
		}
		g1 += r1.goodput / shiftSeeds
		g2 += r2.goodput / shiftSeeds
		if r2.recovery < 0 {
			r2.recovery = math.MaxInt
		}
		rec = append(rec, r2.recovery)
	}
	slices.Sort(rec)
	t.Logf("over %d seeds: goodput %.3f× (1 s), %.3f× (2 s); seconds back within 2 s for good, sorted %v", shiftSeeds, g1, g2, rec)
	if g1 < 0.82 {
		t.Errorf("target 1s: mean goodput %.3f× the new capacity, want ≥ 0.82", g1)
	}
	if g2 < 0.9 {
		t.Errorf("target 2s: mean goodput %.3f× the new capacity, want ≥ 0.9", g2)
	}
	if m := rec[shiftSeeds/2]; m > 3 {
		t.Errorf("target 2s: median %d s back within the target for good, want ≤ 3", m)
	}
}

// TestCapacityShiftInFlightLimit is the same shift with the in-flight
// limit (Config.InFlightLimit; doc.go, "The in-flight limit"), target
// 1s: the limit follows the farm's completion rate within a second of
// the shift, so the queue the old capacity allowed is not refilled while
// the percentile, which sees the slowed requests only when they
// complete, lags; and it keeps the farm full after it (the limit, 22,
// is above the 16 workers).
func TestCapacityShiftInFlightLimit(t *testing.T) {
	r := simulateShift(t, Config{Scaled: true, InFlightLimit: true}, time.Second, 1)
	if r.goodput < 0.9 {
		t.Errorf("goodput %.2f× the new capacity, want ≥ 0.9", r.goodput)
	}
	if r.back < 0 || r.back > 5 {
		t.Errorf("back within the target %d s after the shift (by arrival), want ≤ 5", r.back)
	}
	if r.before < 0.95 {
		t.Errorf("goodput before the shift %.2f× the old capacity, want ≥ 0.95", r.before)
	}
}
