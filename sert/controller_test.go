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
