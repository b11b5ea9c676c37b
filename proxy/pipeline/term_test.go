package pipeline

import (
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/sert"
)

// TestTerminatedReply: OutTerminated is 503 (never the app's 429), with
// the app's Retry-After, X-Sentry-Reject: terminated and reason
// "terminated"; it is not a passive-health failure.
func TestTerminatedReply(t *testing.T) {
	a := &App{Reject: RejectResponse{Status: 429, RetryAfter: 7}}
	r := ReplyFor(a, OutTerminated, admission.Decision{}, false)
	if r.Status != 503 || r.Retry != 7 || string(r.Verdict) != "terminated" || len(r.Body) == 0 {
		t.Fatalf("reply %+v, want 503, Retry-After 7, terminated, a body", r)
	}
	if StatusOf(OutTerminated) != 503 || OutcomeReason[OutTerminated] != "terminated" || CountsAsFailure(OutTerminated) {
		t.Fatalf("status %d reason %q failure %v", StatusOf(OutTerminated), OutcomeReason[OutTerminated], CountsAsFailure(OutTerminated))
	}
}

// TestTermLatch: the timer's look (Due) before the threshold re-arms
// (for at most the lower bound), after it wins the latch once; the
// response's Disarm after a cut loses; a Disarm first leaves nothing to
// cut; a raised threshold re-arms for the rest.
func TestTermLatch(t *testing.T) {
	c, err := sert.New(sert.Config{Params: sert.DefaultParams(), Classes: []*sert.ClassConfig{{Name: "gold", Lower: 100 * time.Millisecond, Upper: 300 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Class(0)
	t0 := time.Unix(1000, 0)
	var x Term
	if w := x.Arm(cl, t0); w != 100*time.Millisecond {
		t.Fatalf("first look after %v, want the lower bound 100ms", w)
	}
	if w, cut := x.Due(t0.Add(250 * time.Millisecond)); w != 50*time.Millisecond || cut {
		t.Fatalf("at 250ms: wait %v cut %v, want 50ms, false", w, cut)
	}
	if w, cut := x.Due(t0.Add(300 * time.Millisecond)); w != 0 || !cut || !x.Cut() {
		t.Fatalf("at 300ms: wait %v cut %v, want the cut", w, cut)
	}
	if x.Disarm() {
		t.Fatal("the response won after the cut")
	}
	if _, cut := x.Due(t0.Add(400 * time.Millisecond)); cut {
		t.Fatal("cut twice")
	}

	x.Arm(cl, t0)
	if !x.Disarm() {
		t.Fatal("the response lost with nothing cut")
	}
	if w, cut := x.Due(t0.Add(time.Second)); w != 0 || cut {
		t.Fatalf("after the response: wait %v cut %v, want nothing", w, cut)
	}

	// The threshold rises in flight: the look at the old threshold
	// re-arms for the rest (bounded by the lower bound).
	x.Arm(cl, t0)
	if err := c.Reconfigure(sert.Config{Params: sert.DefaultParams(), Classes: []*sert.ClassConfig{{Name: "gold", Lower: 100 * time.Millisecond, Upper: 350 * time.Millisecond}}}); err != nil {
		t.Fatal(err)
	}
	if w, cut := x.Due(t0.Add(300 * time.Millisecond)); w != 50*time.Millisecond || cut {
		t.Fatalf("raised to 350ms, at 300ms: wait %v cut %v, want 50ms, false", w, cut)
	}

	// Under heavy loss (p ≥ HW) the threshold falls to LB = 100ms; a
	// request cut at 120ms counts one termination, reclaims min(120ms,
	// UB − 120ms) = 120ms, and (an app without a controller) tells no
	// ticket.
	for i := 0; i < 200; i++ {
		cl.Arrive()
		if i%2 == 0 {
			cl.Reject()
		}
	}
	c.Tick(t0)
	if cl.Threshold() != 100*time.Millisecond {
		t.Fatalf("threshold after a tick at p = 50%%: %v, want LB", cl.Threshold())
	}
	x.Arm(cl, t0)
	if _, cut := x.Due(t0.Add(120 * time.Millisecond)); !cut {
		t.Fatal("not cut at 120ms with T = 100ms")
	}
	before := cl.Counts()
	(&App{}).Terminated(&Ticket{}, &x, t0.Add(125*time.Millisecond), 1)
	after := cl.Counts()
	if after.Terminated != before.Terminated+1 || after.Reclaimed-before.Reclaimed != 120*time.Millisecond {
		t.Fatalf("terminated %d→%d, reclaimed +%v; want +1 and +120ms", before.Terminated, after.Terminated, after.Reclaimed-before.Reclaimed)
	}

	var off Term
	if off.Arm(nil, t0) != 0 || off.On() || !off.Disarm() || off.Cut() {
		t.Fatal("a Term without a class is not off")
	}
}
