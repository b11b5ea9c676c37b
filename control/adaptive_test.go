package control

import (
	"bytes"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sentry-proxy/sentry/adaptive"
	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/classify"
	"github.com/sentry-proxy/sentry/policy"
)

// adaptiveApp is testApp with the policy's adaptive and fall-back
// defaults, as Parse fills them.
func adaptiveApp(mode string) *policy.App {
	ac := testApp(mode)
	ac.Admission.Adaptive = policy.AdaptiveAdmission{NReq: 100, Timeout: time.Second, Alpha: 0.7, ErrI: -0.5, AdjD: 1.2, AdjI: 2,
		CI: -0.1, RateMin: 0.05, RateMax: 5000, AdjLo: 10, LCThresh: 20, Burst: 100 * time.Millisecond,
		// The paper's rule: these tests work its numbers by hand.
		Rule: policy.AdaptiveRulePaper}
	ac.Admission.Fallback = policy.Fallback{Enabled: true, MissWindows: 3, NoTimingShare: 0.5, ReturnWindows: 10, ReturnRatio: 0.8}
	return ac
}

type manualClock struct{ ns atomic.Int64 }

func (c *manualClock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *manualClock) add(d time.Duration) { c.ns.Add(int64(d)) }
func newClock() *manualClock {
	c := &manualClock{}
	c.ns.Store(time.Unix(1000, 0).UnixNano())
	return c
}
func (b *syncBuf) Write(p []byte) (int, error) { b.mu.Lock(); defer b.mu.Unlock(); return b.b.Write(p) }
func (b *syncBuf) String() string              { b.mu.Lock(); defer b.mu.Unlock(); return b.b.String() }

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// manualManager is a manager on a manual clock, without the monitor
// goroutine (the test calls tick), logging to the returned buffer.
func manualManager(t *testing.T) (*Manager, *prometheus.Registry, *manualClock, *syncBuf) {
	t.Helper()
	ck := newClock()
	buf := &syncBuf{}
	reg := prometheus.NewRegistry()
	m, err := NewManager(Options{Registerer: reg, Now: ck.now,
		Logger: hclog.New(&hclog.LoggerOptions{Output: buf, Level: hclog.Info})})
	if err != nil {
		t.Fatal(err)
	}
	m.noMonitor = true
	t.Cleanup(m.Close)
	return m, reg, ck, buf
}

// complete reports n completions of class with the given latency from
// arrival; timing says whether the backend sent a usable Server-Timing
// and a measured time.
func complete(a *App, ck *manualClock, class, n int, latency time.Duration, timing bool) {
	now := ck.now()
	for i := 0; i < n; i++ {
		r := admission.Result{End: now}
		if timing {
			r.ServerTiming, r.Measured, r.InService = []byte("cpu;dur=5"), 5*time.Millisecond, 1
		}
		// Marked as the pipeline marks it: the mode that admitted it.
		a.Done(&admission.Ticket{Class: class, Key: []byte("/x"), Arrival: now.Add(-latency), Mode: a.sw.Load().Mode()}, r)
	}
}

