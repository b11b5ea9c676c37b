package batchac

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sentry-proxy/sentry/admission"
)

func newFakeState(n int, inflight int64, q, rsla time.Duration) *fakeState {
	st := &fakeState{}
	st.n.Store(int64(n))
	st.inflight.Store(inflight)
	st.q.Store(int64(q))
	st.rsla.Store(int64(rsla))
	return st
}

func TestConfigValidation(t *testing.T) {
	gold := []ClassConfig{{Name: "gold", Period: 100 * time.Millisecond}}
	tests := []struct {
		name string
		cfg  Config
		err  string // substring; empty means valid
	}{
		{"minimal", Config{Classes: gold}, ""},
		{"no classes", Config{}, "no classes"},
		{"empty name", Config{Classes: []ClassConfig{{Period: time.Second}}}, "empty name"},
		{"duplicate", Config{Classes: []ClassConfig{{Name: "a"}, {Name: "a"}}}, "listed twice"},
		{"negative period", Config{Classes: []ClassConfig{{Name: "a", Period: -1}}}, "negative period"},
		{"negative buckets", Config{Classes: gold, Buckets: -1}, "negative bucket"},
		{"negative cap", Config{Classes: gold, QueueCap: -1}, "negative queue cap"},
		{"parallelism < 1", Config{Classes: gold, Parallelism: 0.5}, "parallelism"},
		{"parallelism NaN", Config{Classes: gold, Parallelism: math.NaN()}, "parallelism"},
		{"parallelism Inf", Config{Classes: gold, Parallelism: math.Inf(1)}, "parallelism"},
		{"parallelism huge", Config{Classes: gold, Parallelism: 1e9}, "at most"},
		{"too many classes", Config{Classes: make([]ClassConfig, MaxClasses+1)}, "at most"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(newFakeState(1, 0, 0, time.Second), tt.cfg)
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("error %v, want one containing %q", err, tt.err)
			}
		})
	}
	if _, err := New(nil, Config{Classes: gold}); err == nil {
		t.Fatal("nil State accepted")
	}
	c, _ := New(newFakeState(1, 0, 0, time.Second), Config{Classes: gold})
	s := c.snap.Load()
	if s.buckets != DefaultBuckets || s.queueCap != DefaultQueueCap || s.parallelism != 1 {
		t.Fatalf("defaults not applied: %+v", s)
	}
}

func TestRetryAfterClamp(t *testing.T) {
	for _, tc := range []struct {
		ns   float64
		want time.Duration
	}{
		{0, time.Second}, {-5, time.Second}, {math.NaN(), time.Second},
		{1, time.Second}, {1e9, time.Second}, {1e9 + 1, 2 * time.Second},
		{59.5e9, 60 * time.Second}, {1e15, 60 * time.Second}, {math.Inf(1), 60 * time.Second},
	} {
		if got := retryAfter(tc.ns); got != tc.want {
			t.Errorf("retryAfter(%v) = %v, want %v", tc.ns, got, tc.want)
		}
	}
}

// TestPaperFormula checks, over a grid, that with P = 1 the test is exactly
// the paper's eq. 5, Q + (η + ⌈β/n⌉)·S ≤ R_sla − d, computed independently
// in integer nanoseconds.
func TestPaperFormula(t *testing.T) {
	for n := 1; n <= 4; n++ {
		for load := int64(0); load <= 40; load += 3 {
			for beta := 1; beta <= 9; beta++ {
				for _, s := range []int64{1e6, 7e6, 50e6, 89e6, 100e6} {
					m := model{n: n, load: load, q: 10e6, rsla: 1e9, p: 1}
					sum := float64(s) * float64(beta)
					got := m.fits(beta, sum, 1e9-100e6)
					// n·Q + (load + n·⌈β/n⌉)·S ≤ n·(R − d), all integers.
					ceil := int64((beta + n - 1) / n)
					lhs := int64(n)*10e6 + (load+int64(n)*ceil)*s
					want := lhs <= int64(n)*(1e9-100e6)
					if got != want {
						t.Fatalf("n=%d load=%d β=%d S=%d: fits=%v, paper says %v", n, load, beta, s, got, want)
					}
				}
			}
		}
	}
}

