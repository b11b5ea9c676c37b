package proxy

import (
	"time"

	"github.com/sentry-proxy/sentry/sert"
)

// Selective early termination on the fasthttp and h2 front ends (package
// sert; the shared part is pipeline/term.go, the event loops' is their
// sweep).
//
// The cut is abort.go's: the request's body is an abortBody, which binds
// the backend connection fasthttp picked to an abortable, and the
// termination timer closes that connection (abortable.abort); fasthttp's
// read then fails, it drops the connection (never back to the pool), and
// relay returns at once without a retry, since the hold says it was cut.
// An h2 request already has its stream's abortable; an HTTP/1.1 request
// of a terminable class gets the exchange's own (exchange.ab), so only
// those requests pay for it: their body goes as a stream, so a body-less
// GET reaches the backend with Content-Length: 0, and fasthttp's own
// retry of a stale keep-alive connection is off for them (sentry's retry
// policy, pipeline.TryAgain, still applies: a terminated request is never
// retried).
//
// "First response byte" is the first byte read from the backend
// connection: the connection (idleConn) holds the exchange's Term while
// the timer is armed and disarms the latch on its first Read, so a
// response whose head came in time is never cut while fasthttp reads a
// slow body (HostClient.Do reads a body up to streamThreshold whole
// before it returns). Before anything is written to the client, serve
// stops the timer; if the timer won first, whatever came back is dropped
// and the client gets 503 terminated.
//
// The timer is one time.Timer per pooled exchange, made on its first
// terminable request and re-armed (Reset) for each, so a terminable
// request allocates nothing for it after warm-up.

// reset makes a pooled exchange's abortable ready for a new request.
func (ab *abortable) reset() {
	ab.mu.Lock()
	ab.done, ab.mu.conn, ab.mu.cut, ab.mu.term = nil, nil, false, nil
	ab.mu.Unlock()
}

// armTerm starts the termination clock at dispatch for class cl; the
// timer cuts hold.
func (x *fhExchange) armTerm(cl *sert.Class, dispatch time.Time, hold *abortable) {
	x.tmu.Lock()
	wait := x.term.Arm(cl, dispatch)
	x.tOn, x.tCut = true, hold
	hold.track(&x.term)
	if x.tm == nil {
		x.tm = time.AfterFunc(wait, x.fireTerm)
	} else {
		x.tm.Reset(wait)
	}
	x.tmu.Unlock()
}

// stopTerm ends the timer's part: after it, the latch is decided (a
// timer that runs late finds tOn false and does nothing).
func (x *fhExchange) stopTerm() {
	x.tmu.Lock()
	if x.tCut != nil {
		x.tCut.track(nil)
	}
	x.tOn, x.tCut = false, nil
	x.tmu.Unlock()
	x.tm.Stop()
}

// fireTerm is the timer: it re-arms when the class's threshold has risen
// since it was armed, or wins the latch and cuts the backend connection.
func (x *fhExchange) fireTerm() {
	x.tmu.Lock()
	defer x.tmu.Unlock()
	if !x.tOn {
		return
	}
	wait, cut := x.term.Due(time.Now())
	switch {
	case wait > 0:
		x.tm.Reset(wait)
	case cut:
		x.tCut.abort()
	}
}
