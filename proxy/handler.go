package proxy

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
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
	if o == pipeline.OutRelayed && ctx.Response.IsBodyStream() && p.endAtBody(a, rt.Access, ctx, b, start, drainConnOf(ctx.Conn()), &ae) {
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
