package proxy

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/estimator"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/sentry-proxy/sentry/sert"
)

// fhExchange is the fasthttp path's per-request scratch space, pooled so the request path
// does not allocate.
type fhExchange struct {
	t     pipeline.Ticket // the request's admission (package pipeline)
	ctx   *fasthttp.RequestCtx
	buf   []byte              // forwarding headers and the request ID
	tp    []byte              // the traceparent sentry started (trace_context generate)
	load  []byte              // sentry's load header's value (apps[].load)
	chain []byte              // a trusted proxy's X-Forwarded-For lines, merged
	in    pipeline.TrustedFwd // what a trusted proxy sent
	st    []byte              // stripped Server-Timing
	wake  chanWaker           // the Waker of a parked admission (awaitPending)

	// Selective early termination (term.go): the exchange's termination
	// state, its timer (made once per pooled exchange) and, for an
	// HTTP/1.1 request, the hold on the backend connection the timer cuts
	// (an h2 request uses its stream's).
	term  pipeline.Term
	tm    *time.Timer
	tmu   sync.Mutex // guards tOn and tCut against the timer's goroutine
	tOn   bool
	tCut  *abortable
	ab    abortable
	abody abortBody
	// bresp is the backend's answer as relay reads it; takeResponse
	// moves it into the client's (respbody.go). A body that streams takes
	// it away (nil: another is acquired for the next request).
	bresp *fasthttp.Response
}

// fhExchange is the classifier's view of the request (classify.Request).
func (x *fhExchange) Method() []byte            { return x.ctx.Method() }
func (x *fhExchange) Path() []byte              { return x.ctx.Path() }
func (x *fhExchange) Host() []byte              { return x.ctx.Host() }
func (x *fhExchange) Peek(h string) []byte      { return x.ctx.Request.Header.Peek(h) }
func (x *fhExchange) Cookie(name string) []byte { return x.ctx.Request.Header.Cookie(name) }

var exchangePool = sync.Pool{New: func() any { return &fhExchange{buf: make([]byte, 0, 128), wake: make(chanWaker, 1)} }}

// chanWaker is the fasthttp path's admission.Waker: a channel with room for
// one wake-up, so Wake never blocks. A pooled exchange keeps its channel; a
// stale wake-up left from an earlier request only makes awaitPending poll
// once more.
type chanWaker chan struct{}

// Wake implements admission.Waker.
func (w chanWaker) Wake() {
	select {
	case w <- struct{}{}:
	default:
	}
}

// awaitPending blocks until p's decision is made (woken through wake),
// the client goes (gone fires; nil: never) or a drain runs out of time
// (expired; nil: never); either of the last two withdraws the request.
func awaitPending(p admission.Pending, wake chanWaker, gone, expired <-chan struct{}) admission.Decision {
	for {
		select {
		case <-wake:
			if d, ok := p.Result(); ok {
				return d
			}
			continue
		case <-gone:
		case <-expired:
		}
		p.Cancel()
		return admission.Decision{Verdict: admission.RejectGone}
	}
}

var (
	hdrServerTiming = []byte("Server-Timing")
	strHTTP         = []byte("http")
)

// closeIfBodyUnread closes the connection after a response sentry made
// itself when the request's body streams: fasthttp has read at most a
// prefix of it, and the rest would otherwise be parsed as the next request
// on this connection (a request-smuggling desync). A body buffered whole
// (no longer a stream) was read to its end: the connection stays, as on
// the event loops.
func closeIfBodyUnread(ctx *fasthttp.RequestCtx, o pipeline.Outcome) {
	if o == pipeline.OutRelayed || !ctx.Request.IsBodyStream() {
		return
	}
	if cl := ctx.Request.Header.ContentLength(); cl != 0 && cl != -2 {
		ctx.SetConnectionClose()
	}
}

// peerAddr returns the connection's remote address without allocating.
func peerAddr(ctx *fasthttp.RequestCtx) netip.Addr {
	if ta, ok := ctx.RemoteAddr().(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap()
	}
	return netip.IPv6Unspecified()
}

