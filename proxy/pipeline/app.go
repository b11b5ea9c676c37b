package pipeline

import (
	"crypto/tls"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/classify"
	"github.com/sentry-proxy/sentry/fairshare"
	"github.com/sentry-proxy/sentry/lb"
	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/sert"
)

// app.go: the per-app runtime both engines run requests against: the
// admission controller's interface, the app itself, the backends it
// relays to (Upstream), its prebuilt rejection and its per-request
// metrics.

// Controller is an app's admission stack as the request path sees it
// (implemented by package control).
type Controller interface {
	// Classes returns the class names, most important first.
	Classes() []string
	// Classify returns the class index and the history key (which may alias
	// the request's path).
	Classify(r classify.Request, client netip.Addr) (class int, key []byte)
	// Estimate counts the arrival and returns S and its bucket.
	Estimate(class int, key []byte, now time.Time) (s time.Duration, bucket int)
	// Done tells a relayed request's ticket its outcome: the ticket
	// (class, key, estimate, arrival) is the front end's, filled when the
	// request was decided; the result carries the backend's Server-Timing
	// (may be empty), the time from dispatch to response head, the
	// backend's in-flight count at dispatch and the end time. Done must
	// not retain either.
	Done(t *admission.Ticket, r admission.Result)
	// StripServerTiming tells whether to remove the timing entries.
	StripServerTiming() bool
	// Park asks for admission without blocking: decided is true when d
	// is the decision (every mode but batch, and in batch mode a class
	// without a period, a full queue, no backend). Otherwise p is the
	// request's ticket: wk is woken once its decision is made, and the
	// front end then takes it with p.Result, or calls p.Cancel when the
	// client has gone. r.Key must stay valid until then.
	Park(r *admission.Request, wk admission.Waker) (d admission.Decision, p admission.Pending, decided bool)
}

// App is the runtime of one policy app.
type App struct {
	Policy     *policy.App
	Name       string
	Pool       *lb.Pool
	Controller Controller // nil: no classification, admit all
	// Term is the app's selective early termination (package sert), set
	// only when a class of the policy declares terminate: nil is the one
	// check a request of an app without it pays (term.go).
	Term   *sert.Controller
	LoopOK bool // every backend address is an IP:port (the event loops never resolve names), reached over plain HTTP/1.1
	// H2 is package proxy's HTTP/2 client of this app's backends
	// (*h2Client) when backends.protocol is h2c or h2; nil for HTTP/1.1.
	H2     any
	Reject RejectResponse
	// Client names a request's client for fair sharing inside a class
	// (admission.fair_share; package fairshare): Decide computes the
	// client key once and carries it in admission.Request. Nil: fair
	// sharing is off.
	Client  *fairshare.Identity
	Trusted bool // has trusted proxies
	ReqID   string
	// Trace is the app's trace_context (trace.go).
	Trace TraceMode
	// LoadHeader is the degradation signal's header (degradation.header):
	// removed from every client request, in any spelling (DropIncoming),
	// whether the signal is on or not. Load, when not nil, is the signal's
	// source (degradation.enabled): the engines set LoadHeader on every
	// admitted request to AppendLoad's value (load.go).
	LoadHeader string
	Load       LoadSource
	Metrics    *AppMetrics
	Shared     *AppShared
	// decisions[class][verdict], resolved for this snapshot's classes.
	Decisions [][]prometheus.Counter
	// ClassLatency[class] is the latency histogram of the class's
	// admitted and relayed requests (sentry_admitted_duration_seconds),
	// resolved for this snapshot's classes; an app without a controller
	// has one class, "default".
	ClassLatency []prometheus.Observer
	// ClassNames are the class names this snapshot's series are labelled
	// with (a copy taken when the app was built).
	ClassNames []string
}

// AppShared is the part of an app's runtime that outlives snapshots: its
// metrics and the timeout cells every upstream connection reads, so a reload
// changes timeouts on live connections.
type AppShared struct {
	Metrics *AppMetrics
	Idle    atomic.Int64 // Timeouts.Response, ns
	Connect atomic.Int64 // Timeouts.Connect, ns
	// TLS is the client TLS configuration of the app's backends
	// (backends.tls), nil for plain TCP: read at each dial, so a reload
	// applies to every new connection.
	TLS atomic.Pointer[tls.Config]
	// H2 holds the proxy's HTTP/2 client of the app's backends
	// (backends.protocol h2c or h2; package proxy's *h2Client, possibly
	// nil): it keeps its connections across snapshots.
	H2 atomic.Value
	// Link names how the backends were reached when the app was last
	// built (backends.tls and protocol); written only by a reload, under
	// the proxy's lock.
	Link string
}

// RejectResponse is the prebuilt rejection.
type RejectResponse struct {
	Status     int
	Body       []byte
	RetryAfter int // seconds, default
	// GRPCStatus is an admission rejection's grpc-status for a gRPC
	// request (reject.grpc_status): 14 or 8; 0 is read as 14.
	GRPCStatus int
}

