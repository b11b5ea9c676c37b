package pipeline

import (
	"net/netip"
	"time"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/classify"
)

// The request pipeline, once for every engine (proxy/doc.go, "Layers"
// and "Engines"). An engine parses and checks the head, routes it to an app, and
// then runs these steps in this order, supplying only a view of the
// request (classify.Request), the client's address as the header policy
// read it (ClientAddr), and its own way to wait and to write headers:
//
//	decide    a.Decide      classify, estimate (counts the arrival), ask admission (Park)
//	          (engine)      wait for a parked decision: block (fasthttp, h2) or park the exchange (loops)
//	          a.Admitted    count the verdict once; map it to what comes next
//	          (engine)      no healthy backend → 503; plan the forwarding headers (PlanForwarding)
//	relay     (engine)      send, retry by TryAgain, read the response head
//	complete  a.Observe     tell the ticket the outcome (Controller.Done); say whether to strip Server-Timing
//	          (engine)      metrics (a.Metrics.Observe), then the access log
//
// Nothing here allocates: the ticket lives in the engine's pooled
// per-exchange state.

// Ticket is one request's admission state as the pipeline keeps it, held
// in the engine's pooled per-exchange state: the admission.Ticket the
// outcome is reported against, the admission.Request Park may keep while
// the request waits, and, for an engine whose request bytes may move while
// the request waits, a copy of the history key.
type Ticket struct {
	admission.Ticket
	Req admission.Request
	key []byte
	// The verdict Admitted counted (decided: it did), for the access log.
	verdict admission.Verdict
	decided bool
}

// TrustedPeer tells whether the app trusts peer as a proxy (step 4 of the
// header policy): the engine then reads what the proxy sent, and the
// client's address is clientAddr's, not peer.
func (a *App) TrustedPeer(peer netip.Addr) bool {
	return a.Trusted && Trusted(a.Policy.TrustedProxies, peer)
}

// ClientAddr is the client's address for classification, from a trusted
// peer's X-Forwarded-For lines merged into xff.
func (a *App) ClientAddr(peer netip.Addr, xff []byte) netip.Addr {
	return ClientFromXFF(a.Policy.TrustedProxies, peer, xff)
}

// Decide is the first half of the decide step: it classifies the request
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
// mode off admits everything (its controller says so at once), counted by
// admitted.
func (a *App) Decide(t *Ticket, v classify.Request, client netip.Addr, now time.Time, gone <-chan struct{}, copyKey bool, wk admission.Waker) (d admission.Decision, pend admission.Pending, decided bool) {
	ctl := a.Controller
	t.Req = admission.Request{Gone: gone}
	t.Ticket = admission.Ticket{Arrival: now, Class: -1}
	t.decided = false
	if ctl == nil {
		return admission.Decision{Verdict: admission.Admit}, nil, true
	}
	class, key := ctl.Classify(v, client)
	if copyKey {
		t.key = append(t.key[:0], key...)
		key = t.key
	}
	t.Class, t.Key = class, key
	t.Req.Class, t.Req.Key = class, key
	if a.Client != nil {
		// The client's identity for fair sharing inside its class,
		// from the address after trusted_proxies or the app's header,
		// cookie or claim: one hash, no allocation.
		t.Req.Client, t.Req.Addr = a.Client.Key(v, client), client
	}
	t.Req.S, t.Req.Bucket = ctl.Estimate(class, key, now)
	t.S = t.Req.S
	// Mode off is the controller's answer, at once (one atomic load):
	// not a flag of the snapshot, so that a mode forced at run time (the
	// admin API) reaches an app whose policy says off.
	return ctl.Park(&t.Req, wk)
}

// Admitted is the second half of the decide step, once d is known (at once
// or after a wait): it counts the verdict, once per request, and tells
// what comes next: OutRelayed (forward the request), OutRejected (write
// the rejection for d), or OutClientGone (the client left while the
// request waited: close without an answer). The engine then checks for a
// healthy backend (503 no_backend) before it plans the forwarding headers.
func (a *App) Admitted(t *Ticket, d admission.Decision) Outcome {
	if a.Controller == nil {
		return OutRelayed
	}
	a.decision(t.Class, d.Verdict)
	t.verdict, t.decided = d.Verdict, true
	t.Ticket.Mode = d.Mode // the completion goes back to the mode that admitted
	t.Ticket.OverTarget = d.OverTarget
	switch d.Verdict {
	case admission.Admit:
		return OutRelayed
	case admission.RejectGone:
		return OutClientGone
	}
	return OutRejected
}

// Observe is the first part of the complete step, for a relayed exchange
// whose response head came: the ticket is told the outcome, and strip
// tells whether the engine removes the timing entries from the response's
// Server-Timing (estimator.StripServerTiming). An app without a controller
// observes nothing.
func (a *App) Observe(t *Ticket, r admission.Result) (strip bool) {
	ctl := a.Controller
	if ctl == nil {
		return false
	}
	ctl.Done(&t.Ticket, r)
	return ctl.StripServerTiming()
}