// TestAdaptiveModeAdmitsByBucket: in mode adaptive, Admit and Park take a
// token from the class's bucket; Done's latency from arrival drives the
// controller; the controller's variables are exported per app and class.
func TestAdaptiveModeAdmitsByBucket(t *testing.T) {
	m, reg, ck, _ := manualManager(t)
	pool := &fakePool{}
	pool.healthy.Store(1)
	pool.inflight.Store(1) // busy: on an idle farm the work-conserving rule admits without a token
	ac := adaptiveApp("adaptive")
	ac.Admission.Adaptive.InitialRate = 10 // 100ms of it: one token
	a, err := m.Build(ac, pool)
	if err != nil {
		t.Fatal(err)
	}
	if a.Mode() != admission.ModeAdaptive {
		t.Fatalf("mode %v", a.Mode())
	}
	if d := a.Admit(&admission.Request{Class: 1}); d.Verdict != admission.Admit {
		t.Fatalf("first request: %v", d.Verdict)
	}
	d, p, decided := a.Park(&admission.Request{Class: 1}, nil)
	if !decided || p != nil || d.Verdict != admission.RejectAdaptive || d.RetryAfter != time.Second {
		t.Fatalf("second request: %+v %v %v, want rejected_adaptive at once", d, p, decided)
	}
	ck.add(100 * time.Millisecond) // one token at 10/s
	if d := a.Admit(&admission.Request{Class: 1}); d.Verdict != admission.Admit {
		t.Fatalf("after 100ms: %v", d.Verdict)
	}
	// 100 gold completions at 2s from arrival, over R_sla = 1s: the
	// controller runs; gold over target cuts bronze (10 → 1), not gold.
	complete(a, ck, 0, 100, 2*time.Second, true)
	c := a.adp.Load()
	if g, b := c.State(0), c.State(1); g.Runs != 1 || g.Rate != 10 || b.Rate != 1 {
		t.Fatalf("gold %+v bronze %+v, want one run, gold 10, bronze 1", g, b)
	}
	// R_sla follows the QoS table into the controller's targets.
	a.tick(ck.now(), time.Second)
	if got := c.Config().Targets; got[0] != time.Second || got[1] != time.Second {
		t.Fatalf("targets %v", got)
	}
	want := `
# HELP sentry_adaptive_rate Token bucket rate, requests per second.
# TYPE sentry_adaptive_rate gauge
sentry_adaptive_rate{app="shop",class="bronze"} 1
sentry_adaptive_rate{app="shop",class="gold"} 10
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sentry_adaptive_rate"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sentry_adaptive_tokens", "sentry_adaptive_percentile_seconds", "sentry_adaptive_error", "sentry_adaptive_samples"} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != 2 {
			t.Errorf("%s: %d series (%v), want 2", name, n, err)
		}
	}
	mode := `
# HELP sentry_admission_mode 1 for the admission mode in force (batch, threshold, adaptive, off).
# TYPE sentry_admission_mode gauge
sentry_admission_mode{app="shop",mode="adaptive"} 1
sentry_admission_mode{app="shop",mode="batch"} 0
sentry_admission_mode{app="shop",mode="off"} 0
sentry_admission_mode{app="shop",mode="threshold"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(mode), "sentry_admission_mode"); err != nil {
		t.Fatal(err)
	}
}

// runWindow runs one monitor window in batch mode: admits requests of gold
// admitted by the batch test (an idle farm), then n completions at
// latency, then the tick.
func runWindow(t *testing.T, a *App, ck *manualClock, admits, n int, latency time.Duration, timing bool) {
	t.Helper()
	for i := 0; i < admits; i++ {
		if m := a.Mode(); m == admission.ModeBatch {
			if d := a.Admit(&admission.Request{Class: 0, S: time.Millisecond}); d.Verdict != admission.Admit {
				t.Fatalf("batch rejected on an idle farm: %v", d.Verdict)
			}
		}
	}
	complete(a, ck, 0, n, latency, timing)
	ck.add(time.Second)
	a.tick(ck.now(), time.Second)
}

