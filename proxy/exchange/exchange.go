package exchange

import (
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/lb"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/sentry-proxy/sentry/sert"
)

// exchange.go: the Exchange, its events and the order of its steps up to
// the response head (response.go has the rest).

// Env is what the exchanges of one driver share: the log, the access log's writer, and the illegal-transition
// rule. Read-only once the driver runs (Illegal is an atomic), so the
// loops of one front end share one.
type Env struct {
	// IDs, if set (tests, with one driver goroutine), makes the IDs of
	// every exchange (IDGen.Counting: readable scripts); nil: each
	// Scratch's own generator does (pipeline/requestid.go).
	IDs *pipeline.IDGen
	Log hclog.Logger
	// Access writes an access-log line; called (by Done) only for an
	// exchange whose route logs access. The entry and its slices are
	// valid during the call only.
	Access func(e *pipeline.AccessEntry)
	// Illegal counts illegal transitions (nil: not counted); Strict
	// makes one panic instead (the tests).
	Illegal *atomic.Uint64
	Strict  bool
	// Trace, if set (tests), sees every transition.
	Trace func(ex *Exchange, from, to State)
}

// Action is what the driver does next for an exchange, after an event.
// What it does with the backend connection follows from the action:
// Connect, Reply, Abort and Cut drop the one bound (never reused: the
// attempt is over), Finish gives it back when Reusable.
type Action uint8

const (
	// None: nothing until the next event.
	None Action = iota
	// Park: the request waits for its batch run (State Parked): keep the
	// exchange until the Waker given to Start is woken and Pending's
	// Result has the decision, then Resume; Abort if the client goes.
	Park
	// Connect: get a connection to Upstream() (for App()), and say how
	// it went: Bound, Capped or ConnectFailed.
	Connect
	// Wait: Upstream()'s connections are at max_conns_per_backend (State
	// Waiting): queue the exchange for one; Bound when one comes, Expire
	// once Deadline passes.
	Wait
	// Send: write Unsent() to the backend connection, telling Wrote.
	Send
	// WriteHead: the backend's response head came (Response): decide the
	// client side's buffering (MayBuffer), call Relay, write the head to
	// the client (RespField), then call Body with the bytes after it.
	WriteHead
	// Forward: pass the body bytes to the client; more follow.
	Forward
	// Finish: pass the body bytes; the body has ended. Give the backend
	// connection back (Reusable) or close it, then call Done.
	Finish
	// Reply: write Reply() (sentry's own answer) to the client, then call
	// Done.
	Reply
	// Abort: call Done, then cut the client's response -- close the
	// connection, or reset the stream -- unless Outcome() is
	// OutClientGone (the client is what went).
	Abort
	// Cut: the exchange ran past its class's termination threshold:
	// close the backend connection, then call Terminate.
	Cut
)

var actionNames = [...]string{None: "none", Park: "park", Connect: "connect", Wait: "wait", Send: "send", WriteHead: "write-head",
	Forward: "forward", Finish: "finish", Reply: "reply", Abort: "abort", Cut: "cut"}

// String names the action (test and debug output).
func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "invalid"
}

