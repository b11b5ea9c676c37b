package admission

import (
	"math"
	"testing"
	"time"
)

// TestSwitchStateRoundTrip: an auto switch given another's state is in
// its mode with its hysteresis (the revert wait after relapse backoff,
// the anchor), clamped to its own bounds; a forced mode takes nothing.
func TestSwitchStateRoundTrip(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	a, _ := NewSwitch(SwitchConfig{Hold: time.Second, RevertAfter: 10 * time.Second})
	for i := range 5 {
		a.ObserveRate(now.Add(time.Duration(i)*500*time.Millisecond), 0.95, 400)
	}
	if a.Mode() != ModeThreshold {
		t.Fatalf("mode %v", a.Mode())
	}
	st, ok := a.State()
	if !ok || st.Mode != "threshold" || st.AnchorR != 400 || st.AnchorU != 0.95 || st.RevertAfter != int64(10*time.Second) {
		t.Fatalf("state %+v %v", st, ok)
	}
	b, _ := NewSwitch(SwitchConfig{Hold: time.Second, RevertAfter: 20 * time.Second})
	if err := b.Restore(st); err != nil {
		t.Fatal(err)
	}
	if got := b.Status(); got.Mode != ModeThreshold || got.RevertAfter != 20*time.Second || !got.Since.Equal(a.Status().Since) {
		t.Errorf("restored %+v", got)
	}
	// The anchor came along: at the same CPU the predicted batch load
	// stays high, so no revert.
	for i := range 50 {
		b.ObserveRate(now.Add(time.Duration(i)*time.Second), 0.3, 400)
	}
	if b.Mode() != ModeThreshold {
		t.Errorf("reverted although the rate that caused the switch is still there")
	}
	forced, _ := NewSwitch(SwitchConfig{Mode: ModeBatch})
	if _, ok := forced.State(); ok {
		t.Error("a forced switch has a state")
	}
	if err := forced.Restore(st); err == nil || forced.Mode() != ModeBatch {
		t.Errorf("a forced switch took a state: %v", err)
	}
	for _, bad := range []SwitchState{{Mode: "off"}, {Mode: "sideways"}, {Mode: "batch", AnchorU: math.NaN()}, {Mode: "batch", RevertAfter: -1}} {
		if err := b.Restore(bad); err == nil {
			t.Errorf("took %+v", bad)
		}
	}
}

// TestSwitchStateForcedAtRunTime: an auto switch the operator holds in a
// mode (Force, the admin API) exports batch mode, as Unforce would leave
// it, with its hysteresis memory -- not the held mode: a runtime override
// is not carried to the next process.
func TestSwitchStateForcedAtRunTime(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for _, m := range []Mode{ModeThreshold, ModeAdaptive, ModeOff} {
		a, _ := NewSwitch(SwitchConfig{Hold: time.Second, RevertAfter: 10 * time.Second})
		for i := range 5 {
			a.ObserveRate(now.Add(time.Duration(i)*500*time.Millisecond), 0.95, 400)
		}
		if _, err := a.Force(m, now.Add(3*time.Second)); err != nil {
			t.Fatal(err)
		}
		st, ok := a.State()
		if !ok || st.Mode != "batch" || st.Since != 0 || st.AnchorR != 400 || st.RevertAfter != int64(10*time.Second) {
			t.Errorf("forced %v: state %+v %v, want batch mode with the anchor", m, st, ok)
		}
		b, _ := NewSwitch(SwitchConfig{Hold: time.Second, RevertAfter: 10 * time.Second})
		if err := b.Restore(st); err != nil || b.Mode() != ModeBatch {
			t.Errorf("forced %v: restored into %v: %v", m, b.Mode(), err)
		}
		if _, forced := b.Forced(); forced {
			t.Errorf("forced %v: the restored switch is forced", m)
		}
	}
}
