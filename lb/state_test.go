package lb

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// quiesceLog records Options.Quiesce calls.
type quiesceLog struct {
	mu    sync.Mutex
	calls []string
}

func (q *quiesceLog) quiesce(addr string, a any, out bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := addr + " in"
	if out {
		s = addr + " out"
	}
	if a == nil {
		s += " (nil attachment)"
	}
	q.calls = append(q.calls, s)
}

func (q *quiesceLog) String() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return strings.Join(q.calls, ", ")
}

// TestDrainEveryAlgorithm: a draining backend is never picked by any
// algorithm from SetState's return on, leaves Healthy's count, keeps its
// requests in flight until they are released, is logged drained once when
// the last one is, and comes back when enabled.
func TestDrainEveryAlgorithm(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(string(alg), func(t *testing.T) {
			var logs syncBuffer
			var ql quiesceLog
			al := newAttachLog()
			p := NewPool(Options{Algorithm: alg, Rand: seededRand(1), Logger: testLogger(&logs), Attach: al.attach, Quiesce: ql.quiesce}, addrList(3))
			a := byAddr(p, "10.0.0.1:80")
			// Two requests in flight to a before the drain.
			in1, in2 := take(p, a), take(p, a)
			prev, ok := p.SetState(a.Addr(), Draining)
			mustEqual(t, "ok", ok, true)
			mustEqual(t, "prev", prev, Enabled)
			mustEqual(t, "state", a.State(), Draining)
			mustEqual(t, "Healthy", p.Healthy(), 2)
			mustEqual(t, "a healthy (its health is apart)", a.Healthy(), true)
			mustEqual(t, "a drained with 2 in flight", a.Drained(), false)
			checkAvail(t, p)
			for range 200 {
				b := p.Pick()
				if b == a {
					t.Fatal("picked a draining backend")
				}
				p.Release(b, true)
			}
			mustEqual(t, "quiesce calls", ql.String(), "10.0.0.1:80 out")
			p.Release(in1, true)
			if strings.Contains(logs.String(), "backend drained") {
				t.Fatal("drained logged with a request still in flight")
			}
			p.Release(in2, false) // a failure: still drained
			mustEqual(t, "a drained", a.Drained(), true)
			mustEqual(t, "quiesce calls", ql.String(), "10.0.0.1:80 out, 10.0.0.1:80 out")
			mustEqual(t, "drained log lines", strings.Count(logs.String(), "backend drained"), 1)
			// The same state again changes nothing and logs nothing.
			if prev, _ := p.SetState(a.Addr(), Draining); prev != Draining {
				t.Fatalf("prev = %v", prev)
			}
			mustEqual(t, "drained log lines", strings.Count(logs.String(), "backend drained"), 1)

			p.SetState(a.Addr(), Enabled)
			mustEqual(t, "Healthy", p.Healthy(), 3)
			checkAvail(t, p)
			mustEqual(t, "quiesce calls", ql.String(), "10.0.0.1:80 out, 10.0.0.1:80 out, 10.0.0.1:80 in")
			seen := false
			for range 50 {
				b := p.Pick()
				seen = seen || b == a
				p.Release(b, true)
			}
			if !seen {
				t.Fatal("an enabled backend was never picked again")
			}
			// Draining with nothing in flight is drained at once.
			p.SetState(a.Addr(), Draining)
			mustEqual(t, "drained log lines", strings.Count(logs.String(), "backend drained"), 2)
		})
	}
}

// TestStatePickFallback: a Pick from an available set built before the
// drain (a stale snapshot) still never returns the backend.
func TestStatePickFallback(t *testing.T) {
	p := NewPool(Options{}, addrList(1))
	a := p.Backends()[0]
	stale := p.avail.Load()
	p.SetState(a.Addr(), Disabled)
	p.avail.Store(stale) // as if the rebuild had not landed yet
	if b := p.Pick(); b != nil {
		t.Fatalf("picked %s, want nil", b.Addr())
	}
}

func TestSetStateUnknown(t *testing.T) {
	p := NewPool(Options{}, addrList(2))
	if _, ok := p.SetState("10.9.9.9:80", Draining); ok {
		t.Fatal("SetState of a non-member reported ok")
	}
	mustEqual(t, "Healthy", p.Healthy(), 2)
}

