package control

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/policy"
)

func terminatingApp(mode string) *policy.App {
	ac := testApp(mode)
	ac.Terminate = []*policy.Terminate{{Lower: 500 * time.Millisecond, Upper: 15 * time.Second}, nil}
	return ac
}

// The App counts a terminating class's arrivals (Estimate) and rejections
// (every rejecting decision, once), and its controller turns them into
// the paper's threshold; a class without terminate has no terminator.
func TestTerminationCountsAndThreshold(t *testing.T) {
	m, _ := newManager(t, nil)
	pool := &fakePool{}
	a, err := m.Build(terminatingApp("threshold"), pool)
	if err != nil {
		t.Fatal(err)
	}
	gold := a.Terminator(0)
	if gold == nil || a.Terminator(1) != nil || a.Terminator(7) != nil {
		t.Fatalf("terminators: gold %v, bronze %v", gold, a.Terminator(1))
	}
	if gold.Threshold() != 15*time.Second || !gold.Terminable("GET") || gold.Terminable("POST") {
		t.Fatalf("gold starts at %v", gold.Threshold())
	}
	now := time.Now()
	key := []byte("/checkout")
	pool.healthy.Store(1)
	for i := range 100 {
		a.Estimate(0, key, now)
		a.Estimate(1, key, now) // bronze: not counted anywhere in sert
		if i < 8 {
			// No backend: rejected at once (threshold mode).
			pool.healthy.Store(0)
			if d := a.Admit(&admission.Request{Class: 0, Key: key}); d.Verdict == admission.Admit {
				t.Fatal("admitted without a backend")
			}
			pool.healthy.Store(1)
		}
	}
	if c := gold.Counts(); c.Arrived != 100 || c.Rejected != 8 || c.Terminated != 0 {
		t.Fatalf("counts %+v, want 100 arrived, 8 rejected", c)
	}
	a.Termination().Tick(now.Add(10 * time.Second))
	if th := gold.Threshold(); th != 3981450*time.Microsecond {
		t.Fatalf("threshold at 8%% loss: %v, want 3.98145s", th)
	}
}

// A parked request withdrawn by its client counts as a rejection, once.
func TestTerminationCountsCancel(t *testing.T) {
	m, _ := newManager(t, nil)
	pool := &fakePool{}
	pool.healthy.Store(1)
	ac := terminatingApp("batch")
	ac.Classes[0].Period = 50 * time.Millisecond
	ac.Admission.Batch.StrictPeriods = true // every arrival waits for its run
	a, err := m.Build(ac, pool)
	if err != nil {
		t.Fatal(err)
	}
	_, p, decided := a.Park(&admission.Request{Class: 0, Key: []byte("/checkout"), S: time.Millisecond}, wakerFunc(func() {}))
	if decided {
		t.Fatal("decided at once; the class's policer period should have queued it")
	}
	p.Cancel()
	if c := a.Terminator(0).Counts(); c.Rejected != 1 {
		t.Fatalf("rejected %d after a cancel, want 1", c.Rejected)
	}
}

type wakerFunc func()

func (f wakerFunc) Wake() { f() }

// A reload keeps a class's termination state by name, applies new bounds
// with the F it had, and a class that drops terminate has no terminator.
func TestTerminationSurvivesReload(t *testing.T) {
	m, _ := newManager(t, nil)
	pool := &fakePool{}
	pool.healthy.Store(1)
	a, err := m.Build(terminatingApp("threshold"), pool)
	if err != nil {
		t.Fatal(err)
	}
	gold := a.Terminator(0)
	for range 100 {
		gold.Arrive()
	}
	for range 8 {
		gold.Terminate()
	}
	a.Termination().Tick(time.Now())

	ac := terminatingApp("threshold")
	ac.Terminate[0] = &policy.Terminate{Lower: time.Second, Upper: 10 * time.Second, Methods: []string{"GET", "POST"}}
	ac.Termination = policy.Termination{Alpha: 4, LowWater: 0.05, HighWater: 0.15, Interval: time.Second, MinArrivals: 10}
	b, err := m.Build(ac, pool)
	if err != nil {
		t.Fatal(err)
	}
	if b != a || a.Terminator(0) != gold {
		t.Fatal("reload replaced the app or the class's state")
	}
	// F(8%) = 0.2401 kept: T = 1 + 0.2401·9 = 3.1609 s.
	if th := gold.Threshold(); th != 3160900*time.Microsecond || !gold.Terminable("POST") {
		t.Fatalf("after reload: T %v, POST %v", th, gold.Terminable("POST"))
	}
	if got := a.Termination().Params().MinArrivals; got != 10 {
		t.Fatalf("min arrivals %d after reload", got)
	}
	ac.Terminate = nil
	if _, err := m.Build(ac, pool); err != nil {
		t.Fatal(err)
	}
	if a.Terminator(0) != nil {
		t.Fatal("gold terminates after terminate was removed")
	}
}

// The threshold, terminations, p and reclaimed server-seconds are
// exported per class; an app that goes away takes its metrics with it.
func TestTerminationMetrics(t *testing.T) {
	m, reg := newManager(t, nil)
	pool := &fakePool{}
	pool.healthy.Store(1)
	a, err := m.Build(terminatingApp("threshold"), pool)
	if err != nil {
		t.Fatal(err)
	}
	gold := a.Terminator(0)
	gold.Terminate()
	gold.Reclaim(2 * time.Second)
	want := `
# HELP sentry_terminations_total Requests of the class terminated for passing the threshold before their first response byte.
# TYPE sentry_terminations_total counter
sentry_terminations_total{app="shop",class="gold"} 1
# HELP sentry_termination_reclaimed_server_seconds_total Backend time termination reclaimed, in server-seconds (the proxy's estimate of work the cut requests would still have done).
# TYPE sentry_termination_reclaimed_server_seconds_total counter
sentry_termination_reclaimed_server_seconds_total{app="shop",class="gold"} 2
# HELP sentry_termination_threshold_seconds Current termination threshold T = LB + F(p)·(UB − LB) of the class.
# TYPE sentry_termination_threshold_seconds gauge
sentry_termination_threshold_seconds{app="shop",class="gold"} 15
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sentry_terminations_total",
		"sentry_termination_reclaimed_server_seconds_total", "sentry_termination_threshold_seconds"); err != nil {
		t.Fatal(err)
	}
	m.Retain(nil)
	if n, err := testutil.GatherAndCount(reg, "sentry_termination_threshold_seconds"); err != nil || n != 0 {
		t.Fatalf("after the app went: %d series, %v", n, err)
	}
	if _, err := m.Build(terminatingApp("threshold"), pool); err != nil {
		t.Fatalf("rebuild after Retain: %v", err)
	}
}
