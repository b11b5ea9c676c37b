package control

import (
	"testing"

	"github.com/sentry-proxy/sentry/admission"
)

// TestForceMode: a forced mode decides every request from Force's return
// on, whatever the policy says (off included, whose apps the request path
// asks too); Unforce returns to the policy's mode; a reload that rebuilds
// the switch ends the force.
func TestForceMode(t *testing.T) {
	m, _ := newManager(t, nil)
	pool := &fakePool{}
	pool.healthy.Store(0) // batch and threshold refuse without a backend: a visible difference from off
	a, err := m.Build(testApp("off"), pool)
	if err != nil {
		t.Fatal(err)
	}
	if m.App("shop") != a || m.App("nope") != nil {
		t.Fatal("Manager.App")
	}
	r := &admission.Request{Class: 1}
	if d := a.Admit(r); d.Verdict != admission.Admit || d.Mode != admission.ModeOff {
		t.Fatalf("policy off: %+v", d)
	}
	from, err := a.Force(admission.ModeBatch)
	if err != nil || from != admission.ModeOff {
		t.Fatalf("Force = %v, %v", from, err)
	}
	if got, ok := a.Forced(); !ok || got != admission.ModeBatch || a.Mode() != admission.ModeBatch {
		t.Fatalf("Forced = %v, %v", got, ok)
	}
	if d, _, decided := a.Park(r, nil); !decided || d.Verdict != admission.RejectNoBackend || d.Mode != admission.ModeBatch {
		t.Fatalf("forced batch, no backend: %+v decided %v", d, decided)
	}
	if _, err := a.Force(admission.ModeAuto); err == nil {
		t.Fatal("Force(auto) accepted")
	}
	if from, was := a.Unforce(); !was || from != admission.ModeBatch || a.Mode() != admission.ModeOff {
		t.Fatalf("Unforce = %v, %v; mode %v", from, was, a.Mode())
	}
	if a.ConfiguredMode() != admission.ModeOff {
		t.Fatal("ConfiguredMode")
	}

	// Forced adaptive: the controller is seeded and admits.
	if _, err := a.Force(admission.ModeAdaptive); err != nil {
		t.Fatal(err)
	}
	if d := a.Admit(&admission.Request{Class: 0}); d.Mode != admission.ModeAdaptive {
		t.Fatalf("forced adaptive decided in %v", d.Mode)
	}
	// A reload to another mode rebuilds the switch: the force is gone.
	if _, err := m.Build(testApp("threshold"), pool); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Forced(); ok || a.Mode() != admission.ModeThreshold {
		t.Fatalf("after a reload: mode %v", a.Mode())
	}
}
