package thresholdac

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sentry-proxy/sentry/admission"
)

const eps = 1e-12

func TestComputePaperExamples(t *testing.T) {
	// Cataclysm §3.3: capacity 100 requests/s, s = 1 (so work = λ).
	tests := []struct {
		name  string
		k     float64
		work  []float64
		class int
		p     float64
	}{
		{"λ=75,50: all of C1, half of C2", 100, []float64{75, 50}, 1, 0.5},
		{"λ=150,75: two-thirds of C1, none of C2", 100, []float64{150, 75}, 0, 2.0 / 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Compute(tc.k, tc.work)
			if got.All || got.Class != tc.class || math.Abs(got.P-tc.p) > eps {
				t.Fatalf("Compute(%v, %v) = %+v, want class %d p %v", tc.k, tc.work, got, tc.class, tc.p)
			}
		})
	}
}

func TestCompute(t *testing.T) {
	tests := []struct {
		name  string
		k     float64
		work  []float64
		class int
		p     float64
		all   bool
	}{
		// λ = 10, 20, 30 /s; s = 50, 40, 100 ms → work 0.5, 0.8, 3.0; K = 2.
		// Σ_{j<2} = 1.3 ≤ 2 < 4.3 → i = 2, p = 0.7/3.
		{"different s", 2, []float64{0.5, 0.8, 3.0}, 2, 0.7 / 3, false},
		// λ = 100, 10; s = 5 ms, 200 ms → 0.5, 2; K = 1 → i = 1, p = 0.25.
		{"cheap important, costly rest", 1, []float64{0.5, 2}, 1, 0.25, false},
		{"all fit", 1, []float64{0.2, 0.3}, 2, 1, true},
		{"exactly full fits", 1, []float64{0.25, 0.75}, 2, 1, true},
		{"just over", 1, []float64{0.25, 0.75, 0.5}, 2, 0, false},
		{"zero rates skipped", 1, []float64{0, 0, 5}, 2, 0.2, false},
		{"all zero", 1, []float64{0, 0, 0}, 3, 1, true},
		{"no classes", 1, nil, 0, 1, true},
		{"negative and NaN count as zero", 1, []float64{-3, math.NaN(), 2}, 2, 0.5, false},
		{"infinite work", 1, []float64{0.5, math.Inf(1), 0.1}, 1, 0, false},
		{"zero capacity", 0, []float64{1, 1}, 0, 0, false},
		{"zero capacity, no work", 0, []float64{0, 0}, 2, 1, true},
		{"negative capacity", -1, []float64{1}, 0, 0, false},
		{"NaN capacity", math.NaN(), []float64{1}, 0, 0, false},
		{"infinite capacity", math.Inf(1), []float64{1e300, 1e300}, 2, 1, true},
		{"first class alone over", 3, []float64{4, 1}, 0, 0.75, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Compute(tc.k, tc.work)
			if got.All != tc.all || got.Class != tc.class || math.Abs(got.P-tc.p) > eps {
				t.Fatalf("Compute(%v, %v) = %+v, want class %d p %v all %v", tc.k, tc.work, got, tc.class, tc.p, tc.all)
			}
			if !got.All && !(got.P >= 0 && got.P < 1) {
				t.Fatalf("p = %v outside [0, 1)", got.P)
			}
		})
	}
}

// fakeInputs is a mutable Inputs for tests.
type fakeInputs struct {
	mu    sync.Mutex
	rate  []float64
	s     []time.Duration
	n     int
	calls int
}

func (f *fakeInputs) Rate(c int) float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rate[c]
}

func (f *fakeInputs) MeanS(c int) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.s[c]
}

func (f *fakeInputs) Healthy() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.n
}

func (f *fakeInputs) set(n int, rate []float64, s []time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n, f.rate, f.s = n, rate, s
}

func ms(v ...float64) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x * float64(time.Millisecond))
	}
	return out
}

