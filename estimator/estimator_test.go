package estimator

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"
)

// clock is a manual clock for tests.
type clock struct{ t time.Time }

func newClock() *clock                       { return &clock{time.Unix(1_700_000_000, 0)} }
func (c *clock) now() time.Time              { return c.t }
func (c *clock) advance(d time.Duration)     { c.t = c.t.Add(d) }
func ms(f float64) time.Duration             { return time.Duration(f * float64(time.Millisecond)) }
func relErr(got, want time.Duration) float64 { return math.Abs(float64(got-want)) / float64(want) }

func mustNew(t testing.TB, cfg Config, classes ...string) *Estimator {
	t.Helper()
	if len(classes) == 0 {
		classes = []string{"gold", "bronze"}
	}
	e, err := New(cfg, classes)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol*math.Max(math.Abs(a), math.Abs(b)) }

func TestDecayHalfLife(t *testing.T) {
	c := newClock()
	e := mustNew(t, Config{HalfLife: 10 * time.Second})
	k := []byte("/k")
	// A fall, which no clamp touches (rises at the same instant are held
	// back by the rise limit; see TestWinsorise).
	e.Observe(0, k, ms(16), -1, c.now())
	e.Observe(0, k, ms(10), -1, c.now()) // same instant: equal weights
	st, _ := e.Stats(0, k)
	if st.Mean != ms(13) || st.Weight != 2 {
		t.Fatalf("same instant: %+v", st)
	}
	e = mustNew(t, Config{HalfLife: 10 * time.Second})
	e.Observe(0, k, ms(10), -1, c.now())
	c.advance(10 * time.Second) // one half-life: the old sample weighs 1/2
	e.Observe(0, k, ms(20), -1, c.now())
	st, _ = e.Stats(0, k)
	if want := (0.5*10 + 20) / 1.5; !near(float64(st.Mean), float64(ms(want)), 1e-9) || !near(st.Weight, 1.5, 1e-12) {
		t.Fatalf("one half-life: mean %v weight %v, want %vms 1.5", st.Mean, st.Weight, want)
	}
	c.advance(20 * time.Second) // two more: weights 1/8, 1/4, 1
	e.Observe(0, k, ms(30), -1, c.now())
	st, _ = e.Stats(0, k)
	want := (10.0/8 + 20.0/4 + 30) / (1.0/8 + 1.0/4 + 1)
	if !near(float64(st.Mean), float64(ms(want)), 1e-9) || !near(st.Weight, 1.375, 1e-12) {
		t.Fatalf("three half-lives: mean %v weight %v, want %vms 1.375", st.Mean, st.Weight, want)
	}
	// Weighted variance with the same weights.
	w := []float64{1.0 / 8, 1.0 / 4, 1}
	x := []float64{10, 20, 30}
	var v float64
	for i := range w {
		v += w[i] * (x[i] - want) * (x[i] - want)
	}
	v /= 1.375
	if got := float64(st.StdDev) / 1e6; !near(got, math.Sqrt(v), 1e-6) {
		t.Fatalf("stddev %vms, want %vms", got, math.Sqrt(v))
	}
	// Time running backwards decays nothing.
	c.advance(-time.Minute)
	e.Observe(0, k, ms(30), -1, c.now())
	st, _ = e.Stats(0, k)
	if !near(st.Weight, 2.375, 1e-12) {
		t.Fatalf("backwards: weight %v", st.Weight)
	}
}

