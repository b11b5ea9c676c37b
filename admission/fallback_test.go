package admission

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// TestFallback: in auto mode Fallback moves batch → adaptive and back,
// logs the reason, counts and exports the mode; it refuses the wrong
// source mode and every forced mode; the CPU rule does not act in
// adaptive mode.
func TestFallback(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	reg := prometheus.NewRegistry()
	var seen []string
	s, err := NewSwitch(SwitchConfig{
		Logger:     hclog.New(&hclog.LoggerOptions{Output: &lockedWriter{&buf, &mu}, Level: hclog.Info}),
		Registerer: reg,
		CPU:        func() (time.Duration, error) { return 0, nil },
		OnSwitch:   func(from, to Mode, _ time.Time) { seen = append(seen, from.String()+">"+to.String()) },
	})
	if err != nil {
		t.Fatal(err)
	}
	m := newManual()
	if s.Fallback(m.now(), ModeBatch, "x") {
		t.Fatal("batch → batch switched")
	}
	if !s.Fallback(m.now(), ModeAdaptive, "percentile_missed", "windows", 3) || s.Mode() != ModeAdaptive {
		t.Fatalf("mode %v, want adaptive", s.Mode())
	}
	if s.Fallback(m.now(), ModeAdaptive, "again") {
		t.Fatal("adaptive → adaptive switched")
	}
	// CPU saturation does not move adaptive mode to threshold.
	step(m, s, 0.99, 500*time.Millisecond, 5*time.Second)
	if s.Mode() != ModeAdaptive {
		t.Fatalf("CPU moved adaptive to %v", s.Mode())
	}
	got := gather(t, reg)
	if got[`sentry_admission_mode{mode="adaptive"}`] != 1 || got[`sentry_admission_mode{mode="batch"}`] != 0 ||
		got[`sentry_admission_mode_switches_total{direction="to_adaptive"}`] != 1 {
		t.Fatalf("metrics %v", got)
	}
	if !s.Fallback(m.now(), ModeBatch, "model_ok") || s.Mode() != ModeBatch {
		t.Fatal("no return to batch")
	}
	if st := s.Status(); st.ToAdaptive != 1 || st.ToBatch != 1 {
		t.Fatalf("status %+v", st)
	}
	if strings.Join(seen, ",") != "batch>adaptive,adaptive>batch" {
		t.Fatalf("OnSwitch saw %v", seen)
	}
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	for _, want := range []string{"from=batch to=adaptive reason=percentile_missed windows=3", "from=adaptive to=batch reason=model_ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("log %q lacks %q", out, want)
		}
	}
	// Threshold mode is the CPU rule's: Fallback leaves it alone.
	step(m, s, 0.99, 500*time.Millisecond, 3*time.Second)
	if s.Mode() != ModeThreshold || s.Fallback(m.now(), ModeAdaptive, "x") {
		t.Fatalf("mode %v: fallback from threshold", s.Mode())
	}
	for _, forced := range []Mode{ModeBatch, ModeThreshold, ModeOff, ModeAdaptive} {
		f, err := NewSwitch(SwitchConfig{Mode: forced})
		if err != nil {
			t.Fatal(err)
		}
		if f.Fallback(m.now(), ModeAdaptive, "x") || f.Fallback(m.now(), ModeBatch, "x") || f.Mode() != forced {
			t.Fatalf("forced %v moved to %v", forced, f.Mode())
		}
	}
	sw := &Switched{Batch: AdmitAll{}, Threshold: AdmitAll{}, Adaptive: rejectAll{}, Switch: s}
	s.Fallback(m.now(), ModeAdaptive, "x") // threshold: refused
	if sw.Admit(&Request{}).Verdict != Admit {
		t.Fatal("threshold mode dispatched to adaptive")
	}
	a, _ := NewSwitch(SwitchConfig{Mode: ModeAdaptive})
	sw.Switch = a
	if sw.Admit(&Request{}).Verdict != RejectAdaptive {
		t.Fatal("adaptive mode not dispatched to Adaptive")
	}
}

type rejectAll struct{}

func (rejectAll) Admit(*Request) Decision { return Decision{Verdict: RejectAdaptive} }
