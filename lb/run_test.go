package lb

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeProbe answers probes from a per-address table and counts calls.
type fakeProbe struct {
	mu    sync.Mutex
	fail  map[string]bool
	calls atomic.Int64
	// called, when set, receives one value per probe (never blocks).
	called chan string
}

func newFakeProbe() *fakeProbe { return &fakeProbe{fail: map[string]bool{}} }

func (f *fakeProbe) set(addr string, failing bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[addr] = failing
}

func (f *fakeProbe) probe(ctx context.Context, addr string) error {
	f.calls.Add(1)
	if f.called != nil {
		select {
		case f.called <- addr:
		default:
		}
	}
	if _, ok := ctx.Deadline(); !ok {
		return errors.New("probe context has no deadline")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail[addr] {
		return errors.New("connection refused")
	}
	return nil
}

func TestActiveRiseFall(t *testing.T) {
	ctx := context.Background()
	fp := newFakeProbe()
	var logs syncBuffer
	opts := Options{
		Algorithm: RoundRobin, Logger: testLogger(&logs),
		Active: &Active{Interval: time.Hour, Timeout: time.Second, Rise: 2, Fall: 3, Probe: fp.probe},
	}
	p := NewPool(opts, addrList(3))
	a := p.Backends()[0]

	fp.set(a.Addr(), true)
	p.checkOnce(ctx)
	p.checkOnce(ctx)
	mustEqual(t, "down after 2 of 3 failures", a.Down(), false)
	mustEqual(t, "probes", fp.calls.Load(), int64(6))
	// A success in between restarts the count.
	fp.set(a.Addr(), false)
	p.checkOnce(ctx)
	fp.set(a.Addr(), true)
	p.checkOnce(ctx)
	p.checkOnce(ctx)
	mustEqual(t, "down after 2 failures since success", a.Down(), false)
	p.checkOnce(ctx)
	mustEqual(t, "down after 3 failures", a.Down(), true)
	mustEqual(t, "healthy", a.Healthy(), false)
	mustEqual(t, "pool healthy", p.Healthy(), 2)
	if !strings.Contains(logs.String(), "backend marked down") {
		t.Fatalf("down not logged:\n%s", logs.String())
	}
	for _, alg := range algorithms {
		opts.Algorithm = alg
		p.Reconfigure(opts)
		for range 50 {
			b := p.Pick()
			if b == a {
				t.Fatalf("%s picked a backend marked down", alg)
			}
			p.Release(b, true)
		}
	}

	fp.set(a.Addr(), false)
	p.checkOnce(ctx)
	mustEqual(t, "down after 1 of 2 successes", a.Down(), true)
	fp.set(a.Addr(), true)
	p.checkOnce(ctx) // resets the rise count
	fp.set(a.Addr(), false)
	p.checkOnce(ctx)
	mustEqual(t, "down after 1 success since failure", a.Down(), true)
	p.checkOnce(ctx)
	mustEqual(t, "down after 2 successes", a.Down(), false)
	mustEqual(t, "pool healthy", p.Healthy(), 3)
	if !strings.Contains(logs.String(), "backend marked up") {
		t.Fatalf("up not logged:\n%s", logs.String())
	}

	// Turning active checks off marks everything up.
	fp.set(a.Addr(), true)
	for range 3 {
		p.checkOnce(ctx)
	}
	mustEqual(t, "down again", a.Down(), true)
	opts.Active = nil
	p.Reconfigure(opts)
	mustEqual(t, "down after disabling active checks", a.Down(), false)
	checkAvail(t, p)
}

func TestActiveAndPassiveAreSeparate(t *testing.T) {
	clk := newClock()
	fp := newFakeProbe()
	p := NewPool(Options{
		Failures: 1, Cooldown: time.Second, Now: clk.Now,
		Active: &Active{Rise: 1, Fall: 1, Probe: fp.probe},
	}, addrList(1))
	b := p.Backends()[0]
	fp.set(b.Addr(), true)
	p.checkOnce(context.Background())
	p.Release(take(p, b), false)
	fp.set(b.Addr(), false)
	p.checkOnce(context.Background())
	mustEqual(t, "healthy: up but ejected", b.Healthy(), false)
	clk.Advance(time.Second)
	mustEqual(t, "healthy: up and cooled down", b.Healthy(), true)
	fp.set(b.Addr(), true)
	p.checkOnce(context.Background())
	mustEqual(t, "healthy: down, cooled down", b.Healthy(), false)
	if p.Pick() != nil {
		t.Fatal("picked a down backend")
	}
}

func TestCheckCancelledChangesNothing(t *testing.T) {
	fp := newFakeProbe()
	p := NewPool(Options{Active: &Active{Fall: 1, Probe: fp.probe}}, addrList(2))
	fp.set(p.Backends()[0].Addr(), true)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p.checkOnce(ctx)
	mustEqual(t, "healthy", p.Healthy(), 2)
}

func TestResolve(t *testing.T) {
	var (
		mu      sync.Mutex
		answers []any // []string or error
	)
	resolve := func(ctx context.Context) ([]string, error) {
		if _, ok := ctx.Deadline(); !ok {
			return nil, errors.New("resolve context has no deadline")
		}
		mu.Lock()
		defer mu.Unlock()
		next := answers[0]
		answers = answers[1:]
		if err, ok := next.(error); ok {
			return nil, err
		}
		return next.([]string), nil
	}
	push := func(a any) {
		mu.Lock()
		defer mu.Unlock()
		answers = append(answers, a)
	}
	al := newAttachLog()
	var logs syncBuffer
	p := NewPool(Options{Resolve: resolve, Attach: al.attach, Detach: al.detach, Logger: testLogger(&logs)}, []string{"seed:80"})
	ctx := context.Background()

	push([]string{"10.0.0.1:80", "10.0.0.2:80"})
	p.resolveOnce(ctx)
	mustEqual(t, "members", strings.Join(addrsOf(p.Backends()), ","), "10.0.0.1:80,10.0.0.2:80")
	kept := take(p, p.Backends()[1])

	push(errors.New("SERVFAIL"))
	p.resolveOnce(ctx)
	mustEqual(t, "members after error", strings.Join(addrsOf(p.Backends()), ","), "10.0.0.1:80,10.0.0.2:80")
	if !strings.Contains(logs.String(), "SERVFAIL") {
		t.Fatalf("resolve error not logged:\n%s", logs.String())
	}

	push([]string{})
	p.resolveOnce(ctx)
	mustEqual(t, "members after empty answer", len(p.Backends()), 2)
	push(errors.New("SERVFAIL"))
	p.resolveOnce(ctx)
	// One warning for the whole failing streak; the rest at debug.
	mustEqual(t, "warnings while failing", strings.Count(logs.String(), "[WARN]"), 1)

	push([]string{"10.0.0.3:80", "10.0.0.2:80"})
	p.resolveOnce(ctx)
	if !strings.Contains(logs.String(), "backend resolution recovered") {
		t.Fatalf("recovery not logged:\n%s", logs.String())
	}
	mustEqual(t, "members", strings.Join(addrsOf(p.Backends()), ","), "10.0.0.3:80,10.0.0.2:80")
	if byAddr(p, "10.0.0.2:80") != kept || kept.Inflight() != 1 {
		t.Fatal("re-resolution lost the state of a retained backend")
	}
	p.Release(kept, true)
	p.Close()
	al.balanced(t)
}

// waitGoroutines waits (bounded) for the goroutine count to fall back to
// want: a goroutine that has signalled its WaitGroup may take a moment to
// exit.
func waitGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > want {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines: %d, want %d\n%s", runtime.NumGoroutine(), want, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
}

// eventually waits (bounded) for cond, for effects that follow a signal
// from inside a callback.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestRunStopsAllGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	fp := newFakeProbe()
	fp.called = make(chan string, 1)
	resolved := make(chan struct{}, 1)
	p := NewPool(Options{
		Active: &Active{Interval: time.Millisecond, Timeout: time.Second, Probe: fp.probe},
		Resolve: func(context.Context) ([]string, error) {
			select {
			case resolved <- struct{}{}:
			default:
			}
			return addrList(40), nil // more than maxProbers
		},
		ResolveInterval: time.Millisecond,
	}, addrList(3))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx)
	}()
	for range 3 { // several rounds of each
		<-fp.called
		<-resolved
	}
	eventually(t, "resolved membership", func() bool { return len(p.Backends()) == 40 })
	// A second Run while running returns at once.
	p.Run(ctx)
	cancel()
	<-done
	waitGoroutines(t, before)
}