// handle is the HTTP/1.1 request path, in its order of steps: the head
// checks and the first steps of the header policy (docs/request-path.md,
// "The header policy") on the raw head fasthttp keeps, the body's
// framing and buffering, then serve (the rest, as for h2) and the
// access line.
func (fe *frontend) handle(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	p := fe.p
	// body_min_rate ends with the handler (its body is in, or was relayed),
	// before fasthttp hands a hijacked connection to a tunnel.
	rc := rateConnOf(ctx.Conn())
	if rc != nil {
		defer rc.stopBodyRate()
	}
	rt := fe.route.Load()
	h := &ctx.Request.Header
	clientClose := h.ConnectionClose() // before the Connection header goes
	var f pipeline.HeadFacts
	a, ok := fe.routeHead(ctx, rt, &f)
	if !ok {
		return
	}
	upgrade := dropHopByHop(h, a, &f)
	// A body that has not arrived whole is read into sentry first
	// (server.request_buffer), under body_timeout and body_min_rate, so
	// the request is classified, admitted and counted in flight only once
	// it is ready: a slow client costs memory, never a backend connection.
	// Requests without a body (Content-Length: 0 included) skip all of
	// this.
	ready := start
	var body *bodyBuf
	var ae pipeline.AccessEntry // what the access log is told (filled only when it is on)
	ae.Class = -1
	cl := h.ContentLength()
	if cl != 0 && cl != -2 {
		if o := p.checkFraming(a, ctx); o != pipeline.OutRelayed {
			p.recordCtx(a, rt.Access, ctx, o, nil, start, &ae)
			return
		}
	}
	if ctx.Request.IsBodyStream() && cl != 0 && cl != -2 {
		var bb bodyBuf
		body = &bb
		o, used := fe.readBody(ctx, a, body)
		defer body.done(p, &ctx.Request)
		if o != pipeline.OutRelayed {
			if o == pipeline.OutClientGone {
				hangUp(ctx)
			} else {
				p.writeError(ctx, a, o)
				ctx.SetConnectionClose()
				if o == pipeline.OutBadRequest {
					// A malformed chunked body: counted as a request
					// fasthttp could not parse, like a refused head.
					fe.clientError(o)
					return
				}
			}
			p.recordCtx(a, rt.Access, ctx, o, nil, start, &ae)
			return
		}
		body.streamed = !used || body.client != nil
		if rc != nil && !body.streamed {
			rc.stopBodyRate()
		}
		ready = time.Now()
	}
	in := fhReq{peer: peerAddr(ctx), isTLS: ctx.IsTLS(), ready: ready, expired: fe.expired, upgrade: upgrade, clientClose: clientClose || f.Close}
	o, b := p.serve(a, ctx, in, body, &ae)
	closeIfBodyUnread(ctx, o)
	if o == pipeline.OutBadRequest {
		// A chunk malformed past the buffer, found while it streamed.
		fe.clientError(o)
	}
	if o == pipeline.OutRelayed && ctx.Response.IsBodyStream() && p.endAtBody(a, rt.Access, ctx, b, start, finConnOf(ctx.Conn()), &ae) {
		return // completed at the body's end (bodyEnd)
	}
	p.recordCtx(a, rt.Access, ctx, o, b, start, &ae)
}

// routeHead runs the head checks (headcheck.go), filling f, and finds
// the app rt routes the request's Host to. A head refused, or one no app
// serves, is answered here and ok is false: a refused head counts as
// one fasthttp could not parse (sentry_client_errors_total) and, as
// there, the connection is closed; no_app gets no access line.
func (fe *frontend) routeHead(ctx *fasthttp.RequestCtx, rt *pipeline.Route, f *pipeline.HeadFacts) (a *pipeline.App, ok bool) {
	h := &ctx.Request.Header
	o, ok := checkTarget(&ctx.Request, ctx.IsTLS())
	if ok {
		a = rt.Lookup(h.Host())
		reqID, load := "", ""
		if a != nil {
			reqID, load = a.ReqID, a.LoadHeader
		}
		*f = pipeline.ScanHead(h.RawHeaders(), reqID, load)
		o, ok = checkHead(h, f)
		if ok && a == nil {
			o, ok = pipeline.OutNoApp, false
		}
	}
	if ok {
		return a, true
	}
	fe.p.writeError(ctx, a, o)
	if o == pipeline.OutNoApp {
		closeIfBodyUnread(ctx, o)
		return a, false
	}
	fe.clientError(o)
	ctx.SetConnectionClose()
	return a, false
}

