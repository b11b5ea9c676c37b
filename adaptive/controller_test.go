package adaptive

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sentry-proxy/sentry/admission"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newCtl(t *testing.T, cfg Config) (*Controller, *clock) {
	t.Helper()
	ck := &clock{t: time.Unix(1000, 0)}
	cfg.Now = ck.now
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, ck
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// feed observes n samples of class: i·step for i = 1..n.
func feed(c *Controller, class, n int, step time.Duration) {
	for i := 1; i <= n; i++ {
		c.Observe(class, time.Duration(i)*step)
	}
}

// TestDecrease: 100 samples 1..100 ms put the 90th percentile at 90 ms;
// against a 50 ms target err = 0.8 > 0, so the rate is divided by 1.2 and
// the bucket emptied.
func TestDecrease(t *testing.T) {
	c, _ := newCtl(t, Config{Targets: []time.Duration{50 * time.Millisecond}, InitialRate: 100})
	feed(c, 0, 100, time.Millisecond)
	st := c.State(0)
	if st.Runs != 1 || st.Sample != 90*time.Millisecond || st.Cur != 90*time.Millisecond {
		t.Fatalf("runs %d samp %v cur %v, want 1, 90ms, 90ms", st.Runs, st.Sample, st.Cur)
	}
	if !near(st.Err, 0.8) || !near(st.Rate, 100/1.2) || st.Tokens != 0 {
		t.Fatalf("err %v rate %v tokens %v, want 0.8, %v, 0", st.Err, st.Rate, st.Tokens, 100/1.2)
	}
}

// TestIncrease: a percentile far below target raises the rate additively,
// by adj_i·(−(err − c_i)); the second run smooths cur with α = 0.7.
func TestIncrease(t *testing.T) {
	c, _ := newCtl(t, Config{Targets: []time.Duration{time.Second}, InitialRate: 10})
	feed(c, 0, 100, time.Millisecond) // samp 90ms: err = −0.91
	st := c.State(0)
	want := 10 + 2*(-(-0.91 - (-0.1)))
	if !near(st.Err, -0.91) || !near(st.Rate, want) {
		t.Fatalf("err %v rate %v, want −0.91, %v", st.Err, st.Rate, want)
	}
	feed(c, 0, 100, 2*time.Millisecond) // samp 180ms: cur = 0.7·90 + 0.3·180 = 117ms
	st = c.State(0)
	if st.Cur != 117*time.Millisecond {
		t.Fatalf("cur %v, want 117ms", st.Cur)
	}
	// err = −0.883 < −0.5: increase again.
	want += 2 * (-(-0.883 - (-0.1)))
	if !near(st.Rate, want) {
		t.Fatalf("rate %v, want %v", st.Rate, want)
	}
}

// TestDeadBand: between err_i and err_d nothing changes.
func TestDeadBand(t *testing.T) {
	c, _ := newCtl(t, Config{Targets: []time.Duration{120 * time.Millisecond}, InitialRate: 10})
	feed(c, 0, 100, time.Millisecond) // err = −0.25
	if st := c.State(0); st.Rate != 10 {
		t.Fatalf("rate %v, want 10 unchanged", st.Rate)
	}
}

// TestClamp: the rate stays in [RateMin, RateMax].
func TestClamp(t *testing.T) {
	c, _ := newCtl(t, Config{Targets: []time.Duration{time.Millisecond}, InitialRate: 0.06})
	feed(c, 0, 100, time.Millisecond)
	if st := c.State(0); st.Rate != DefaultRateMin {
		t.Fatalf("rate %v, want the minimum %v", st.Rate, DefaultRateMin)
	}
	c, _ = newCtl(t, Config{Targets: []time.Duration{time.Hour}, InitialRate: 4999})
	feed(c, 0, 100, time.Millisecond)
	if st := c.State(0); st.Rate != DefaultRateMax {
		t.Fatalf("rate %v, want the maximum %v", st.Rate, DefaultRateMax)
	}
}

