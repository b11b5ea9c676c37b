package admission

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// manual is a manual clock for driving Observe.
type manual struct{ t time.Time }

func (m *manual) now() time.Time            { return m.t }
func (m *manual) advance(d time.Duration)   { m.t = m.t.Add(d) }
func newManual() *manual                    { return &manual{t: time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)} }
func (m *manual) feed(s *Switch, u float64) { s.Observe(m.t, u) }

type switchRecord struct {
	from, to Mode
	at       time.Time
}

func newTestSwitch(t *testing.T, cfg SwitchConfig) (*Switch, *[]switchRecord) {
	t.Helper()
	var recs []switchRecord
	cfg.OnSwitch = func(from, to Mode, at time.Time) { recs = append(recs, switchRecord{from, to, at}) }
	s, err := NewSwitch(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, &recs
}

// step feeds utilisation u every interval for total.
func step(m *manual, s *Switch, u float64, interval, total time.Duration) {
	for d := time.Duration(0); d < total; d += interval {
		m.advance(interval)
		m.feed(s, u)
	}
}

func TestParseMode(t *testing.T) {
	for _, m := range []Mode{ModeAuto, ModeBatch, ModeThreshold, ModeOff, ModeAdaptive} {
		got, err := ParseMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	for _, bad := range []string{"", "Auto", "Adaptive", "thresh"} {
		if _, err := ParseMode(bad); err == nil {
			t.Errorf("ParseMode(%q) accepted", bad)
		}
	}
	if Mode(99).String() != "unknown" {
		t.Error("Mode(99).String()")
	}
}

func TestNewSwitchValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  SwitchConfig
		want string
	}{
		{"bad mode", SwitchConfig{Mode: 9}, "mode"},
		{"low above high", SwitchConfig{CPULow: 0.9, CPUHigh: 0.8}, "cpu_low"},
		{"low equals high", SwitchConfig{CPULow: 0.85}, "cpu_low"},
		{"high above 1", SwitchConfig{CPUHigh: 1.2}, "cpu_high"},
		{"negative low", SwitchConfig{CPULow: -0.1}, "cpu_low"},
		{"NaN high", SwitchConfig{CPUHigh: math.NaN()}, "cpu_high"},
		{"negative hold", SwitchConfig{Hold: -time.Second}, "negative"},
		{"negative revert", SwitchConfig{RevertAfter: -time.Second}, "negative"},
		{"max below revert", SwitchConfig{RevertAfter: time.Minute, MaxRevertAfter: time.Second}, "max_revert_after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewSwitch(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewSwitch error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
	s, err := NewSwitch(SwitchConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Configured() != ModeAuto || s.Mode() != ModeBatch || s.cfg.CPUHigh != DefaultCPUHigh || s.cfg.CPULow != DefaultCPULow ||
		s.cfg.Hold != DefaultHold || s.cfg.RevertAfter != DefaultRevertAfter || s.cfg.MaxRevertAfter != 8*DefaultRevertAfter {
		t.Fatalf("defaults: %+v mode %v", s.cfg, s.Mode())
	}
	if st := s.Status(); !math.IsNaN(st.Utilization) || st.RevertAfter != DefaultRevertAfter {
		t.Fatalf("initial status %+v", st)
	}
}

func TestHysteresis(t *testing.T) {
	const tick = 250 * time.Millisecond
	m := newManual()
	s, recs := newTestSwitch(t, SwitchConfig{})

	// Above cpu_high for less than hold: no switch.
	m.feed(s, 0.5)
	step(m, s, 0.9, tick, DefaultHold-tick) // samples above from +tick to +hold−tick: a run of hold − 2·tick
	if s.Mode() != ModeBatch {
		t.Fatal("switched before hold")
	}
	// A dip to exactly cpu_high (not above) resets the hold timer.
	step(m, s, DefaultCPUHigh, tick, tick)
	step(m, s, 0.95, tick, DefaultHold)
	if s.Mode() != ModeBatch {
		t.Fatal("switched although the dip should have reset the hold timer")
	}
	// One more sample makes the run last hold: switch.
	step(m, s, 0.95, tick, tick)
	if s.Mode() != ModeThreshold || len(*recs) != 1 || (*recs)[0] != (switchRecord{ModeBatch, ModeThreshold, m.t}) {
		t.Fatalf("mode %v, switches %+v", s.Mode(), *recs)
	}
	switchedAt := m.t

	// Below cpu_low, but for less than revert_after: no revert.
	step(m, s, 0.3, tick, DefaultRevertAfter)
	if s.Mode() != ModeThreshold {
		t.Fatal("reverted before revert_after")
	}
	// A sample at cpu_low (not below) resets the revert timer.
	step(m, s, DefaultCPULow, tick, tick)
	step(m, s, 0.3, tick, DefaultRevertAfter)
	if s.Mode() != ModeThreshold {
		t.Fatal("reverted although the revert timer should have been reset")
	}
	step(m, s, 0.3, tick, tick)
	if s.Mode() != ModeBatch || len(*recs) != 2 || (*recs)[1].to != ModeBatch {
		t.Fatalf("mode %v, switches %+v", s.Mode(), *recs)
	}
	st := s.Status()
	if st.ToThreshold != 1 || st.ToBatch != 1 || !st.Since.Equal(m.t) || st.Utilization != 0.3 || st.Mode != ModeBatch {
		t.Fatalf("status %+v", st)
	}
	if m.t.Sub(switchedAt) < DefaultRevertAfter {
		t.Fatal("episode shorter than revert_after")
	}
}

// TestNoFlap oscillates utilisation around each threshold and around both,
// and checks that a saturation episode has at most one switch each way.
func TestNoFlap(t *testing.T) {
	const tick = 250 * time.Millisecond
	m := newManual()
	s, recs := newTestSwitch(t, SwitchConfig{})
	oscillate := func(a, b float64, period int, total time.Duration) {
		i := 0
		for d := time.Duration(0); d < total; d += tick {
			m.advance(tick)
			u := a
			if (i/period)%2 == 1 {
				u = b
			}
			m.feed(s, u)
			i++
		}
	}
	// Around cpu_high, above for up to 1.75s at a time: never switches.
	oscillate(0.8, 0.9, 7, 10*time.Minute)
	if len(*recs) != 0 {
		t.Fatalf("switched while oscillating around cpu_high: %+v", *recs)
	}
	// Saturate: exactly one switch.
	step(m, s, 0.95, tick, 3*time.Second)
	// Around cpu_high, cpu_low, and between both, for ages: no revert.
	oscillate(0.8, 0.9, 1, 10*time.Minute)
	oscillate(0.55, 0.65, 3, 10*time.Minute)
	oscillate(0.1, 0.95, 4, 10*time.Minute)
	oscillate(0.5, 0.7, 100, 10*time.Minute) // below cpu_low for 25s at a time
	if len(*recs) != 1 || s.Mode() != ModeThreshold {
		t.Fatalf("switches %+v, mode %v", *recs, s.Mode())
	}
	// Calm: exactly one revert, then oscillation around both thresholds in
	// batch mode again does nothing.
	step(m, s, 0.2, tick, 40*time.Second)
	oscillate(0.5, 0.9, 3, 10*time.Minute)
	if len(*recs) != 2 || s.Mode() != ModeBatch {
		t.Fatalf("switches %+v, mode %v", *recs, s.Mode())
	}
}

// TestNoFlapRandom drives random utilisation that crosses both thresholds
// often and checks the invariants of the hysteresis on every switch.
func TestNoFlapRandom(t *testing.T) {
	const tick = 100 * time.Millisecond
	rng := rand.New(rand.NewPCG(7, 11))
	m := newManual()
	s, recs := newTestSwitch(t, SwitchConfig{})
	type sample struct {
		at time.Time
		u  float64
	}
	var hist []sample
	u := 0.7
	for range 200_000 { // 5.5 hours
		m.advance(tick)
		// A random walk with occasional jumps, clamped to [0, 1].
		u += rng.NormFloat64() * 0.05
		if rng.IntN(200) == 0 {
			u = rng.Float64()
		}
		u = min(max(u, 0), 1)
		hist = append(hist, sample{m.t, u})
		m.feed(s, u)
	}
	if len(*recs) < 4 {
		t.Fatalf("only %d switches; the walk should produce several episodes", len(*recs))
	}
	// Switches alternate direction, and each is preceded by an
	// uninterrupted run of qualifying samples of at least hold / the
	// current revert wait (≥ revert_after).
	idx := 0
	for k, r := range *recs {
		want := ModeThreshold
		if k%2 == 1 {
			want = ModeBatch
		}
		if r.to != want {
			t.Fatalf("switch %d to %v, want %v: %+v", k, r.to, want, *recs)
		}
		for hist[idx].at.Before(r.at) {
			idx++
		}
		need := DefaultHold
		ok := func(u float64) bool { return u > DefaultCPUHigh }
		if want == ModeBatch {
			need = DefaultRevertAfter
			ok = func(u float64) bool { return u < DefaultCPULow }
		}
		j := idx
		for j > 0 && ok(hist[j-1].u) {
			j--
		}
		if run := hist[idx].at.Sub(hist[j].at); run < need {
			t.Fatalf("switch %d at %v after a run of only %v", k, r.at, run)
		}
		if k > 0 && r.at.Sub((*recs)[k-1].at) < min(need, DefaultHold) {
			t.Fatalf("switches %d and %d too close", k-1, k)
		}
	}
}

func TestRelapseBackoff(t *testing.T) {
	const tick = 500 * time.Millisecond
	m := newManual()
	s, recs := newTestSwitch(t, SwitchConfig{RevertAfter: 10 * time.Second, MaxRevertAfter: 35 * time.Second})
	// A sustained overload whose CPU falls when threshold mode is on: the
	// sentry relapses each time it reverts.
	episode := func() time.Duration {
		start := m.t
		for s.Mode() == ModeBatch {
			step(m, s, 0.95, tick, tick)
		}
		for s.Mode() == ModeThreshold {
			step(m, s, 0.3, tick, tick)
		}
		return m.t.Sub(start)
	}
	var waits []time.Duration
	for range 5 {
		episode()
		waits = append(waits, s.Status().RevertAfter)
	}
	want := []time.Duration{10 * time.Second, 20 * time.Second, 35 * time.Second, 35 * time.Second, 35 * time.Second}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("revert waits %v, want %v", waits, want)
		}
	}
	if len(*recs) != 10 {
		t.Fatalf("%d switches, want 10", len(*recs))
	}
	// A long calm before the next saturation resets the wait.
	step(m, s, 0.3, tick, time.Minute)
	for s.Mode() == ModeBatch {
		step(m, s, 0.95, tick, tick)
	}
	if got := s.Status().RevertAfter; got != 10*time.Second {
		t.Fatalf("after a calm the revert wait is %v, want 10s", got)
	}
}

func TestRateAnchor(t *testing.T) {
	const tick = 500 * time.Millisecond
	m := newManual()
	s, recs := newTestSwitch(t, SwitchConfig{})
	feed := func(u, rate float64, d time.Duration) {
		for e := time.Duration(0); e < d; e += tick {
			m.advance(tick)
			s.ObserveRate(m.t, u, rate)
		}
	}
	feed(0.9, 10_000, 3*time.Second) // switch at u₀ = 0.9, r₀ = 10k/s
	if s.Mode() != ModeThreshold {
		t.Fatal("no switch")
	}
	// Threshold mode is cheap: CPU 0.25 while the rate stays high. The
	// predicted batch utilisation 0.9 × 9000/10000 = 0.81 is not below
	// cpu_low, so no revert however long.
	feed(0.25, 9000, 10*time.Minute)
	if s.Mode() != ModeThreshold {
		t.Fatal("reverted while the overload persisted")
	}
	// Rate unknown for a while: utilisation alone decides the samples,
	// but a known rate that is still high breaks the run again.
	feed(0.25, math.NaN(), 20*time.Second)
	feed(0.25, 9000, tick)
	feed(0.25, math.NaN(), 20*time.Second)
	if s.Mode() != ModeThreshold {
		t.Fatal("reverted although the run was broken")
	}
	// The overload ends: 0.9 × 6000/10000 = 0.54 < 0.6.
	feed(0.2, 6000, DefaultRevertAfter+tick)
	if s.Mode() != ModeBatch || len(*recs) != 2 {
		t.Fatalf("mode %v, switches %+v", s.Mode(), *recs)
	}
}

func TestForcedModesNeverSwitch(t *testing.T) {
	for _, mode := range []Mode{ModeBatch, ModeThreshold, ModeOff} {
		t.Run(mode.String(), func(t *testing.T) {
			m := newManual()
			s, recs := newTestSwitch(t, SwitchConfig{Mode: mode})
			if s.Mode() != mode {
				t.Fatalf("initial mode %v", s.Mode())
			}
			step(m, s, 1.0, time.Second, 5*time.Minute)
			step(m, s, 0.0, time.Second, 5*time.Minute)
			step(m, s, 1.0, time.Second, 5*time.Minute)
			if s.Mode() != mode || len(*recs) != 0 {
				t.Fatalf("mode %v, switches %+v", s.Mode(), *recs)
			}
			if st := s.Status(); st.Utilization != 1.0 || st.Configured != mode {
				t.Fatalf("status %+v", st)
			}
		})
	}
}

func TestObserveIgnoresNaNAndOutOfOrder(t *testing.T) {
	m := newManual()
	s, recs := newTestSwitch(t, SwitchConfig{})
	step(m, s, 0.9, time.Second, time.Second)
	m.feed(s, math.NaN())
	if st := s.Status(); st.Utilization != 0.9 {
		t.Fatalf("NaN stored: %v", st.Utilization)
	}
	// A sample from the past must not extend or break the run.
	s.Observe(m.t.Add(-time.Hour), 0.1)
	step(m, s, 0.9, time.Second, time.Second)
	if s.Mode() != ModeBatch {
		t.Fatal("switched after a run of 1s")
	}
	step(m, s, 0.9, time.Second, time.Second)
	if s.Mode() != ModeThreshold || len(*recs) != 1 {
		t.Fatalf("mode %v, switches %+v", s.Mode(), *recs)
	}
}

func TestSwitchLogsAndMetrics(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := hclog.New(&hclog.LoggerOptions{Output: &lockedWriter{w: &buf, mu: &mu}, Level: hclog.Info})
	reg := prometheus.NewPedanticRegistry()
	s, err := NewSwitch(SwitchConfig{Logger: logger, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	m := newManual()
	step(m, s, 0.95, time.Second, 3*time.Second)

	mu.Lock()
	out := buf.String()
	mu.Unlock()
	for _, want := range []string{"modeswitch", "admission mode switched", "from=batch", "to=threshold", "utilization=0.95", "held=2s"} {
		if !strings.Contains(out, want) {
			t.Errorf("log %q lacks %q", out, want)
		}
	}
	got := gather(t, reg)
	for name, want := range map[string]float64{
		`sentry_admission_mode{mode="batch"}`:                            0,
		`sentry_admission_mode{mode="off"}`:                              0,
		`sentry_admission_mode{mode="adaptive"}`:                         0,
		`sentry_admission_mode_switches_total{direction="to_adaptive"}`:  0,
		`sentry_admission_mode{mode="threshold"}`:                        1,
		`sentry_admission_mode_switches_total{direction="to_batch"}`:     0,
		`sentry_admission_mode_switches_total{direction="to_threshold"}`: 1,
		`sentry_cpu_utilization_ratio`:                                   0.95,
		`sentry_admission_revert_after_seconds`:                          30,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	if len(got) != 9 {
		t.Errorf("gathered %d series, want 9: %v", len(got), got)
	}
	// Registering a second switch on the same registry is an error, not a panic.
	if _, err := NewSwitch(SwitchConfig{Registerer: reg}); err == nil {
		t.Fatal("duplicate registration accepted")
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// verdictAdmitter returns a fixed verdict, to tell the dispatch targets apart.
type verdictAdmitter Verdict

func (v verdictAdmitter) Admit(*Request) Decision { return Decision{Verdict: Verdict(v)} }

func TestSwitchedDispatch(t *testing.T) {
	m := newManual()
	s, _ := newTestSwitch(t, SwitchConfig{})
	a := &Switched{Batch: verdictAdmitter(RejectTest), Threshold: verdictAdmitter(RejectThreshold), Switch: s}
	req := &Request{}
	// Each decision is marked with the mode that took it (Decision.Mode).
	if got := a.Admit(req); got.Verdict != RejectTest || got.Mode != ModeBatch {
		t.Fatalf("batch mode dispatched to %v, marked %v", got.Verdict, got.Mode)
	}
	step(m, s, 0.95, time.Second, 3*time.Second)
	if got := a.Admit(req); got.Verdict != RejectThreshold || got.Mode != ModeThreshold {
		t.Fatalf("threshold mode dispatched to %v, marked %v", got.Verdict, got.Mode)
	}
	off, _ := newTestSwitch(t, SwitchConfig{Mode: ModeOff})
	a = &Switched{Switch: off} // off needs neither admitter
	if got := a.Admit(req); got.Verdict != Admit || got.Mode != ModeOff {
		t.Fatalf("off mode: %v, marked %v", got.Verdict, got.Mode)
	}
	if n := testing.AllocsPerRun(1000, func() { a.Admit(req) }); n != 0 {
		t.Fatalf("Switched.Admit allocates %v times", n)
	}
}

func TestCPUMeter(t *testing.T) {
	var cpu time.Duration
	var fail error
	procs := 4
	meter := NewCPUMeter(func() (time.Duration, error) { return cpu, fail }, func() int { return procs })
	at := time.Unix(1000, 0)
	if _, ok, err := meter.Sample(at); ok || err != nil {
		t.Fatal("first sample must only prime")
	}
	cpu += 2 * time.Second
	at = at.Add(time.Second)
	if u, ok, err := meter.Sample(at); !ok || err != nil || u != 0.5 {
		t.Fatalf("got %v %v %v, want 0.5", u, ok, err)
	}
	// Same instant: no sample.
	if _, ok, _ := meter.Sample(at); ok {
		t.Fatal("zero wall interval gave a sample")
	}
	// An error keeps the previous reading: the next success averages the gap.
	fail = context.DeadlineExceeded
	at = at.Add(time.Second)
	if _, ok, err := meter.Sample(at); ok || err == nil {
		t.Fatal("error not reported")
	}
	fail = nil
	cpu += 4 * time.Second
	at = at.Add(time.Second)
	if u, ok, _ := meter.Sample(at); !ok || u != 0.5 {
		t.Fatalf("after error got %v, want 0.5 over 2s", u)
	}
	// CPU going backwards (a broken reader) clamps to 0; procs < 1 counts as 1.
	cpu -= time.Second
	procs = 0
	at = at.Add(time.Second)
	if u, ok, _ := meter.Sample(at); !ok || u != 0 {
		t.Fatalf("backwards CPU gave %v", u)
	}
	cpu += time.Second / 2
	at = at.Add(time.Second)
	if u, _, _ := meter.Sample(at); u != 0.5 {
		t.Fatalf("procs 0 gave %v, want 0.5", u)
	}
}

// TestProcessCPUTime burns CPU and checks the real reader's utilisation is
// positive and bounded; it makes no timing assertion beyond sanity.
func TestProcessCPUTime(t *testing.T) {
	if _, err := ProcessCPUTime(); err == ErrCPUUnsupported {
		t.Skip(err)
	}
	meter := NewCPUMeter(nil, nil)
	if _, _, err := meter.Sample(time.Now()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(150 * time.Millisecond)
	x := uint64(1)
	for time.Now().Before(deadline) {
		for range 1000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	u, ok, err := meter.Sample(time.Now())
	if err != nil || !ok {
		t.Fatalf("sample: %v %v", ok, err)
	}
	// One goroutine spun for the whole interval; the bound allows threads
	// outside GOMAXPROCS (GC workers, the race detector) on every CPU.
	limit := float64(runtime.NumCPU())/float64(runtime.GOMAXPROCS(0)) + 0.5
	if !(u > 0) || u > limit {
		t.Fatalf("utilisation %v, want in (0, %v] (x=%d)", u, limit, x)
	}
	t.Logf("utilisation while spinning one goroutine: %.3f (GOMAXPROCS %d)", u, runtime.GOMAXPROCS(0))
}

// TestRun drives the sampler in a synctest bubble with a fake CPU reader
// that burns 95% of the CPUs, then checks the switch happens and Run stops.
func TestRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		start := time.Now()
		load := 0.95
		var cpu time.Duration
		last := start
		read := func() (time.Duration, error) { // CPU grows at load × 2 CPUs of wall time
			mu.Lock()
			defer mu.Unlock()
			now := time.Now()
			cpu += time.Duration(load * 2 * float64(now.Sub(last)))
			last = now
			return cpu, nil
		}
		switched := make(chan switchRecord, 4)
		s, err := NewSwitch(SwitchConfig{
			CPU: read, Procs: func() int { return 2 },
			Rate:     func() float64 { return 5000 },
			OnSwitch: func(from, to Mode, at time.Time) { switched <- switchRecord{from, to, at} },
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { s.Run(ctx, 250*time.Millisecond); close(done) }()

		r := <-switched
		// First sample above at +250ms; the run reaches hold at +2.25s.
		if r.to != ModeThreshold || r.at.Sub(start) != DefaultHold+250*time.Millisecond {
			t.Fatalf("switch %+v after %v", r, r.at.Sub(start))
		}
		if u := s.Status().Utilization; math.Abs(u-0.95) > 1e-6 {
			t.Fatalf("utilisation %v", u)
		}
		cancel()
		<-done
		select {
		case r := <-switched:
			t.Fatalf("unexpected switch %+v", r)
		default:
		}
	})
}

func TestRunSurvivesCPUErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		var mu sync.Mutex
		logger := hclog.New(&hclog.LoggerOptions{Output: &lockedWriter{w: &buf, mu: &mu}})
		calls := 0
		s, err := NewSwitch(SwitchConfig{
			Logger: logger,
			CPU: func() (time.Duration, error) {
				calls++
				if calls > 2 && calls < 6 {
					return 0, ErrCPUUnsupported
				}
				return time.Duration(calls) * time.Millisecond, nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { s.Run(ctx, time.Second); close(done) }()
		time.Sleep(10 * time.Second)
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		out := buf.String()
		if strings.Count(out, "cannot read process CPU time") != 1 || strings.Count(out, "reading process CPU time again") != 1 {
			t.Fatalf("log:\n%s", out)
		}
		if s.Mode() != ModeBatch || math.IsNaN(s.Status().Utilization) {
			t.Fatalf("status %+v", s.Status())
		}
	})
}

// gather returns every gathered series as name{label="value",...} → value.
func gather(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			if len(m.GetLabel()) > 0 {
				var parts []string
				for _, l := range m.GetLabel() {
					parts = append(parts, l.GetName()+`="`+l.GetValue()+`"`)
				}
				name += "{" + strings.Join(parts, ",") + "}"
			}
			switch {
			case m.Gauge != nil:
				out[name] = m.GetGauge().GetValue()
			case m.Counter != nil:
				out[name] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}