// dropHopByHop removes, from a head routeHead passed for app a, the
// fields that are not forwarded: those the client's Connection lists
// first (from the client's request only), then the other hop-by-hop
// ones, and a client's copy of the load header (pipeline/load.go). It
// returns whether the request goes as an upgrade, keeping its Upgrade
// header for a tunnel.
func dropHopByHop(h *fasthttp.RequestHeader, a *pipeline.App, f *pipeline.HeadFacts) (upgrade bool) {
	if f.ConnOther || f.Aliases {
		dropListed(h, h.RawHeaders(), a.ReqID, a.LoadHeader)
	}
	upgrade = f.Upgrade && len(h.PeekBytes(pipeline.HdrUpgrade)) > 0
	if upgrade && a.H2 != nil {
		// An HTTP/2 backend takes no HTTP/1.1 upgrade: the request goes
		// as an ordinary one, its Upgrade dropped (a server may ignore
		// Upgrade, RFC 9110 §7.8), rather than as HTTP/1.1 bytes to a
		// backend that speaks HTTP/2 only.
		upgrade = false
	}
	if f.Hop { // fasthttp's Del scans every header per name: only when there is one
		stripHopByHop(h, upgrade)
	}
	if f.Load {
		h.Del(a.LoadHeader)
	}
	return upgrade
}

// clientError counts a request refused as one fasthttp could not parse
// (sentry_client_errors_total).
func (fe *frontend) clientError(o pipeline.Outcome) {
	fe.p.metrics.clientErrors.WithLabelValues(fe.addr, pipeline.OutcomeReason[o]).Inc()
}

// hangUp closes the client's connection without writing a response: the
// client is gone, and 499 is for the metrics and the access log only.
func hangUp(ctx *fasthttp.RequestCtx) {
	ctx.Response.SetStatusCode(pipeline.StatusOf(pipeline.OutClientGone))
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(net.Conn) {})
}

// fhReq is what a front end tells serve of a request besides its app,
// its RequestCtx, its body and its access entry: how it came in and what
// its head asked. The front end has already removed the hop-by-hop
// headers (and those the client's Connection lists).
type fhReq struct {
	peer  netip.Addr // the connection's remote address
	isTLS bool
	// ready is when the request became ready to admit: after its head,
	// or after its body when the body was buffered.
	ready time.Time
	// cut is an h2 stream's hold on its backend exchange (abort.go),
	// whose done closes when the client resets the stream. nil on
	// HTTP/1.1, whose connection is checked after a wait instead.
	cut *abortable
	// expired is closed when the front end's drain runs out of time
	// (frontend.expired); nil: never.
	expired <-chan struct{}
	// upgrade: the request keeps its Upgrade header for a tunnel.
	upgrade bool
	// clientClose: the client asked to close the connection.
	clientClose bool
}

// fhCall is what serve's steps share of one request. It lives on
// serve's stack and holds nothing of its callers' stacks: the access
// entry and the body, which do, are passed to the steps that need them.
type fhCall struct {
	fhReq
	a       *pipeline.App
	ctx     *fasthttp.RequestCtx
	x       *fhExchange     // the pooled scratch space
	gone    <-chan struct{} // closed when an h2 stream's client goes (nil on HTTP/1.1)
	trusted bool            // the peer is a trusted proxy (identify)
	id      []byte          // the request ID sent (forward)
	cb      *clientBody     // the body, when it streams from the client (outRequest)
}

