package estimator

import (
	"fmt"
	"math"
	"math/rand"
	"sort"
	"testing"
	"time"
)

// TestPoisoning replays issue 18's attack on a manual clock: 20 normal
// requests of 10 ms to a path, then n uploads that a client trickled for
// 12 s each, then nothing. The path's estimate and the class's prior (what
// a path never seen gets) must stay at most 2× the true 10 ms while the
// outliers arrive and in the 5 s after they stop, whether the outliers come
// back as reported service time (the worst case: all 12 s count as S) or
// as proxy-measured time, and whether they finish at once or spread over
// the 12 s of the attack. The outliers hit the attacked path itself, or
// each a fresh path of the class (URL explosion).
func TestPoisoning(t *testing.T) {
	const (
		trueS = 10 * time.Millisecond
		bound = 2 * trueS
		slow  = 12 * time.Second
	)
	for _, n := range []int{3, 30, 300} {
		for _, measured := range []bool{false, true} {
			for _, spread := range []time.Duration{time.Second, slow} {
				for _, fresh := range []bool{false, true} {
					name := fmt.Sprintf("n=%d/measured=%v/over=%v/fresh=%v", n, measured, spread, fresh)
					t.Run(name, func(t *testing.T) {
						c := newClock()
						e := mustNew(t, Config{})
						key, unseen := []byte("/upload"), []byte("/never/seen")
						observe := func(k []byte, d time.Duration) {
							if measured {
								e.ObserveMeasured(0, k, d, c.now())
							} else {
								e.Observe(0, k, d, -1, c.now())
							}
						}
						check := func(when string) {
							t.Helper()
							e.Refresh(c.now())
							if s, _ := e.Estimate(0, key); s > bound {
								t.Fatalf("%s: estimate of the path %v > %v", when, s, bound)
							}
							if s, _ := e.Estimate(0, unseen); s > bound {
								t.Fatalf("%s: estimate of an unseen path %v > %v", when, s, bound)
							}
						}
						for range 20 {
							observe(key, trueS)
							c.advance(100 * time.Millisecond)
						}
						for i := range n {
							k := key
							if fresh {
								k = fmt.Appendf(nil, "/upload/%d", i)
							}
							observe(k, slow)
							c.advance(spread / time.Duration(n))
							check(fmt.Sprintf("outlier %d", i+1))
						}
						for range 5 {
							c.advance(time.Second)
							check("after the attack")
						}
						// Measured outliers also feed the fallback Q; clamped
						// against Q + Ŝ they leave it well under a second
						// (11.6 s without the clamp, for n = 300).
						if q := e.Q(); q > time.Second {
							t.Errorf("Q %v after the attack", q)
						}
						st, _ := e.Stats(0, key)
						m, _, _ := e.ClassStats(0)
						t.Logf("5s after: path estimate %v, class prior %v, Q %v", st.Mean, m, e.Q())
					})
				}
			}
		}
	}
}