// TestAutoFallsBackAndReturns: auto leaves batch for adaptive after
// miss_windows (3) consecutive windows in which batch admitted and the
// admitted p95 missed R_sla, seeds the controller with what batch was
// admitting, logs and exports the switch; it returns to batch after
// return_windows (10) calm windows, and not before.
func TestAutoFallsBackAndReturns(t *testing.T) {
	m, reg, ck, logs := manualManager(t)
	pool := &fakePool{}
	pool.healthy.Store(1)
	a, err := m.Build(adaptiveApp("auto"), pool)
	if err != nil {
		t.Fatal(err)
	}
	// Two bad windows, then a good one: the count restarts.
	runWindow(t, a, ck, 30, 30, 2*time.Second, true)
	runWindow(t, a, ck, 30, 30, 2*time.Second, true)
	runWindow(t, a, ck, 30, 30, 100*time.Millisecond, true)
	// Too few completions to judge: no count either way.
	runWindow(t, a, ck, 30, minSamples-1, 2*time.Second, true)
	runWindow(t, a, ck, 30, 30, 2*time.Second, true)
	runWindow(t, a, ck, 30, 30, 2*time.Second, true)
	if a.Mode() != admission.ModeBatch {
		t.Fatalf("fell back after 2 bad windows: %v", a.Mode())
	}
	// Exactly 5% over R_sla is not a miss of the p95; 2 of 30 is.
	runWindow(t, a, ck, 30, 30, 100*time.Millisecond, true)
	complete(a, ck, 0, 38, 100*time.Millisecond, true)
	runWindow(t, a, ck, 30, 2, 2*time.Second, true) // 2 of 40 = 5%
	if a.fb.bad != 0 {
		t.Fatalf("5%% over counted as a miss of p95")
	}
	complete(a, ck, 0, 37, 100*time.Millisecond, true)
	runWindow(t, a, ck, 30, 3, 2*time.Second, true) // 3 of 40
	if a.fb.bad != 1 {
		t.Fatalf("7.5%% over not counted as a miss of p95")
	}
	runWindow(t, a, ck, 30, 30, 100*time.Millisecond, true)
	for i := 0; i < 3; i++ {
		runWindow(t, a, ck, 25, 30, 2*time.Second, true)
	}
	if a.Mode() != admission.ModeAdaptive {
		t.Fatalf("mode %v after 3 missed windows, want adaptive", a.Mode())
	}
	if r := a.adp.Load().State(0).Rate; r != 30 {
		t.Errorf("gold seeded at %v/s, want 30 (what completed; batch admitted 25)", r)
	}
	if out := logs.String(); !strings.Contains(out, "admission mode switched") || !strings.Contains(out, "from=batch to=adaptive reason=percentile_missed windows=3") {
		t.Errorf("log %q", out)
	}
	if n := gatherOne(t, reg, "sentry_admission_mode_switches_total", "to", "adaptive"); n != 1 {
		t.Errorf("switches to adaptive %v", n)
	}
	// In adaptive mode: 9 calm windows, then one that is not, then 10.
	for i := 0; i < 9; i++ {
		runWindow(t, a, ck, 0, 30, 100*time.Millisecond, true)
	}
	runWindow(t, a, ck, 0, 30, 900*time.Millisecond, true) // > 0.8 × 1s
	for i := 0; i < 9; i++ {
		runWindow(t, a, ck, 0, 30, 100*time.Millisecond, true)
	}
	if a.Mode() != admission.ModeAdaptive {
		t.Fatalf("returned before 10 calm windows in a row")
	}
	runWindow(t, a, ck, 0, 30, 100*time.Millisecond, true)
	if a.Mode() != admission.ModeBatch {
		t.Fatalf("mode %v after 10 calm windows, want batch", a.Mode())
	}
	if out := logs.String(); !strings.Contains(out, "from=adaptive to=batch reason=model_usable windows=10") {
		t.Errorf("log %q", out)
	}
	// Most responses without a usable service time: falls back though
	// the percentile is met.
	for i := 0; i < 3; i++ {
		runWindow(t, a, ck, 30, 30, 100*time.Millisecond, false)
	}
	if a.Mode() != admission.ModeAdaptive || !strings.Contains(logs.String(), "reason=no_service_time") {
		t.Fatalf("mode %v without service times; log %q", a.Mode(), logs.String())
	}
}