func TestClassDecayAndPrior(t *testing.T) {
	c := newClock()
	e := mustNew(t, Config{HalfLife: 10 * time.Second})
	if s, b := e.Estimate(0, []byte("/new")); s != 0 || b != 0 {
		t.Fatalf("empty estimator: %v %d", s, b)
	}
	e.Observe(1, []byte("/a"), ms(100), -1, c.now())
	c.advance(10 * time.Second)
	e.Observe(1, []byte("/b"), ms(10), -1, c.now())
	e.Refresh(c.now())
	// Class 1: 100ms with weight 1/2 and 10ms with weight 1.
	if m := e.ClassMean(1); !near(float64(m), float64(ms(40)), 1e-9) {
		t.Fatalf("class mean %v, want 40ms", m)
	}
	// An unseen key of class 1 gets the class mean; of class 0 (no samples
	// yet) the app's mean.
	if s, b := e.Estimate(1, []byte("/unseen")); !near(float64(s), float64(ms(40)), 1e-9) || b != 3 {
		t.Fatalf("prior %v bucket %d", s, b)
	}
	if s, _ := e.Estimate(0, []byte("/unseen")); !near(float64(s), float64(ms(40)), 1e-9) {
		t.Fatalf("app prior %v", s)
	}
	if s, b := e.Estimate(1, []byte("/a")); s != ms(100) || b != 4 {
		t.Fatalf("known key %v bucket %d", s, b)
	}
	// Out-of-range classes are harmless.
	e.Observe(7, []byte("/a"), ms(1), 0, c.now())
	e.Observe(-1, []byte("/a"), ms(1), 0, c.now())
	if s, _ := e.Estimate(9, []byte("/a")); !near(float64(s), float64(ms(40)), 1e-9) {
		t.Fatalf("out of range: %v", s)
	}
}

func TestQueueEstimate(t *testing.T) {
	c := newClock()
	e := mustNew(t, Config{QueueHalfLife: 5 * time.Second})
	k := []byte("/k")
	// Fallback only: the first sample of a key gives no queue sample.
	e.ObserveMeasured(0, k, ms(50), c.now())
	e.Refresh(c.now())
	if e.Q() != 0 {
		t.Fatalf("Q %v", e.Q())
	}
	if st, _ := e.Stats(0, k); st.Mean != ms(50) {
		t.Fatalf("S %v", st.Mean)
	}
	// A later, slower response of the same key: measured − Ŝ = 30ms of queueing.
	e.ObserveMeasured(0, k, ms(80), c.now())
	e.Refresh(c.now())
	if e.Q() != ms(30) {
		t.Fatalf("fallback Q %v, want 30ms", e.Q())
	}
	// Reported queue samples take over while they arrive.
	e.Observe(0, []byte("/r"), ms(5), ms(2), c.now())
	e.Refresh(c.now())
	if e.Q() != ms(2) {
		t.Fatalf("reported Q %v, want 2ms", e.Q())
	}
	// Fallback S = measured − Q.
	e.ObserveMeasured(1, []byte("/f"), ms(12), c.now())
	if st, _ := e.Stats(1, []byte("/f")); st.Mean != ms(10) {
		t.Fatalf("fallback S %v, want 10ms", st.Mean)
	}
	// ... clamped at 0.
	e.ObserveMeasured(1, []byte("/g"), ms(1), c.now())
	if st, _ := e.Stats(1, []byte("/g")); st.Mean != 0 {
		t.Fatalf("clamped S %v", st.Mean)
	}
	// Once reports stop for long enough (weight < 1), fallback samples rule again.
	c.advance(10 * time.Second)
	e.Refresh(c.now())
	if e.Q() != ms(30) {
		t.Fatalf("after reports stopped: Q %v, want 30ms", e.Q())
	}
}