// TestStateSurvivesReconfigureNotRejoin: the state belongs to the member:
// it lasts across Reconfigure, and a backend that leaves and joins again
// is Enabled.
func TestStateSurvivesReconfigureNotRejoin(t *testing.T) {
	p := NewPool(Options{}, addrList(2))
	addr := "10.0.0.2:80"
	p.SetState(addr, Draining)
	p.Reconfigure(Options{Algorithm: RoundRobin})
	mustEqual(t, "after Reconfigure", p.Backend(addr).State(), Draining)
	mustEqual(t, "Healthy", p.Healthy(), 1)
	p.SetAddrs(addrList(1))
	p.SetAddrs(addrList(2))
	mustEqual(t, "after leaving and joining", p.Backend(addr).State(), Enabled)
	mustEqual(t, "Healthy", p.Healthy(), 2)
}

// TestDisabledSkipsChecks: a Disabled backend gets no active probe and no
// Reach; leaving Disabled with active checks it is down until a probe
// passes, and Run probes it at once.
func TestDisabledSkipsChecks(t *testing.T) {
	fp := newFakeProbe()
	fp.called = make(chan string, 64)
	opts := Options{Active: &Active{Interval: time.Hour, Timeout: time.Second, Rise: 3, Fall: 1, Probe: fp.probe}}
	p := NewPool(opts, addrList(2))
	a, b := p.Backends()[0], p.Backends()[1]
	p.SetState(a.Addr(), Disabled)
	p.checkOnce(context.Background())
	probed := drain(fp.called)
	if strings.Contains(probed, a.Addr()) || !strings.Contains(probed, b.Addr()) {
		t.Fatalf("probed %q: want %s only", probed, b.Addr())
	}
	// Failing probes of a disabled backend would mark it down: none are
	// sent, so its health stays as it was.
	fp.set(a.Addr(), true)
	p.checkOnce(context.Background())
	mustEqual(t, "a down while disabled", a.Down(), false)

	// Back with checks on: down, one probe short of its rise, and a round
	// runs at once (the interval is an hour).
	fp.set(a.Addr(), false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitProbe(t, fp.called, b.Addr()) // Run's first round
	drain(fp.called)
	p.SetState(a.Addr(), Enabled)
	mustEqual(t, "a down on leaving Disabled", a.Down(), true)
	mustEqual(t, "Healthy", p.Healthy(), 1)
	waitProbe(t, fp.called, a.Addr())
	deadline := time.Now().Add(10 * time.Second)
	for a.Down() {
		if time.Now().After(deadline) {
			t.Fatal("a still down after a passing probe")
		}
		time.Sleep(time.Millisecond)
	}
	mustEqual(t, "Healthy", p.Healthy(), 2)
}

// TestDisabledNoReach: Reach is not called for a Disabled backend, even
// one ejected and past its trial wait.
func TestDisabledNoReach(t *testing.T) {
	clk := newClock()
	var mu sync.Mutex
	var reached []string
	reach := func(_ context.Context, addr string) error {
		mu.Lock()
		defer mu.Unlock()
		reached = append(reached, addr)
		return nil
	}
	p := NewPool(Options{Failures: 1, Cooldown: time.Minute, Reach: reach, Now: clk.Now}, addrList(2))
	a, b := p.Backends()[0], p.Backends()[1]
	p.Release(take(p, a), false)
	p.Release(take(p, b), false)
	p.SetState(a.Addr(), Disabled)
	clk.Advance(2 * TrialWait)
	p.reachOnce(context.Background())
	mu.Lock()
	got := strings.Join(reached, ",")
	mu.Unlock()
	mustEqual(t, "reached", got, b.Addr())
}

// TestDisabledWithoutChecksBackAtOnce: without active checks, enabling a
// disabled backend puts it in rotation at once.
func TestDisabledWithoutChecksBackAtOnce(t *testing.T) {
	p := NewPool(Options{}, addrList(2))
	a := p.Backends()[0]
	p.SetState(a.Addr(), Disabled)
	mustEqual(t, "Healthy", p.Healthy(), 1)
	p.SetState(a.Addr(), Enabled)
	mustEqual(t, "Healthy", p.Healthy(), 2)
	mustEqual(t, "a down", a.Down(), false)
}

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{Enabled: "enabled", Draining: "draining", Disabled: "disabled", 7: "unknown"} {
		mustEqual(t, "String", s.String(), want)
	}
}

// drain empties ch and returns what it held, comma-separated.
func drain(ch chan string) string {
	var out []string
	for {
		select {
		case s := <-ch:
			out = append(out, s)
		default:
			return strings.Join(out, ",")
		}
	}
}

// waitProbe waits until addr is probed.
func waitProbe(t *testing.T, ch chan string, addr string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case s := <-ch:
			if s == addr {
				return
			}
		case <-timeout:
			t.Fatalf("%s not probed", addr)
		}
	}
}