// TestFallbackNeedsBatchAdmitting: misses while batch admitted nothing
// (only probes, or nothing) say nothing against the model; a forced mode
// and enabled: false never fall back.
func TestFallbackNeedsBatchAdmitting(t *testing.T) {
	m, _, ck, _ := manualManager(t)
	pool := &fakePool{}
	pool.healthy.Store(1)
	a, err := m.Build(adaptiveApp("auto"), pool)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		runWindow(t, a, ck, 0, 30, 2*time.Second, true)
	}
	if a.Mode() != admission.ModeBatch {
		t.Fatalf("fell back without batch admitting: %v", a.Mode())
	}
	for _, ac := range []*policy.App{adaptiveApp("batch"), func() *policy.App {
		ac := adaptiveApp("auto")
		ac.Admission.Fallback.Enabled = false
		return ac
	}()} {
		ac.Name = "other-" + ac.Admission.Mode
		b, err := m.Build(ac, pool)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ {
			runWindow(t, b, ck, 30, 30, 2*time.Second, true)
		}
		if b.Mode() != admission.ModeBatch {
			t.Fatalf("%s fell back: %v", ac.Name, b.Mode())
		}
	}
}

// TestReloadKeepsAdaptiveRates: a reload that changes nothing keeps the
// controller; one that changes its settings or the classes rebuilds it,
// and each class keeps its learned rate by name.
func TestReloadKeepsAdaptiveRates(t *testing.T) {
	m, _, ck, _ := manualManager(t)
	pool := &fakePool{}
	pool.healthy.Store(1)
	ac := adaptiveApp("adaptive")
	ac.Admission.Adaptive.InitialRate = 100
	a, err := m.Build(ac, pool)
	if err != nil {
		t.Fatal(err)
	}
	complete(a, ck, 0, 100, 2*time.Second, true) // bronze 100 → 10
	complete(a, ck, 1, 100, 2*time.Second, true) // bronze 10 → 8.333 (least important: itself)
	c1 := a.adp.Load()
	gold, bronze := c1.State(0).Rate, c1.State(1).Rate
	if gold != 100 || bronze >= 10 {
		t.Fatalf("rates before reload %v %v", gold, bronze)
	}
	if _, err := m.Build(ac, pool); err != nil || a.adp.Load() != c1 {
		t.Fatalf("unchanged reload rebuilt the controller (%v)", err)
	}
	// New settings, classes reordered and one added.
	ac2 := adaptiveApp("adaptive")
	ac2.Admission.Adaptive.AdjD = 1.5
	ac2.Classes = []classify.ClassConfig{
		{Name: "platinum", Rules: []classify.Rule{{Path: "/vip"}}},
		{Name: "bronze", Rules: []classify.Rule{{Path: "/b"}}},
		{Name: "gold", Default: true},
	}
	if _, err := m.Build(ac2, pool); err != nil {
		t.Fatal(err)
	}
	c2 := a.adp.Load()
	if c2 == c1 || c2.Config().AdjD != 1.5 {
		t.Fatal("settings change did not rebuild the controller")
	}
	if p, b, g := c2.State(0).Rate, c2.State(1).Rate, c2.State(2).Rate; p != 5000 || b != bronze || g != gold {
		t.Fatalf("after reload platinum %v bronze %v gold %v, want 5000 (new), %v, %v", p, b, g, bronze, gold)
	}
	if st := c2.State(2); st.Cur != 2*time.Second {
		t.Fatalf("gold's smoothed percentile %v not carried", st.Cur)
	}
}

// prometheusCounter gathers the control collector's mode switch counter

// TestAdaptiveNoAlloc: in adaptive mode the decision and the outcome
// (Admit, Park, Done feeding the controller, its runs included) allocate
// nothing.
func TestAdaptiveNoAlloc(t *testing.T) {
	m, _, ck, _ := manualManager(t)
	pool := &fakePool{}
	pool.healthy.Store(1)
	a, err := m.Build(adaptiveApp("adaptive"), pool)
	if err != nil {
		t.Fatal(err)
	}
	req := &admission.Request{Class: 1}
	tk := &admission.Ticket{Class: 1, Key: []byte("/x"), Arrival: ck.now(), Mode: admission.ModeAdaptive}
	res := admission.Result{ServerTiming: []byte("cpu;dur=5"), Measured: 5 * time.Millisecond, InService: 1, End: ck.now().Add(20 * time.Millisecond)}
	if n := testing.AllocsPerRun(500, func() {
		a.Admit(req)
		a.Park(req, nil)
		a.Done(tk, res)
	}); n != 0 {
		t.Fatalf("%v allocations per request", n)
	}
	if a.adp.Load().State(1).Runs == 0 {
		t.Fatal("the controller never ran: the measurement missed its runs")
	}
}