func TestRunFollowsReconfigure(t *testing.T) {
	before := runtime.NumGoroutine()
	p := NewPool(Options{}, addrList(2))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx)
	}()
	// Enabling active checks (with a long interval) probes at once.
	fp := newFakeProbe()
	fp.called = make(chan string, 2)
	p.Reconfigure(Options{Active: &Active{Interval: time.Hour, Fall: 1, Probe: fp.probe}})
	got := []string{<-fp.called, <-fp.called}
	slices.Sort(got)
	mustEqual(t, "probed", strings.Join(got, ","), strings.Join(addrList(2), ","))
	// Enabling DNS resolves at once.
	resolved := make(chan struct{})
	p.Reconfigure(Options{Resolve: func(context.Context) ([]string, error) {
		close(resolved)
		return []string{"new:80"}, nil
	}, ResolveInterval: time.Hour})
	<-resolved
	// The answer is adopted right after Resolve returns.
	eventually(t, "resolved membership", func() bool {
		return strings.Join(addrsOf(p.Backends()), ",") == "new:80"
	})
	cancel()
	<-done
	waitGoroutines(t, before)
}

func TestRunWaitsForSlowProbes(t *testing.T) {
	before := runtime.NumGoroutine()
	started := make(chan struct{}, 8)
	var running atomic.Int64
	p := NewPool(Options{Active: &Active{Interval: time.Hour, Timeout: time.Hour, Probe: func(ctx context.Context, _ string) error {
		running.Add(1)
		defer running.Add(-1)
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}}}, addrList(4))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx)
	}()
	for range 4 {
		<-started
	}
	cancel()
	<-done
	mustEqual(t, "probes still running after Run returned", running.Load(), int64(0))
	mustEqual(t, "healthy (a cancelled round changes nothing)", p.Healthy(), 4)
	waitGoroutines(t, before)
}