// Exchange is one request and its response, from the decision to the
// access record: what every driver used to keep itself (the ticket, the
// attempts, the framing of the response, the termination state), and
// the order of the steps. It makes no system call and reads no clock:
// time is an argument of every event. A driver keeps one per client
// connection or stream and reuses it; its zero value is ready for Init.
// It is used by one goroutine at a time.
type Exchange struct {
	env   *Env
	sc    *Scratch
	state State

	a        *pipeline.App
	t        pipeline.Ticket // the request's admission (package pipeline, pipeline.go)
	pend     admission.Pending
	lbb      *lb.Backend
	u        *pipeline.Upstream
	released bool // lbb is released (or was never picked)
	peer     netip.Addr
	client   netip.Addr     // the client's address after trusted_proxies
	id       []byte         // the request ID
	trace    pipeline.Trace // the request's trace context (pipeline/trace.go)
	req      []byte         // the request as sent to the backend (kept for a retry)
	sent     int
	attempts int // attempts to relay so far, the current one included (pipeline.TryAgain)
	stale    int // of which on reused connections found closed (pipeline.MaxStaleRetries)

	// facts of the request
	idem, headReq, grpc, h2, logs bool
	size                          int64

	start     time.Time
	dispatch  time.Time
	inService int
	deadline  int64 // the connect, wait or idle deadline (Unix ns; 0: none)
	reused    bool  // the connection bound is a kept one
	gotBytes  bool  // a byte of the response came

	// Selective early termination (pipeline/term.go): termCl is the
	// class when the request is terminable (nil: never cut); term its
	// state from dispatch; termAt when the driver looks next (Unix ns;
	// 0: not armed).
	termCl *sert.Class
	term   pipeline.Term
	termAt int64

	// the response
	status    int
	mode      uint8
	remain    int64
	ct        pipeline.ChunkTracker
	bkClose   bool // the backend connection is not to be kept
	strip     bool // Server-Timing is stripped (Relay)
	mayBuffer bool
	upstrm    time.Duration // dispatch to response head (access log)
	outBytes  int64         // response body bytes passed on (access log)

	// the end: what Done records
	out       pipeline.Outcome
	outStatus int

	// the access log's view of the head (Start, when the route logs):
	// the buffer and the spans it reads at Done
	src                        []byte
	method, uri, host, ua, ref []byte
}

// Init ties the exchange to its driver's Env and Scratch (once, or when
// it moves to another driver).
func (ex *Exchange) Init(env *Env, sc *Scratch) { ex.env, ex.sc = env, sc }

// State is where the exchange is.
func (ex *Exchange) State() State { return ex.state }

// Busy tells whether an exchange is in progress (not Idle).
func (ex *Exchange) Busy() bool { return ex.state != Idle }

// App is the exchange's app (nil when Idle).
func (ex *Exchange) App() *pipeline.App { return ex.a }

// Upstream is the backend picked for the current attempt (nil: none yet).
func (ex *Exchange) Upstream() *pipeline.Upstream { return ex.u }

// Pending is the admission ticket of a Parked exchange.
func (ex *Exchange) Pending() admission.Pending { return ex.pend }

// Deadline is when Expire is due (Unix ns; 0: none): the connect timeout
// while Connecting, the wait for a connection while Waiting, the
// backend's idle (response) timeout while Sending or Relaying.
func (ex *Exchange) Deadline() int64 { return ex.deadline }

// TermAt is when Tick is due (Unix ns; 0: not armed).
func (ex *Exchange) TermAt() int64 { return ex.termAt }

// ID is the request ID (the forwarding plan's, or a reply's).
func (ex *Exchange) ID() []byte { return ex.id }

// Trace is the request's trace context: the traceparent it came with
// when valid, or the one sentry started (pipeline/trace.go); for the
// driver's log lines about the request.
func (ex *Exchange) Trace() *pipeline.Trace { return &ex.trace }

// ids is the driver's ID generator: its Scratch's (Env.IDs in tests).
func (ex *Exchange) ids() *pipeline.IDGen {
	if ex.env.IDs != nil {
		return ex.env.IDs
	}
	return &ex.sc.ids
}

// HeadRequest tells whether the request is a HEAD.
func (ex *Exchange) HeadRequest() bool { return ex.headReq }

// Outcome is how the exchange ended, once an ending action (Finish,
// Reply, Abort) was returned and until the next Start.
func (ex *Exchange) Outcome() pipeline.Outcome { return ex.out }

// Logs tells whether Done writes an access-log line (the driver then
// gives it a fresh time).
func (ex *Exchange) Logs() bool { return ex.logs }

// setState moves the exchange to state to, checking the transition:
// an illegal one panics under Env.Strict (the tests) and is counted
// otherwise (the package doc says why).
func (ex *Exchange) setState(to State) {
	from := ex.state
	if !from.Legal(to) {
		if ex.env.Illegal != nil {
			ex.env.Illegal.Add(1)
		}
		if ex.env.Strict {
			panic("exchange: illegal transition " + from.String() + " -> " + to.String())
		}
	}
	if ex.env.Trace != nil {
		ex.env.Trace(ex, from, to)
	}
	ex.state = to
}

