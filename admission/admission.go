package admission

import (
	"net/netip"
	"time"
)

// Verdict is the outcome of an admission decision.
type Verdict uint8

const (
	// Admit lets the request through to the load balancer.
	Admit Verdict = iota
	// RejectTest: the batch test Q + (η + ⌈β/n⌉)·S ≤ R_sla − d_i failed.
	RejectTest
	// RejectCascade: a more important class failed its test this round.
	RejectCascade
	// RejectQueueFull: the wait queue for the request's class and bucket was at its cap.
	RejectQueueFull
	// RejectThreshold: threshold mode's (i, p) draw rejected the request.
	RejectThreshold
	// RejectNoBackend: no healthy backend could take the request.
	RejectNoBackend
	// RejectGone: the client disconnected while waiting.
	RejectGone
	// RejectPriority: the request would fit, but the room left is held for
	// the predicted demand of more important classes (batchac's reserve).
	RejectPriority
	// RejectAdaptive: the class's token bucket (adaptive mode, SEDA's
	// response-time controller) had no token.
	RejectAdaptive
	// RejectOverShare: the request's client is over its fair share of its
	// class (package fairshare): it had no turn, or the room left was held
	// for the class's clients within their share.
	RejectOverShare
	numVerdicts
)

var verdictNames = [numVerdicts]string{
	Admit:           "admitted",
	RejectTest:      "rejected_test",
	RejectCascade:   "rejected_cascade",
	RejectQueueFull: "queue_full",
	RejectThreshold: "rejected_threshold",
	RejectNoBackend: "no_backend",
	RejectGone:      "client_gone",
	RejectPriority:  "rejected_priority",
	RejectAdaptive:  "rejected_adaptive",
	RejectOverShare: "over_share",
}

// String returns the metric label value for v.
func (v Verdict) String() string {
	if v < numVerdicts {
		return verdictNames[v]
	}
	return "unknown"
}

// Verdicts lists every verdict, for pre-creating metric series.
func Verdicts() []Verdict {
	out := make([]Verdict, numVerdicts)
	for i := range out {
		out[i] = Verdict(i)
	}
	return out
}

// Request is what the proxy knows about a request when it asks for admission.
// It is filled by the classifier and the estimator and must not be retained
// by an Admitter after Admit returns.
type Request struct {
	// Class is the index of the request's priority class; 0 is the most important.
	Class int
	// Bucket is the service-time bucket index (0 = smallest).
	Bucket int
	// S is the estimated inherent service time.
	S time.Duration
	// Gone is closed (or receives) when the client disconnects while the
	// request waits. It may be nil when the front end cannot tell.
	Gone <-chan struct{}
	// Key is the request's history key (classify), read only by the probe
	// that keeps a rejected key learning (estimator.Probe). Optional: nil
	// makes the probe look at the class as a whole.
	Key []byte
	// Client is the request's client identity as a 64-bit key (package
	// fairshare: its address after trusted_proxies, or the app's
	// configured header, cookie or token claim); 0 when unknown, which
	// leaves the request outside fair sharing. Addr is the client's
	// address, kept only to name a client on the status page.
	Client uint64
	Addr   netip.Addr
	// Share is the request's standing in its class's fair share, set by
	// the fair-share filter before the mode decides (WithinShare when fair
	// sharing is off or the class is not shedding). Every mode reads it.
	Share Share
	// Rank orders the marginal tier (Share Marginal): the client's place
	// in the order the filter gave the tier to its clients, 0 first. A
	// mode that tests a batch admits the lower rank first, so that what
	// it refuses of the tier falls on as few clients as it can, the
	// last, rather than on every client of the tier at random (DAGOR's
	// user priority, inside the tier). 0 for every other Share.
	Rank uint8
}

// Share is a request's standing in its class's fair share
// (docs/algorithms.md §12). Classes still go in order; Share orders the
// requests inside one class.
type Share uint8

const (
	// WithinShare: the client sends at most its fair share of the class
	// (or fair sharing is idle): the request is decided as its class.
	WithinShare Share = iota
	// OverShare: the client sends more than its fair share and has its
	// turn now: the request is decided as its class with room held for
	// the class's within-share demand, the way a class is tested with
	// room held for the more important classes; refused where a
	// within-share request would pass, it is RejectOverShare.
	OverShare
	// Marginal: the client is over its share and is one of the few that
	// fill what the turns leave of the class's capacity: decided as
	// OverShare with room held for the turns as well, and more for each
	// rank before its own (Request.Rank).
	Marginal
	// SpareOnly: the client is over its share and has no turn now: the
	// request is admitted only where admitting it harms nobody (a free
	// slot and nothing waiting: the work-conserving rule's condition,
	// docs/algorithms.md §10), else RejectOverShare.
	SpareOnly
)

