package batchac

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/admission"
)

type countWaker struct{ n atomic.Int64 }

func (w *countWaker) Wake() { w.n.Add(1) }

func newParkController(t *testing.T, inflight int64) (*Controller, *fakeState, *manualClock) {
	t.Helper()
	clock := &manualClock{t: time.Unix(1000, 0)}
	st := newFakeState(1, inflight, 0, time.Second)
	// The paper's test (NoImpliedQueue): these tests are about parking, and
	// their hand-computed batches fill an idle farm to the budget.
	c, err := New(st, Config{Now: clock.Now, StrictPeriods: true, NoImpliedQueue: true, Classes: []ClassConfig{
		{Name: "gold", Period: 0}, {Name: "bronze", Period: 100 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, st, clock
}

// TestPark: a class without a period is decided at once; a class with one
// parks, its run wakes the Waker once however many of its requests it
// decided, and Result hands out (and counts) each decision once.
func TestPark(t *testing.T) {
	c, _, clock := newParkController(t, 0)
	wk := &countWaker{}
	if d, p, decided := c.Park(&admission.Request{Class: 0, S: time.Millisecond}, wk); !decided || p != nil || d.Verdict != admission.Admit {
		t.Fatalf("period-0 class: %v %v %v, want decided admit", d, p, decided)
	}
	var ps []*Parked
	for i := 0; i < 3; i++ {
		d, p, decided := c.Park(&admission.Request{Class: 1, S: 300 * time.Millisecond}, wk)
		if decided || p == nil {
			t.Fatalf("bronze %d: decided %v (%v), want parked", i, decided, d)
		}
		if _, ready := p.Result(); ready {
			t.Fatalf("bronze %d ready before its run", i)
		}
		ps = append(ps, p)
	}
	if got := c.QueueLen(1); got != 3 {
		t.Fatalf("queue %d, want 3", got)
	}
	if wk.n.Load() != 0 {
		t.Fatal("woken before the run")
	}
	clock.Advance(100 * time.Millisecond)
	c.Tick(clock.Now())
	if got := wk.n.Load(); got != 1 {
		t.Fatalf("woken %d times, want once per run", got)
	}
	// R = 1s − 100ms = 900ms, n = 1, P = 1: (0 + 3)·300 = 900 → all three.
	for i, p := range ps {
		d, ready := p.Result()
		if !ready || d.Verdict != admission.Admit {
			t.Fatalf("bronze %d: %v ready=%v, want admitted", i, d.Verdict, ready)
		}
	}
	if got := c.pending.Load(); got != 0 {
		t.Fatalf("pending %d after the results were taken, want 0", got)
	}
	if got := c.snap.Load().classes[1].decisions[admission.Admit].Load(); got != 3 {
		t.Fatalf("counted %d admissions, want 3", got)
	}
}

// TestParkCancel: a client that goes while parked leaves its queue (before
// the run) or gives its admission back (after it), and counts as gone.
func TestParkCancel(t *testing.T) {
	c, _, clock := newParkController(t, 0)
	wk := &countWaker{}
	_, before, _ := c.Park(&admission.Request{Class: 1, S: time.Millisecond}, wk)
	_, after, _ := c.Park(&admission.Request{Class: 1, S: time.Millisecond}, wk)
	before.Cancel()
	if got := c.QueueLen(1); got != 1 {
		t.Fatalf("queue %d after a cancel, want 1", got)
	}
	clock.Advance(100 * time.Millisecond)
	c.Tick(clock.Now())
	if got := c.pending.Load(); got != 1 {
		t.Fatalf("pending %d before the result is taken, want 1", got)
	}
	after.Cancel()
	if got := c.pending.Load(); got != 0 {
		t.Fatalf("pending %d after a cancel of an admitted request, want 0", got)
	}
	cl := c.snap.Load().classes[1]
	if gone, adm := cl.decisions[admission.RejectGone].Load(), cl.decisions[admission.Admit].Load(); gone != 2 || adm != 0 {
		t.Fatalf("gone %d admitted %d, want 2 and 0", gone, adm)
	}
}

// TestParkClose: Close decides every parked request (no backend) and wakes.
func TestParkClose(t *testing.T) {
	c, _, _ := newParkController(t, 0)
	wk := &countWaker{}
	_, p, _ := c.Park(&admission.Request{Class: 1, S: time.Millisecond}, wk)
	c.Close()
	if wk.n.Load() != 1 {
		t.Fatalf("woken %d times by Close, want 1", wk.n.Load())
	}
	if d, ready := p.Result(); !ready || d.Verdict != admission.RejectNoBackend {
		t.Fatalf("%v ready=%v, want no_backend", d.Verdict, ready)
	}
	if d, _, decided := c.Park(&admission.Request{Class: 1}, wk); !decided || d.Verdict != admission.RejectNoBackend {
		t.Fatalf("after Close: %v decided=%v", d.Verdict, decided)
	}
}

// TestParkAllocs: Park, the run and Result allocate nothing once warm.
func TestParkAllocs(t *testing.T) {
	c, _, clock := newParkController(t, 0)
	wk := &countWaker{}
	r := &admission.Request{Class: 1, S: time.Millisecond}
	cycle := func() {
		_, p, _ := c.Park(r, wk)
		clock.Advance(100 * time.Millisecond)
		c.Tick(clock.Now())
		p.Result()
	}
	cycle()
	if a := testing.AllocsPerRun(200, cycle); a != 0 {
		t.Fatalf("%v allocs per park/run/result", a)
	}
}

// TestParkRanks: Park queues a marginal request with its rank, as Admit
// does (testdata/fairshare_rank.txt, the same batch): the run takes the
// marginal tier by rank, not by arrival. Both of rank 0 pass, one of
// rank 1, none of rank 2, which came first.
func TestParkRanks(t *testing.T) {
	clock := &manualClock{t: time.Unix(1000, 0)}
	st := newFakeState(1, 4, 0, time.Second)
	st.means[0].Store(int64(200 * time.Millisecond))
	c, err := New(st, Config{Now: clock.Now, StrictPeriods: true, Parallelism: 4, ReserveFloor: 0.25,
		Classes: []ClassConfig{{Name: "bronze", Period: 100 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	wk := &countWaker{}
	ranks := []uint8{2, 2, 1, 1, 0, 0}
	var ps []*Parked
	for i, r := range ranks {
		d, p, decided := c.Park(&admission.Request{Class: 0, S: 200 * time.Millisecond, Share: admission.Marginal, Rank: r}, wk)
		if decided || p == nil {
			t.Fatalf("request %d: decided %v (%v), want parked", i, decided, d)
		}
		ps = append(ps, p)
	}
	clock.Advance(100 * time.Millisecond)
	c.Tick(clock.Now())
	want := []admission.Verdict{admission.RejectOverShare, admission.RejectOverShare, admission.Admit,
		admission.RejectOverShare, admission.Admit, admission.Admit}
	for i, p := range ps {
		d, ready := p.Result()
		if !ready || d.Verdict != want[i] {
			t.Errorf("rank %d (arrival %d): %v ready=%v, want %v", ranks[i], i, d.Verdict, ready, want[i])
		}
	}
}