// TestTerminatedIsNoSLASample: a request cut by selective early
// termination (Result.Terminated) feeds the estimator its cost but is no
// response time a client saw: in adaptive mode it adds no sample to the
// controller (Ended: a completion without one), and in auto it does not
// count against the batch model in the fall-back window however long it
// ran.
func TestTerminatedIsNoSLASample(t *testing.T) {
	m, _, ck, _ := manualManager(t)
	pool := &fakePool{}
	pool.healthy.Store(1)
	a, err := m.Build(adaptiveApp("adaptive"), pool)
	if err != nil {
		t.Fatal(err)
	}
	cut := func(a *App, class, n int, ran time.Duration) {
		now := ck.now()
		for i := 0; i < n; i++ {
			a.Done(&admission.Ticket{Class: class, Key: []byte("/x"), Arrival: now.Add(-ran), Mode: a.sw.Load().Mode()},
				admission.Result{Measured: ran, InService: 1, End: now, Terminated: true})
		}
	}
	// 99 gold requests cut after 2s (over R_sla = 1s), then one that
	// completes in 100ms: nreq (100) is not reached, so the controller
	// has not run; one sample waits, and it is the response's.
	cut(a, 0, 99, 2*time.Second)
	complete(a, ck, 0, 1, 100*time.Millisecond, true)
	if st := a.adp.Load().State(0); st.Runs != 0 || st.Samples != 1 {
		t.Fatalf("gold after 99 cut and 1 response: %+v, want no run and 1 sample", st)
	}
	if n := a.win.n.Load(); n != 1 {
		t.Fatalf("window completions %d, want 1 (the response)", n)
	}
	// The estimator did see the cut requests' cost.
	if s, _ := a.est.Estimate(0, []byte("/x")); s < time.Second {
		t.Errorf("estimated S %v after 99 cuts at 2s, want their cost", s)
	}

	// Auto: windows of 30 responses within R_sla and 30 cuts at 2s
	// never fall back; the same 30 at 2s as responses do.
	ac := adaptiveApp("auto")
	ac.Name = "auto"
	b, err := m.Build(ac, pool)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		cut(b, 0, 30, 2*time.Second)
		runWindow(t, b, ck, 30, 30, 100*time.Millisecond, true)
	}
	if b.Mode() != admission.ModeBatch {
		t.Fatalf("terminations counted against the batch model: %v", b.Mode())
	}
	for i := 0; i < 3; i++ {
		complete(b, ck, 0, 30, 2*time.Second, true)
		runWindow(t, b, ck, 30, 30, 100*time.Millisecond, true)
	}
	if b.Mode() != admission.ModeAdaptive {
		t.Fatalf("responses over R_sla did not count: %v", b.Mode())
	}
}