// Tier is the share's rank below its class for a mode that holds room
// per rank: 0 WithinShare, 1 OverShare, 2 Marginal (SpareOnly is decided
// apart).
func (s Share) Tier() int {
	if s >= SpareOnly {
		return 2
	}
	return int(s)
}

// Decision is an admission decision.
type Decision struct {
	Verdict Verdict
	// RetryAfter is the predicted time until the farm drains enough to take
	// the request; zero means "use the policy's default".
	RetryAfter time.Duration
	// Mode is the admission mode that decided (an owner that switches
	// modes sets it; zero, ModeAuto, when not told). The front end copies
	// it into the request's Ticket, so that the outcome goes back to the
	// controller that admitted the request even after a switch.
	Mode Mode
	// OverTarget marks an admission the mode's own test would have
	// refused -- the request alone misses its class's target (its
	// estimate, or its estimate plus the measured queue, exceeds the
	// budget) -- made because admitting it harmed nobody: the farm had
	// idle capacity and nothing waited (the work-conserving rule,
	// docs/algorithms.md §10; each mode's doc.go gives its condition).
	// Set only with Verdict Admit. The owner counts and logs it, and the
	// request's completion is kept out of the SLA feedback (its time is
	// its own service time, which no admission decision can change).
	OverTarget bool
}

// Admitter decides whether a request may go to a backend. Admit may block,
// for at most the class period plus one policer run (batch mode); it must be
// safe for concurrent use and should not allocate.
type Admitter interface {
	Admit(r *Request) Decision
}

// AdmitAll is the "off" mode: every request is admitted.
type AdmitAll struct{}

// Admit always admits.
func (AdmitAll) Admit(*Request) Decision { return Decision{Verdict: Admit} }

var _ Admitter = AdmitAll{}

// Waker is told that a parked request (see Pending) has its decision. Wake
// is called from the goroutine that made the decision, after every lock of
// the admitter is released, at most once per decision run for each distinct
// Waker however many of its requests the run decided. It must not block:
// the usual implementation writes an eventfd or sends on a buffered channel
// without blocking, and the owner then polls its pending requests.
type Waker interface{ Wake() }

// Pending is a request that waits for its decision, for a caller that must
// not block (an event loop). After its Waker is woken the owner polls
// Result; when its client has gone it calls Cancel instead. A Pending is
// pooled by its admitter: after Result returned ready, or after Cancel,
// the owner must not use it again.
type Pending interface {
	// Result returns the decision once it is made (ready true), counting
	// it once; ready is false while the request still waits.
	Result() (d Decision, ready bool)
	// Cancel withdraws the request (its client has gone): it leaves its
	// queue, or a decision already made is dropped (an admission is given
	// back). It is counted as RejectGone.
	Cancel()
}

// Ticket is an admitted request as the front end holds it until the
// exchange ends: what its outcome is reported against (a Controller's
// Done). The front end fills it when it decides the request (class, key,
// estimate, arrival) and keeps it in its pooled per-exchange state, so
// handing it back costs no allocation. Key may alias the request's bytes:
// it must stay valid until Done returns, and Done must not retain it.
type Ticket struct {
	// Class is the request's priority class.
	Class int
	// Key is the request's history key (classify).
	Key []byte
	// S is the service-time estimate the request was admitted with.
	S time.Duration
	// Arrival is when the request became ready to admit; the estimate
	// counted its arrival at this time, and its latency runs from it.
	Arrival time.Time
	// Mode is the mode that admitted the request (Decision.Mode; zero when
	// not told). Its completion feeds that mode's controller, whatever
	// mode is in force when it completes: after auto's fall-back the
	// requests batch mode admitted must not read as the adaptive
	// controller's (its backlog count would go short by them).
	Mode Mode
	// OverTarget is Decision.OverTarget: the request was admitted by the
	// work-conserving rule, over its own target. Its completion feeds the
	// estimator, not the SLA windows.
	OverTarget bool
}

// Result is how a relayed exchange ended, as its ticket is told.
type Result struct {
	// ServerTiming is the backend's Server-Timing value (may be empty).
	ServerTiming []byte
	// Measured is the time from dispatch to the response head; zero when
	// it says nothing of the backend (a body streamed from the client).
	Measured time.Duration
	// InService is the backend's in-flight count at dispatch, this request
	// included; zero when Measured is zero.
	InService int
	// End is when the response head came; the latency is End − Arrival.
	End time.Time
	// Terminated tells that selective early termination cut the request
	// before its response head (package sert): Measured is sert.Sample's
	// (at least the threshold), End the cut, and the client got a 503, so
	// End − Arrival is no response time a client saw.
	Terminated bool
}

// Latency is the time from the ticket's arrival to the result's end.
func (r *Result) Latency(t *Ticket) time.Duration { return r.End.Sub(t.Arrival) }