// serve runs one request through admission and relay. The response
// (relayed or generated) is left in ctx.Response. It returns the outcome
// and the upstream that served it (nil if none).
//
// Its steps, in order, below it: identify, decide (and park), the
// answers that spend no backend, forward, then an upgrade's tunnel
// (upgrade.go) or relayAdmitted: outRequest, send, observe, reply.
//
// body (nil: no streamed body) says how the body was read. ae receives
// what the access log needs that only serve knows: the client's address,
// the class and verdict, the backend's time.
func (p *Proxy) serve(a *pipeline.App, ctx *fasthttp.RequestCtx, in fhReq, body *bodyBuf, ae *pipeline.AccessEntry) (pipeline.Outcome, *pipeline.Upstream) {
	// The body cap (max_body_bytes) was applied by the caller before any
	// body was read: checkFraming on HTTP/1.1, the same bodyCap on h2.
	c := fhCall{fhReq: in, a: a, ctx: ctx, x: exchangePool.Get().(*fhExchange)}
	c.x.ctx = ctx
	defer c.x.release()
	if in.cut != nil {
		c.gone = in.cut.done // an h2 stream is gone when its context is done
	}
	client := c.identify(ae)
	d, o := c.decide(client, ae)
	switch o {
	case pipeline.OutClientGone:
		hangUp(ctx)
		return pipeline.OutClientGone, nil
	case pipeline.OutRejected:
		p.writeReject(a, ctx, d)
		return pipeline.OutRejected, nil
	}
	// No healthy backend: answer before spending anything on the request.
	if a.Pool.Healthy() == 0 {
		p.writeError(ctx, a, pipeline.OutNoBackend)
		return pipeline.OutNoBackend, nil
	}
	c.forward(p, ae)
	if in.upgrade {
		o, u := p.upgrade(a, ctx)
		if ctx.Response.StatusCode() != fasthttp.StatusSwitchingProtocols {
			// Not a tunnel: the answer is cleaned as any other.
			if o == pipeline.OutRelayed {
				stripHopByHopResponse(&ctx.Response.Header)
			}
			ctx.Response.Header.SetBytesV(a.ReqID, c.id)
		}
		return o, u
	}
	return c.relayAdmitted(p, body, ae)
}

// release returns x to the pool, holding nothing of its request.
func (x *fhExchange) release() {
	x.dropBackendResp()
	x.ctx, x.in, x.t.Ticket, x.t.Req = nil, pipeline.TrustedFwd{}, admission.Ticket{}, admission.Request{}
	x.abody = abortBody{} // holds nothing of this request in the pool
	exchangePool.Put(x)
}

// identify reads who the request is from and which trace it is in, for
// the decision and for the access line of every outcome, rejections
// included. It returns the client's address: the peer's or, from a
// trusted proxy, the one its X-Forwarded-For lines name (one list, RFC
// 9110 §5.3). Trace context (pipeline/trace.go) is read here; one is
// started only for a request that is forwarded (forward).
func (c *fhCall) identify(ae *pipeline.AccessEntry) netip.Addr {
	x, a, h := c.x, c.a, &c.ctx.Request.Header
	c.trusted = a.TrustedPeer(c.peer)
	client := c.peer
	x.in, x.chain = pipeline.TrustedFwd{}, x.chain[:0]
	if c.trusted {
		for _, v := range h.PeekAll(fasthttp.HeaderXForwardedFor) {
			x.chain = x.in.Add(pipeline.KindXFF, v, x.chain)
		}
		client = a.ClientAddr(c.peer, x.in.XFF)
	}
	ae.Client = client
	ae.Trace.Reset()
	if a.Trace != pipeline.TraceOff {
		if vs := h.PeekAll(pipeline.HdrTraceparent); len(vs) == 1 {
			ae.Trace.Read(vs[0])
		}
	}
	return client
}