// TestQueueNow: QNow is the queue the latest completions met. After five
// seconds of a queue of 200ms at 1,000 completions a second, the load is
// cut to 50 a second and the queue is gone (the end of an overload that
// adaptive mode had cut). Q, Config.QueueHalfLife's mean weighted by
// completions, still reads more than a tenth of a 250ms target (25ms)
// seconds later; QNow is under it within a second. QNow takes the same
// source as Q (reported queues while they arrive, else the fallback
// samples), and a queue that comes back shows in it within a few
// completions.
func TestQueueNow(t *testing.T) {
	c := newClock()
	e := mustNew(t, Config{})
	k := []byte("/k")
	for range 5000 {
		c.advance(time.Millisecond)
		e.Observe(0, k, ms(5), ms(200), c.now())
	}
	e.Refresh(c.now())
	if q, qn := e.Q(), e.QNow(); relErr(q, ms(200)) > 0.01 || relErr(qn, ms(200)) > 0.01 {
		t.Fatalf("under the queue: Q %v QNow %v, want 200ms", q, qn)
	}
	quiet := func() (sec float64) {
		for i := 1; ; i++ {
			c.advance(20 * time.Millisecond)
			e.Observe(0, k, ms(5), 0, c.now())
			if e.QNow() <= ms(25) {
				return float64(i) * 0.02
			}
			if i > 500 {
				t.Fatalf("QNow %v after 10s without a queue", e.QNow())
			}
		}
	}
	if sec := quiet(); sec > 1 {
		t.Fatalf("QNow under 25ms after %.2fs, want within 1s", sec)
	}
	if q := e.Q(); q <= ms(25) {
		t.Fatalf("Q %v: the test no longer shows the lag QNow is for", q)
	}
	for range 100 { // 2s more: Q lags still
		c.advance(20 * time.Millisecond)
		e.Observe(0, k, ms(5), 0, c.now())
	}
	if q := e.Q(); q <= ms(25) {
		t.Fatalf("Q %v 3s after the queue ended", q)
	}
	// The queue comes back: five completions show it.
	for range 5 {
		c.advance(20 * time.Millisecond)
		e.Observe(0, k, ms(5), ms(200), c.now())
	}
	e.Refresh(c.now())
	if qn := e.QNow(); qn <= ms(25) {
		t.Fatalf("QNow %v after five completions that queued 200ms", qn)
	}

	// At a completion every 1.5s (slow requests one at a time), the time
	// half-life forgets a queue within two completions, where eight steps
	// of gain 1/8 alone would take 16 of them (24s).
	for range 8 {
		c.advance(1500 * time.Millisecond)
		e.Observe(0, k, ms(1500), ms(1500), c.now())
	}
	e.Refresh(c.now())
	for i := 1; e.QNow() > ms(25); i++ {
		if i > 2 {
			t.Fatalf("QNow %v after %d completions without a queue, 1.5s apart", e.QNow(), i-1)
		}
		c.advance(1500 * time.Millisecond)
		e.Observe(0, k, ms(1500), 0, c.now())
		e.Refresh(c.now())
	}

	// Fallback samples (no Server-Timing) feed it as they feed Q.
	f := mustNew(t, Config{})
	f.ObserveMeasured(0, k, ms(50), c.now())
	f.ObserveMeasured(0, k, ms(80), c.now())
	f.Refresh(c.now())
	if f.QNow() != ms(30) || f.Q() != ms(30) {
		t.Fatalf("fallback: Q %v QNow %v, want 30ms", f.Q(), f.QNow())
	}
}

func TestObserveTiming(t *testing.T) {
	c := newClock()
	e := mustNew(t, Config{Alpha: 0.5})
	tm, _ := ParseServerTiming([]byte("cpu;dur=10, db;dur=20, queue;dur=3"))
	e.ObserveTiming(0, []byte("/a"), tm, ms(100), c.now())
	if st, _ := e.Stats(0, []byte("/a")); st.Mean != ms(20) { // 10 + 0.5·20
		t.Fatalf("S %v", st.Mean)
	}
	e.Refresh(c.now())
	if e.Q() != ms(3) {
		t.Fatalf("Q %v", e.Q())
	}
	// Queue only: S = measured − queue.
	tm, _ = ParseServerTiming([]byte("queue;dur=4"))
	e.ObserveTiming(0, []byte("/b"), tm, ms(10), c.now())
	if st, _ := e.Stats(0, []byte("/b")); st.Mean != ms(6) {
		t.Fatalf("S %v", st.Mean)
	}
	// Nothing reported: fallback.
	e.ObserveTiming(0, []byte("/c"), Timing{}, ms(10), c.now())
	if _, ok := e.Stats(0, []byte("/c")); !ok {
		t.Fatal("fallback not recorded")
	}
	// Nothing at all: nothing recorded.
	e.ObserveTiming(0, []byte("/d"), Timing{}, 0, c.now())
	if _, ok := e.Stats(0, []byte("/d")); ok {
		t.Fatal("recorded nothing")
	}
}