// Start is the event "a request head arrived", for app a (the driver
// routed it: it holds the listener's route table), from peer; wk is how
// a batch run wakes the driver for a parked request, logs whether the
// route logs access. It runs the decide step (classify, estimate, ask
// admission) and, once admitted, plans the forwarding and picks a
// backend: Park, Connect or Reply.
func (ex *Exchange) Start(a *pipeline.App, h *Head, peer netip.Addr, wk admission.Waker, logs bool, now time.Time) Action {
	ex.begin(a, h, peer, logs, now)
	// The decide step (package pipeline, pipeline.go). The core never
	// blocks: a request whose decision is not made at once parks.
	d, pend, decided := a.Decide(&ex.t, ex.sc.View(h), ex.client, now, nil, true, wk)
	ex.setState(Admitting)
	if !decided {
		ex.pend = pend
		ex.setState(Parked)
		return Park
	}
	return ex.admitted(d, h, now)
}

// Refuse is the event "a request head arrived, and the driver refuses
// the request before its decision" for the reason o: a cap refuses its
// body (pipeline.OutBodyTooLarge, OutLengthRequired: max_body_bytes), or
// its body could not be read (OutBodyTimeout, OutBufferFull;
// OutClientGone when the client went). Nothing is decided (the ticket is never asked, the
// access record has no class): Reply with sentry's answer for o, or
// Abort when the client went.
func (ex *Exchange) Refuse(a *pipeline.App, h *Head, peer netip.Addr, o pipeline.Outcome, logs bool, now time.Time) Action {
	ex.begin(a, h, peer, logs, now)
	ex.t = pipeline.Ticket{}
	ex.t.Class = -1
	ex.setState(Admitting)
	if o == pipeline.OutClientGone {
		return ex.abort(o)
	}
	return ex.reply(o, admission.Decision{})
}

// begin takes the facts of a request that arrived (Start, Refuse).
func (ex *Exchange) begin(a *pipeline.App, h *Head, peer netip.Addr, logs bool, now time.Time) {
	ex.a, ex.start, ex.peer = a, now, peer
	ex.status, ex.released, ex.lbb, ex.u = 0, true, nil, nil
	ex.id = ex.id[:0]
	m := h.Method()
	ex.headReq = string(m) == "HEAD" // methods are case-sensitive
	ex.idem = pipeline.IdempotentMethod(m)
	ct := h.Raw.ContentType
	ex.grpc = ct != (pipeline.Span{}) && pipeline.IsGRPC(ct.Of(h.B))
	ex.h2, ex.size, ex.logs = h.H2, h.Size, logs
	if logs {
		ex.src, ex.method, ex.uri, ex.host = h.B, m, h.Target(), h.Host()
		ex.ua, ex.ref = h.Raw.Peek(h.B, "User-Agent"), h.Raw.Peek(h.B, "Referer")
	}
	ex.client = ex.sc.Forwarded(a, h, peer)
	ex.trace.Reset()
	if a.Trace != pipeline.TraceOff {
		readTrace(&ex.trace, h)
	}
	ex.upstrm, ex.outBytes = 0, 0
}

// Resume is the event "a parked request's decision d came"; h is its
// head read again (nil if it could not be: the exchange is aborted). It
// goes on as Start does after an immediate decision.
func (ex *Exchange) Resume(d admission.Decision, h *Head, now time.Time) Action {
	ex.pend = nil
	ex.setState(Admitting)
	if h == nil {
		return ex.abort(pipeline.OutBadRequest)
	}
	ex.sc.Forwarded(ex.a, h, ex.peer)
	return ex.admitted(d, h, now)
}