// decide is the decide step (package pipeline): classify, estimate,
// admit. This engine may block, so a parked request waits here for its
// decision; it leaves its batch queue when its client hangs up (an h2
// stream's gone, or the HTTP/1.1 connection's watch where there is one).
// A client that left while it waited gets no answer, and no backend is
// spent on it: OutClientGone.
func (c *fhCall) decide(client netip.Addr, ae *pipeline.AccessEntry) (admission.Decision, pipeline.Outcome) {
	x, a := c.x, c.a
	d, pend, decided := a.Decide(&x.t, x, client, c.ready, c.gone, false, x.wake)
	if !decided {
		g := c.gone
		var unwatch func()
		if g == nil {
			if ch, stop, ok := watchGone(c.ctx.Conn()); ok {
				g, unwatch = ch, stop
			}
		}
		d = awaitPending(pend, x.wake, g, c.expired)
		if unwatch != nil {
			unwatch()
		}
	}
	o := a.Admitted(&x.t, d)
	ae.Decided(&x.t)
	if o == pipeline.OutRelayed && a.Controller != nil && c.gone == nil && time.Since(c.ready) > time.Millisecond && !connAlive(c.ctx.Conn()) {
		o = pipeline.OutClientGone
	}
	return d, o
}

// forward sets an admitted request's forwarding headers
// (pipeline.PlanForwarding: every incoming copy goes, then one of each is
// set) and its request ID (c.id), a traceparent when trace_context
// generate starts one, and sentry's load header.
func (c *fhCall) forward(p *Proxy, ae *pipeline.AccessEntry) {
	x, a, h := c.x, c.a, &c.ctx.Request.Header
	if c.trusted {
		for _, v := range h.PeekAll(fasthttp.HeaderXForwardedProto) {
			x.in.Add(pipeline.KindXFProto, v, nil)
		}
		for _, v := range h.PeekAll(fasthttp.HeaderXForwardedHost) {
			x.in.Add(pipeline.KindXFHost, v, nil)
		}
		for _, v := range h.PeekAll(a.ReqID) {
			x.in.Add(pipeline.KindOther, v, nil)
		}
	}
	var fw pipeline.Forwarding
	x.buf, fw = pipeline.PlanForwarding(x.buf, &x.in, c.peer, c.isTLS, h.Host(), &p.ids)
	c.id = fw.ID
	h.DelBytes(pipeline.HdrXFF)
	h.DelBytes(pipeline.HdrXFProto)
	h.DelBytes(pipeline.HdrXFHost)
	h.Del(a.ReqID)
	h.SetBytesKV(pipeline.HdrXFF, fw.XFF)
	h.SetBytesKV(pipeline.HdrXFProto, fw.Proto)
	h.SetBytesKV(pipeline.HdrXFHost, fw.Host)
	h.SetBytesV(a.ReqID, c.id)
	if a.Trace == pipeline.TraceGenerate && !ae.Trace.Valid() {
		p.ids.StartTrace(&ae.Trace)
		h.Del(pipeline.HdrTraceparent)
		h.Del(pipeline.HdrTracestate)
		// (through the pooled exchange's buffer: fasthttp's setter
		// would move ae to the heap)
		x.tp = append(x.tp[:0], ae.Trace.Header()...)
		h.SetBytesV(pipeline.HdrTraceparent, x.tp)
	}
	// The degradation signal (pipeline/load.go): an admitted request
	// carries sentry's (a client's copy went with the header policy:
	// handle on HTTP/1.1, H2Skip on h2).
	if a.Load != nil {
		// (through the pooled exchange's buffer: a local array would
		// move to the heap)
		x.load = a.AppendLoad(x.load[:0], x.t.Class, time.Now())
		h.SetBytesV(a.LoadHeader, x.load)
	}
}

