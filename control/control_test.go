package control

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/classify"
	"github.com/sentry-proxy/sentry/policy"
)

type fakePool struct {
	healthy  atomic.Int64
	inflight atomic.Int64
}

func (p *fakePool) Healthy() int    { return int(p.healthy.Load()) }
func (p *fakePool) Inflight() int64 { return p.inflight.Load() }

type req struct{ method, path, host string }

func (r req) Method() []byte       { return []byte(r.method) }
func (r req) Path() []byte         { return []byte(r.path) }
func (r req) Host() []byte         { return []byte(r.host) }
func (r req) Peek(string) []byte   { return nil }
func (r req) Cookie(string) []byte { return nil }

func testApp(mode string) *policy.App {
	return &policy.App{
		Name: "shop",
		Classes: []classify.ClassConfig{
			{Name: "gold", Rules: []classify.Rule{{PathPrefix: "/checkout"}}},
			{Name: "bronze", Default: true},
		},
		ServerTiming: policy.ServerTiming{Strip: true},
		SLA:          policy.SLA{Percentile: 95, Targets: []policy.SLABand{{Below: 1000, Target: time.Second}, {Target: 3 * time.Second}}},
		Admission: policy.Admission{Mode: mode,
			Threshold: policy.ThresholdAdmission{Recompute: time.Second},
			Switch:    policy.ModeSwitch{CPUHigh: 0.85, CPULow: 0.6, Hold: 2 * time.Second, RevertAfter: 30 * time.Second}},
	}
}