// admitted acts on the admission decision d: the rejection, or the relay.
func (ex *Exchange) admitted(d admission.Decision, h *Head, now time.Time) Action {
	a := ex.a
	if a.Admitted(&ex.t, d) != pipeline.OutRelayed {
		// Rejected (a parked exchange whose client went was aborted,
		// never resumed).
		return ex.reply(pipeline.OutRejected, d)
	}
	if a.Pool.Healthy() == 0 {
		return ex.reply(pipeline.OutNoBackend, admission.Decision{})
	}
	var id []byte
	ex.req, id = ex.sc.AppendRequest(ex.req[:0], a, h, ex.peer, ex.ids(), &ex.trace, ex.t.Class, now)
	ex.id = append(ex.id[:0], id...)
	ex.attempts, ex.stale = 0, 0
	// Selective early termination (pipeline/term.go): the drivers hold
	// the body whole and hand upgrades elsewhere, so only the class and
	// the method decide. Armed at the first dispatch (Bound).
	ex.termCl = a.TermClass(&ex.t, h.Method())
	return ex.pick()
}

// pick picks a backend for the next attempt: Connect, or the answer when
// none is healthy (502 after a failed attempt, 503 before any).
func (ex *Exchange) pick() Action {
	bk := ex.a.Pool.Pick()
	if bk == nil {
		if ex.u != nil {
			return ex.reply(pipeline.OutBackendFailed, admission.Decision{})
		}
		return ex.reply(pipeline.OutNoBackend, admission.Decision{})
	}
	ex.attempts++
	ex.lbb, ex.u, ex.released = bk, bk.Attachment.(*pipeline.Upstream), false
	ex.inService = int(bk.Inflight())
	return Connect
}

// Bound is the event "a connection to Upstream() is the exchange's":
// connecting says its connect is still in progress (Connected follows),
// reused that it was kept from an earlier exchange. Send, or None while
// connecting.
func (ex *Exchange) Bound(connecting, reused bool, now time.Time) Action {
	ex.sent, ex.gotBytes, ex.bkClose, ex.reused = 0, false, false, reused
	ex.dispatch = now
	if ex.termCl != nil && ex.attempts == 1 {
		// The termination clock starts at the first dispatch; a retry
		// does not restart it (as on the fasthttp path, whose timer spans
		// relay's attempts).
		ex.termAt = now.UnixNano() + int64(ex.term.Arm(ex.termCl, now))
	}
	if connecting {
		ex.setState(Connecting)
		ex.deadline = now.UnixNano() + ex.a.Shared.Connect.Load()
		return None
	}
	ex.setState(Sending)
	ex.deadline = now.UnixNano() + ex.a.Shared.Idle.Load()
	return Send
}

// Connected is the event "the connect in progress succeeded": Send.
func (ex *Exchange) Connected(now time.Time) Action {
	ex.setState(Sending)
	ex.deadline = now.UnixNano() + ex.a.Shared.Idle.Load()
	return Send
}

// Capped is the event "Upstream()'s connections are at
// max_conns_per_backend": Wait (up to timeouts.connect, as fasthttp's
// HostClient waits for a free connection), or, with no connect timeout,
// 503 backend_busy.
func (ex *Exchange) Capped(now time.Time) Action {
	if wait := ex.a.Shared.Connect.Load(); wait > 0 {
		ex.setState(Waiting) // (a wait again, after a failed dial, is a new wait)
		ex.deadline = now.UnixNano() + wait
		return Wait
	}
	ex.release(true)
	return ex.reply(pipeline.OutBackendBusy, admission.Decision{})
}

// ConnectFailed is the event "the connect to Upstream() failed" (cause
// is logged): the backend is ejected (unambiguous, as on the fasthttp
// path), and the request goes to another (Connect) when the retry policy
// (pipeline.TryAgain) says so, else 502 (Reply). The first failure since
// the backend last answered is logged at WARN with its cause
// (pipeline.Upstream.Unreachable).
func (ex *Exchange) ConnectFailed(cause error, now time.Time) Action {
	a := ex.a
	a.Pool.Eject(ex.lbb)
	ex.released = true
	if ex.u.Unreachable() {
		ex.env.Log.Warn("backend unreachable; ejected until it answers again",
			pipeline.LogRequest([]any{"app", a.Name, "backend", ex.u.Addr, "error", cause}, ex.id, &ex.trace)...)
	} else if log := ex.env.Log; log.IsDebug() {
		log.Debug("relay failed", pipeline.LogRequest([]any{"app", a.Name, "backend", ex.u.Addr, "error", cause}, ex.id, &ex.trace)...)
	}
	if !pipeline.TryAgain(pipeline.FailConnect, ex.idem, ex.attempts-ex.stale, false) {
		return ex.reply(pipeline.OutBackendFailed, admission.Decision{})
	}
	return ex.pick()
}