// TestStepChangeLearned: a lasting change of service time is learned
// within the bound doc.go gives, H·log2(2.5·r) for a rise by r ≥ 2 under
// steady traffic (10 ms → 50 ms: r = 5, H = 30 s: about 109 s), by the
// path and by the class prior; and a fall is learned as fast as before
// (an ordinary decayed mean: 90% of the way in log2(10)·H ≈ 100 s).
func TestStepChangeLearned(t *testing.T) {
	c := newClock()
	e := mustNew(t, Config{})
	key, unseen := []byte("/report"), []byte("/never/seen")
	run := func(s time.Duration, d time.Duration, each func(elapsed time.Duration)) {
		for el := time.Duration(0); el < d; el += 100 * time.Millisecond { // 10 requests/s
			e.Observe(0, key, s, -1, c.now())
			c.advance(100 * time.Millisecond)
			if each != nil {
				each(el)
			}
		}
	}
	run(ms(10), 2*time.Minute, nil) // steady weight: 10/s × H/ln 2 ≈ 433
	var learned, priorLearned time.Duration = -1, -1
	run(ms(50), 3*time.Minute, func(el time.Duration) {
		s, _ := e.Estimate(0, key)
		if s > ms(50) {
			t.Fatalf("overshoot at %v: %v", el, s)
		}
		if learned < 0 && s >= ms(45) {
			learned = el
		}
		if p, _ := e.Estimate(0, unseen); priorLearned < 0 && p >= ms(45) {
			priorLearned = el
		}
	})
	t.Logf("10ms → 50ms: path within 10%% after %v, class prior after %v", learned, priorLearned)
	if learned < 0 || learned > 110*time.Second {
		t.Errorf("path learned the step after %v, bound 110s", learned)
	}
	if priorLearned < 0 || priorLearned > 110*time.Second {
		t.Errorf("class prior learned the step after %v, bound 110s", priorLearned)
	}
	learned = -1
	run(ms(10), 3*time.Minute, func(el time.Duration) {
		if s, _ := e.Estimate(0, key); learned < 0 && s <= ms(14) {
			learned = el
		}
	})
	t.Logf("50ms → 10ms: within 10%% of the way after %v", learned)
	if learned < 0 || learned > 100*time.Second {
		t.Errorf("fall learned after %v, bound 100s", learned)
	}
}

// TestWinsorise: once a key has a mean m, a sample counts as at most
// m + max(m, 3σ) + Floor (2m + Floor while young); once it is no longer
// young (YoungSamples samples and YoungTime), the mean rises no higher
// than its ceiling (Z standard errors above it, rising no faster than
// riseLimit); falls count in full; a key's first sample counts
// in full for the key, clamped for the class.
func TestWinsorise(t *testing.T) {
	c := newClock()
	e := mustNew(t, Config{HalfLife: 100 * time.Second})
	k := []byte("/k")
	e.Observe(0, k, ms(10), -1, c.now())
	e.Observe(0, k, ms(1000), -1, c.now()) // σ = 0: counts as 2·10 + 1 = 21ms
	st, _ := e.Stats(0, k)
	if !near(float64(st.Mean), float64(ms(15.5)), 1e-9) || st.Weight != 2 {
		t.Fatalf("young key: %+v, want mean 15.5ms", st)
	}
	for range YoungSamples {
		e.Observe(0, k, ms(15.5), -1, c.now())
	}
	// Young for YoungTime after its first sample, whatever the count.
	e.Observe(0, k, ms(1000), -1, c.now())
	if st, _ := e.Stats(0, k); st.Mean <= ms(15.5) {
		t.Fatalf("young key (%d samples, no time passed) held: %v", YoungSamples+3, st.Mean)
	}
	c.advance(YoungTime)
	for range 100 { // back down, then grown up
		e.Observe(0, k, ms(15.5), -1, c.now())
	}
	// Grown up: without time passing, however many outliers come, no rise
	// past the ceiling, Z standard errors (σ/√w) above the mean before them.
	before, _ := e.Stats(0, k)
	ceil := float64(before.Mean) + Z*float64(before.StdDev)/math.Sqrt(before.Weight)
	for range 100 {
		e.Observe(0, k, ms(1000), -1, c.now())
	}
	if st, _ := e.Stats(0, k); st.Mean < before.Mean || float64(st.Mean) > ceil*(1+1e-6) {
		t.Fatalf("same instant: %v → %v, want at most the ceiling %v", before.Mean, st.Mean, time.Duration(ceil))
	}
	// One second later, from the ceiling, at most (m + 1ms)·4^(1s/H) − 1ms.
	before, _ = e.Stats(0, k)
	c.advance(time.Second)
	e.Observe(0, k, ms(1000), -1, c.now())
	st, _ = e.Stats(0, k)
	if want := (float64(before.Mean)/1e6+1)*math.Pow(4, 1.0/100) - 1; st.Mean <= before.Mean || float64(st.Mean) > float64(ms(want))*(1+1e-6) {
		t.Fatalf("rise limit: %v → %v, want above it and at most %vms", before.Mean, st.Mean, want)
	}
	// Falls count in full.
	before = st
	e.Observe(0, k, 0, -1, c.now())
	st, _ = e.Stats(0, k)
	if want := float64(before.Mean) * before.Weight / (before.Weight + 1); !near(float64(st.Mean), want, 1e-6) {
		t.Fatalf("after a fall: mean %v, want %v", st.Mean, time.Duration(want))
	}
	// A new key of a class with a prior: its own first sample in full, the
	// class's sample clamped at Rho·prior + Floor.
	e.Refresh(c.now())
	prior := e.ClassMean(0)
	e.Observe(0, []byte("/new"), 10*time.Second, -1, c.now())
	if st, _ := e.Stats(0, []byte("/new")); st.Mean != 10*time.Second {
		t.Fatalf("new key's estimate %v, want its sample", st.Mean)
	}
	c.advance(time.Millisecond)
	e.Refresh(c.now())
	if m := e.ClassMean(0); m > prior+prior/100 {
		t.Fatalf("class prior %v rose from %v within 1ms", m, prior)
	}
}

