package control

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/adaptive"
	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/classify"
	"github.com/sentry-proxy/sentry/thresholdac"
)

// TestExportRestore: a second manager given the first's state (through
// JSON, as an upgrade hands it over) has its estimates, learned P and
// capacity, auto's mode and fall-back memory, and adaptive rates from the
// first moment, with the probe's ceiling; a class the new policy renamed is left out and reported.
func TestExportRestore(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	// The mode switch's sampler reads the clock from its own goroutine.
	var clockNs atomic.Int64
	clockNs.Store(now.UnixNano())
	clock := func() time.Time { return time.Unix(0, clockNs.Load()) }
	m1, _ := newManager(t, clock)
	pool := &fakePool{}
	pool.healthy.Store(2)
	a1, err := m1.Build(testApp("auto"), pool)
	if err != nil {
		t.Fatal(err)
	}
	for range 200 {
		now = now.Add(5 * time.Millisecond)
		clockNs.Store(now.UnixNano())
		a1.est.Arrive(0, now)
		a1.Done(&admission.Ticket{Class: 0, Key: []byte("/checkout/pay"), S: 20 * time.Millisecond, Arrival: now.Add(-60 * time.Millisecond)},
			admission.Result{ServerTiming: []byte("cpu;dur=20, queue;dur=2"), Measured: 60 * time.Millisecond, InService: 6, End: now})
		a1.Done(&admission.Ticket{Class: 1, Key: []byte("/x"), Arrival: now.Add(-5 * time.Millisecond)},
			admission.Result{ServerTiming: []byte("cpu;dur=5"), Measured: 5 * time.Millisecond, InService: 1, End: now})
	}
	a1.batch.ObserveSpare(12, 20*time.Millisecond, 50*time.Millisecond) // the probe came back saturated beside 12
	p1, _ := a1.batch.LearnedParallelism()
	if p1 <= 1.5 {
		t.Fatalf("learned P %v: the test needs one learned", p1)
	}
	a1.learner.Observe(thresholdac.Observation{Work: 3, SLAMet: true, Healthy: 2})
	if !a1.sw.Load().Fallback(now, admission.ModeAdaptive, "test") {
		t.Fatal("no fall-back")
	}
	a1.fb.Lock()
	a1.fb.wait, a1.fb.calm = 6, 2
	a1.fb.Unlock()
	a1.adp.Load().SetRate(0, 123)

	data, err := json.Marshal(m1.Export(now))
	if err != nil {
		t.Fatal(err)
	}
	var states map[string]AppState
	if err := json.Unmarshal(data, &states); err != nil {
		t.Fatal(err)
	}
	now = now.Add(100 * time.Millisecond)
	clockNs.Store(now.UnixNano())

	m2, _ := newManager(t, clock)
	ac := testApp("auto")
	ac.Classes[1] = classify.ClassConfig{Name: "copper", Default: true} // bronze renamed
	a2, err := m2.Build(ac, pool)
	if err != nil {
		t.Fatal(err)
	}
	ignored, err := m2.Restore("shop", states["shop"], now)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`class "bronze": not in the policy (1 keys)`, `adaptive class "bronze": not in the policy`} {
		if !strings.Contains(strings.Join(ignored, "\n"), want) {
			t.Errorf("ignored %q lacks %q", ignored, want)
		}
	}
	if len(ignored) != 2 {
		t.Errorf("ignored %q", ignored)
	}
	s1, _ := a1.Estimate(0, []byte("/checkout/pay"), now)
	s2, _ := a2.Estimate(0, []byte("/checkout/pay"), now)
	if s1 != s2 || s1 == 0 {
		t.Errorf("estimate %v, restored %v", s1, s2)
	}
	if p2, _ := a2.batch.LearnedParallelism(); p2 != p1 {
		t.Errorf("P %v, restored %v", p1, p2)
	}
	if m1, u1, ok1 := a1.batch.ProbeCeiling(); !ok1 || m1 != 12 {
		t.Errorf("no probe ceiling to carry: %d %v", m1, ok1)
	} else if m2, u2, ok2 := a2.batch.ProbeCeiling(); !ok2 || m2 != m1 || u2 != u1 {
		t.Errorf("probe ceiling %d until %d, restored %d until %d (%v)", m1, u1, m2, u2, ok2)
	}
	if c1, c2 := a1.learner.State(), a2.learner.State(); c1 != c2 || c1.PerServer == 0 {
		t.Errorf("capacity %+v, restored %+v", c1, c2)
	}
	if got := a2.Mode(); got != admission.ModeAdaptive {
		t.Errorf("mode %v, want adaptive", got)
	}
	a2.fb.Lock()
	fb := [3]any{a2.fb.wait, a2.fb.calm, a2.fb.last}
	a2.fb.Unlock()
	if fb != [3]any{6, 2, admission.ModeAdaptive} {
		t.Errorf("fall-back memory %v", fb)
	}
	if l := a2.adp.Load().Learned(0); l.Rate != 123 {
		t.Errorf("adaptive gold rate %v, want 123", l.Rate)
	}
	if a2.RSLA() != a1.RSLA() {
		t.Errorf("R_sla %v, restored %v", a1.RSLA(), a2.RSLA())
	}

	// A restored app never fails a start, whatever the state says.
	bad := states["shop"]
	bad.Parallelism = -3
	bad.ProbeCeiling = -1
	bad.Mode.Mode = "sideways"
	bad.Adaptive = map[string]adaptive.Learned{"gold": {Rate: -1}}
	ignored, err = m2.Restore("shop", bad, now)
	if err != nil || len(ignored) != 5 { // bronze's keys, P, probe ceiling, mode, adaptive gold
		t.Errorf("bad state: %v, ignored %q", err, ignored)
	}
	if _, err := m2.Restore("gone", bad, now); err == nil {
		t.Error("an app the policy lacks restored")
	}
}

// TestPeerInflight: requests the other process of an upgrade has in
// flight count as the farm's load, so the batch test sees no free slot.
func TestPeerInflight(t *testing.T) {
	m, _ := newManager(t, nil)
	pool := &fakePool{}
	pool.healthy.Store(1)
	a, err := m.Build(testApp("batch"), pool)
	if err != nil {
		t.Fatal(err)
	}
	if _, free, _ := a.batch.Room(0, 10*time.Millisecond, 0, 0); !free {
		t.Fatal("an idle farm has no free slot")
	}
	m.SetPeerInflight("shop", 5)
	if n, _ := m.Inflight("shop"); n != 5 {
		t.Errorf("in flight %d, want 5", n)
	}
	if _, free, _ := a.batch.Room(0, 10*time.Millisecond, 0, 0); free {
		t.Error("a free slot while the other process has 5 in flight")
	}
	if own := m.OwnInflight()["shop"]; own != 0 {
		t.Errorf("own in flight %d", own)
	}
	m.SetPeerInflight("shop", 0)
	if _, free, _ := a.batch.Room(0, 10*time.Millisecond, 0, 0); !free {
		t.Error("no free slot once the upgrade is over")
	}
}
