package pipeline

import (
	"net/http"
	"time"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/sert"
)

// term.go: selective early termination in the exchange (package sert;
// docs/termination.md), the part every engine shares. An engine keeps a
// Term in its per-exchange state, asks Arm at dispatch, checks Due when
// its timer fires (the loops: on their sweep; fasthttp and h2: a timer
// per pooled exchange), calls Disarm when the response head is about to
// go to the client, and calls Terminated after it cut the backend
// exchange, before it writes the reply for OutTerminated.

// Term is one exchange's termination state. The zero Term is off; it
// does not allocate.
type Term struct {
	cl       *sert.Class // nil: this exchange is not terminable
	latch    sert.Latch
	dispatch time.Time
	cutAt    time.Duration // elapsed when cut (Due's last look)
	thr      time.Duration // the threshold it was cut at
}

// TermClass returns the termination state of the ticket's class when a
// request with this method may be cut: the app terminates (Term is set
// only when a class of the policy declares terminate), the class does,
// and its terminator allows the method. The caller has already excluded
// upgrades and request bodies that stream. For an app without terminate
// this is one nil check.
func (a *App) TermClass(t *Ticket, method []byte) *sert.Class {
	if a.Term == nil {
		return nil
	}
	cl := a.Term.Class(t.Class)
	if cl == nil || !cl.TerminableBytes(method) {
		return nil
	}
	return cl
}

// Arm starts the termination clock at dispatch for class cl (nil: off)
// and returns how long until the timer should first look (the class's
// threshold now, at most its lower bound: see recheck). Every engine arms
// it at the first dispatch only: a retry (after a failed connect or a
// connection that broke before any response byte) does not restart the
// clock.
func (x *Term) Arm(cl *sert.Class, dispatch time.Time) time.Duration {
	x.cl, x.dispatch, x.cutAt, x.thr = cl, dispatch, 0, 0
	x.latch.Reset()
	if cl == nil {
		return 0
	}
	return recheck(cl, cl.Threshold())
}

// recheck bounds a timer's wait by the class's lower bound LB: a threshold
// that rose is seen when the timer fires (it re-arms for the rest), but
// one that fell would not be until the old one ran out, so the timer
// looks again at least every LB. The threshold is never below LB, so a
// cut comes at most LB late, and a request looks at most UB/LB times
// (30 with the default range) -- only requests that run that long.
func recheck(cl *sert.Class, wait time.Duration) time.Duration {
	if lb, _ := cl.Bounds(); lb > 0 && wait > lb {
		return lb
	}
	return wait
}

// On tells whether the exchange is terminable and not yet decided.
func (x *Term) On() bool { return x.cl != nil }

// Due is the timer's look at now: wait > 0 is how long to re-arm for
// (the request is not yet overdue under the current threshold, which may
// have moved since the timer was armed: a new threshold applies to
// requests in flight); cut true means the latch was won and the
// caller must cut the backend exchange and answer OutTerminated. Both
// zero: the response won (or termination is off); nothing to do.
func (x *Term) Due(now time.Time) (wait time.Duration, cut bool) {
	cl := x.cl
	if cl == nil {
		return 0, false
	}
	el := now.Sub(x.dispatch)
	if r := cl.Remaining(el); r > 0 {
		return recheck(cl, r), false
	}
	if !x.latch.Terminate() {
		return 0, false
	}
	x.cutAt, x.thr = el, cl.Threshold()
	return 0, true
}

// Disarm is called when the response head is about to go to the client:
// true means it may (termination is off, or it lost); false means the
// timer cut the exchange first, and the engine answers OutTerminated
// instead (it calls Terminated).
func (x *Term) Disarm() bool {
	if x.cl == nil {
		return true
	}
	return x.latch.Disarm()
}

// Cut reports whether the timer won the latch.
func (x *Term) Cut() bool { return x.cl != nil && x.latch.Terminated() }

// Off ends the exchange's termination state (the pooled exchange is
// reused).
func (x *Term) Off() { x.cl = nil }

// Terminated completes a terminated exchange: it counts the termination
// and the backend time it reclaimed (sert.Class.Reclaim), and tells the
// ticket its outcome with the measured time sert.Sample gives (at least
// the threshold: the estimator and the batch test see the cost), at now.
// inService is the backend's in-flight count at dispatch.
//
// Reclaimed time: the request's true remaining cost is unknown (that is
// why it was cut), so it is estimated as the time it had already run,
// capped at what the class's upper bound leaves (nothing runs past UB):
// min(elapsed, UB − elapsed). Running as long again is the expected
// remaining time of a request of age elapsed under a heavy-tailed
// (Pareto, α = 2) service time, the case termination is for; UB −
// elapsed alone, the most a cut can free, overstated it by orders of
// magnitude (15 s per cut with the default range).
func (a *App) Terminated(t *Ticket, x *Term, now time.Time, inService int) {
	cl := x.cl
	if cl == nil {
		return
	}
	el := now.Sub(x.dispatch)
	if x.cutAt > 0 && x.cutAt < el {
		el = x.cutAt
	}
	cl.Terminate()
	_, ub := cl.Bounds()
	cl.Reclaim(min(el, ub-el))
	thr := x.thr
	if thr == 0 {
		thr = cl.Threshold()
	}
	a.Observe(t, admission.Result{Measured: sert.Sample(el, thr, true), InService: inService, End: now, Terminated: true})
	x.cl = nil
}

// terminatedReply is OutTerminated's answer (ReplyFor): always 503 --
// the cut is the server's overload, never the client's rate, so never
// 429 -- with the app's Retry-After (reject.retry_after, as a rejection
// without a computed wait) and X-Sentry-Reject: terminated.
func (a *App) terminatedReply() Reply {
	secs := 1
	body := errorBodies[OutTerminated]
	if a != nil {
		secs = max(a.Reject.RetryAfter, 1)
	}
	return Reply{Status: http.StatusServiceUnavailable, Retry: secs, Wait: time.Duration(secs) * time.Second, Verdict: verdictTerminated, Body: body}
}

var verdictTerminated = []byte("terminated")