// TestReachEndsEjection: with Reach, an ejected backend stays out until
// a Reach after its trial wait succeeds (or the cooldown ends); a failed
// trial doubles the wait the next Reach must wait for. The issue this
// fixes: a backend killed and restarted was used again only when its
// cooldown (10 s) ended, seconds after it came back.
func TestReachEndsEjection(t *testing.T) {
	clk := newClock()
	fp := newFakeProbe()
	var logs syncBuffer
	p := NewPool(Options{Failures: 3, Cooldown: 10 * time.Second, Now: clk.Now, Reach: fp.probe, Logger: testLogger(&logs)}, addrList(2))
	a := p.Backends()[0]
	ctx := context.Background()

	fp.set(a.Addr(), true) // killed: connections refused
	p.Eject(take(p, a))
	mustEqual(t, "ejected until the cooldown's end", a.EjectedUntil(), clk.Now().Add(10*time.Second))
	p.reachOnce(ctx)
	mustEqual(t, "reached within the trial wait", fp.calls.Load(), int64(0))
	clk.Advance(TrialWait)
	p.reachOnce(ctx)
	mustEqual(t, "reached after the wait", fp.calls.Load(), int64(1))
	mustEqual(t, "healthy while it refuses", a.Healthy(), false)
	clk.Advance(ReachInterval)
	fp.set(a.Addr(), false) // restarted
	p.reachOnce(ctx)
	mustEqual(t, "healthy at the first Reach that answers", a.Healthy(), true)
	mustEqual(t, "pool healthy", p.Healthy(), 2)
	checkAvail(t, p)
	if !strings.Contains(logs.String(), "backend half-open") || !strings.Contains(logs.String(), "after=reach") {
		t.Fatalf("half-open not logged:\n%s", logs.String())
	}
	calls := fp.calls.Load()
	p.reachOnce(ctx)
	mustEqual(t, "reached while half-open", fp.calls.Load(), calls)

	// Its trial fails (it accepts connections but fails requests): out
	// again, and a Reach ends it only after twice the wait.
	p.Release(take(p, a), false)
	mustEqual(t, "healthy after a failed trial", a.Healthy(), false)
	mustEqual(t, "ejected until the cooldown's end", a.EjectedUntil(), clk.Now().Add(10*time.Second))
	clk.Advance(TrialWait)
	p.reachOnce(ctx)
	mustEqual(t, "half-open after one wait; the second is twice", a.Healthy(), false)
	clk.Advance(TrialWait)
	p.reachOnce(ctx)
	mustEqual(t, "half-open after the doubled wait", a.Healthy(), true)
	p.Release(take(p, a), true)
	mustEqual(t, "rejoined", a.EjectedUntil(), time.Time{})

	// Passive checks off: nothing is reached.
	q := NewPool(Options{Now: clk.Now, Reach: fp.probe}, addrList(1))
	q.Eject(take(q, q.Backends()[0]))
	calls = fp.calls.Load()
	q.reachOnce(ctx)
	mustEqual(t, "reached with passive checks off", fp.calls.Load(), calls)
}