// TestAdaptiveShared: admission.adaptive.shared runs one controller for
// every class: one bucket (gold's admission takes bronze's token) and
// the fall-back seeds it with the classes' sum.
func TestAdaptiveShared(t *testing.T) {
	m, _, ck, _ := manualManager(t)
	pool := &fakePool{}
	pool.healthy.Store(1)
	pool.inflight.Store(1) // busy: on an idle farm the work-conserving rule admits without a token
	ac := adaptiveApp("adaptive")
	ac.Admission.Adaptive.Shared = true
	ac.Admission.Adaptive.InitialRate = 10 // 100ms of it: one token
	a, err := m.Build(ac, pool)
	if err != nil {
		t.Fatal(err)
	}
	c := a.adp.Load()
	if !c.Config().Shared || c.Classes() != 2 {
		t.Fatalf("shared %v, classes %d", c.Config().Shared, c.Classes())
	}
	if d := a.Admit(&admission.Request{Class: 0}); d.Verdict != admission.Admit {
		t.Fatalf("gold: %v", d.Verdict)
	}
	if d := a.Admit(&admission.Request{Class: 1}); d.Verdict != admission.RejectAdaptive {
		t.Fatalf("bronze after gold took the one token: %v, want rejected (one bucket)", d.Verdict)
	}
	ck.add(100 * time.Millisecond)
	if d := a.Admit(&admission.Request{Class: 1}); d.Verdict != admission.Admit {
		t.Fatalf("bronze after a refill: %v", d.Verdict)
	}
	for i, cs := range *a.classes.Load() {
		cs.admRate.Store(math.Float64bits(float64(10 * (i + 1))))
	}
	a.seedAdaptive(0)
	if r0, r1 := c.State(0).Rate, c.State(1).Rate; r0 != 30 || r1 != 30 {
		t.Errorf("seeded %v and %v, want the one controller at 10 + 20", r0, r1)
	}
}

// TestCompletionsGoToTheirMode: a decision carries the mode that took it
// (admission.Decision.Mode, copied into the Ticket by the pipeline), and
// a completion feeds the adaptive controller as that mode says: after
// auto's fall-back, the requests batch mode left in flight complete on
// it without a sample, however late they are, and its own requests give
// samples. The farm's in-flight count the controller reads (backlog,
// in-flight limit) is the pool's, so it includes batch's requests, and an
// admitted request that ends without a response (no Done) does not stay
// in it; the limit starts from the last window's completion rate.
func TestCompletionsGoToTheirMode(t *testing.T) {
	m, _, ck, _ := manualManager(t)
	pool := &fakePool{}
	pool.healthy.Store(1)
	ac := adaptiveApp("auto")
	ac.Admission.Adaptive.InFlightLimit = true
	a, err := m.Build(ac, pool)
	if err != nil {
		t.Fatal(err)
	}
	if d := a.Admit(&admission.Request{Class: 0, S: time.Millisecond}); d.Verdict != admission.Admit || d.Mode != admission.ModeBatch {
		t.Fatalf("batch decision %v marked %v, want admit marked batch", d.Verdict, d.Mode)
	}
	// The fall-back comes at a window's tick with 40 requests of batch
	// mode's in flight (the pool's count), 30 completions a window.
	pool.inflight.Store(40)
	for i := 0; i < 4 && a.Mode() == admission.ModeBatch; i++ {
		runWindow(t, a, ck, 25, 30, 2*time.Second, true)
	}
	if a.Mode() != admission.ModeAdaptive {
		t.Fatalf("mode %v after missed windows, want adaptive", a.Mode())
	}
	c := a.adp.Load()
	want := int64(math.Ceil(adaptive.InFlightShare(c.Config().Percentile) * 30))
	if lim, in := c.Limit(); in != 40 || lim != max(adaptive.InFlightMin, want) {
		t.Fatalf("after the fall-back: limit %d, in flight %d; want %d (30/s completed), 40 (the pool's)", lim, in, max(adaptive.InFlightMin, want))
	}
	now := ck.now()
	for i := 0; i < 40; i++ { // batch's requests complete, 5 s late
		a.Done(&admission.Ticket{Class: 0, Key: []byte("/x"), Arrival: now.Add(-5 * time.Second), Mode: admission.ModeBatch},
			admission.Result{End: now, Measured: 5 * time.Second, InService: 1, ServerTiming: []byte("cpu;dur=5")})
	}
	pool.inflight.Store(0)
	if st := c.State(0); st.Samples != 0 {
		t.Errorf("batch's completions gave the controller %d samples, want 0", st.Samples)
	}
	// Two of its own: one ends without a response (a backend error: no
	// Done; the pool releases it), one completes.
	for range 2 {
		d := a.Admit(&admission.Request{Class: 0})
		if d.Verdict != admission.Admit || d.Mode != admission.ModeAdaptive {
			t.Fatalf("adaptive decision %v marked %v, want admit marked adaptive", d.Verdict, d.Mode)
		}
	}
	a.Done(&admission.Ticket{Class: 0, Key: []byte("/x"), Arrival: now.Add(-100 * time.Millisecond), Mode: admission.ModeAdaptive},
		admission.Result{End: now, Measured: 100 * time.Millisecond, InService: 1, ServerTiming: []byte("cpu;dur=5")})
	if st := c.State(0); st.Samples != 1 {
		t.Errorf("the controller's own completion gave %d samples, want 1", st.Samples)
	}
	if _, in := c.Limit(); in != 0 {
		t.Errorf("controller reads %d in flight with the pool empty, want 0 (the failed request is not kept)", in)
	}
}