func TestRiseLimit(t *testing.T) {
	const H = 30 * time.Second
	inv := 1 / float64(H)
	for _, tc := range []struct {
		level float64
		dt    time.Duration
		want  float64
	}{
		{float64(ms(10)), 0, float64(ms(10))},
		{float64(ms(10)), -time.Second, float64(ms(10))},
		{float64(ms(10)), H / 2, float64(ms(21))},
		{float64(ms(10)), H / 4, float64(ms(11*1.4142135623730951 - 1))},
		{0, H / 2, float64(ms(1))},
	} {
		if got := riseLimit(tc.level, int64(tc.dt), inv); !near(got, tc.want, 1e-6) {
			t.Errorf("riseLimit(%v, %v) = %v, want %v", time.Duration(tc.level), tc.dt, time.Duration(got), time.Duration(tc.want))
		}
	}
	// Idle time beyond half a half-life accrues nothing more.
	if got := riseLimit(float64(ms(10)), int64(1000*H), inv); !near(got, float64(ms(21)), 1e-6) {
		t.Errorf("after 1000 half-lives: %v, want 21ms", time.Duration(got))
	}
}

// TestProbe: a probe is granted once per interval per class, only for a
// key (or, for an unseen key, a class) without a sample for an interval.
func TestProbe(t *testing.T) {
	c := newClock()
	e := mustNew(t, Config{ProbeInterval: time.Second})
	k := []byte("/k")
	e.Observe(0, k, ms(10), -1, c.now())
	e.Observe(0, []byte("/other"), ms(10), -1, c.now())
	if e.Probe(0, k, c.now()) || e.Probe(0, nil, c.now()) || e.Probe(0, []byte("/unseen"), c.now()) {
		t.Fatal("probe granted with a fresh sample")
	}
	c.advance(999 * time.Millisecond)
	if e.Probe(0, k, c.now()) {
		t.Fatal("probe granted before the interval")
	}
	c.advance(time.Millisecond)
	if !e.Probe(0, k, c.now()) {
		t.Fatal("no probe after an interval without samples")
	}
	if e.Probe(0, k, c.now()) || e.Probe(0, []byte("/other"), c.now()) {
		t.Fatal("second probe in the same interval")
	}
	if e.Probe(1, nil, c.now()) {
		t.Fatal("probe for a class never sampled")
	}
	e.Observe(1, k, ms(10), -1, c.now().Add(-time.Second))
	e.Refresh(c.now().Add(-time.Second))
	if !e.Probe(1, nil, c.now()) { // another class has its own budget
		t.Fatal("class 1 had no probe")
	}
	c.advance(time.Second)
	// The class has samples from another key, but this key has none.
	e.Observe(0, []byte("/other"), ms(10), -1, c.now())
	e.Refresh(c.now())
	if e.Probe(0, []byte("/unseen"), c.now()) || e.Probe(0, nil, c.now()) {
		t.Fatal("probe for an unseen key of a class with fresh samples")
	}
	if !e.Probe(0, k, c.now()) {
		t.Fatal("no probe for a stale key in a class with fresh samples")
	}
	if e.Probe(5, k, c.now()) || e.Probe(-1, k, c.now()) {
		t.Fatal("probe for an out-of-range class")
	}
	// Concurrent callers: exactly one wins.
	c.advance(2 * time.Second)
	won := make(chan bool, 8)
	for range 8 {
		go func() { won <- e.Probe(0, k, c.now()) }()
	}
	n := 0
	for range 8 {
		if <-won {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d concurrent probes granted", n)
	}
}

// TestPoisonSurvivesReload: a reload keeps the learned levels (and so
// whatever poisoning got past the bounds); it neither resets nor
// re-inflates them, and the probe budget carries over.
func TestPoisonSurvivesReload(t *testing.T) {
	c := newClock()
	reg := NewRegistry()
	e, _ := reg.Get("a", Config{}, []string{"gold", "bronze"})
	k := []byte("/k")
	for range 20 {
		e.Observe(1, k, ms(10), -1, c.now())
		c.advance(100 * time.Millisecond)
	}
	for range 300 {
		e.Observe(1, k, 12*time.Second, -1, c.now())
	}
	before, _ := e.Stats(1, k)
	if _, err := reg.Get("a", Config{HalfLife: 10 * time.Second}, []string{"bronze", "gold"}); err != nil {
		t.Fatal(err)
	}
	after, _ := e.Stats(0, k)
	if after != before || after.Mean > ms(20) {
		t.Fatalf("after reload %+v, before %+v", after, before)
	}
	c.advance(time.Second)
	if !e.Probe(0, k, c.now()) {
		t.Fatal("no probe after reload")
	}
}

// TestSkewedUnbiased: honest service times with a long upper tail (the
// exponential, σ = mean, as the scenario farm and many real backends give)
// must be learned without bias, by the key and by the class prior. The
// rise limit once held each step of the mean: every honest upward step
// that came soon after the previous sample (or with an earlier timestamp,
// as concurrent completions do) was cut, downward steps never were, and
// here a key of true mean 80 ms was still estimated at 62–65 ms after five
// minutes (41–46% low at worst from the first minute on; now at most 9%).
// The estimates admission divides by the learned parallelism then
// differed from class to class (step10x on main: gold 41 ms, bronze 12 ms,
// with TestColdStartBatch's cold start), the parallelism learned mostly
// from bronze fell to 2.2 for 8 slots, and gold was rejected at 1×
// capacity. Now the rise limit bounds a ceiling that sits Z standard
// errors above the mean (see ceiling).
func TestSkewedUnbiased(t *testing.T) {
	const mean = 80 * time.Millisecond
	for _, rate := range []float64{40, 160} {
		t.Run(fmt.Sprintf("rate=%v", rate), func(t *testing.T) {
			c := newClock()
			e := mustNew(t, Config{})
			rng := rand.New(rand.NewSource(1))
			key, unseen := []byte("/checkout/pay"), []byte("/never/seen")
			start := c.now()
			gap := time.Duration(float64(time.Second) / rate)
			var worst float64
			for next := time.Minute; c.now().Sub(start) < 5*time.Minute; {
				c.advance(time.Duration(rng.ExpFloat64() * float64(gap)))
				at := c.now()
				if rng.Intn(4) == 0 { // completions reach Observe out of order
					at = at.Add(-time.Duration(rng.Int63n(int64(gap))))
				}
				e.Observe(0, key, time.Duration(rng.ExpFloat64()*float64(mean)), -1, at)
				if c.now().Sub(start) < next {
					continue
				}
				next += 10 * time.Second
				e.Refresh(c.now())
				for _, k := range [][]byte{key, unseen} {
					s, _ := e.Estimate(0, k)
					err := float64(s-mean) / float64(mean)
					worst = max(worst, math.Abs(err))
					if math.Abs(err) > 0.12 {
						t.Errorf("after %v: %s estimated %v, true mean %v", c.now().Sub(start), k, s, mean)
					}
				}
			}
			t.Logf("worst error from 1m on: %.1f%%", 100*worst)
		})
	}
}

// TestColdStartBatch pins the cold-start half of step10x's regression. A
// batch class's first policer run dispatches dozens of requests at once to
// a farm of 16 slots; the first completions are the shortest of them
// (samples of 1–30 ms for a mean of 80 ms), and a key held to the rise
// limit from its 8th sample on stayed at a fraction of the truth for
// minutes (3.4 ms after 5 s, 9.4 ms after 30 s). A key is now young for
// YoungTime after its first sample too, and its ceiling starts at mean +
// headroom, so the honest samples that follow pull it up: 44 ms after
// 5 s, 70 ms after 30 s. Not all the way: from there on it is held like
// any key, and the rise limit cannot tell this climb from an attack.
func TestColdStartBatch(t *testing.T) {
	const mean = 80 * time.Millisecond
	c := newClock()
	e := mustNew(t, Config{})
	rng := rand.New(rand.NewSource(3))
	start := c.now()
	key := []byte("/browse/catalog")
	// Arrivals: 60 at once (the first run), then 160/s; FIFO over 16 slots.
	var arrivals []time.Duration
	for range 60 {
		arrivals = append(arrivals, 0)
	}
	for at := time.Duration(0); at < 30*time.Second; at += time.Duration(rng.ExpFloat64() * float64(time.Second/160)) {
		arrivals = append(arrivals, at)
	}
	type done struct{ at, s time.Duration }
	var slots [16]time.Duration // when each slot frees
	var completions []done
	for _, a := range arrivals {
		i := 0
		for j := range slots {
			if slots[j] < slots[i] {
				i = j
			}
		}
		s := time.Duration(rng.ExpFloat64() * float64(mean))
		begin := max(a, slots[i])
		slots[i] = begin + s
		completions = append(completions, done{begin + s, s})
	}
	sort.Slice(completions, func(i, j int) bool { return completions[i].at < completions[j].at })
	var first []time.Duration
	checks := []struct {
		at  time.Duration
		min time.Duration
	}{{5 * time.Second, mean / 2}, {30 * time.Second, mean * 8 / 10}}
	for _, d := range completions {
		for len(checks) > 0 && d.at >= checks[0].at {
			s, _ := e.Estimate(0, key)
			t.Logf("estimate %v after a cold start: %v (true mean %v)", checks[0].at, s, mean)
			if s < checks[0].min {
				t.Errorf("estimate %v after a cold start %v, want at least %v", checks[0].at, s, checks[0].min)
			}
			checks = checks[1:]
		}
		if len(first) < YoungSamples {
			first = append(first, d.s)
		}
		e.Observe(0, key, d.s, -1, start.Add(d.at))
	}
	t.Logf("first %d samples: %v", YoungSamples, first)
	if len(checks) > 0 {
		t.Fatalf("the run ended before %v", checks[0].at)
	}
}

// TestHeavyTailLearned pins issue 14's last gap: one URL whose requests
// take 5 ms, or 500 ms for 2% of them (sert-sweep.yaml), at 765/s. The
// clamp once counted a sample as at most m + max(m, 3σ) + Floor with σ
// taken from the clamped samples, so the 500 ms tail never widened σ and
// the estimate settled at 5.1 ms against a true mean of 14.9 ms: batch
// admission let in three times what the farm could serve. Now it is
// within 12% from the first minute on (8% reported, 10% measured); on the
// way, 8.4 ms after 10 s and 12.7 ms after 30 s, the ceiling's rise limit
// and then the decayed mean's half-life setting the pace.
func TestHeavyTailLearned(t *testing.T) {
	const (
		light, heavy = 5 * time.Millisecond, 500 * time.Millisecond
		share        = 0.02
		rate         = 765
	)
	mean := time.Duration((1-share)*float64(light) + share*float64(heavy))
	for _, measured := range []bool{false, true} {
		t.Run(fmt.Sprintf("measured=%v", measured), func(t *testing.T) {
			c := newClock()
			e := mustNew(t, Config{})
			rng := rand.New(rand.NewSource(14))
			key := []byte("/search")
			start := c.now()
			gap := time.Second / rate
			var worst float64
			for next := 10 * time.Second; c.now().Sub(start) < 3*time.Minute; {
				c.advance(time.Duration(rng.ExpFloat64() * float64(gap)))
				s := light
				if rng.Float64() < share {
					s = heavy
				}
				if measured { // no Server-Timing: the proxy's own time
					e.ObserveMeasured(0, key, s, c.now())
				} else {
					e.Observe(0, key, s, -1, c.now())
				}
				if c.now().Sub(start) < next {
					continue
				}
				next += 10 * time.Second
				e.Refresh(c.now())
				got, _ := e.Estimate(0, key)
				t.Logf("after %v: %v", c.now().Sub(start).Round(time.Second), got)
				if c.now().Sub(start) < time.Minute {
					continue // a cold start: learned at the rise limit
				}
				err := float64(got-mean) / float64(mean)
				worst = max(worst, math.Abs(err))
				if math.Abs(err) > 0.12 {
					t.Errorf("after %v: estimated %v, true mean %v", c.now().Sub(start), got, mean)
				}
			}
			t.Logf("worst error from 1m on: %.1f%% (true mean %v)", 100*worst, mean)
		})
	}
}

// TestSustainedOutliersBounded pins Tail, found in review of the change
// that let heavy tails in: with no per-sample bound on a grown-up key, a
// steady 1% of 12 s samples among 10 ms ones took the key to 130 ms in
// 5 min, and 1 per second of 1 h samples to 35 s; the rise limit bounds
// only the pace. A sample now counts as at most Tail·m + Floor, so a
// share s below 1/Tail moves the mean to about m/(1 − s·Tail) at most
// however long it lasts (1%: 2×), while a share of 2% and more is learned
// as the key's cost (TestHeavyTailLearned).
func TestSustainedOutliersBounded(t *testing.T) {
	for _, measured := range []bool{false, true} {
		for _, out := range []time.Duration{12 * time.Second, time.Hour} {
			t.Run(fmt.Sprintf("measured=%v/out=%v", measured, out), func(t *testing.T) {
				c := newClock()
				e := mustNew(t, Config{})
				key := []byte("/search")
				obs := func(d time.Duration) {
					if measured {
						e.ObserveMeasured(0, key, d, c.now())
					} else {
						e.Observe(0, key, d, -1, c.now())
					}
				}
				for range 20 {
					obs(10 * time.Millisecond)
					c.advance(100 * time.Millisecond)
				}
				// 5 minutes at 100 requests/s, one of every 100 an outlier.
				for i := range 30000 {
					if i%100 == 99 {
						obs(out)
					} else {
						obs(10 * time.Millisecond)
					}
					c.advance(10 * time.Millisecond)
				}
				e.Refresh(c.now())
				got, _ := e.Estimate(0, key)
				prior := e.ClassMean(0)
				t.Logf("after 5 min of a 1%% share of %v: key %v, class prior %v", out, got, prior)
				for _, s := range []time.Duration{got, prior} {
					if s > 22*time.Millisecond {
						t.Errorf("estimate %v after 5 min of a 1%% share of %v outliers, want at most 22ms (2.2×)", s, out)
					}
				}
			})
		}
	}
}