// Upstream is what the proxy attaches to each lb.Backend (its Attachment).
type Upstream struct {
	Addr string
	// Client is the fasthttp front end's *fasthttp.HostClient for this
	// backend (package proxy's hostClient reads it): held as any so that
	// this package does not import fasthttp; reading it is a type
	// assertion to a concrete type, not an interface call.
	Client any
	// Conns is the goroutine drivers' connections to this backend
	// (package proxy's *gpool), held as any for the same reason.
	Conns any
	Reqs  [6]prometheus.Counter // by code class
	// Event-loop front ends (package proxy/evloop), and the goroutine
	// drivers' (Conns): their connections to this backend (counted
	// against max_conns_per_backend with Client's), its
	// resolved address, and whether it has left the pool.
	LoopConns atomic.Int32
	// LoopWaiting is the loops' exchanges waiting for a connection to
	// this backend (max_conns_per_backend reached): while there are any,
	// a loop closes its idle connections to it rather than keep them,
	// so that the cap's room goes to whichever loop waits.
	LoopWaiting atomic.Int32
	sa          atomic.Pointer[loopAddr]
	Closed      atomic.Bool
	// Quiesced: the operator took the backend out of rotation (drained or
	// disabled; lb.Options.Quiesce): no front end keeps an idle
	// connection to it, and the event loops close theirs when they come
	// back from an exchange.
	Quiesced atomic.Bool
	// Alert is a TLS alert the backend sent on a connection whose
	// handshake had completed on sentry's side (TLS 1.3 refuses a client
	// certificate that way, with the first response): the HTTP client
	// reports only a closed connection, so the relay takes the cause
	// from here to log it.
	Alert atomic.Pointer[error]
	// unreachable: a connect (or the name's resolution) failed since the
	// backend last answered (Unreachable, Answered).
	unreachable atomic.Bool
}

// Unreachable records a failed connect or resolution to u. It returns true
// only for the first since u last answered: the caller then logs the
// cause at WARN, so a dead backend is named once, not once per request,
// and named again only after it recovered and failed anew.
func (u *Upstream) Unreachable() bool { return u.unreachable.CompareAndSwap(false, true) }

// Answered records a response head from u. It returns true when u had
// been reported unreachable (the caller logs the recovery). The common
// case is one atomic load.
func (u *Upstream) Answered() bool {
	return u.unreachable.Load() && u.unreachable.CompareAndSwap(true, false)
}

// BodyCap is the app's body cap (max_body_bytes), the one rule for every
// engine: a declared length over it is 413; a body of unknown length
// (chunked, or h2 without content-length: cl == -1) is 411, since it
// cannot be capped while it streams. OutRelayed means no objection.
func (a *App) BodyCap(cl int64) Outcome {
	lim := a.Policy.MaxBodyBytes
	switch {
	case lim <= 0:
		return OutRelayed
	case cl > lim:
		return OutBodyTooLarge
	case cl == -1:
		return OutLengthRequired
	}
	return OutRelayed
}

// AppMetrics holds the per-app series resolved once, so the request path
// only does atomic adds.
type AppMetrics struct {
	None    [6]prometheus.Counter  // requests not relayed, by code class
	Latency [3]prometheus.Observer // by result: relayed, rejected, error
	Errs    [NumOutcomes]prometheus.Counter
}

// Complete is the metrics part of the complete step for every engine:
// AppMetrics.Observe, and for a relayed request the latency histogram of
// its class (class -1: not classified; an app without a controller counts
// in its one class). Rejections and sentry's own answers are not in the
// class histograms: a 50 µs rejection would pull the percentile down
// exactly when the farm is overloaded.
func (a *App) Complete(o Outcome, status int, u *Upstream, start time.Time, class int) {
	secs := a.Metrics.observe(o, status, u, start)
	if o != OutRelayed {
		return
	}
	if a.Controller == nil {
		class = 0
	}
	if class >= 0 && class < len(a.ClassLatency) {
		a.ClassLatency[class].Observe(secs)
	}
}

// Observe records one finished request.
func (am *AppMetrics) Observe(o Outcome, status int, u *Upstream, start time.Time) {
	am.observe(o, status, u, start)
}

func (am *AppMetrics) observe(o Outcome, status int, u *Upstream, start time.Time) float64 {
	cc := CodeClass(status)
	if u != nil && o == OutRelayed {
		u.Reqs[cc].Inc()
	} else {
		am.None[cc].Inc()
	}
	if c := am.Errs[o]; c != nil {
		c.Inc()
	}
	r := resultError
	switch o {
	case OutRelayed:
		r = resultRelayed
	case OutRejected, OutNoBackend:
		r = resultRejected
	}
	secs := time.Since(start).Seconds()
	am.Latency[r].Observe(secs)
	return secs
}

const (
	resultRelayed = iota
	resultRejected
	resultError
)

var ResultNames = [...]string{resultRelayed: "relayed", resultRejected: "rejected", resultError: "error"}

// decision counts an admission decision.
func (a *App) decision(class int, v admission.Verdict) {
	if class >= 0 && class < len(a.Decisions) {
		a.Decisions[class][v].Inc()
	}
}