// TestFallbackOnServiceTimeJump: a window in batch mode counts against
// the model when the backends' reported service times add up to more
// than jumpRatio (2) times the estimates their requests were admitted
// with, though the percentile is met (the farm became slower; the
// estimator's averages follow over tens of seconds); 1.2 times does not.
func TestFallbackOnServiceTimeJump(t *testing.T) {
	m, _, ck, logs := manualManager(t)
	pool := &fakePool{}
	pool.healthy.Store(1)
	a, err := m.Build(adaptiveApp("auto"), pool)
	if err != nil {
		t.Fatal(err)
	}
	window := func(reported string) {
		for i := 0; i < 25; i++ {
			if d := a.Admit(&admission.Request{Class: 0, S: 5 * time.Millisecond}); d.Verdict != admission.Admit {
				t.Fatalf("batch rejected on an idle farm: %v", d.Verdict)
			}
		}
		now := ck.now()
		for i := 0; i < 30; i++ { // 100ms from arrival: the p95 is met
			a.Done(&admission.Ticket{Class: 0, Key: []byte("/x"), S: 5 * time.Millisecond, Arrival: now.Add(-100 * time.Millisecond), Mode: admission.ModeBatch},
				admission.Result{ServerTiming: []byte(reported), Measured: 20 * time.Millisecond, InService: 1, End: now})
		}
		ck.add(time.Second)
		a.tick(ck.now(), time.Second)
	}
	for i := 0; i < 6; i++ {
		window("cpu;dur=6") // 1.2× the estimate
	}
	if a.Mode() != admission.ModeBatch || a.fb.bad != 0 {
		t.Fatalf("mode %v, %d windows against the model, with service times 1.2× the estimates", a.Mode(), a.fb.bad)
	}
	for i := 0; i < 2; i++ {
		window("cpu;dur=15") // 3×
	}
	if a.Mode() != admission.ModeBatch {
		t.Fatalf("fell back after 2 windows")
	}
	window("cpu;dur=15")
	if a.Mode() != admission.ModeAdaptive {
		t.Fatalf("mode %v after 3 windows of service times 3× the estimates, want adaptive", a.Mode())
	}
	if out := logs.String(); !strings.Contains(out, "reason=service_time_jump") || !strings.Contains(out, "service_over_estimate=3") {
		t.Errorf("log %q", out)
	}
}

