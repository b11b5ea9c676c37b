package sert

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func newTest(t *testing.T, p Params) *Controller {
	t.Helper()
	c, err := New(Config{Params: p, Classes: []*ClassConfig{
		{Name: "search", Lower: 500 * time.Millisecond, Upper: 15 * time.Second}, nil}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The latch lets exactly one of the timer and the first byte win, however
// they race.
func TestLatch(t *testing.T) {
	var l Latch
	if !l.Disarm() || l.Terminate() || l.Terminated() || !l.Disarm() {
		t.Fatal("a disarmed latch must stay disarmed")
	}
	l.Reset()
	if !l.Terminate() || l.Terminate() || l.Disarm() || !l.Terminated() {
		t.Fatal("a terminated latch must refuse the response")
	}
	for range 200 {
		var l Latch
		var wg sync.WaitGroup
		var term, resp bool
		wg.Add(2)
		go func() { defer wg.Done(); term = l.Terminate() }()
		go func() { defer wg.Done(); resp = l.Disarm() }()
		wg.Wait()
		if term == resp {
			t.Fatalf("terminate %v, respond %v: exactly one must win", term, resp)
		}
	}
}

// Counting races with Tick and Reconfigure (run with -race); every count
// is seen exactly once across ticks.
func TestConcurrentCounting(t *testing.T) {
	c := newTest(t, Params{Alpha: 4, LowWater: 0.05, HighWater: 0.15, Interval: time.Second, MinArrivals: 1})
	const workers, each = 4, 2000
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				cl := c.Class(0)
				cl.Arrive()
				if i%10 == 0 {
					cl.Reject()
				}
				_ = cl.Threshold()
				_ = cl.Terminable("GET")
			}
		}()
	}
	var total, lost uint64
	now := time.Unix(0, 0)
	for range 50 {
		now = now.Add(time.Second)
		c.Tick(now)
		if u := c.Class(0).Last(); !u.Skipped {
			total += u.Arrived
			lost += u.Lost
		}
		if err := c.Reconfigure(Config{Params: c.Params(), Classes: []*ClassConfig{
			{Name: "search", Lower: 500 * time.Millisecond, Upper: 15 * time.Second}, nil}}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	c.Tick(now.Add(time.Second))
	if u := c.Class(0).Last(); !u.Skipped {
		total += u.Arrived
		lost += u.Lost
	}
	if total != workers*each || lost != workers*each/10 {
		t.Fatalf("ticks saw %d arrivals and %d losses, want %d and %d", total, lost, workers*each, workers*each/10)
	}
}

// Run ticks on its own and stops with its context.
func TestRunStops(t *testing.T) {
	c := newTest(t, Params{Alpha: 4, LowWater: 0.05, HighWater: 0.15, Interval: time.Millisecond, MinArrivals: 1})
	cl := c.Class(0)
	for range 100 {
		cl.Arrive()
		cl.Terminate()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for cl.Threshold() != 500*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatal("Run did not update the threshold")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop")
	}
}

func TestRemaining(t *testing.T) {
	c := newTest(t, DefaultParams())
	cl := c.Class(0)
	if r := cl.Remaining(5 * time.Second); r != 10*time.Second {
		t.Fatalf("remaining %v, want 10s", r)
	}
	if c.Class(1) != nil || c.Class(-1) != nil || c.Class(2) != nil {
		t.Fatal("a class without a range, or out of range, must be nil")
	}
}

func TestCollector(t *testing.T) {
	c := newTest(t, DefaultParams())
	cl := c.Class(0)
	for range 100 {
		cl.Arrive()
	}
	for range 8 {
		cl.Terminate()
	}
	cl.Reclaim(1500 * time.Millisecond)
	cl.Reclaim(-time.Second)
	c.Tick(time.Unix(10, 0))
	k := NewCollector(c, prometheus.Labels{"app": "shop"})
	want := `
# HELP sentry_termination_threshold_seconds Current termination threshold T = LB + F(p)·(UB − LB) of the class.
# TYPE sentry_termination_threshold_seconds gauge
sentry_termination_threshold_seconds{app="shop",class="search"} 3.98145
# HELP sentry_terminations_total Requests of the class terminated for passing the threshold before their first response byte.
# TYPE sentry_terminations_total counter
sentry_terminations_total{app="shop",class="search"} 8
# HELP sentry_termination_loss_ratio Loss fraction p = (rejected + terminated)/arrived over the last interval that updated the threshold.
# TYPE sentry_termination_loss_ratio gauge
sentry_termination_loss_ratio{app="shop",class="search"} 0.08
# HELP sentry_termination_reclaimed_server_seconds_total Backend time termination reclaimed, in server-seconds (the proxy's estimate of work the cut requests would still have done).
# TYPE sentry_termination_reclaimed_server_seconds_total counter
sentry_termination_reclaimed_server_seconds_total{app="shop",class="search"} 1.5
`
	if err := testutil.CollectAndCompare(k, strings.NewReader(want),
		"sentry_termination_threshold_seconds", "sentry_terminations_total",
		"sentry_termination_loss_ratio", "sentry_termination_reclaimed_server_seconds_total"); err != nil {
		t.Fatal(err)
	}
	if err := prometheus.NewPedanticRegistry().Register(k); err != nil {
		t.Fatal(err)
	}
}

// TestRunLooksBetweenTicks drives Run's loop on a ticker channel and a
// manual clock: the first LooksPerInterval − 1 ticks are Looks (one of
// them lowers T early, without consuming the counts), the next is the
// Tick that judges the whole window, and an interval changed by
// Reconfigure re-times the ticker.
func TestRunLooksBetweenTicks(t *testing.T) {
	t0 := time.Unix(0, 0)
	var mu sync.Mutex
	now := t0
	// Each Look or Tick of the loop reads the clock once; read tells send
	// that the loop has read the time of the tick it was sent, so the next
	// send cannot move the clock under a tick still being handled.
	read := make(chan struct{}, 1)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		select {
		case read <- struct{}{}:
		default:
		}
		return now
	}
	p := DefaultParams() // 10 s interval, HW 15%, min 100
	cfg := Config{Params: p, Now: clock, Classes: []*ClassConfig{{Name: "search", Lower: 500 * time.Millisecond, Upper: 15 * time.Second}}}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Class(0)
	<-read                        // New's read
	ticks := make(chan time.Time) // unbuffered: a send returns once the loop took the previous one
	resets := make(chan time.Duration, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.run(ctx, p.Interval, ticks, func(d time.Duration) { resets <- d }); close(done) }()
	step := p.Interval / LooksPerInterval
	send := func(i int) {
		mu.Lock()
		now = t0.Add(time.Duration(i) * step)
		mu.Unlock()
		ticks <- now
		select {
		case <-read:
		case <-time.After(10 * time.Second):
			t.Fatalf("the loop did not read the clock for tick %d", i)
		}
	}

	// 1000 requests, 400 of them lost, before the first look. At 2.5 s
	// the projection is HW × 1000 × 10/2.5 = 600 > 400: nothing; at
	// 3.75 s it is 400 ≤ 400, the window's p will be ≥ HW: T falls.
	for range 1000 {
		cl.Arrive()
	}
	for range 400 {
		cl.Reject()
	}
	send(1)
	send(2) // the loop has finished the look at 1.25 s
	if cl.Threshold() != 15*time.Second || cl.Last().Early {
		t.Fatalf("after the look at 1.25 s: T %v, last %+v; want UB", cl.Threshold(), cl.Last())
	}
	send(3)
	send(4) // the loop has finished the look at 3.75 s
	if u := cl.Last(); !u.Early || cl.Threshold() != 500*time.Millisecond || u.Arrived != 1000 || u.Lost != 400 ||
		!u.At.Equal(t0.Add(3*step)) {
		t.Fatalf("after the look at 3.75 s: T %v, last %+v; want an early fall to 500ms on 1000/400 at 3.75 s", cl.Threshold(), u)
	}
	send(5)
	for range 1000 {
		cl.Arrive()
	}
	send(6)
	send(7)
	send(8) // the Tick at 10 s
	send(9) // the loop has finished the Tick
	u := cl.Last()
	if u.Early || u.Skipped || u.Arrived != 2000 || u.Lost != 400 || u.P != 0.2 || cl.Threshold() != 500*time.Millisecond {
		t.Fatalf("the tick at 10 s: T %v, last %+v; want the whole window, 400 lost of 2000, T = LB", cl.Threshold(), u)
	}

	// A reload that changes the interval re-times the ticker at the next
	// Tick.
	cfg.Params.Interval = 4 * time.Second
	if err := c.Reconfigure(cfg); err != nil {
		t.Fatal(err)
	}
	for i := 10; i <= 16; i++ {
		send(i)
	}
	select {
	case d := <-resets:
		if d != 500*time.Millisecond {
			t.Fatalf("reset to %v, want 500ms (4 s / %d)", d, LooksPerInterval)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reset after the interval changed")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("run did not stop")
	}
}