// TestTimeout: with fewer than nreq samples the controller runs after
// Timeout at the next Tick, and not before; without samples it never runs.
func TestTimeout(t *testing.T) {
	c, ck := newCtl(t, Config{Targets: []time.Duration{50 * time.Millisecond, time.Second}, InitialRate: 100})
	c.Observe(0, 200*time.Millisecond)
	ck.add(999 * time.Millisecond)
	c.Tick(ck.now())
	if st := c.State(0); st.Runs != 0 {
		t.Fatal("ran before the timeout")
	}
	ck.add(time.Millisecond)
	c.Tick(ck.now())
	if st := c.State(0); st.Runs != 1 || st.Sample != 200*time.Millisecond {
		t.Fatalf("runs %d samp %v, want 1 run on the one sample", st.Runs, st.Sample)
	}
	if st := c.State(1); st.Runs != 0 {
		t.Fatal("a class without samples ran")
	}
}

// TestMulticlass (§3.3): gold over target divides bronze's rate by adj_lo
// (not gold's own) and bronze may not rise while gold is over; once bronze is
// at the minimum, gold's own rate is cut after lc_thresh more runs.
func TestMulticlass(t *testing.T) {
	c, _ := newCtl(t, Config{Targets: []time.Duration{50 * time.Millisecond, time.Second}, InitialRate: 100, LCThresh: 3})
	feed(c, 0, 100, time.Millisecond) // gold: err 0.8
	if g, b := c.State(0).Rate, c.State(1).Rate; g != 100 || !near(b, 10) {
		t.Fatalf("gold %v bronze %v, want 100 and 10", g, b)
	}
	feed(c, 1, 100, time.Millisecond) // bronze far under target, but flagged
	if b := c.State(1).Rate; !near(b, 10) {
		t.Fatalf("bronze rose to %v while gold was over target", b)
	}
	feed(c, 1, 100, time.Millisecond) // gold's last run is still over target
	if b := c.State(1).Rate; !near(b, 10) {
		t.Fatalf("bronze rose to %v while gold's last run was over target", b)
	}
	for i := 0; i < 5 && c.State(0).Err > 0; i++ { // gold's runs come under target...
		for j := 0; j < 100; j++ {
			c.Observe(0, 10*time.Millisecond)
		}
	}
	b0 := c.State(1).Rate
	feed(c, 1, 100, time.Millisecond) // the flag of gold's last over-target run
	if b := c.State(1).Rate; b != b0 {
		t.Fatalf("bronze rose to %v at its first run after gold's flag", b)
	}
	feed(c, 1, 100, time.Millisecond) // ...and then bronze rises
	if b := c.State(1).Rate; c.State(0).Err > 0 || !(b > b0) {
		t.Fatalf("bronze %v did not rise from %v once gold was under target (err %v)", b, b0, c.State(0).Err)
	}
	// Drive bronze to the minimum: 10·... /10 each gold run.
	for i := 0; i < 8 && c.State(1).Rate > DefaultRateMin; i++ {
		feed(c, 0, 100, time.Millisecond)
	}
	if b := c.State(1).Rate; b != DefaultRateMin {
		t.Fatalf("bronze %v, want the minimum", b)
	}
	g0 := c.State(0).Rate
	for i := 1; i <= 3; i++ { // lc = 1..3: not yet
		feed(c, 0, 100, time.Millisecond)
		if g := c.State(0).Rate; g != g0 {
			t.Fatalf("gold cut at lc=%d, want only past lc_thresh=3", i)
		}
	}
	feed(c, 0, 100, time.Millisecond) // lc = 4 > 3
	if g := c.State(0).Rate; !near(g, g0/1.2) {
		t.Fatalf("gold %v, want %v after lc_thresh runs", g, g0/1.2)
	}
	if st := c.State(0); st.LC != 0 {
		t.Fatalf("lc %d after the cut, want 0", st.LC)
	}
}

// TestBucket: the bucket holds Burst seconds of the rate (at least one
// token) and refills at the rate; a rejection says when the next token
// comes.
func TestBucket(t *testing.T) {
	c, ck := newCtl(t, Config{Targets: []time.Duration{time.Second}, InitialRate: 100, Burst: 50 * time.Millisecond})
	r := &admission.Request{Class: 0}
	admitted := 0
	for i := 0; i < 10; i++ {
		if c.Admit(r).Verdict == admission.Admit {
			admitted++
		}
	}
	if admitted != 5 { // 100/s × 50 ms
		t.Fatalf("admitted %d of a burst, want 5", admitted)
	}
	d := c.Admit(r)
	if d.Verdict != admission.RejectAdaptive || d.RetryAfter != time.Second {
		t.Fatalf("%+v, want rejected_adaptive with 1s", d)
	}
	ck.add(20 * time.Millisecond) // two tokens
	if c.Admit(r).Verdict != admission.Admit || c.Admit(r).Verdict != admission.Admit || c.Admit(r).Verdict == admission.Admit {
		t.Fatal("want exactly two tokens after 20ms at 100/s")
	}
	// Out-of-range classes count as the least important.
	if c.Admit(&admission.Request{Class: 7}).Verdict != admission.RejectAdaptive {
		t.Fatal("out-of-range class not mapped to the last class")
	}
}