// TestProbeEndsEjection: with active checks, a good probe after the
// trial wait ends a passive ejection (Envoy's
// successful_active_health_check_uneject_host); one within the wait
// does not.
func TestProbeEndsEjection(t *testing.T) {
	clk := newClock()
	fp := newFakeProbe()
	p := NewPool(Options{Failures: 1, Cooldown: 10 * time.Second, Now: clk.Now,
		Active: &Active{Interval: time.Hour, Rise: 2, Fall: 3, Probe: fp.probe}}, addrList(2))
	a := p.Backends()[0]
	ctx := context.Background()
	p.Eject(take(p, a))
	mustEqual(t, "ejected until the cooldown's end", a.EjectedUntil(), clk.Now().Add(10*time.Second))
	p.checkOnce(ctx)
	mustEqual(t, "healthy after a good probe within the wait", a.Healthy(), false)
	clk.Advance(TrialWait)
	p.checkOnce(ctx)
	mustEqual(t, "healthy after a good probe after the wait", a.Healthy(), true)
	checkAvail(t, p)
}

// TestTransitionProbes: a backend whose rise (or fall) count has started
// is in transition, and a transitional round probes it alone.
func TestTransitionProbes(t *testing.T) {
	fp := newFakeProbe()
	p := NewPool(Options{Active: &Active{Interval: time.Hour, Rise: 2, Fall: 2, Probe: fp.probe}}, addrList(3))
	a, b := p.Backends()[0], p.Backends()[1]
	ctx := context.Background()
	p.checkOnce(ctx)
	mustEqual(t, "in transition, all up", p.inTransition(), false)
	fp.set(a.Addr(), true)
	p.checkOnce(ctx)
	mustEqual(t, "in transition after a's first failure", p.inTransition(), true)
	calls := fp.calls.Load()
	p.check(ctx, true)
	mustEqual(t, "probes of a transitional round", fp.calls.Load()-calls, int64(1))
	mustEqual(t, "a down after its second failure", a.Down(), true)
	mustEqual(t, "in transition, a down", p.inTransition(), false)
	fp.set(a.Addr(), false)
	fp.set(b.Addr(), true)
	p.checkOnce(ctx)
	mustEqual(t, "in transition: a rising, b falling", p.inTransition(), true)
	calls = fp.calls.Load()
	p.check(ctx, true)
	mustEqual(t, "probes of a transitional round", fp.calls.Load()-calls, int64(2))
	mustEqual(t, "a up", a.Down(), false)
	mustEqual(t, "b down", b.Down(), true)
}

// TestRunProbesTransitionsFast: Run probes a backend in transition every
// Interval/FastDivisor, so a returning backend is up a fraction of an
// interval after its first good probe (HAProxy's fastinter), while the
// others wait for the next whole round.
func TestRunProbesTransitionsFast(t *testing.T) {
	fp := newFakeProbe()
	fp.called = make(chan string, 64)
	p := NewPool(Options{Active: &Active{Interval: 20 * time.Second, Timeout: time.Second, Rise: 2, Fall: 1, Probe: fp.probe}}, addrList(2))
	a := p.Backends()[0]
	fp.set(a.Addr(), true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("a down after the first round", a.Down)
	fp.set(a.Addr(), false)
	// The next whole round is 20 s away; a reconfigure with the same
	// options runs one now: a's first good probe starts its rise.
	p.Reconfigure(Options{Active: &Active{Interval: 20 * time.Second, Timeout: time.Second, Rise: 2, Fall: 1, Probe: fp.probe}})
	start := time.Now()
	waitFor("a up", func() bool { return !a.Down() })
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("a up %v after its first good probe, want about 2 s (Interval/FastDivisor)", d)
	}
}
