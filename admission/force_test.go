package admission

import (
	"testing"
	"time"
)

// TestForce: a forced mode holds against the CPU rule and the fall-back,
// is not counted or reported as a switch, and Unforce returns an auto
// switch to batch mode, where the CPU rule works again.
func TestForce(t *testing.T) {
	m := newManual()
	s, recs := newTestSwitch(t, SwitchConfig{Now: m.now})
	from, err := s.Force(ModeOff, m.now())
	if err != nil || from != ModeBatch {
		t.Fatalf("Force = %v, %v", from, err)
	}
	if got, ok := s.Forced(); !ok || got != ModeOff || s.Mode() != ModeOff {
		t.Fatalf("Forced = %v, %v; Mode %v", got, ok, s.Mode())
	}
	// Saturated far longer than Hold: no switch while forced.
	step(m, s, 0.99, 100*time.Millisecond, 10*time.Second)
	if s.Mode() != ModeOff {
		t.Fatalf("the CPU rule moved a forced switch to %v", s.Mode())
	}
	if s.Fallback(m.now(), ModeAdaptive, "test") || s.Fallback(m.now(), ModeBatch, "test") {
		t.Fatal("Fallback moved a forced switch")
	}
	st := s.Status()
	if !st.Forced || st.ToThreshold+st.ToBatch+st.ToAdaptive != 0 || len(*recs) != 0 {
		t.Fatalf("status %+v, OnSwitch %v: a forced change is no switch", st, *recs)
	}
	// The utilisation gauge stays live while forced.
	if st.Utilization != 0.99 {
		t.Fatalf("utilization %v", st.Utilization)
	}
	from, was := s.Unforce(m.now())
	if !was || from != ModeOff || s.Mode() != ModeBatch || s.Status().Forced {
		t.Fatalf("Unforce = %v, %v; Mode %v", from, was, s.Mode())
	}
	if _, was := s.Unforce(m.now()); was {
		t.Fatal("a second Unforce reported a force")
	}
	// The CPU rule starts over: Hold of saturation switches to threshold.
	step(m, s, 0.99, 100*time.Millisecond, 3*time.Second)
	if s.Mode() != ModeThreshold {
		t.Fatalf("after Unforce the CPU rule does not act: %v", s.Mode())
	}
	// Forcing the mode already in force holds it too.
	if _, err := s.Force(ModeThreshold, m.now()); err != nil {
		t.Fatal(err)
	}
	step(m, s, 0.1, 100*time.Millisecond, 2*DefaultRevertAfter)
	if s.Mode() != ModeThreshold {
		t.Fatalf("a forced threshold reverted to %v", s.Mode())
	}
}

// TestForceConfigured: a configured (non-auto) mode can be forced too,
// and Unforce returns to it.
func TestForceConfigured(t *testing.T) {
	m := newManual()
	s, _ := newTestSwitch(t, SwitchConfig{Mode: ModeOff, Now: m.now})
	if _, err := s.Force(ModeAdaptive, m.now()); err != nil {
		t.Fatal(err)
	}
	if s.Mode() != ModeAdaptive {
		t.Fatalf("Mode %v", s.Mode())
	}
	s.Unforce(m.now())
	if s.Mode() != ModeOff {
		t.Fatalf("Unforce went to %v, want the configured off", s.Mode())
	}
	for _, bad := range []Mode{ModeAuto, 99} {
		if _, err := s.Force(bad, m.now()); err == nil {
			t.Errorf("Force(%v) accepted", bad)
		}
	}
	if _, ok := s.Forced(); ok {
		t.Fatal("a refused Force holds the switch")
	}
}
