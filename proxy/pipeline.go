package proxy

import (
	"net/netip"
	"time"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/classify"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// The request pipeline, once for every engine (doc.go, "The request
// path"). An engine parses and checks the head, routes it to an app, and
// then runs these steps in this order, supplying only a view of the
// request (classify.Request), the client's address as the header policy
// read it (clientAddr), and its own way to wait and to write headers:
//
//	decide    a.decide      classify, estimate (counts the arrival), ask admission (Park)
//	          (engine)      wait for a parked decision: block (fasthttp, h2) or park the exchange (loops)
//	          a.admitted    count the verdict once; map it to what comes next
//	          (engine)      no healthy backend → 503; plan the forwarding headers (pipeline.PlanForwarding)
//	relay     (engine)      send, retry by pipeline.TryAgain, read the response head
//	complete  a.observe     tell the ticket the outcome (Controller.Done); say whether to strip Server-Timing
//	          p.record      metrics, then the access log
//
// Nothing here allocates: the ticket lives in the engine's pooled
// per-exchange state.

// ticket is one request's admission state as the pipeline keeps it, held
// in the engine's pooled per-exchange state: the admission.Ticket the
// outcome is reported against, the admission.Request Park may keep while
// the request waits, and, for an engine whose request bytes may move while
// the request waits, a copy of the history key.
type ticket struct {
	admission.Ticket
	req admission.Request
	key []byte
}

// trustedPeer tells whether the app trusts peer as a proxy (step 4 of the
// header policy): the engine then reads what the proxy sent, and the
// client's address is clientAddr's, not peer.
func (a *app) trustedPeer(peer netip.Addr) bool {
	return a.trusted && pipeline.Trusted(a.cfg.TrustedProxies, peer)
}

// clientAddr is the client's address for classification, from a trusted
// peer's X-Forwarded-For lines merged into xff.
func (a *app) clientAddr(peer netip.Addr, xff []byte) netip.Addr {
	return pipeline.ClientFromXFF(a.cfg.TrustedProxies, peer, xff)
}

// decide is the first half of the decide step: it classifies the request
// (v, from client), estimates its service time at now (which counts the
// arrival), fills t, and asks for admission without blocking (Park, woken
// through wk). decided is true when d is the decision; otherwise pend is
// the parked request, and the engine waits for it (woken through wk)
// before calling admitted, or cancels it when the client goes. gone is the
// engine's client-gone signal for a blocking Admitter (nil: none). With
// copyKey the history key is copied into t, for an engine whose request
// bytes may not stay put until the exchange ends.
//
// An app without a controller admits everything, uncounted; an app in
// mode off admits everything, counted by admitted.
func (a *app) decide(t *ticket, v classify.Request, client netip.Addr, now time.Time, gone <-chan struct{}, copyKey bool, wk admission.Waker) (d admission.Decision, pend admission.Pending, decided bool) {
	ctl := a.ctl
	t.req = admission.Request{Gone: gone}
	t.Ticket = admission.Ticket{Arrival: now}
	if ctl == nil {
		return admission.Decision{Verdict: admission.Admit}, nil, true
	}
	class, key := ctl.Classify(v, client)
	if copyKey {
		t.key = append(t.key[:0], key...)
		key = t.key
	}
	t.Class, t.Key = class, key
	t.req.Class, t.req.Key = class, key
	t.req.S, t.req.Bucket = ctl.Estimate(class, key, now)
	t.S = t.req.S
	if a.off {
		return admission.Decision{Verdict: admission.Admit}, nil, true
	}
	return ctl.Park(&t.req, wk)
}

// admitted is the second half of the decide step, once d is known (at once
// or after a wait): it counts the verdict, once per request, and tells
// what comes next: pipeline.OutRelayed (forward the request), pipeline.OutRejected (write
// the rejection for d), or pipeline.OutClientGone (the client left while the
// request waited: close without an answer). The engine then checks for a
// healthy backend (503 no_backend) before it plans the forwarding headers.
func (a *app) admitted(t *ticket, d admission.Decision) pipeline.Outcome {
	if a.ctl == nil {
		return pipeline.OutRelayed
	}
	a.decision(t.Class, d.Verdict)
	switch d.Verdict {
	case admission.Admit:
		return pipeline.OutRelayed
	case admission.RejectGone:
		return pipeline.OutClientGone
	}
	return pipeline.OutRejected
}

// observe is the first part of the complete step, for a relayed exchange
// whose response head came: the ticket is told the outcome, and strip
// tells whether the engine removes the timing entries from the response's
// Server-Timing (estimator.StripServerTiming). An app without a controller
// observes nothing.
func (a *app) observe(t *ticket, r admission.Result) (strip bool) {
	ctl := a.ctl
	if ctl == nil {
		return false
	}
	ctl.Done(&t.Ticket, r)
	return ctl.StripServerTiming()
}

// record is the last part of the complete step, for every request that
// reached an app, relayed or answered by sentry: the metrics, then (access
// true: the route logs access) the access-log line. method, uri and id
// are read only for the log.
func (p *Proxy) record(a *app, access bool, o pipeline.Outcome, status int, u *upstream, start time.Time, method, uri, id []byte) {
	a.m.observe(o, status, u, start)
	if access {
		p.accessLine(a, method, uri, status, u, start, id, o)
	}
}