func newController(t *testing.T, cfg Config) *Controller {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewValidation(t *testing.T) {
	in := &fakeInputs{}
	l, _ := NewLearner(LearnerConfig{})
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no classes", Config{Inputs: in, PerServer: 1}, "Classes"},
		{"no inputs", Config{Classes: 1, PerServer: 1}, "Inputs"},
		{"no capacity", Config{Classes: 1, Inputs: in}, "one of PerServer and Learned"},
		{"both capacities", Config{Classes: 1, Inputs: in, PerServer: 1, Learned: l}, "not both"},
		{"negative capacity", Config{Classes: 1, Inputs: in, PerServer: -1}, "PerServer"},
		{"NaN capacity", Config{Classes: 1, Inputs: in, PerServer: math.NaN()}, "PerServer"},
		{"infinite capacity", Config{Classes: 1, Inputs: in, PerServer: math.Inf(1)}, "PerServer"},
		{"negative period", Config{Classes: 1, Inputs: in, PerServer: 1, Period: -time.Second}, "Period"},
		{"ok configured", Config{Classes: 3, Inputs: in, PerServer: 1}, ""},
		{"ok learned", Config{Classes: 3, Inputs: in, Learned: l}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.cfg)
			if tc.want == "" {
				if err != nil || c == nil {
					t.Fatalf("New: %v", err)
				}
				if c.Period() != DefaultPeriod {
					t.Fatalf("period %v, want default %v", c.Period(), DefaultPeriod)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct{ period, want time.Duration }{
		{time.Millisecond, time.Second},
		{200 * time.Millisecond, time.Second},
		{time.Second, time.Second},
		{1500 * time.Millisecond, 2 * time.Second},
		{15 * time.Second, 15 * time.Second},
		{15*time.Second + 1, 16 * time.Second},
	} {
		if got := RetryAfter(tc.period); got != tc.want {
			t.Errorf("RetryAfter(%v) = %v, want %v", tc.period, got, tc.want)
		}
	}
}

// fixedRand returns v on every draw.
func fixedRand(v uint64) func() uint64 { return func() uint64 { return v } }

func verdicts(c *Controller, classes int) []admission.Verdict {
	out := make([]admission.Verdict, classes)
	for i := range out {
		out[i] = c.Admit(&admission.Request{Class: i}).Verdict
	}
	return out
}

func TestControllerPaperExample(t *testing.T) {
	// Capacity 100 server-seconds/s as 4 servers × 25, s = 1 s.
	in := &fakeInputs{}
	in.set(4, []float64{75, 50}, []time.Duration{time.Second, time.Second})
	var draw uint64
	c := newController(t, Config{Classes: 2, Inputs: in, PerServer: 25, Rand: func() uint64 { return draw }})

	// Before the first recompute everything is admitted.
	if got := verdicts(c, 2); got[0] != admission.Admit || got[1] != admission.Admit {
		t.Fatalf("before recompute: %v", got)
	}

	at := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	th := c.Recompute(at)
	if th.Class != 1 || th.P != 0.5 || th.K != 100 || th.Offered != 125 || !th.At.Equal(at) || th.Healthy != 4 || !th.CapacityKnown {
		t.Fatalf("threshold %+v", th)
	}
	if cur := c.Current(); cur != th {
		t.Fatalf("Current %+v != Recompute %+v", cur, th)
	}
	// Draw just below p·2³² admits class 1, just above rejects it.
	draw = uint64(1<<31-1) << 32
	if got := c.Admit(&admission.Request{Class: 1}); got.Verdict != admission.Admit {
		t.Fatalf("low draw: %+v", got)
	}
	draw = uint64(1<<31) << 32
	got := c.Admit(&admission.Request{Class: 1})
	if got.Verdict != admission.RejectThreshold || got.RetryAfter != time.Second {
		t.Fatalf("high draw: %+v", got)
	}
	if got := c.Admit(&admission.Request{Class: 0}); got.Verdict != admission.Admit {
		t.Fatalf("class 0: %+v", got)
	}

	// λ = 150, 75: class 0 with p = 2/3, class 1 rejected whatever the draw.
	in.set(4, []float64{150, 75}, []time.Duration{time.Second, time.Second})
	th = c.Recompute(at.Add(time.Second))
	if th.Class != 0 || math.Abs(th.P-2.0/3) > eps {
		t.Fatalf("threshold %+v", th)
	}
	draw = 0
	if got := verdicts(c, 2); got[0] != admission.Admit || got[1] != admission.RejectThreshold {
		t.Fatalf("draw 0: %v", got)
	}
	draw = math.MaxUint64
	if got := verdicts(c, 2); got[0] != admission.RejectThreshold || got[1] != admission.RejectThreshold {
		t.Fatalf("draw max: %v", got)
	}
}

func TestControllerCases(t *testing.T) {
	type want struct {
		class int
		p     float64
		all   bool
	}
	tests := []struct {
		name      string
		n         int
		perServer float64
		rate      []float64
		s         []time.Duration
		want      want
		verdicts  []admission.Verdict // with a draw of 0 (admits whenever p > 0)
	}{
		{
			// work = 10·0.05 + 20·0.04 + 30·0.1 = 0.5 + 0.8 + 3.0; K = 2·1.
			name: "different s", n: 2, perServer: 1,
			rate: []float64{10, 20, 30}, s: ms(50, 40, 100),
			want:     want{2, 0.7 / 3, false},
			verdicts: []admission.Verdict{admission.Admit, admission.Admit, admission.Admit},
		},
		{
			// work = 400·0.002 + 100·0.01 + 50·0.02 = 0.8 + 1 + 1; K = 3·0.5 = 1.5.
			name: "three classes, middle cut", n: 3, perServer: 0.5,
			rate: []float64{400, 100, 50}, s: ms(2, 10, 20),
			want:     want{1, 0.7, false},
			verdicts: []admission.Verdict{admission.Admit, admission.Admit, admission.RejectThreshold},
		},
		{
			name: "all fit", n: 10, perServer: 1,
			rate: []float64{10, 20, 30}, s: ms(50, 40, 100),
			want:     want{3, 1, true},
			verdicts: []admission.Verdict{admission.Admit, admission.Admit, admission.Admit},
		},
		{
			name: "zero rates", n: 1, perServer: 1,
			rate: []float64{0, 0, 0}, s: ms(50, 40, 100),
			want:     want{3, 1, true},
			verdicts: []admission.Verdict{admission.Admit, admission.Admit, admission.Admit},
		},
		{
			name: "unknown s counts as no work", n: 1, perServer: 1,
			rate: []float64{1000, 5, 0}, s: ms(0, 400, 10),
			want:     want{1, 0.5, false},
			verdicts: []admission.Verdict{admission.Admit, admission.Admit, admission.RejectThreshold},
		},
		{
			name: "n=0 rejects everything", n: 0, perServer: 1,
			rate: []float64{1, 1, 1}, s: ms(1, 1, 1),
			want:     want{0, 0, false},
			verdicts: []admission.Verdict{admission.RejectThreshold, admission.RejectThreshold, admission.RejectThreshold},
		},
		{
			name: "n=0 with no traffic still rejects", n: 0, perServer: 1,
			rate: []float64{0, 0, 0}, s: ms(1, 1, 1),
			want:     want{0, 0, false},
			verdicts: []admission.Verdict{admission.RejectThreshold, admission.RejectThreshold, admission.RejectThreshold},
		},
		{
			name: "negative n treated as 0", n: -2, perServer: 1,
			rate: []float64{1, 1, 1}, s: ms(1, 1, 1),
			want:     want{0, 0, false},
			verdicts: []admission.Verdict{admission.RejectThreshold, admission.RejectThreshold, admission.RejectThreshold},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := &fakeInputs{}
			in.set(tc.n, tc.rate, tc.s)
			c := newController(t, Config{Classes: 3, Inputs: in, PerServer: tc.perServer, Rand: fixedRand(0), Period: 15 * time.Second})
			th := c.Recompute(time.Unix(100, 0))
			if th.Class != tc.want.class || math.Abs(th.P-tc.want.p) > 1e-9 || th.All != tc.want.all {
				t.Fatalf("threshold %+v, want %+v", th, tc.want)
			}
			got := verdicts(c, 3)
			for i := range got {
				if got[i] != tc.verdicts[i] {
					t.Fatalf("verdicts %v, want %v", got, tc.verdicts)
				}
			}
			if d := c.Admit(&admission.Request{Class: 2}); d.Verdict == admission.RejectThreshold && d.RetryAfter != 15*time.Second {
				t.Fatalf("RetryAfter %v, want 15s", d.RetryAfter)
			}
		})
	}
}

func TestOutOfRangeClass(t *testing.T) {
	in := &fakeInputs{}
	in.set(1, []float64{0.5, 2}, ms(1000, 1000)) // i = 1, p = 0.25
	c := newController(t, Config{Classes: 2, Inputs: in, PerServer: 1, Rand: fixedRand(0)})
	c.Recompute(time.Unix(1, 0))
	for _, cls := range []int{-1, 2, 1 << 40} {
		if d := c.Admit(&admission.Request{Class: cls}); d.Verdict != admission.RejectThreshold {
			t.Errorf("class %d: %v, want rejected as least important", cls, d.Verdict)
		}
	}
	in.set(1, []float64{0, 0}, ms(1000, 1000)) // all fit
	c.Recompute(time.Unix(2, 0))
	for _, cls := range []int{-1, 2, 1 << 40} {
		if d := c.Admit(&admission.Request{Class: cls}); d.Verdict != admission.Admit {
			t.Errorf("class %d with all fitting: %v, want admitted", cls, d.Verdict)
		}
	}
}

func TestAdmitThresholdEdges(t *testing.T) {
	for _, tc := range []struct {
		p    float64
		want uint32
	}{
		{0, 0}, {-1, 0}, {math.NaN(), 0}, {0.5, 1 << 31}, {math.Nextafter(1, 0), math.MaxUint32}, {1, math.MaxUint32},
	} {
		if got := admitThreshold(tc.p); got != tc.want {
			t.Errorf("admitThreshold(%v) = %d, want %d", tc.p, got, tc.want)
		}
	}
}

// TestAdmitFraction checks that the admitted fraction of the threshold
// class matches p over many seeded draws, for both seeded sources.
func TestAdmitFraction(t *testing.T) {
	const draws = 400_000
	sources := map[string]func() uint64{
		"pcg":         rand.New(rand.NewPCG(1, 2)).Uint64,
		"counterrand": NewCounterRand(42).Uint64,
		"default":     nil, // runtime cheaprand, unseeded: 5σ fails about once in 10⁶ runs
	}
	for name, src := range sources {
		for _, work := range [][]float64{{0.5, 1.5}, {75, 50}, {150, 75}, {0.1, 0.89, 10}} {
			k := 1.0
			if work[0] > 10 {
				k = 100
			}
			want := Compute(k, work)
			in := &fakeInputs{}
			in.set(1, work, ms(1000, 1000, 1000)[:len(work)])
			c := newController(t, Config{Classes: len(work), Inputs: in, PerServer: k, Rand: src})
			c.Recompute(time.Unix(1, 0))
			admitted := 0
			for range draws {
				if c.Admit(&admission.Request{Class: want.Class}).Verdict == admission.Admit {
					admitted++
				}
			}
			got := float64(admitted) / draws
			sigma := math.Sqrt(want.P * (1 - want.P) / draws)
			if math.Abs(got-want.P) > 5*sigma+1e-9 {
				t.Errorf("%s work %v: admitted fraction %.5f, want %.5f ± %.5f", name, work, got, want.P, 5*sigma)
			}
		}
	}
}

func TestAdmitDoesNotAllocate(t *testing.T) {
	in := &fakeInputs{}
	in.set(1, []float64{0.5, 1}, ms(1000, 1000))
	c := newController(t, Config{Classes: 2, Inputs: in, PerServer: 1})
	c.Recompute(time.Unix(1, 0))
	req := &admission.Request{Class: 1}
	if n := testing.AllocsPerRun(1000, func() { c.Admit(req) }); n != 0 {
		t.Fatalf("Admit allocates %v times", n)
	}
}

func TestLearnedCapacity(t *testing.T) {
	l, err := NewLearner(LearnerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	in := &fakeInputs{}
	in.set(4, []float64{75, 50}, []time.Duration{10 * time.Millisecond, 10 * time.Millisecond}) // work 0.75 + 0.5
	c := newController(t, Config{Classes: 2, Inputs: in, Learned: l, Rand: fixedRand(math.MaxUint64)})

	// Unknown capacity: admit everything.
	th := c.Recompute(time.Unix(1, 0))
	if !th.All || th.CapacityKnown || th.K != 0 {
		t.Fatalf("unknown capacity: %+v", th)
	}
	if got := verdicts(c, 2); got[1] != admission.Admit {
		t.Fatalf("unknown capacity verdicts %v", got)
	}

	// Batch mode sustained 1.0 server-s/s over 4 servers within the SLA:
	// 0.25 per server, so K = 1.0 → class 1 admitted with p = 0.5.
	l.Observe(Observation{Work: 1.0, SLAMet: true, Healthy: 4})
	th = c.Recompute(time.Unix(2, 0))
	if !th.CapacityKnown || th.PerServer != 0.25 || th.K != 1 || th.Class != 1 || math.Abs(th.P-0.5) > eps {
		t.Fatalf("learned: %+v", th)
	}
	// A server fails: K = 3 × 0.25 = 0.75 → class 0 alone fills it.
	in.set(3, []float64{75, 50}, []time.Duration{10 * time.Millisecond, 10 * time.Millisecond})
	th = c.Recompute(time.Unix(3, 0))
	if th.K != 0.75 || th.Class != 1 || th.P != 0 {
		t.Fatalf("after a failure: %+v", th)
	}
	if got := verdicts(c, 2); got[0] != admission.Admit || got[1] != admission.RejectThreshold {
		t.Fatalf("verdicts %v", got)
	}
}

func TestLearner(t *testing.T) {
	newL := func(t *testing.T, cfg LearnerConfig) *Learner {
		t.Helper()
		l, err := NewLearner(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	est := func(l *Learner) float64 { v, _ := l.PerServer(); return v }

	t.Run("unknown until evidence", func(t *testing.T) {
		l := newL(t, LearnerConfig{})
		if _, ok := l.PerServer(); ok {
			t.Fatal("known before any observation")
		}
		for _, o := range []Observation{
			{Work: 1, SLAMet: true, Healthy: 0},
			{Work: -1, SLAMet: true, Healthy: 1},
			{Work: math.NaN(), SLAMet: true, Healthy: 1},
			{Work: math.Inf(1), SLAMet: true, Healthy: 1},
			{Work: 0, SLAMet: true, Healthy: 1},
			{Work: 0, SLAMet: false, Healthy: 1},
		} {
			if l.Observe(o) {
				t.Errorf("used %+v", o)
			}
		}
		if _, ok := l.PerServer(); ok || l.Observations() != 0 {
			t.Fatal("known after unusable observations")
		}
		if !l.Observe(Observation{Work: 3, SLAMet: true, Healthy: 2}) || est(l) != 1.5 {
			t.Fatalf("first met observation: %v", est(l))
		}
	})
	t.Run("first evidence a violation", func(t *testing.T) {
		l := newL(t, LearnerConfig{})
		l.Observe(Observation{Work: 2, SLAMet: false, Healthy: 1})
		if v, ok := l.PerServer(); !ok || math.Abs(v-1.9) > eps {
			t.Fatalf("got %v %v, want 1.9", v, ok)
		}
	})
	t.Run("rise toward higher sustained work", func(t *testing.T) {
		l := newL(t, LearnerConfig{Initial: 1})
		l.Observe(Observation{Work: 2, SLAMet: true, Healthy: 1}) // 1 + 0.25·1
		if math.Abs(est(l)-1.25) > eps {
			t.Fatalf("after rise %v, want 1.25", est(l))
		}
		l.Observe(Observation{Work: 0.5, SLAMet: true, Healthy: 1}) // lower, not limited: no change
		if math.Abs(est(l)-1.25) > eps {
			t.Fatalf("after low met interval %v, want 1.25", est(l))
		}
		for range 100 {
			l.Observe(Observation{Work: 2, SLAMet: true, Healthy: 1})
		}
		if math.Abs(est(l)-2) > 1e-9 {
			t.Fatalf("converged to %v, want 2", est(l))
		}
	})
	t.Run("violation cuts below the work", func(t *testing.T) {
		l := newL(t, LearnerConfig{Initial: 2})
		l.Observe(Observation{Work: 3, SLAMet: false, Healthy: 2}) // w = 1.5 < 2 → 1.5·0.95
		if math.Abs(est(l)-1.425) > eps {
			t.Fatalf("after violation %v, want 1.425", est(l))
		}
		l.Observe(Observation{Work: 10, SLAMet: false, Healthy: 2}) // w = 5 > est → est·0.95
		if math.Abs(est(l)-1.425*0.95) > eps {
			t.Fatalf("after violation above %v", est(l))
		}
	})
	t.Run("floor", func(t *testing.T) {
		l := newL(t, LearnerConfig{Initial: 2, Floor: 0.5})
		l.Observe(Observation{Work: 0.01, SLAMet: false, Healthy: 1})
		if est(l) != 0.5 {
			t.Fatalf("floored to %v, want 0.5", est(l))
		}
	})
	t.Run("probe only when limited and near the estimate", func(t *testing.T) {
		l := newL(t, LearnerConfig{Initial: 1})
		l.Observe(Observation{Work: 1, SLAMet: true, Healthy: 1}) // not limited
		if est(l) != 1 {
			t.Fatalf("unlimited probe: %v", est(l))
		}
		l.Observe(Observation{Work: 0.5, SLAMet: true, Healthy: 1, Limited: true}) // far below
		if est(l) != 1 {
			t.Fatalf("far-below probe: %v", est(l))
		}
		l.Observe(Observation{Work: 0.95, SLAMet: true, Healthy: 1, Limited: true})
		if math.Abs(est(l)-1.01) > eps {
			t.Fatalf("probe: %v, want 1.01", est(l))
		}
		// Probing alone is bounded by (1+Probe)/(1−ProbeSlack) of the work.
		for range 1000 {
			l.Observe(Observation{Work: 1, SLAMet: true, Healthy: 1, Limited: true})
		}
		if bound := 1.01 / 0.9; est(l) > bound+eps {
			t.Fatalf("probed to %v, above bound %v", est(l), bound)
		}
	})
	t.Run("sawtooth under threshold-mode feedback", func(t *testing.T) {
		// True capacity 1.0/server; threshold mode admits ≈ K; intervals
		// over capacity miss the SLA. The estimate must stay near 1.
		l := newL(t, LearnerConfig{Initial: 0.3})
		var lo, hi float64 = math.Inf(1), 0
		for i := range 2000 {
			k := est(l)
			l.Observe(Observation{Work: 4 * k, SLAMet: k <= 1, Healthy: 4, Limited: true})
			if i > 500 {
				lo, hi = min(lo, est(l)), max(hi, est(l))
			}
		}
		if lo < 0.9 || hi > 1.02 {
			t.Fatalf("estimate range [%v, %v], want within [0.9, 1.02]", lo, hi)
		}
	})
	t.Run("validation", func(t *testing.T) {
		for _, cfg := range []LearnerConfig{
			{Initial: -1}, {Initial: math.NaN()}, {Floor: math.Inf(1)},
			{Rise: 1.5}, {Rise: -0.1}, {Backoff: 1}, {Backoff: -0.5},
			{Probe: -1}, {Probe: math.Inf(1)}, {ProbeSlack: 1}, {ProbeSlack: -0.1},
		} {
			if _, err := NewLearner(cfg); err == nil {
				t.Errorf("NewLearner(%+v) accepted", cfg)
			}
		}
	})
}

func TestRecomputeConcurrentWithAdmit(t *testing.T) {
	in := &fakeInputs{}
	in.set(1, []float64{0.5, 1}, ms(1000, 1000))
	c := newController(t, Config{Classes: 2, Inputs: in, PerServer: 1})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 2 {
		wg.Go(func() {
			req := &admission.Request{Class: g}
			for {
				select {
				case <-stop:
					return
				default:
					c.Admit(req)
				}
			}
		})
	}
	for i := range 200 {
		in.set(1, []float64{0.5, float64(i % 3)}, ms(1000, 1000))
		c.Recompute(time.Unix(int64(i), 0))
	}
	close(stop)
	wg.Wait()
}

func TestRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in := &fakeInputs{}
		in.set(1, []float64{75, 50}, []time.Duration{10 * time.Millisecond, 10 * time.Millisecond})
		c := newController(t, Config{Classes: 2, Inputs: in, PerServer: 1})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		start := time.Now()
		go func() { c.Run(ctx); close(done) }()

		synctest.Wait() // the first recompute happens at once
		if th := c.Current(); !th.At.Equal(start) || th.Class != 1 {
			t.Fatalf("first recompute %+v", th)
		}
		in.set(1, []float64{150, 75}, []time.Duration{10 * time.Millisecond, 10 * time.Millisecond})
		time.Sleep(DefaultPeriod)
		synctest.Wait()
		if th := c.Current(); !th.At.Equal(start.Add(DefaultPeriod)) || th.Class != 0 {
			t.Fatalf("second recompute %+v", th)
		}
		cancel()
		<-done // Run returns on cancel; synctest fails the test on a leaked goroutine
	})
}