func TestParallelismLearning(t *testing.T) {
	st := newFakeState(1, 0, 0, time.Second)
	cfg := Config{Classes: []ClassConfig{{Name: "gold", Period: time.Millisecond}}, Parallelism: 1}
	c, err := New(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.ObserveService(8, 10*time.Millisecond, 20*time.Millisecond)
	if p := c.Parallelism(); p != 1 {
		t.Fatalf("learning off, but P moved to %v", p)
	}

	cfg.LearnParallelism = true
	if err := c.Reconfigure(cfg); err != nil {
		t.Fatal(err)
	}
	// A backend with 4 slots: 8 in service take 2× their inherent time.
	for range 500 {
		c.ObserveService(8, 10*time.Millisecond, 20*time.Millisecond)
	}
	if p := c.Parallelism(); math.Abs(p-4) > 0.01 {
		t.Fatalf("saturated samples: P = %v, want ≈ 4", p)
	}
	// Unsaturated samples below P carry no information.
	for range 500 {
		c.ObserveService(2, 10*time.Millisecond, 10*time.Millisecond)
	}
	if p := c.Parallelism(); math.Abs(p-4) > 0.01 {
		t.Fatalf("uninformative samples moved P to %v", p)
	}
	// 6 in service at full speed: P is at least 6.
	for range 500 {
		c.ObserveService(6, 10*time.Millisecond, 10*time.Millisecond)
	}
	if p := c.Parallelism(); math.Abs(p-6) > 0.01 {
		t.Fatalf("full-speed samples: P = %v, want ≈ 6", p)
	}
	// Nonsense is ignored.
	c.ObserveService(0, time.Millisecond, time.Millisecond)
	c.ObserveService(4, 0, time.Millisecond)
	c.ObserveService(4, time.Millisecond, -1)
	// A new configured P restarts learning from it.
	cfg.Parallelism = 2
	if err := c.Reconfigure(cfg); err != nil {
		t.Fatal(err)
	}
	if p := c.Parallelism(); p != 2 {
		t.Fatalf("after reconfigure P = %v, want 2", p)
	}
}

// TestConcurrent hammers one controller from many goroutines under -race:
// arrivals in every class (two periodic, one immediate), disconnects,
// reconfigures, with Run ticking on the real clock. Every Admit must return,
// every decision must be counted once, and nothing may stay queued.
func TestConcurrent(t *testing.T) {
	st := newFakeState(4, 0, time.Millisecond, 200*time.Millisecond)
	cfg := Config{
		Classes: []ClassConfig{
			{Name: "gold", Period: time.Millisecond},
			{Name: "silver", Period: 3 * time.Millisecond},
			{Name: "bronze", Period: 0},
		},
		Buckets:  4,
		QueueCap: 64,
	}
	c, err := New(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- c.Run(ctx) }()

	const workers, perWorker = 48, 150
	var verdicts [maxVerdicts]atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range perWorker {
				req := admission.Request{
					Class:  rng.IntN(4), // 3 is out of range: counts as bronze
					Bucket: rng.IntN(5),
					S:      time.Duration(rng.IntN(20)) * time.Millisecond,
				}
				var gone chan struct{}
				if rng.IntN(4) == 0 {
					gone = make(chan struct{})
					req.Gone = gone
					delay := time.Duration(rng.IntN(3000)) * time.Microsecond
					go func() { time.Sleep(delay); close(gone) }()
				}
				d := c.Admit(&req)
				verdicts[d.Verdict].Add(1)
				if d.Verdict == admission.Admit {
					st.inflight.Add(1)
					time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond)
					st.inflight.Add(-1)
				} else if d.Verdict != admission.RejectGone && d.Verdict != admission.RejectNoBackend &&
					(d.RetryAfter < time.Second || d.RetryAfter > time.Minute) {
					t.Errorf("verdict %v with Retry-After %v", d.Verdict, d.RetryAfter)
				}
			}
		}()
	}
	// Reconfigure while traffic flows: periods change, a class comes and goes.
	wg.Add(1)
	go func() {
		defer wg.Done()
		alt := cfg
		alt.Classes = []ClassConfig{
			{Name: "gold", Period: 2 * time.Millisecond},
			{Name: "bronze", Period: time.Millisecond},
		}
		for i := range 20 {
			next := cfg
			if i%2 == 0 {
				next = alt
			}
			if err := c.Reconfigure(next); err != nil {
				t.Error(err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := c.Reconfigure(cfg); err != nil {
			t.Error(err)
		}
	}()
	wg.Wait()

	var total int64
	for i := range verdicts {
		total += verdicts[i].Load()
	}
	if total != workers*perWorker {
		t.Fatalf("%d decisions for %d requests", total, workers*perWorker)
	}
	if verdicts[admission.Admit].Load() == 0 {
		t.Fatal("nothing admitted")
	}
	if p := c.pending.Load(); p != 0 {
		t.Fatalf("pending = %d after all Admit calls returned", p)
	}
	for i := range cfg.Classes {
		if n := c.QueueLen(i); n != 0 {
			t.Fatalf("class %d: %d still queued", i, n)
		}
	}
	// The counters agree with what the callers saw: silver was removed and
	// restored, and kept its counters.
	var counted uint64
	for _, cl := range c.snap.Load().classes {
		for v := range admission.Verdicts() {
			counted += cl.decisions[v].Load()
		}
	}
	if int64(counted) != total {
		t.Fatalf("counters say %d decisions, callers saw %d", counted, total)
	}
	cancel()
	if err := <-runDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v", err)
	}
	c.Close()
}

// TestRunNoLeak shows the policer goroutine and parked waiters all end:
// on ctx cancellation Run returns, and Close releases the waiters.
func TestRunNoLeak(t *testing.T) {
	base := runtime.NumGoroutine()
	st := newFakeState(1, 0, 0, time.Second)
	c, err := New(st, Config{Classes: []ClassConfig{{Name: "gold", Period: time.Hour}}, StrictPeriods: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- c.Run(ctx) }()

	// Waiters parked for an hour-long period.
	var wg sync.WaitGroup
	got := make(chan admission.Verdict, 10)
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got <- c.Admit(&admission.Request{S: time.Millisecond}).Verdict
		}()
	}
	for c.QueueLen(0) < 10 {
		runtime.Gosched()
	}
	cancel()
	if err := <-runDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v", err)
	}
	c.Close()
	wg.Wait()
	for range 10 {
		if v := <-got; v != admission.RejectNoBackend {
			t.Fatalf("waiter released with %v", v)
		}
	}
	// Run after Close returns at once.
	if err := c.Run(context.Background()); err != nil {
		t.Fatalf("Run after Close: %v", err)
	}
	if err := c.Reconfigure(Config{Classes: []ClassConfig{{Name: "x"}}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Reconfigure after Close: %v", err)
	}
	c.Close() // idempotent

	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines: %d, baseline %d\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}