// relayAdmitted relays an admitted request that is not an upgrade, tells
// the ticket how it went (observe) and leaves the client's answer in
// ctx.Response (reply).
func (c *fhCall) relayAdmitted(p *Proxy, body *bodyBuf, ae *pipeline.AccessEntry) (pipeline.Outcome, *pipeline.Upstream) {
	req := &c.ctx.Request
	req.Header.ResetConnectionClose()
	if c.isTLS {
		// The backend hop is plain HTTP; fasthttp's HostClient refuses a
		// request whose URI says https.
		req.URI().SetSchemeBytes(strHTTP)
	}
	// A stream cancelled by now (h2: reset) is not sent to a backend.
	if c.gone != nil {
		select {
		case <-c.gone:
			return pipeline.OutClientGone, nil
		default:
		}
	}
	// HTTP/1.1: a client that closes its side while its request is
	// relayed is gone, as on the loops (fin_linux.go): it gets no answer.
	// The relay lasts to the body's end when the response streams
	// (bodyEnd), else to here.
	fc := c.finConn()
	if fc != nil && fc.relayStart() {
		fc.relayEnd()
		hangUp(c.ctx)
		return pipeline.OutClientGone, nil
	}
	out := c.outRequest(body)
	if out != req {
		defer fasthttp.ReleaseRequest(out)
	}
	o, u, dispatch, inService := c.send(p, out, body, &ae.Trace)
	if fc != nil && fc.finSeen() {
		fc.relayEnd()
		c.x.dropBackendResp()
		hangUp(c.ctx)
		return pipeline.OutClientGone, u
	}
	clientClose := c.clientClose
	if c.cb != nil && c.cb.unread {
		clientClose = true // the rest of the body must not be read as a request
	}
	if o == pipeline.OutRelayed {
		c.observe(body, dispatch, inService, ae)
	}
	c.reply(p, o, u, clientClose)
	if fc != nil && (o != pipeline.OutRelayed || !c.ctx.Response.IsBodyStream()) {
		fc.relayEnd()
	}
	return o, u
}

// finConn is the HTTP/1.1 connection whose FIN ends the request while
// it is relayed (fin_linux.go); nil for an h2 stream, whose reset does.
func (c *fhCall) finConn() *drainConn {
	if c.cut != nil {
		return nil
	}
	return finConnOf(c.ctx.Conn())
}

// finConnOf is the drainConn of fasthttp's connection nc, if any.
func finConnOf(nc net.Conn) *drainConn {
	switch x := nc.(type) {
	case *drainConn:
		return x
	case drainTLSConn:
		return x.drainConn
	}
	return nil
}

// outRequest is the request that goes to the backend: the client's, or,
// for a body that streams from the client (c.cb, set here), a copy. fasthttp
// owns the request's stream (and releases it with the request), so the
// copy carries it, wrapped to tell the client's read errors from the
// backend's: for a chunked body larger than the buffer, the part read
// first and then the rest of the stream. The caller releases a copy.
func (c *fhCall) outRequest(body *bodyBuf) *fasthttp.Request {
	req := &c.ctx.Request
	if body == nil || body.client == nil {
		return req
	}
	c.cb = body.client
	if c.cut == nil && c.a.H2 != nil {
		c.cb.stop = readUnblocker(c.ctx.Conn()) // relayH2 may abandon it halfway
	}
	out := fasthttp.AcquireRequest()
	req.CopyTo(out)
	out.SetBodyStream(c.cb, body.cl)
	return out
}

// send relays out (relay, with its retries) under what may cut it: an h2
// stream's reset (abort.go) and selective early termination (term.go),
// never for a body that streams from the client nor an upgrade. It
// returns relay's outcome, or OutTerminated when the termination timer
// won; the upstream; when the request was dispatched; and the backend's
// in-flight count then.
func (c *fhCall) send(p *Proxy, out *fasthttp.Request, body *bodyBuf, tr *pipeline.Trace) (pipeline.Outcome, *pipeline.Upstream, time.Time, int) {
	x, a, req := c.x, c.a, &c.ctx.Request
	var ab *abortBody
	if c.cut != nil {
		// An h2 stream: its reset cuts the backend exchange (abort.go).
		ab = &abortBody{ab: c.cut, resp: x.backendResp(), b: req.Body(), cl: len(req.Body())}
		if c.cb != nil {
			ab.b, ab.src, ab.cl = nil, c.cb, body.cl
		}
	}
	var tcl *sert.Class
	if c.cb == nil && a.H2 == nil { // not an HTTP/2 backend: see docs/request-path.md, "Backends over HTTP/2"
		tcl = a.TermClass(&x.t, req.Header.Method())
	}
	if tcl != nil && ab == nil {
		// HTTP/1.1: the exchange's own hold on the backend connection,
		// bound the way an h2 stream's is (abort.go).
		x.ab.reset()
		x.abody = abortBody{ab: &x.ab, resp: x.backendResp(), b: req.Body(), cl: len(req.Body())}
		ab = &x.abody
	}
	dispatch := time.Now()
	if tcl != nil {
		x.armTerm(tcl, dispatch, ab.ab)
	}
	o, u, inService := p.relay(a, out, x.backendResp(), c.cb, ab, tr)
	if tcl != nil {
		x.stopTerm()
		if c.cut == nil {
			x.ab.unbind() // the timer is stopped: nothing cuts this hold any more
		}
		if x.term.Cut() {
			// The timer won the latch (term.go): the backend connection
			// was closed; whatever came back is dropped, and the request
			// is not retried (relay saw the cut).
			a.Terminated(&x.t, &x.term, time.Now(), inService)
			o = pipeline.OutTerminated
		} else {
			x.term.Disarm()
			x.term.Off()
		}
	}
	return o, u, dispatch, inService
}