// Unsent is what is left of the request to send (Send).
func (ex *Exchange) Unsent() []byte { return ex.req[ex.sent:] }

// Wrote is the event "n more bytes of the request went to the backend".
func (ex *Exchange) Wrote(n int) { ex.sent += n }

// Broke is the event "the backend connection failed" in the way f says
// (pipeline.FailBroken: closed or reset; pipeline.FailNoRetry: a
// response that cannot be relayed, or a head larger than the driver's
// buffer). Before the response head: another attempt (Connect) when the
// retry policy allows -- the drivers hold the body whole, so an
// idempotent request is replayable, and a kept connection found closed
// (reused) is not the backend's fault nor an attempt, up to
// pipeline.MaxStaleRetries -- else 502 (Reply). Once the head is out:
// Abort.
func (ex *Exchange) Broke(f pipeline.Failure, now time.Time) Action {
	if ex.state == Relaying {
		// Part of the response is out: the client's connection cannot
		// carry an error response now.
		return ex.abort(pipeline.OutBackendFailed)
	}
	if ex.reused && f == pipeline.FailBroken && !ex.gotBytes && ex.idem && ex.stale < pipeline.MaxStaleRetries {
		ex.stale++ // a keep-alive connection closed under it: not an attempt
	}
	if pipeline.TryAgain(f, ex.idem, ex.attempts-ex.stale, ex.gotBytes) {
		ex.release(ex.reused)
		return ex.pick()
	}
	ex.release(false)
	return ex.reply(pipeline.OutBackendFailed, admission.Decision{})
}

// Expire is the event "Deadline passed" (the driver may hold it off
// while it has paused reading the backend for a slow client: the write
// timeout covers the client then). Waiting: 503 backend_busy.
// Connecting: the connect failed (ConnectFailed's actions). Before the
// response head: 504. After it: Abort.
func (ex *Exchange) Expire(now time.Time) Action {
	switch ex.state {
	case Waiting:
		ex.release(true)
		return ex.reply(pipeline.OutBackendBusy, admission.Decision{})
	case Connecting:
		return ex.ConnectFailed(errConnectTimeout, now)
	case Relaying:
		return ex.abort(pipeline.OutBackendTimeout)
	}
	ex.release(false)
	return ex.reply(pipeline.OutBackendTimeout, admission.Decision{})
}

// Tick is the termination timer's event, due at TermAt: before the
// response head (Connecting, Sending) and once the class's current
// threshold has passed since dispatch, Cut; a threshold that rose since
// the timer was armed re-arms it for the rest (None).
func (ex *Exchange) Tick(now time.Time) Action {
	if ex.state != Connecting && ex.state != Sending {
		ex.termAt = 0
		return None
	}
	wait, cut := ex.term.Due(now)
	ex.termAt = 0
	if !cut {
		if wait > 0 {
			ex.termAt = now.UnixNano() + int64(wait)
		}
		return None
	}
	return Cut
}

// Terminate completes a Cut, once the driver closed the backend
// connection (never reused): the ticket is told the cut
// (pipeline.App.Terminated), and the client gets 503 terminated; the
// request is not retried.
func (ex *Exchange) Terminate(now time.Time) Action {
	ex.release(true) // the backend did nothing wrong: no passive-health failure
	ex.a.Terminated(&ex.t, &ex.term, now, ex.inService)
	return ex.reply(pipeline.OutTerminated, admission.Decision{})
}