func TestAlphaFit(t *testing.T) {
	c := newClock()
	e := mustNew(t, Config{FitAlpha: true, Refresh: time.Second})
	if e.Alpha() != 1 {
		t.Fatalf("initial α %v", e.Alpha())
	}
	rng := rand.New(rand.NewPCG(3, 4))
	const alpha, overhead = 0.3, 2.0 // ms
	for range 2000 {
		cpu, io := 1+9*rng.Float64(), 50*rng.Float64()
		q := 3 * rng.Float64()
		measured := overhead + q + cpu + alpha*io + 0.2*rng.NormFloat64()
		tm := Timing{CPU: ms(cpu), IO: ms(io), Queue: ms(q), HasCPU: true, HasIO: true, HasQueue: true}
		e.ObserveTiming(0, []byte("/x"), tm, ms(measured), c.now())
		c.advance(10 * time.Millisecond)
	}
	e.Refresh(c.now())
	if a := e.Alpha(); math.Abs(a-alpha) > 0.02 {
		t.Fatalf("fitted α %v, want %v", a, alpha)
	}
	t.Logf("fitted α %.4f (true %.2f)", e.Alpha(), alpha)
}

func TestRate(t *testing.T) {
	c := newClock()
	e := mustNew(t, Config{})
	// 100/s on class 0 for 30 s, evenly spaced.
	for range 3000 {
		e.Arrive(0, c.now())
		c.advance(10 * time.Millisecond)
	}
	if r := e.Rate(0, c.now()); math.Abs(r-100) > 1 {
		t.Fatalf("rate %v, want 100", r)
	}
	if r := e.Rate(1, c.now()); r != 0 {
		t.Fatalf("idle class rate %v", r)
	}
	// A step to 300/s: after 5 s (one time constant) 1−1/e of the way.
	for range 500 {
		e.Arrive(0, c.now())
		e.Arrive(0, c.now())
		e.Arrive(0, c.now())
		c.advance(10 * time.Millisecond)
	}
	want := 300 - 200*math.Exp(-5.0/5)
	if r := e.Rate(0, c.now()); math.Abs(r-want) > 15 {
		t.Fatalf("after step: rate %v, want ≈%v", r, want)
	}
	// Silence: the rate decays toward 0 without arrivals.
	c.advance(30 * time.Second)
	if r := e.Rate(0, c.now()); r > 300*math.Exp(-29.0/5) {
		t.Fatalf("after 30s idle: rate %v", r)
	}
}

func TestEta(t *testing.T) {
	if Eta(6, 4) != 1.5 || Eta(0, 0) != 0 || !math.IsInf(Eta(1, 0), 1) {
		t.Fatal("Eta")
	}
}