// observe is the complete step (package pipeline) of a relayed request:
// the ticket is told the outcome, with the service time measured from
// dispatch and the backend's Server-Timing, which loses sentry's metric
// when Observe says so.
func (c *fhCall) observe(body *bodyBuf, dispatch time.Time, inService int, ae *pipeline.AccessEntry) {
	now := time.Now()
	rh := &c.x.backendResp().Header
	st := rh.PeekBytes(hdrServerTiming)
	// Measured service time runs from dispatch, when the body is in
	// sentry. A body that streams to the backend (larger than the
	// buffer, or buffering off) would add the client's upload time to
	// it, so such a request gives no measured sample: only the
	// backend's Server-Timing counts (the estimator cannot be
	// poisoned by a slow upload).
	measured, busy := now.Sub(dispatch), inService
	ae.Upstrm = measured
	if body != nil && body.streamed {
		measured, busy = 0, 0
		if cb := c.cb; cb != nil {
			// An HTTP/2 backend's: a body all sent before the response
			// head (a unary gRPC call; an HTTP/1.1 client's, sent whole)
			// gives the time from its end to the head. One still
			// streaming at the head (a bidirectional call) gives none.
			if at := cb.sentAt.Load(); at != 0 && at <= cb.headAt {
				measured, busy = time.Duration(cb.headAt-at), inService
			}
		}
	}
	x := c.x
	if c.a.Observe(&x.t, admission.Result{ServerTiming: st, Measured: measured, InService: busy, End: now}) && len(st) > 0 {
		x.st = estimator.StripServerTiming(x.st[:0], st)
		if len(x.st) == 0 {
			rh.DelBytes(hdrServerTiming)
		} else {
			rh.SetBytesKV(hdrServerTiming, x.st)
		}
	}
}

// reply leaves the client's answer in ctx.Response: the backend's, its
// hop-by-hop fields stripped, or the error outcome o calls for; either
// with the request ID, and closing the connection when clientClose says
// so.
func (c *fhCall) reply(p *Proxy, o pipeline.Outcome, u *pipeline.Upstream, clientClose bool) {
	ctx, a, x := c.ctx, c.a, c.x
	if o != pipeline.OutRelayed {
		x.dropBackendResp()
		p.writeError(ctx, a, o)
	} else {
		// A body of known size up to the stream threshold was read whole
		// by the client; fasthttp still hands it over as a stream, which
		// holds the backend connection until the client write ends and
		// costs a wrapper per response. Turn it back into a plain body:
		// the backend connection goes back to the pool now and the
		// response is written in one piece.
		br := x.backendResp()
		if cl := br.Header.ContentLength(); cl >= 0 && cl <= streamThreshold && br.IsBodyStream() {
			if c.cut != nil {
				c.cut.unbind() // Body() hands the connection back
			}
			br.Body()
		}
		p.takeResponse(ctx, x, a, c.cut)
		stripHopByHopResponse(&ctx.Response.Header)
		if !ctx.Response.IsBodyStream() {
			quiescedEnd(a, u)
		}
	}
	ctx.Response.Header.SetBytesV(a.ReqID, c.id)
	if clientClose {
		ctx.SetConnectionClose()
	}
}