func TestAdmitAllocs(t *testing.T) {
	c, _ := newCtl(t, Config{Targets: []time.Duration{time.Second}})
	r := &admission.Request{}
	if a := testing.AllocsPerRun(1000, func() { c.Admit(r) }); a != 0 {
		t.Fatalf("%v allocs per Admit", a)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Targets: []time.Duration{0}},
		{Targets: []time.Duration{time.Second}, Percentile: 100},
		{Targets: []time.Duration{time.Second}, Alpha: 1},
		{Targets: []time.Duration{time.Second}, AdjD: 0.5},
		{Targets: []time.Duration{time.Second}, ErrI: 0.1},
		{Targets: []time.Duration{time.Second}, RateMin: 10, RateMax: 1},
		{Targets: []time.Duration{time.Second}, AdjLo: math.NaN()},
		{Targets: []time.Duration{time.Second}, InitialRate: 1e9},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

func TestCollector(t *testing.T) {
	c, _ := newCtl(t, Config{Targets: []time.Duration{50 * time.Millisecond, time.Second}, InitialRate: 100})
	feed(c, 0, 100, time.Millisecond)
	col := NewCollector(c, []string{"gold", "bronze"}, prometheus.Labels{"app": "shop"})
	want := `
# HELP sentry_adaptive_rate Token bucket rate, requests per second.
# TYPE sentry_adaptive_rate gauge
sentry_adaptive_rate{app="shop",class="bronze"} 10
sentry_adaptive_rate{app="shop",class="gold"} 100
`
	if err := testutil.CollectAndCompare(col, strings.NewReader(want), "sentry_adaptive_rate"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(col); n != 2*10+2 {
		t.Fatalf("%d series, want 22 (10 per class, the in-flight limit and count)", n)
	}
}

// TestSeed: a seeded class starts at the given rate with its smoothed
// percentile dropped, and is not cut within the hold -- the responses
// then are of requests another mode admitted -- but is after it.
func TestSeed(t *testing.T) {
	c, ck := newCtl(t, Config{Targets: []time.Duration{time.Second}, Scaled: true, NReq: 10})
	feed(c, 0, 10, 300*time.Millisecond) // a run: cur ≈ 2.7s
	c.Seed(0, 50, 2*time.Second)
	if st := c.State(0); st.Rate != 50 || st.Cur != 0 || st.Samples != 0 {
		t.Fatalf("after Seed: %+v, want rate 50, no cur, no samples", st)
	}
	offer := func() { // 200 offered: the ceiling stays far above 50/s
		for i := 0; i < 200; i++ {
			c.Admit(&admission.Request{Class: 0})
		}
	}
	ck.add(time.Second)
	offer()
	for i := 0; i < 10; i++ {
		c.Observe(0, 3*time.Second)
	}
	if st := c.State(0); st.Runs != 2 || st.Rate != 50 || st.Cur != 3*time.Second {
		t.Fatalf("within the hold: %+v, want a run on its own sample (3s) and no cut", st)
	}
	ck.add(1500 * time.Millisecond)
	offer()
	for i := 0; i < 10; i++ {
		c.Observe(0, 3*time.Second)
	}
	if st := c.State(0); st.Rate >= 50 {
		t.Fatalf("after the hold: rate %v, want a cut", st.Rate)
	}
}

// TestForgiveDebtMeasuredAgainstNothing: a debt set while the farm had
// completed nothing since the class's last run (allowed = 0) is still on
// record, so forgive clears it once the farm's backlog is gone (allowed 0
// used to mean "no debt" and left the class at zero until the rate paid
// it).
func TestForgiveDebtMeasuredAgainstNothing(t *testing.T) {
	c, _ := newCtl(t, Config{Targets: []time.Duration{50 * time.Millisecond}, InitialRate: 10, Scaled: true})
	cl := c.classes[0]
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := c.owe(cl, 40, 0, 10); d != 4*time.Second {
		t.Fatalf("owe: %v, want 4s (40 at 10/s)", d)
	}
	c.forgive() // nothing admitted and not completed: no backlog now
	if tok := cl.bucket.tokens; tok != 0 {
		t.Fatalf("tokens %v after forgive with no backlog, want 0", tok)
	}
	c.forgive() // the debt is paid: the record is cleared
	if cl.debt {
		t.Fatal("debt still on record after it was forgiven")
	}
}

// TestOweBoundedForTinyRate: the time a debt takes is at most staleRuns
// Timeouts, also when backlog/rate overflows a Duration (a rate near 0).
func TestOweBoundedForTinyRate(t *testing.T) {
	c, _ := newCtl(t, Config{Targets: []time.Duration{50 * time.Millisecond}, InitialRate: 10, Scaled: true})
	cl := c.classes[0]
	c.mu.Lock()
	defer c.mu.Unlock()
	want := staleRuns * c.cfg.Timeout
	for _, rate := range []float64{1e-12, 0, math.NaN()} {
		if d := c.owe(cl, 1000, 5, rate); d != want {
			t.Fatalf("owe(1000 at %v/s) = %v, want %v", rate, d, want)
		}
	}
}

// TestInheritCountsOldInFlight: a controller rebuilt on reload observes
// the completions of the requests its predecessor admitted; Inherit counts
// them as admitted, so the farm's outstanding count (the backlog rule's)
// is right once they complete, not short by them for good.
func TestInheritCountsOldInFlight(t *testing.T) {
	cfg := Config{Targets: []time.Duration{time.Second}, InitialRate: 100, Burst: time.Second, Scaled: true}
	old, _ := newCtl(t, cfg)
	const inFlight = 30
	for range inFlight {
		if old.Admit(&admission.Request{Class: 0}).Verdict != admission.Admit {
			t.Fatal("old controller rejected within its burst")
		}
	}
	old.limit.Store(77) // as if measured
	c, _ := newCtl(t, cfg)
	c.Inherit(old)
	if lim, _ := c.Limit(); lim != 0 {
		t.Fatalf("limit %d inherited without the in-flight limit rule", lim)
	}
	withLimit := cfg
	withLimit.InFlightLimit = true
	c2, _ := newCtl(t, withLimit)
	c2.Inherit(old)
	if lim, in := c2.Limit(); lim != 77 || in != inFlight {
		t.Fatalf("inherited limit %d, in flight %d; want 77, %d", lim, in, inFlight)
	}
	const own = 20
	for range own {
		if c.Admit(&admission.Request{Class: 0}).Verdict != admission.Admit {
			t.Fatal("new controller rejected within its burst")
		}
	}
	for range inFlight { // the old requests complete, on the new controller
		c.Ended(0)
	}
	c.mu.Lock()
	got := c.outstanding()
	c.mu.Unlock()
	if got != own {
		t.Fatalf("outstanding %v after the old requests completed, want %d (the new controller's own)", got, own)
	}
	// Seed restarts the count: the requests before it are not its backlog.
	c.Seed(0, 10, 0)
	c.mu.Lock()
	got = c.outstanding()
	c.mu.Unlock()
	if got != 0 {
		t.Fatalf("outstanding %v after Seed, want 0", got)
	}
}

// limitAt brings c's in-flight limit to about lim on its manual clock:
// four Ticks 250ms apart, then lim/InFlightShare(p) completions, then
// the fifth Tick (a second's completion rate × the 1s target × share).
func limitAt(t *testing.T, c *Controller, ck *clock, completions int) {
	t.Helper()
	for range 4 {
		ck.add(250 * time.Millisecond)
		c.Tick(ck.now())
	}
	for range completions {
		c.Ended(0)
	}
	ck.add(250 * time.Millisecond)
	c.Tick(ck.now())
}

// TestInFlightLimitPriority: with several classes the in-flight limit
// keeps §3.3's order. The least important class of L is refused at the
// limit, each more important one a further limit/L later (room a less
// important class cannot take); once a class is refused at its own, for
// the next two Ticks a less important class i is refused already at
// (L − i)/L of the limit, so that what the farm frees goes to the more
// important class first. Without such a refusal a lone bronze class
// fills the whole limit.
func TestInFlightLimitPriority(t *testing.T) {
	cfg := Config{Targets: []time.Duration{time.Second, time.Second, time.Second}, Percentile: 95,
		InitialRate: 1000, Burst: time.Second, NReq: 100000, Timeout: time.Hour, Scaled: true, InFlightLimit: true}
	c, ck := newCtl(t, cfg)
	admit := func(class, n int) int {
		ok := 0
		for range n {
			if c.Admit(&admission.Request{Class: class}).Verdict == admission.Admit {
				ok++
			}
		}
		return ok
	}
	// 300 admitted and completed over a second: the limit is 101 (as in
	// testdata/limit.txt).
	if got := admit(2, 300); got != 300 {
		t.Fatalf("admitted %d of 300 before any limit", got)
	}
	limitAt(t, c, ck, 300)
	if lim, in := c.Limit(); lim != 101 || in != 0 {
		t.Fatalf("limit %d, in flight %d; want 101, 0", lim, in)
	}
	// Bronze alone fills the limit; silver has room to 4/3 of it
	// (134.7), gold to 5/3 (168.3).
	if got := admit(2, 150); got != 101 {
		t.Fatalf("bronze alone admitted %d, want the whole limit 101", got)
	}
	if got := admit(1, 50); got != 34 {
		t.Errorf("silver admitted %d above bronze's 101, want 34 (up to 134.7)", got)
	}
	if got := admit(0, 50); got != 34 {
		t.Errorf("gold admitted %d above 135, want 34 (up to 168.3)", got)
	}
	// Gold was refused at its limit. 110 complete: 59 in flight. Bronze
	// (i = 2) is refused from 101/3, silver from 2·101/3 = 67.3; gold
	// up to its own 168.3.
	for range 110 {
		c.Ended(2)
	}
	if got := admit(2, 10); got != 0 {
		t.Errorf("bronze admitted %d at 59 in flight while gold was refused, want 0 (from 33.7)", got)
	}
	if got := admit(1, 30); got != 9 {
		t.Errorf("silver admitted %d from 59 in flight, want 9 (up to 67.3)", got)
	}
	if got := admit(0, 120); got != 101 {
		t.Errorf("gold admitted %d from 68 in flight, want 101 (up to 168.3)", got)
	}
	// Gold's refusal expires after two Ticks without another; meanwhile
	// the 169 in flight complete (the limit, over the last second's
	// completions, stays above 0 in flight).
	for _, n := range []int{84, 85} {
		for range n {
			c.Ended(0)
		}
		ck.add(250 * time.Millisecond)
		c.Tick(ck.now())
	}
	if lim, in := c.Limit(); in != 0 || lim < InFlightMin {
		t.Fatalf("limit %d at %d in flight, want ≥ %d at 0", lim, in, InFlightMin)
	}
	if got := admit(2, 1); got != 1 {
		t.Errorf("bronze admitted %d with room under the limit and no recent refusal of a more important class, want 1", got)
	}
}

// TestSetInFlightRestartsLimit: at a hand-over (auto's fall-back) the
// controller has seen none of the other mode's completions, so its limit
// would sit at InFlightMin for a second; SetInFlight takes the owner's
// in-flight count and completion rate, sets the limit from that rate at
// once, and restarts the measurement, which replaces it after
// limitWindowMin.
func TestSetInFlightRestartsLimit(t *testing.T) {
	c, ck := newCtl(t, Config{Targets: []time.Duration{time.Second}, Percentile: 95,
		InitialRate: 1000, NReq: 100000, Timeout: time.Hour, Scaled: true, InFlightLimit: true})
	for range 5 { // ticks with no completion: the floor
		ck.add(250 * time.Millisecond)
		c.Tick(ck.now())
	}
	if lim, _ := c.Limit(); lim != InFlightMin {
		t.Fatalf("limit %d with no completions, want %d", lim, InFlightMin)
	}
	c.SetInFlight(40, 300)
	if lim, in := c.Limit(); lim != 101 || in != 40 {
		t.Fatalf("after SetInFlight(40, 300/s): limit %d, in flight %d; want ⌈0.3338·300⌉ = 101, 40", lim, in)
	}
	ck.add(50 * time.Millisecond)
	c.Tick(ck.now())
	if lim, _ := c.Limit(); lim != 101 {
		t.Fatalf("limit %d 50ms after the hand-over, want 101 kept (under limitWindowMin)", lim)
	}
	for range 30 { // the other mode's requests complete
		c.Ended(0)
	}
	ck.add(200 * time.Millisecond)
	c.Tick(ck.now())
	// 30 completions in 250ms: 120/s, ⌈0.3338·120⌉ = 41.
	if lim, in := c.Limit(); lim != 41 || in != 10 {
		t.Fatalf("limit %d, in flight %d 250ms after; want 41 (120/s measured since the hand-over), 10", lim, in)
	}
	c.SetInFlight(-3, math.NaN()) // clamped; an unknown rate keeps the limit
	if lim, in := c.Limit(); lim != 41 || in != 0 {
		t.Fatalf("SetInFlight(-3, NaN): limit %d, in flight %d; want 41, 0", lim, in)
	}
}

// TestInFlightFromOwner: with Config.InFlight the limit and the backlog
// read the owner's count, so requests admitted here that end without a
// response (never Observed nor Ended) do not hold the limit shut once the
// owner has released them; and requests the owner holds from elsewhere
// count against it.
func TestInFlightFromOwner(t *testing.T) {
	var owner atomic.Int64
	c, ck := newCtl(t, Config{Targets: []time.Duration{time.Second}, Percentile: 95, InitialRate: 1000,
		Burst: time.Second, NReq: 100000, Timeout: time.Hour, Scaled: true, InFlightLimit: true,
		InFlight: owner.Load})
	limitAt(t, c, ck, 300) // limit 101
	admit := func(n int) int {
		ok := 0
		for range n {
			if c.Admit(&admission.Request{Class: 0}).Verdict == admission.Admit {
				ok++
				owner.Add(1) // dispatched
			}
		}
		return ok
	}
	if got := admit(150); got != 101 {
		t.Fatalf("admitted %d, want the limit 101", got)
	}
	owner.Store(0) // every one failed: released by the owner, never Observed
	if got := admit(10); got != 10 {
		t.Errorf("admitted %d of 10 with the owner's count at 0, want 10 (the own count, 101, is stale)", got)
	}
	owner.Store(101) // the owner holds requests from elsewhere
	if got := admit(1); got != 0 {
		t.Errorf("admitted %d at the owner's 101, want 0", got)
	}
	if lim, in := c.Limit(); lim != 101 || in != 101 {
		t.Errorf("Limit %d, %d; want 101, 101 (the owner's)", lim, in)
	}
}

// TestSlowStartConditions: the slow start's step (doc.go, "Slow start")
// is limit / in flight, and 0 unless every condition holds
// (testdata/slowstart.txt has it at Ticks).
func TestSlowStartConditions(t *testing.T) {
	ck := &clock{t: time.Unix(1000, 0)}
	for _, tc := range []struct {
		name                  string
		limit, flight         int64
		n, over               int
		mean                  time.Duration
		refused, grow, higher bool
		want                  float64
	}{
		{name: "applies", limit: 20, n: 40, mean: 10 * time.Millisecond, refused: true, want: 20},
		{name: "in flight now", limit: 20, flight: 5, n: 40, mean: 10 * time.Millisecond, refused: true, want: 4},
		// 40 completions over 0.5 s × 100 ms: 8 in flight by Little's law.
		{name: "Little's law", limit: 20, n: 40, mean: 100 * time.Millisecond, refused: true, want: 2.5},
		{name: "half the limit", limit: 20, flight: 10, n: 40, mean: 10 * time.Millisecond, refused: true},
		{name: "no limit yet", n: 40, mean: 10 * time.Millisecond, refused: true},
		{name: "19 completions", limit: 20, n: 19, mean: 10 * time.Millisecond, refused: true},
		{name: "2 of 40 over the bound", limit: 20, n: 40, over: 2, mean: 10 * time.Millisecond, refused: true, want: 20},
		{name: "3 of 40 over the bound", limit: 20, n: 40, over: 3, mean: 10 * time.Millisecond, refused: true},
		{name: "refused nothing", limit: 20, n: 40, mean: 10 * time.Millisecond},
		{name: "queue growing", limit: 20, n: 40, mean: 10 * time.Millisecond, refused: true, grow: true},
		{name: "more important over target", limit: 20, n: 40, mean: 10 * time.Millisecond, refused: true, higher: true},
	} {
		c, err := New(Config{Targets: []time.Duration{time.Second, time.Second}, Percentile: 95, Scaled: true, InFlightLimit: true, Now: ck.now})
		if err != nil {
			t.Fatal(err)
		}
		now := ck.now().Add(500 * time.Millisecond).UnixNano()
		cl := c.classes[1]
		c.limit.Store(tc.limit)
		c.flight.Store(tc.flight)
		cl.recent.n, cl.recent.over, cl.recent.sum = tc.n, tc.over, float64(tc.n)*float64(tc.mean)
		c.done = uint64(tc.n) // completed since the class's last run (its marks are at 0)
		cl.admitted.Store(uint64(tc.n))
		if tc.grow {
			cl.admitted.Store(uint64(2 * tc.n))
		}
		if tc.refused {
			cl.rejected.Store(1)
		}
		c.classes[0].over = tc.higher
		if got := c.slowStart(1, now); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: step %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestSetTargetsClassesRace: Classes, read without the lock (a scrape, the
// owner's monitor), may run while SetTargets replaces the targets; under
// -race this failed when SetTargets rewrote the slice header.
func TestSetTargetsClassesRace(t *testing.T) {
	c, err := New(Config{Targets: []time.Duration{time.Second, 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 1000 {
			if err := c.SetTargets([]time.Duration{time.Duration(i+1) * time.Millisecond, time.Second}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for range 1000 {
		if n := c.Classes(); n != 2 {
			t.Fatalf("Classes %d", n)
		}
	}
	<-done
	if ts := c.Config().Targets; ts[0] != time.Second || ts[1] != time.Second {
		t.Fatalf("targets %v after the last SetTargets", ts)
	}
}

// TestSlowStartRestartsAverage: a step restarts a smoothed percentile
// above the bound at the bound, and drops the samples that came before
// the window it judged (after an overload, the requests in flight when
// it ended); a window with fewer than 20 completions carries over to the
// next Tick.
func TestSlowStartRestartsAverage(t *testing.T) {
	c, ck := newCtl(t, Config{Targets: []time.Duration{time.Second}, Percentile: 95, Scaled: true, InFlightLimit: true,
		NReq: 100000, InitialRate: 10, Burst: time.Second})
	quarter := func(admit, idle int, samples ...time.Duration) {
		for range admit {
			if d := c.Admit(&admission.Request{Class: 0}); d.Verdict == admission.Admit && !d.OverTarget {
				c.Observe(0, 100*time.Millisecond)
			} else if d.Verdict == admission.Admit {
				c.ObserveIdle(0, 100*time.Millisecond)
			}
		}
		for range idle {
			c.ObserveIdle(0, 10*time.Millisecond)
		}
		for _, s := range samples {
			c.Observe(0, s)
		}
		ck.add(250 * time.Millisecond)
		c.Tick(ck.now())
	}
	slow := make([]time.Duration, 20)
	for i := range slow {
		slow[i] = 2 * time.Second
	}
	for range 4 { // the limit in force; the first run at 1 s
		quarter(5, 0)
	}
	for range 4 {
		quarter(0, 0, slow...) // judged at each Tick: far over
	}
	st := c.State(0) // the run at 2 s: cur 0.7·100 ms + 0.3·2 s
	if st.Cur != 670*time.Millisecond || st.Runs != 2 {
		t.Fatalf("before: %+v, want cur 670ms after 2 runs", st)
	}
	quarter(0, 0, slow...) // 20 samples waiting, judged: the window begins after them
	rate := c.State(0).Rate
	for range 30 { // refused by the bucket: the class asks for more
		c.Admit(&admission.Request{Class: 0})
	}
	quarter(0, 10, 10*time.Millisecond) // 11 completions: not yet judged
	if st := c.State(0); st.Rate != rate || st.Samples != 21 {
		t.Fatalf("after 11 completions: %+v, want no step yet", st)
	}
	quarter(0, 20) // 31 in the window, as many as it admitted (the queue does not grow): a step
	st = c.State(0)
	if st.Cur != 500*time.Millisecond || st.Samples != 1 || st.Runs != 2 || st.Rate <= 2*rate {
		t.Errorf("after the step: %+v (rate before %v), want cur 500ms, the one sample of the window, no run, the rate more than doubled", st, rate)
	}
}