func TestReconfigureKeepsState(t *testing.T) {
	c := newClock()
	reg := NewRegistry()
	e, err := reg.Get("shop", Config{}, []string{"gold", "bronze"})
	if err != nil {
		t.Fatal(err)
	}
	e.Observe(0, []byte("/g"), ms(7), -1, c.now())
	e.Observe(1, []byte("/b"), ms(70), -1, c.now())
	for range 50 {
		e.Arrive(1, c.now())
		c.advance(20 * time.Millisecond) // 50/s
	}
	c.advance(time.Second)
	e.Refresh(c.now())
	// Reload: classes reordered, one added, edges changed.
	e2, err := reg.Get("shop", Config{Edges: []time.Duration{ms(50)}}, []string{"silver", "bronze", "gold"})
	if err != nil || e2 != e {
		t.Fatalf("registry returned %p (%v), want %p", e2, err, e)
	}
	if s, b := e.Estimate(2, []byte("/g")); s != ms(7) || b != 0 {
		t.Fatalf("gold key after reload: %v bucket %d", s, b)
	}
	if s, b := e.Estimate(1, []byte("/b")); s != ms(70) || b != 1 {
		t.Fatalf("bronze key after reload: %v bucket %d", s, b)
	}
	if r := e.Rate(1, c.now()); r < 40 {
		t.Fatalf("bronze rate after reload %v", r)
	}
	if m := e.ClassMean(1); m != ms(70) {
		t.Fatalf("bronze mean after reload %v", m)
	}
	if m, _, w := e.ClassStats(0); m != 0 || w != 0 {
		t.Fatalf("new class has state %v %v", m, w)
	}
	if got := e.Classes(); len(got) != 3 || got[0] != "silver" {
		t.Fatalf("classes %v", got)
	}
	// Errors leave the old configuration in force.
	if _, err := reg.Get("shop", Config{MaxKeys: -1}, []string{"x"}); err == nil {
		t.Fatal("no error")
	}
	if len(e.Classes()) != 3 {
		t.Fatal("failed reload changed classes")
	}
	for _, cfg := range []Config{{HalfLife: -1}, {Alpha: math.NaN()}, {Alpha: -1}, {Edges: []time.Duration{2, 1}}, {RateWindow: -1}} {
		if err := e.Reconfigure(cfg, []string{"a"}); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
	for _, cl := range [][]string{nil, {""}, {"a", "a"}} {
		if err := e.Reconfigure(Config{}, cl); err == nil {
			t.Errorf("%q: no error", cl)
		}
	}
	// Shrinking the table evicts at once.
	for i := range 1000 {
		e.Observe(0, []byte(fmt.Sprint("/k", i)), ms(1), -1, c.now())
	}
	if err := e.Reconfigure(Config{MaxKeys: 100}, []string{"silver", "bronze", "gold"}); err != nil {
		t.Fatal(err)
	}
	if e.Len() > 100 || e.MaxKeys() != 100 {
		t.Fatalf("after shrink: %d keys, cap %d", e.Len(), e.MaxKeys())
	}
	if reg.Lookup("shop") != e || len(reg.Apps()) != 1 {
		t.Fatal("lookup")
	}
	reg.Retain("other")
	if reg.Lookup("shop") != nil {
		t.Fatal("retain")
	}
}

// TestClockEviction: keys in use survive a flood of one-off keys.
func TestClockEviction(t *testing.T) {
	c := newClock()
	e := mustNew(t, Config{MaxKeys: 1000})
	hot := make([][]byte, 100)
	for i := range hot {
		hot[i] = []byte(fmt.Sprint("/hot/", i))
		e.Observe(0, hot[i], ms(5), -1, c.now())
	}
	for i := range 100_000 {
		e.Observe(0, []byte(fmt.Sprint("/once/", i)), ms(1), -1, c.now())
		if i%200 == 0 {
			for _, k := range hot {
				e.Estimate(0, k) // in use: sets the reference bit
			}
		}
	}
	lost := 0
	for _, k := range hot {
		if _, ok := e.Stats(0, k); !ok {
			lost++
		}
	}
	if lost > 5 {
		t.Fatalf("%d of %d hot keys evicted", lost, len(hot))
	}
	if e.Len() > 1000 {
		t.Fatalf("len %d", e.Len())
	}
}

// TestMillionKeys: the table stays at its cap and the heap stays bounded.
func TestMillionKeys(t *testing.T) {
	c := newClock()
	e := mustNew(t, Config{})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	key := make([]byte, 0, 32)
	for i := range 1_000_000 {
		key = fmt.Appendf(key[:0], "/item/%d?x=1", i)
		e.Observe(i%2, key, ms(float64(i%50)), -1, c.now())
		if i%1000 == 0 {
			c.advance(time.Millisecond)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if e.Len() > DefaultMaxKeys || e.Len() < DefaultMaxKeys*9/10 {
		t.Fatalf("len %d, cap %d", e.Len(), DefaultMaxKeys)
	}
	if want := uint64(1_000_000 - e.Len()); e.Evictions() != want {
		t.Fatalf("evictions %d, want %d", e.Evictions(), want)
	}
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("keys %d, evictions %d, heap growth %.1f MiB", e.Len(), e.Evictions(), float64(grew)/(1<<20))
	if grew > 16<<20 {
		t.Fatalf("heap grew %d bytes for %d keys", grew, e.Len())
	}
	runtime.KeepAlive(e)
}

// TestAccuracy drives synthetic traffic from keys with known inherent service
// times (5ms…415ms, ±20% uniform noise, queueing uniform in 15…25ms) and
// checks the estimates settle within 10%: after 60 s of warm-up every key's
// estimate is checked once a second for another 60 s. Both paths are run: via
// Server-Timing reports, and via the proxy-measured fallback
// (measured = S + queue) with Q known from another backend's queue reports.
func TestAccuracy(t *testing.T) {
	const nKeys = 40
	trueS := make([]time.Duration, nKeys)
	keys := make([][]byte, nKeys)
	for i := range trueS {
		trueS[i] = ms(5 * math.Pow(1.12, float64(i)))
		keys[i] = []byte(fmt.Sprint("/k/", i))
	}
	noisy := func(rng *rand.Rand, d time.Duration) time.Duration {
		return time.Duration(float64(d) * (0.8 + 0.4*rng.Float64()))
	}
	const Q = 20 * time.Millisecond
	queue := func(rng *rand.Rand) time.Duration { return ms(15 + 10*rng.Float64()) }

	run := func(name string, fallback bool) (worst, final float64) {
		c := newClock()
		e := mustNew(t, Config{})
		rng := rand.New(rand.NewPCG(7, 8))
		buf := make([]byte, 0, 96)
		// 10 requests/s per key for 120 s.
		for step := range 1200 {
			for i, k := range keys {
				s, q := noisy(rng, trueS[i]), queue(rng)
				if fallback {
					if step%2 == 0 { // another backend reports its queue: Q is known
						e.ObserveTiming(1, []byte("/reporter"), Timing{Queue: queue(rng), HasQueue: true}, 0, c.now())
					}
					e.ObserveTiming(0, k, Timing{}, s+q, c.now())
				} else {
					cpu := time.Duration(float64(s) * 0.3)
					buf = fmt.Appendf(buf[:0], "cpu;dur=%.3f, db;dur=%.3f, queue;dur=%.3f, app;desc=x",
						float64(cpu)/1e6, float64(s-cpu)/1e6, float64(q)/1e6)
					tm, ok := ParseServerTiming(buf)
					if !ok {
						t.Fatal("parse")
					}
					e.ObserveTiming(0, k, tm, s+q+ms(1), c.now())
				}
			}
			c.advance(100 * time.Millisecond)
			if step >= 600 && step%10 == 9 {
				final = 0
				for i, k := range keys {
					s, _ := e.Estimate(0, k)
					final = max(final, relErr(s, trueS[i]))
				}
				worst = max(worst, final)
			}
		}
		e.Refresh(c.now())
		t.Logf("%s: relative error of S over %d keys after 60s warm-up: worst %.2f%% over the next 60s, %.2f%% at the end; Q %v (true mean %v)",
			name, nKeys, 100*worst, 100*final, e.Q().Round(10*time.Microsecond), Q)
		if relErr(e.Q(), Q) > 0.05 {
			t.Errorf("%s: Q %v, want %v ±5%%", name, e.Q(), Q)
		}
		return worst, final
	}
	if w, _ := run("server-timing", false); w > 0.10 {
		t.Errorf("server-timing: worst error %.1f%% > 10%%", 100*w)
	}
	if w, _ := run("fallback", true); w > 0.10 {
		t.Errorf("fallback: worst error %.1f%% > 10%%", 100*w)
	}
}

// TestConcurrent exercises every entry point at once under -race.
func TestConcurrent(t *testing.T) {
	reg := NewRegistry()
	e, _ := reg.Get("a", Config{MaxKeys: 500, Refresh: time.Millisecond}, []string{"x", "y"})
	base := time.Unix(1_700_000_000, 0)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			key := make([]byte, 0, 16)
			for i := range 20000 {
				now := base.Add(time.Duration(i) * time.Millisecond)
				key = fmt.Appendf(key[:0], "/k%d", rng.IntN(2000))
				cl := rng.IntN(3) // 2 is out of range at times
				e.Arrive(cl, now)
				e.Estimate(cl, key)
				switch i % 3 {
				case 0:
					e.Observe(cl, key, ms(rng.Float64()*10), ms(1), now)
				case 1:
					e.ObserveMeasured(cl, key, ms(rng.Float64()*20), now)
				case 2:
					e.ObserveTiming(cl, key, Timing{CPU: ms(1), IO: ms(2), HasCPU: true, HasIO: true}, ms(5), now)
				}
				if i%997 == 0 {
					e.Rate(cl, now)
					e.Q()
					e.ClassStats(cl)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 50 {
			classes := []string{"x", "y"}
			if i%2 == 1 {
				classes = []string{"y", "x", "z"}
			}
			if _, err := reg.Get("a", Config{MaxKeys: 200 + 10*i, FitAlpha: i%3 == 0}, classes); err != nil {
				t.Error(err)
			}
			e.Refresh(base)
		}
	}()
	wg.Wait()
	if e.Len() > e.MaxKeys() {
		t.Fatalf("len %d > cap %d", e.Len(), e.MaxKeys())
	}
}

func TestExp2Neg(t *testing.T) {
	worst := 0.0
	for x := 0.0; x < 60; x += 0.000937 {
		got, want := exp2neg(x), math.Exp2(-x)
		worst = max(worst, math.Abs(got-want)/want)
	}
	if worst > 2e-7 {
		t.Fatalf("worst relative error %g", worst)
	}
	for n := range 100 {
		if exp2neg(float64(n)) != math.Exp2(-float64(n)) {
			t.Fatalf("2^-%d not exact", n)
		}
	}
	if exp2neg(1e6) != 0 || exp2neg(math.NaN()) != 0 || exp2neg(999) != math.Exp2(-999) {
		t.Fatal("range")
	}
}

// TestFallbackLoadStep: with no backend reports, a sustained rise in
// queueing goes mostly into Q (half-life 5 s) rather than S (30 s); S keeps
// about a sixth of it, as the package doc says.
func TestFallbackLoadStep(t *testing.T) {
	c := newClock()
	e := mustNew(t, Config{})
	keys := [][]byte{[]byte("/a"), []byte("/b"), []byte("/c")}
	trueS := []time.Duration{ms(10), ms(50), ms(200)}
	step := func(q time.Duration, d time.Duration) {
		for end := c.now().Add(d); c.now().Before(end); c.advance(20 * time.Millisecond) {
			for i, k := range keys {
				e.ObserveMeasured(0, k, trueS[i]+q, c.now())
			}
		}
	}
	step(0, time.Minute)
	step(ms(21), 3*time.Minute)
	e.Refresh(c.now())
	for i, k := range keys {
		s, _ := e.Estimate(0, k)
		if d := s - trueS[i]; d < ms(2) || d > ms(5) {
			t.Errorf("%s: S %v, true %v (+%v)", k, s, trueS[i], d)
		}
	}
	if q := e.Q(); q < ms(17) || q > ms(19) {
		t.Errorf("Q %v, want ≈18ms (6/7 of 21ms)", q)
	}
	t.Logf("after a 21ms queueing step with no reports: Q %v, S errors %v", e.Q(),
		func() (out []time.Duration) {
			for i, k := range keys {
				s, _ := e.Estimate(0, k)
				out = append(out, s-trueS[i])
			}
			return
		}())
}