// TestReturnNeedsAgreeingEstimates: a window in adaptive mode is calm
// only if the service times the backends report agree with the
// estimates their requests were admitted with (not 2× more): the
// fall-back's service_time_jump has cleared. Returning while the
// estimator still lags a slower farm would have batch admit three times
// what the farm finishes.
func TestReturnNeedsAgreeingEstimates(t *testing.T) {
	m, _, ck, logs := manualManager(t)
	pool := &fakePool{}
	pool.healthy.Store(1)
	a, err := m.Build(adaptiveApp("auto"), pool)
	if err != nil {
		t.Fatal(err)
	}
	window := func(mode admission.Mode, reported string) {
		now := ck.now()
		for i := 0; i < 30; i++ { // 100ms from arrival: the p95 is met
			a.Done(&admission.Ticket{Class: 0, Key: []byte("/x"), S: 5 * time.Millisecond, Arrival: now.Add(-100 * time.Millisecond), Mode: mode},
				admission.Result{ServerTiming: []byte(reported), Measured: 20 * time.Millisecond, InService: 1, End: now})
		}
		ck.add(time.Second)
		a.tick(ck.now(), time.Second)
	}
	for i := 0; i < 4; i++ { // the first window after Build counts for no mode
		for j := 0; j < 25; j++ {
			a.Admit(&admission.Request{Class: 0, S: 5 * time.Millisecond})
		}
		window(admission.ModeBatch, "cpu;dur=15")
	}
	if a.Mode() != admission.ModeAdaptive {
		t.Fatalf("mode %v after 3 windows of service times 3× the estimates", a.Mode())
	}
	for i := 0; i < 12; i++ {
		window(admission.ModeAdaptive, "cpu;dur=15") // the percentile met, the estimates a third of the truth
	}
	if a.Mode() != admission.ModeAdaptive {
		t.Fatalf("returned to batch while the reported times are 3× the estimates")
	}
	for i := 0; i < 9; i++ {
		window(admission.ModeAdaptive, "cpu;dur=6")
	}
	if a.Mode() != admission.ModeAdaptive {
		t.Fatalf("returned after 9 calm windows")
	}
	window(admission.ModeAdaptive, "cpu;dur=6")
	if a.Mode() != admission.ModeBatch || !strings.Contains(logs.String(), "reason=model_usable") {
		t.Fatalf("mode %v after 10 windows of agreeing estimates, want batch", a.Mode())
	}
}

// TestReturnRelapseBackoff: a fall-back within a minute of the last
// return to batch (a relapse) doubles the calm windows the next return
// needs, up to 16× fallback.return_windows; one after a longer calm
// restarts from return_windows.
func TestReturnRelapseBackoff(t *testing.T) {
	m, _, ck, logs := manualManager(t)
	pool := &fakePool{}
	pool.healthy.Store(1)
	ac := adaptiveApp("auto")
	ac.Admission.Fallback.ReturnWindows = 2
	a, err := m.Build(ac, pool)
	if err != nil {
		t.Fatal(err)
	}
	fallBack := func() {
		t.Helper()
		for i := 0; i < 3; i++ {
			runWindow(t, a, ck, 30, 30, 2*time.Second, true)
		}
		if a.Mode() != admission.ModeAdaptive {
			t.Fatalf("mode %v after 3 missed windows", a.Mode())
		}
	}
	calm := func(n int) int { // calm windows until batch, at most n
		t.Helper()
		for i := 1; i <= n; i++ {
			runWindow(t, a, ck, 0, 30, 100*time.Millisecond, true)
			if a.Mode() == admission.ModeBatch {
				return i
			}
		}
		return -1
	}
	runWindow(t, a, ck, 30, 30, 100*time.Millisecond, true) // the first window after Build counts for no mode
	fallBack()
	if got := calm(100); got != 2 {
		t.Fatalf("first return after %d calm windows, want 2", got)
	}
	for _, want := range []int{4, 8, 16, 32, 32} {
		fallBack() // within a minute of the return: a relapse
		if got := calm(100); got != want {
			t.Fatalf("return after %d calm windows, want %d", got, want)
		}
	}
	if !strings.Contains(logs.String(), "return_windows=32") {
		t.Errorf("the doubled wait not logged:\n%s", logs.String())
	}
	ck.add(time.Minute)
	fallBack()
	if got := calm(100); got != 2 {
		t.Fatalf("return after %d calm windows a minute after the last, want 2", got)
	}
}