// TestRunBound: with Run on the real clock, a request waits about one period.
// (The exact bound is shown on the manual clock in testdata/bound.txt; the
// slack here absorbs scheduling delays on a loaded machine.)
func TestRunBound(t *testing.T) {
	const period, slack = 20 * time.Millisecond, 250 * time.Millisecond
	st := newFakeState(1, 0, 0, time.Second)
	c, err := New(st, Config{Classes: []ClassConfig{{Name: "gold", Period: period}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	defer c.Close()
	for range 10 {
		start := time.Now()
		d := c.Admit(&admission.Request{S: time.Millisecond})
		if d.Verdict != admission.Admit {
			t.Fatalf("verdict %v", d.Verdict)
		}
		if w := time.Since(start); w > period+slack {
			t.Fatalf("waited %v with period %v", w, period)
		}
	}
	// Reconfigure wakes Run: a shorter period takes effect at once.
	if err := c.Reconfigure(Config{Classes: []ClassConfig{{Name: "gold", Period: time.Millisecond}}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c.Admit(&admission.Request{S: time.Millisecond})
	if w := time.Since(start); w > period+slack {
		t.Fatalf("after shortening the period, waited %v", w)
	}
}

func TestCollector(t *testing.T) {
	st := newFakeState(2, 8, 25*time.Millisecond, 2*time.Second)
	c, err := New(st, Config{
		Classes:     []ClassConfig{{Name: "gold", Period: 0}, {Name: "silver", Period: 100 * time.Millisecond}},
		ConstLabels: prometheus.Labels{"app": "shop"},
		Parallelism: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	c.Admit(&admission.Request{Class: 0, S: time.Millisecond})
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, lp := range m.GetLabel() {
				if lp.GetName() != "app" {
					key += "," + lp.GetName() + "=" + lp.GetValue()
				} else if lp.GetValue() != "shop" {
					t.Errorf("%s: app label %q", mf.GetName(), lp.GetValue())
				}
			}
			switch {
			case m.Counter != nil:
				values[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				values[key] = m.Gauge.GetValue()
			case m.Histogram != nil:
				values[key] = float64(m.Histogram.GetSampleCount())
			}
		}
	}
	for key, want := range map[string]float64{
		"sentry_batch_decisions_total,class=gold,verdict=admitted":   1,
		"sentry_batch_decisions_total,class=silver,verdict=admitted": 0,
		"sentry_batch_queue_length,class=silver":                     0,
		"sentry_batch_wait_seconds,class=silver":                     0,
		"sentry_batch_eta":                                           4,
		"sentry_batch_queue_delay_seconds":                           0.025,
		"sentry_batch_rsla_seconds":                                  2,
		"sentry_batch_parallelism":                                   2,
		"sentry_batch_admitted_pending":                              0,
	} {
		got, ok := values[key]
		if !ok {
			t.Errorf("missing %s", key)
		} else if got != want {
			t.Errorf("%s = %v, want %v", key, got, want)
		}
	}
}

func TestWaitHistogram(t *testing.T) {
	var h waitHist
	for _, d := range []time.Duration{0, time.Millisecond, 100 * time.Millisecond, 3 * time.Second} {
		h.observe(d)
	}
	if got := h.counts[0].Load(); got != 1 { // 0 ≤ 0.5ms
		t.Fatalf("first bucket %d", got)
	}
	if got := h.counts[1].Load(); got != 1 { // 1ms ≤ 1ms
		t.Fatalf("1ms bucket %d", got)
	}
	if got := h.counts[len(waitBounds)].Load(); got != 1 {
		t.Fatalf("+Inf bucket %d", got)
	}
	if got := time.Duration(h.sumNs.Load()); got != 3101*time.Millisecond {
		t.Fatalf("sum %v", got)
	}
}

// TestAdmitAllocs: neither the immediate test nor queueing and being released
// by a policer run allocates.
func TestAdmitAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("timing-dependent")
	}
	st := newFakeState(4, 0, 0, time.Second)
	c, err := New(st, Config{Classes: []ClassConfig{{Name: "gold", Period: 0}, {Name: "silver", Period: time.Nanosecond}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := &admission.Request{Class: 0, S: time.Millisecond}
	if a := testing.AllocsPerRun(1000, func() { c.Admit(req) }); a != 0 {
		t.Fatalf("immediate Admit: %v allocs", a)
	}
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			c.Tick(time.Now())
			runtime.Gosched()
		}
	}()
	queued := &admission.Request{Class: 1, S: time.Millisecond, Gone: make(chan struct{})}
	c.Admit(queued) // warm the pool and the run's scratch slices
	a := testing.AllocsPerRun(1000, func() { c.Admit(queued) })
	stop.Store(true)
	<-done
	if a != 0 {
		t.Fatalf("queued Admit: %v allocs", a)
	}
}