func newManager(t testing.TB, now func() time.Time) (*Manager, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewManager(Options{Registerer: reg, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m, reg
}

func TestBuildClassifyEstimateAdmit(t *testing.T) {
	m, reg := newManager(t, nil)
	pool := &fakePool{}
	pool.healthy.Store(2)
	a, err := m.Build(testApp("batch"), pool)
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Classes(); len(got) != 2 || got[0] != "gold" || got[1] != "bronze" {
		t.Fatalf("classes %v", got)
	}
	c, key := a.Classify(req{"POST", "/checkout/pay", "x"}, netip.Addr{})
	if c != 0 || string(key) != "/checkout/pay" {
		t.Fatalf("classify: %d %q", c, key)
	}
	now := time.Now()
	for i := 0; i < 50; i++ {
		a.Done(&admission.Ticket{Class: 0, Key: key, Arrival: now.Add(-10 * time.Millisecond)}, admission.Result{ServerTiming: []byte("cpu;dur=8, queue;dur=1"), Measured: 9 * time.Millisecond, InService: 1, End: now})
	}
	s, _ := a.Estimate(0, key, now)
	if s < 7*time.Millisecond || s > 9*time.Millisecond {
		t.Errorf("estimate after cpu;dur=8 reports: %v", s)
	}
	d := a.Admit(&admission.Request{Class: 0, S: s})
	if d.Verdict != admission.Admit {
		t.Errorf("idle farm rejected gold: %v", d.Verdict)
	}
	// With no healthy backend the batch test cannot admit.
	pool.healthy.Store(0)
	if d := a.Admit(&admission.Request{Class: 1, S: s}); d.Verdict == admission.Admit {
		t.Errorf("n=0 admitted")
	}
	n, err := testutil.GatherAndCount(reg, "sentry_admission_mode", "sentry_estimator_service_time_seconds", "sentry_sla_target_seconds")
	if err != nil || n != 4+2+1 {
		t.Errorf("gathered %d (%v)", n, err)
	}
}

func TestReloadKeepsLearnedState(t *testing.T) {
	m, _ := newManager(t, nil)
	pool := &fakePool{}
	pool.healthy.Store(1)
	a1, err := m.Build(testApp("batch"), pool)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i := 0; i < 30; i++ {
		a1.Done(&admission.Ticket{Class: 1, Key: []byte("/search"), Arrival: now.Add(-40 * time.Millisecond)}, admission.Result{ServerTiming: []byte("cpu;dur=40"), Measured: 40 * time.Millisecond, InService: 1, End: now})
	}
	// Reload: classes reordered and one added; bronze keeps its history.
	ac := testApp("auto")
	ac.Classes = []classify.ClassConfig{
		{Name: "platinum", Rules: []classify.Rule{{Path: "/vip"}}},
		{Name: "gold", Rules: []classify.Rule{{PathPrefix: "/checkout"}}},
		{Name: "bronze", Default: true},
	}
	a2, err := m.Build(ac, pool)
	if err != nil {
		t.Fatal(err)
	}
	if a1 != a2 {
		t.Fatal("reload built a new stack: learned state lost")
	}
	if got := a2.Classes(); len(got) != 3 || got[2] != "bronze" {
		t.Fatalf("classes after reload %v", got)
	}
	s, _ := a2.Estimate(2, []byte("/search"), now)
	if s < 35*time.Millisecond || s > 45*time.Millisecond {
		t.Errorf("bronze /search estimate after reload = %v, want ~40ms", s)
	}
	if a2.Mode() != admission.ModeBatch {
		t.Errorf("auto mode should start in batch, got %v", a2.Mode())
	}
	// A bad policy changes nothing.
	bad := testApp("batch")
	bad.Classes = []classify.ClassConfig{{Name: "x", Rules: []classify.Rule{{PathRegexp: "("}}}}
	if _, err := m.Build(bad, pool); err == nil {
		t.Fatal("bad regexp accepted")
	}
	if got := a2.Classes(); len(got) != 3 {
		t.Errorf("failed build changed classes to %v", got)
	}
	m.Retain(nil)
	if _, ok := m.apps["shop"]; ok {
		t.Error("Retain(nil) kept the app")
	}
}

func TestModeOffAndThreshold(t *testing.T) {
	m, _ := newManager(t, nil)
	pool := &fakePool{}
	pool.healthy.Store(1)
	a, err := m.Build(testApp("off"), pool)
	if err != nil {
		t.Fatal(err)
	}
	if d := a.Admit(&admission.Request{Class: 1}); d.Verdict != admission.Admit {
		t.Errorf("off rejected")
	}
	// Threshold with a configured capacity of 0.1 server-s/s per backend
	// and gold alone offering 50 req/s × 10 ms = 0.5: bronze gets nothing.
	ac := testApp("threshold")
	ac.Admission.Threshold.Capacity = 0.1
	a, err = m.Build(ac, pool)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i := 0; i < 40; i++ {
		a.Done(&admission.Ticket{Class: 0, Key: []byte("/checkout"), Arrival: now.Add(-10 * time.Millisecond)}, admission.Result{ServerTiming: []byte("cpu;dur=10"), Measured: 10 * time.Millisecond, InService: 1, End: now})
	}
	for i := 0; i < 500; i++ {
		a.Estimate(0, []byte("/checkout"), now.Add(time.Duration(i)*20*time.Millisecond))
	}
	th := a.thr.Load().Recompute(now.Add(10 * time.Second))
	if th.Class != 0 || th.P >= 1 {
		t.Fatalf("threshold pair %+v, want class 0 partially admitted", th)
	}
	// A busy farm (no free slot: with one backend and P = 1, one request
	// in flight fills it); a free slot would take bronze whatever the draw.
	pool.inflight.Store(1)
	if d := a.Admit(&admission.Request{Class: 1}); d.Verdict != admission.RejectThreshold {
		t.Errorf("bronze under threshold: %v", d.Verdict)
	}
	pool.inflight.Store(0)
	if d := a.Admit(&admission.Request{Class: 1}); d.Verdict != admission.Admit {
		t.Errorf("bronze under threshold with a free slot: %v, want admitted (work-conserving)", d.Verdict)
	}
}

func TestTickFollowsQoSTable(t *testing.T) {
	var nowNs atomic.Int64
	nowNs.Store(time.Unix(1000, 0).UnixNano())
	m, _ := newManager(t, func() time.Time { return time.Unix(0, nowNs.Load()) })
	m.noMonitor = true // the test ticks; the monitor's own ticks would race it
	clock := time.Unix(1000, 0)
	pool := &fakePool{}
	pool.healthy.Store(1)
	a, err := m.Build(testApp("batch"), pool)
	if err != nil {
		t.Fatal(err)
	}
	if a.RSLA() != time.Second {
		t.Fatalf("initial R_sla %v", a.RSLA())
	}
	// 2000 req/s for 10 s moves the app into the second band (3 s).
	for s := 0; s < 10; s++ {
		for i := 0; i < 2000; i++ {
			a.Estimate(1, []byte("/"), clock.Add(time.Duration(i)*500*time.Microsecond))
		}
		clock = clock.Add(time.Second)
		nowNs.Store(clock.UnixNano())
	}
	a.tick(clock, time.Second)
	if a.RSLA() != 3*time.Second {
		t.Errorf("R_sla at ~2000 req/s = %v, want 3s", a.RSLA())
	}
}

func TestWindowQuantile(t *testing.T) {
	var w window
	for i := 0; i < 95; i++ {
		w.add(10 * time.Millisecond)
	}
	for i := 0; i < 5; i++ {
		w.add(2 * time.Second)
	}
	n, q := w.drain(0.95)
	if n != 100 || q < 10*time.Millisecond || q > 13*time.Millisecond {
		t.Errorf("p95 of 95×10ms+5×2s = %v (n=%d), want ~10ms", q, n)
	}
	if n, _ := w.drain(0.95); n != 0 {
		t.Error("drain did not reset")
	}
	w.add(2 * time.Second)
	if _, q := w.drain(0.5); q < 2*time.Second || q > 2500*time.Millisecond {
		t.Errorf("upper-bound quantile %v for 2s", q)
	}
}

// A queue estimate above R_sla must not lock admission forever: with
// nothing in flight the owned backends have no queue, and a stale estimate
// decays.
func TestNoDeadlockOnHighQueueEstimate(t *testing.T) {
	var nowNs atomic.Int64
	nowNs.Store(time.Unix(5000, 0).UnixNano())
	clock := func() time.Time { return time.Unix(0, nowNs.Load()) }
	pool := &fakePool{}
	_, a := buildBatchApp(t, clock, pool, func(ac *policy.App) { ac.Classes[0].Period = 0 })
	// The farm reported 900 ms of queueing: Q is far above R_sla (1 s) − S.
	for i := 0; i < 50; i++ {
		a.Done(&admission.Ticket{Class: 0, Key: []byte("/checkout/x"), Arrival: clock().Add(-1100 * time.Millisecond)}, admission.Result{ServerTiming: []byte("cpu;dur=200, queue;dur=900"), Measured: 1100 * time.Millisecond, InService: 1, End: clock()})
	}
	a.est.Refresh(clock().Add(time.Second))
	if q := a.est.Q(); q < 800*time.Millisecond {
		t.Fatalf("setup: Q = %v", q)
	}
	pool.inflight.Store(3)
	if d := a.Admit(&admission.Request{Class: 0, S: 200 * time.Millisecond}); d.Verdict == admission.Admit {
		t.Fatalf("with 3 in flight and Q≈900ms a 200ms request should fail a 1s target")
	}
	// Everything drains: nothing in flight, so no queue.
	pool.inflight.Store(0)
	if d := a.Admit(&admission.Request{Class: 0, S: 200 * time.Millisecond}); d.Verdict != admission.Admit {
		t.Fatalf("idle farm still rejects: %v (Q=%v)", d.Verdict, a.Q())
	}
	// Something in flight but no completion for 20 s: the estimate decays.
	pool.inflight.Store(1)
	nowNs.Add(int64(20 * time.Second))
	if q := a.Q(); q > 100*time.Millisecond {
		t.Fatalf("stale Q after 20 s = %v, want decayed", q)
	}
}

// Server-Timing's queue must not make the parallelism learner think the
// backend serves everything in parallel.
func TestParallelismLearnsFromMeasuredTime(t *testing.T) {
	m, _ := newManager(t, nil)
	pool := &fakePool{}
	pool.healthy.Store(1)
	a, err := m.Build(testApp("batch"), pool) // parallelism 0: learned
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	// A 3-slot backend with 30 in service: each request waits ~9 S.
	for i := 0; i < 2000; i++ {
		a.Done(&admission.Ticket{Class: 1, Key: []byte("/"), S: 10 * time.Millisecond, Arrival: now.Add(-100 * time.Millisecond)}, admission.Result{ServerTiming: []byte("cpu;dur=10, queue;dur=90"), Measured: 100 * time.Millisecond, InService: 30, End: now})
	}
	if p := a.batch.Parallelism(); p < 2 || p > 5 {
		t.Fatalf("learned parallelism %v for a 3-slot backend", p)
	}
}

// Per-class counters follow the class name across a reload that inserts a
// class, and a reload racing with Observe is safe (run with -race).
func TestReloadKeepsClassCountersByName(t *testing.T) {
	m, _ := newManager(t, nil)
	pool := &fakePool{}
	pool.healthy.Store(1)
	a, err := m.Build(testApp("batch"), pool)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i := 0; i < 7; i++ {
		a.Done(&admission.Ticket{Class: 1, Key: []byte("/"), Arrival: now.Add(-time.Millisecond)}, admission.Result{ServerTiming: nil, Measured: time.Millisecond, InService: 1, End: now}) // bronze, within target
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 2000; i++ {
			a.Done(&admission.Ticket{Class: 0, Key: []byte("/checkout/x"), Arrival: now.Add(-10 * time.Second)}, admission.Result{ServerTiming: nil, Measured: time.Millisecond, InService: 1, End: now}) // gold, late
		}
	}()
	ac := testApp("batch")
	ac.Classes = []classify.ClassConfig{
		{Name: "gold", Rules: []classify.Rule{{PathPrefix: "/checkout"}}},
		{Name: "silver", Rules: []classify.Rule{{PathPrefix: "/search"}}},
		{Name: "bronze", Default: true},
	}
	if _, err := m.Build(ac, pool); err != nil {
		t.Fatal(err)
	}
	<-done
	cs := *a.classes.Load()
	if cs[2].name != "bronze" || cs[2].met.Load() != 7 || cs[1].met.Load() != 0 {
		t.Errorf("after inserting silver: bronze met %d (want 7), silver met %d (want 0)", cs[2].met.Load(), cs[1].met.Load())
	}
}

// Threshold mode's guard: even when (i, p) admits everything (capacity far
// above the offered work), a farm already full by the batch model rejects.
func TestThresholdGuardRejectsWhenFarmFull(t *testing.T) {
	m, _ := newManager(t, nil)
	pool := &fakePool{}
	pool.healthy.Store(1)
	ac := testApp("threshold")
	ac.Admission.Batch.Parallelism = 4
	ac.Admission.Threshold.Capacity = 1000 // (i, p) admits all
	a, err := m.Build(ac, pool)
	if err != nil {
		t.Fatal(err)
	}
	// R_sla 1 s, P 4, S 100 ms: full once (η+1)/4·100ms > 1s, i.e. η ≥ 40.
	pool.inflight.Store(10)
	if d := a.Admit(&admission.Request{Class: 1, S: 100 * time.Millisecond}); d.Verdict != admission.Admit {
		t.Fatalf("η=10: %v", d.Verdict)
	}
	pool.inflight.Store(40)
	if d := a.Admit(&admission.Request{Class: 0, S: 100 * time.Millisecond}); d.Verdict != admission.RejectThreshold || d.RetryAfter < time.Second {
		t.Fatalf("η=40: %v %v, want rejected_threshold", d.Verdict, d.RetryAfter)
	}
}

// A class the batch test rejects still gets a trickle of probes, so that
// an estimate too high can be corrected by samples (estimator.Probe): one
// per probe interval, for a key without a recent sample, and only in place
// of a rejection that rests on the estimate.
func TestProbeOverridesRejection(t *testing.T) {
	var nowNs atomic.Int64
	nowNs.Store(time.Unix(5000, 0).UnixNano())
	clock := func() time.Time { return time.Unix(0, nowNs.Load()) }
	pool := &fakePool{}
	_, a := buildBatchApp(t, clock, pool, func(ac *policy.App) { ac.Classes[0].Period = 0 })
	// A busy farm (its one slot taken twice over: P is learned, and the
	// work-conserving rule's probe fills up to 2P): on an idle one the rule
	// admits the heavy request over target, and no probe is needed.
	pool.inflight.Store(2)
	key := []byte("/checkout/x")
	a.Done(&admission.Ticket{Class: 0, Key: key, Arrival: clock().Add(-5 * time.Second)}, admission.Result{ServerTiming: []byte("cpu;dur=5000"), Measured: 5 * time.Second, InService: 1, End: clock()})
	heavy := func() admission.Verdict {
		return a.Admit(&admission.Request{Class: 0, S: 5 * time.Second, Key: key}).Verdict
	}
	if v := heavy(); v != admission.RejectTest {
		t.Fatalf("setup: %v, want rejected_test", v)
	}
	nowNs.Add(int64(time.Second))
	if v := heavy(); v != admission.Admit {
		t.Fatalf("no probe after 1s without samples: %v", v)
	}
	for range 10 {
		if v := heavy(); v != admission.RejectTest {
			t.Fatalf("second probe within the interval: %v", v)
		}
	}
	if a.Probes() != 1 {
		t.Fatalf("probes %d, want 1", a.Probes())
	}
	// No backend: not the estimate's doing, so no probe.
	nowNs.Add(int64(time.Second))
	pool.healthy.Store(0)
	if v := heavy(); v != admission.RejectNoBackend {
		t.Fatalf("no backend: %v", v)
	}
	pool.healthy.Store(1)
	if v := heavy(); v != admission.Admit || a.Probes() != 2 {
		t.Fatalf("probe after the no-backend rejection: %v, probes %d", v, a.Probes())
	}
}

type testWaker chan struct{}

func (w testWaker) Wake() {
	select {
	case w <- struct{}{}:
	default:
	}
}

func (w testWaker) wait(t *testing.T) {
	t.Helper()
	select {
	case <-w:
	case <-time.After(3 * time.Second):
		t.Fatal("the run did not wake the Waker")
	}
}

// TestParkAccountsOnce: a request parked in batch mode is accounted (the
// probe, the admitted work, the rejections) once, when its decision is
// taken, exactly as a blocking Admit; a cancelled one counts as a
// rejection and leaves its queue; the other modes decide at once.
func TestParkAccountsOnce(t *testing.T) {
	var nowNs atomic.Int64
	nowNs.Store(time.Unix(5000, 0).UnixNano())
	clock := func() time.Time { return time.Unix(0, nowNs.Load()) }
	pool := &fakePool{}
	m, a := buildBatchApp(t, clock, pool, func(ac *policy.App) {
		ac.Classes[1].Period = 20 * time.Millisecond
		ac.Admission.Batch.StrictPeriods = true // every arrival waits for its run
	})
	wk := make(testWaker, 1)
	runOnce := func(p admission.Pending) admission.Decision {
		t.Helper()
		if _, ready := p.Result(); ready {
			t.Fatal("ready before its run")
		}
		nowNs.Add(int64(20 * time.Millisecond))
		for {
			wk.wait(t)
			if d, ready := p.Result(); ready {
				return d
			}
		}
	}

	// Admitted by its run: the work is counted when the decision is taken.
	r := &admission.Request{Class: 1, S: 5 * time.Millisecond, Key: []byte("/x")}
	_, p, decided := a.Park(r, wk)
	if decided || p == nil {
		t.Fatal("a class with a period was decided at once")
	}
	if a.work.Load() != 0 {
		t.Fatal("work counted before the decision")
	}
	if d := runOnce(p); d.Verdict != admission.Admit {
		t.Fatalf("%v, want admitted", d.Verdict)
	}
	if w := a.work.Load(); w != int64(5*time.Millisecond) {
		t.Fatalf("work %v, want 5ms once", time.Duration(w))
	}

	// Cancelled: it leaves its queue and counts as a rejection.
	_, p, _ = a.Park(r, wk)
	if a.batch.QueueLen(1) != 1 {
		t.Fatal("not queued")
	}
	p.Cancel()
	if q, rj := a.batch.QueueLen(1), a.rejects.Load(); q != 0 || rj != 1 {
		t.Fatalf("after Cancel: queue %d, rejects %d, want 0 and 1", q, rj)
	}

	// A rejection that rests on the estimate is overridden by a due probe
	// when the parked decision is taken, as in Admit. The farm is busy
	// (its one slot taken twice over: P is learned, and the rule's probe
	// fills up to 2P), or the work-conserving rule would admit the heavy
	// request over target.
	pool.inflight.Store(2)
	heavy := []byte("/heavy")
	a.Done(&admission.Ticket{Class: 1, Key: heavy, Arrival: clock().Add(-5 * time.Second)}, admission.Result{ServerTiming: []byte("cpu;dur=5000"), Measured: 5 * time.Second, InService: 1, End: clock()})
	hr := &admission.Request{Class: 1, S: 5 * time.Second, Key: heavy}
	_, p, _ = a.Park(hr, wk)
	if d := runOnce(p); d.Verdict != admission.RejectTest {
		t.Fatalf("heavy: %v, want rejected_test", d.Verdict)
	}
	if rj := a.rejects.Load(); rj != 2 {
		t.Fatalf("rejects %d, want 2", rj)
	}
	nowNs.Add(int64(time.Second))
	_, p, _ = a.Park(hr, wk)
	if d := runOnce(p); d.Verdict != admission.Admit || a.Probes() != 1 {
		t.Fatalf("heavy after 1s without samples: %v, probes %d; want a probe's admission", d.Verdict, a.Probes())
	}
	if w := a.work.Load(); w != int64(5*time.Millisecond+5*time.Second) {
		t.Fatalf("work %v, want 5.005s", time.Duration(w))
	}

	// A class without a period, and mode off, are decided at once.
	if d, p, decided := a.Park(&admission.Request{Class: 0, S: time.Millisecond}, wk); !decided || p != nil || d.Verdict != admission.Admit {
		t.Fatalf("period-0 class: %v %v %v", d, p, decided)
	}
	if _, err := m.Build(testApp("off"), pool); err != nil {
		t.Fatal(err)
	}
	if d, p, decided := a.Park(r, wk); !decided || p != nil || d.Verdict != admission.Admit {
		t.Fatalf("mode off: %v %v %v", d, p, decided)
	}
}

// buildBatchApp builds an app in batch mode on a manual clock with one
// healthy backend in pool; mod adjusts the policy first.
func buildBatchApp(t *testing.T, clock func() time.Time, pool *fakePool, mod func(*policy.App)) (*Manager, *App) {
	t.Helper()
	m, _ := newManager(t, clock)
	pool.healthy.Store(1)
	ac := testApp("batch")
	mod(ac)
	a, err := m.Build(ac, pool)
	if err != nil {
		t.Fatal(err)
	}
	return m, a
}

// TestParkEarlyByDefault: with strict_periods left at its default, an
// arrival of a class with a period that finds nothing waiting and room on
// the farm is decided at once (batchac, Early admission); strict_periods
// makes it wait for its run.
func TestParkEarlyByDefault(t *testing.T) {
	clock := func() time.Time { return time.Unix(5000, 0) }
	for _, strict := range []bool{false, true} {
		_, a := buildBatchApp(t, clock, &fakePool{}, func(ac *policy.App) {
			ac.Classes[1].Period = 20 * time.Millisecond
			ac.Admission.Batch.StrictPeriods = strict
		})
		r := &admission.Request{Class: 1, S: 5 * time.Millisecond, Key: []byte("/x")}
		d, p, decided := a.Park(r, make(testWaker, 1))
		switch {
		case !strict && (!decided || d.Verdict != admission.Admit):
			t.Errorf("default: decided %v, %v; want admitted at once", decided, d.Verdict)
		case strict && (decided || p == nil):
			t.Errorf("strict_periods: decided %v at once; want parked", decided)
		}
		if p != nil {
			p.Cancel()
		}
	}
}