// Abort is the event "the exchange cannot complete" for the reason o: the
// client went (pipeline.OutClientGone) or stopped reading, or the driver
// is closing. A parked request leaves its batch queue, counted as gone.
// The action is Abort.
func (ex *Exchange) Abort(o pipeline.Outcome) Action { return ex.abort(o) }

func (ex *Exchange) abort(o pipeline.Outcome) Action {
	if ex.state == Parked {
		// The request leaves its batch queue (only a client close or
		// the driver's ends a parked exchange).
		pend := ex.pend
		ex.pend = nil
		pend.Cancel()
		ex.a.Admitted(&ex.t, admission.Decision{Verdict: admission.RejectGone})
	}
	ex.release(o != pipeline.OutBackendFailed && o != pipeline.OutBackendTimeout)
	st := ex.status
	if ex.state != Relaying {
		st = pipeline.StatusOf(o)
	}
	if o == pipeline.OutClientGone {
		st = pipeline.StatusOf(pipeline.OutClientGone)
	}
	ex.out, ex.outStatus = o, st
	return Abort
}

// reply decides sentry's own answer for outcome o (d: a rejection's
// decision): Reply.
func (ex *Exchange) reply(o pipeline.Outcome, d admission.Decision) Action {
	ex.release(!pipeline.CountsAsFailure(o))
	r := &ex.sc.reply
	*r = pipeline.ReplyFor(ex.a, o, d, ex.grpc)
	// Every answer carries a request ID, a rejection's too (it got no
	// forwarding plan, so the ID is made here).
	if len(ex.id) == 0 {
		ex.id = ex.ids().AppendID(ex.id[:0])
	}
	ex.outBytes = int64(len(r.Body))
	if ex.headReq {
		ex.outBytes = 0
	}
	ex.out, ex.outStatus = o, r.Status
	return Reply
}

// Reply is the answer of the last Reply action, in the driver's scratch:
// valid until the scratch's next use.
func (ex *Exchange) Reply() *pipeline.Reply { return &ex.sc.reply }

// release gives the picked backend back to the balancer, once; ok false
// counts a passive-health failure.
func (ex *Exchange) release(ok bool) {
	if !ex.released && ex.lbb != nil {
		ex.a.Pool.Release(ex.lbb, ok)
	}
	ex.released = true
}

// Done completes an exchange that ended (Finish, Reply, Abort, once the
// driver did its part): the metrics, the access record, State Idle.
// now is the end (a fresh time when Logs).
func (ex *Exchange) Done(now time.Time) {
	a, o := ex.a, ex.out
	// The complete step's last part (package pipeline, pipeline.go).
	a.Complete(o, ex.outStatus, ex.u, ex.start, ex.t.Class)
	if ex.logs && !(ex.h2 && o == pipeline.OutClientGone) {
		// (A stream the client reset, or whose connection went, gets
		// no line: metrics only, as on the workers' h2 path.)
		ex.record(now)
	}
	ex.lbb, ex.u, ex.a, ex.pend = nil, nil, nil, nil
	ex.termCl, ex.termAt, ex.deadline = nil, 0, 0
	ex.term.Off()
	ex.src, ex.method, ex.uri, ex.host, ex.ua, ex.ref = nil, nil, nil, nil, nil, nil
	ex.setState(Idle)
}

// record fills the access-log entry and hands it to Env.Access.
func (ex *Exchange) record(now time.Time) {
	e := &ex.sc.acc
	*e = pipeline.AccessEntry{
		Start: ex.start, Duration: now.Sub(ex.start), Client: ex.client, Proto: "HTTP/1.1",
		Status: ex.outStatus, BytesIn: ex.size, BytesOut: ex.outBytes, ID: ex.id,
		Trace: ex.trace,
		App:   ex.a, Outcome: ex.out, Backend: ex.u, Upstrm: ex.upstrm,
		Method: ex.method, URI: ex.uri, Host: ex.host, Agent: ex.ua, Referer: ex.ref,
	}
	if ex.h2 {
		e.Proto = "HTTP/2.0"
	}
	e.Decided(&ex.t)
	ex.env.Access(e)
	*e = pipeline.AccessEntry{} // drop the references to the driver's buffers
}
