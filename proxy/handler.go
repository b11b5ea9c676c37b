package proxy

import (
	"errors"
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

// awaitPending blocks until p's decision is made (woken through wake) or
// the client goes (gone fires; nil: never), which withdraws the request.
func awaitPending(p admission.Pending, wake chanWaker, gone <-chan struct{}) admission.Decision {
	for {
		select {
		case <-wake:
			if d, ok := p.Result(); ok {
				return d
			}
		case <-gone:
			p.Cancel()
			return admission.Decision{Verdict: admission.RejectGone}
		}
	}
}

var (
	hdrRetryAfter   = []byte("Retry-After")
	hdrReject       = []byte("X-Sentry-Reject")
	hdrServerTiming = []byte("Server-Timing")
	strHTTP         = []byte("http")
	strHTTPS        = []byte("https")
	strTextPlain    = []byte("text/plain; charset=utf-8")
	strGRPC         = []byte("application/grpc")
	hdrGRPCStatus   = []byte("Grpc-Status")
	hdrGRPCMessage  = []byte("Grpc-Message")
	hdrGRPCPushback = []byte("Grpc-Retry-Pushback-Ms")
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

// handle is the HTTP/1.1 request path. The head checks and the first
// steps of the header policy (docs/request-path.md, "The header policy") run here, on
// the raw head fasthttp keeps; serve does the rest for HTTP/1.1 and h2.
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
	var a *pipeline.App
	o, ok := checkTarget(&ctx.Request, ctx.IsTLS())
	var f pipeline.HeadFacts
	if ok {
		a = rt.Lookup(h.Host())
		reqID, load := "", ""
		if a != nil {
			reqID, load = a.ReqID, a.LoadHeader
		}
		f = pipeline.ScanHead(h.RawHeaders(), reqID, load)
		o, ok = checkHead(h, &f)
		if ok && a == nil {
			o, ok = pipeline.OutNoApp, false
		}
	}
	if !ok {
		p.writeError(ctx, a, o)
		if o == pipeline.OutNoApp {
			closeIfBodyUnread(ctx, o)
			return
		}
		// A head refused by the checks counts as one fasthttp could not
		// parse (sentry_client_errors_total), and, as there, the
		// connection is closed.
		p.metrics.clientErrors.WithLabelValues(fe.addr, pipeline.OutcomeReason[o]).Inc()
		ctx.SetConnectionClose()
		return
	}
	// Connection-listed headers go first, from the client's request only;
	// then the other hop-by-hop ones.
	if f.ConnOther || f.Aliases {
		dropListed(h, h.RawHeaders(), a.ReqID, a.LoadHeader)
	}
	upgrade := f.Upgrade && len(h.PeekBytes(pipeline.HdrUpgrade)) > 0
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
	if f.Load { // a client's copy of the load header (pipeline/load.go)
		h.Del(a.LoadHeader)
	}
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
				ctx.Response.SetStatusCode(pipeline.StatusOf(o))
				ctx.HijackSetNoResponse(true)
				ctx.Hijack(func(net.Conn) {})
			} else {
				p.writeError(ctx, a, o)
				ctx.SetConnectionClose()
				if o == pipeline.OutBadRequest {
					// A malformed chunked body: counted as a request
					// fasthttp could not parse, like a refused head.
					p.metrics.clientErrors.WithLabelValues(fe.addr, pipeline.OutcomeReason[o]).Inc()
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
	o, b := p.serve(a, ctx, peerAddr(ctx), ctx.IsTLS(), ready, nil, upgrade, clientClose || f.Close, body, &ae)
	closeIfBodyUnread(ctx, o)
	if o == pipeline.OutBadRequest {
		// A chunk malformed past the buffer, found while it streamed.
		p.metrics.clientErrors.WithLabelValues(fe.addr, pipeline.OutcomeReason[o]).Inc()
	}
	p.recordCtx(a, rt.Access, ctx, o, b, start, &ae)
}

// serve runs one request through admission and relay. The response (relayed
// or generated) is left in ctx.Response. It returns the outcome and the
// upstream that served it (nil if none).
//
// gone, if not nil, is closed when the client disconnects (h2 streams); for
// HTTP/1.1 the connection is checked after a wait instead.
//
// The front end has already removed hop-by-hop headers (and those the
// client's Connection lists name); upgrade says the request keeps its
// Upgrade header for a tunnel, clientClose that the client asked to close.
// start is when the request became ready to admit: after its head, or
// after its body when the body was buffered. body (nil: no streamed body)
// says how the body was read. ae receives what the access log needs that
// only serve knows: the client's address, the class and verdict, the
// backend's time.
func (p *Proxy) serve(a *pipeline.App, ctx *fasthttp.RequestCtx, peer netip.Addr, isTLS bool, start time.Time, cut *abortable, upgrade, clientClose bool, body *bodyBuf, ae *pipeline.AccessEntry) (pipeline.Outcome, *pipeline.Upstream) {
	// The body cap (max_body_bytes) was applied by the caller before any
	// body was read: checkFraming on HTTP/1.1, the same bodyCap on h2.
	req := &ctx.Request
	h := &req.Header
	// An h2 stream (cut) is gone when its context is done.
	var gone <-chan struct{}
	if cut != nil {
		gone = cut.done
	}

	x := exchangePool.Get().(*fhExchange)
	x.ctx = ctx
	defer func() {
		x.dropBackendResp()
		x.ctx, x.in, x.t.Ticket, x.t.Req = nil, pipeline.TrustedFwd{}, admission.Ticket{}, admission.Request{}
		x.abody = abortBody{} // holds nothing of this request in the pool
		exchangePool.Put(x)
	}()

	// From a trusted proxy, its X-Forwarded-For lines are one list (RFC
	// 9110 §5.3).
	isTrusted := a.TrustedPeer(peer)
	client := peer
	x.in, x.chain = pipeline.TrustedFwd{}, x.chain[:0]
	if isTrusted {
		for _, v := range h.PeekAll(fasthttp.HeaderXForwardedFor) {
			x.chain = x.in.Add(pipeline.KindXFF, v, x.chain)
		}
		client = a.ClientAddr(peer, x.in.XFF)
	}
	ae.Client = client
	// Trace context (pipeline/trace.go): read here, so that a
	// rejection's line names the trace too; one is started only for a
	// request that is forwarded (below).
	ae.Trace.Reset()
	if a.Trace != pipeline.TraceOff {
		if vs := h.PeekAll(pipeline.HdrTraceparent); len(vs) == 1 {
			ae.Trace.Read(vs[0])
		}
	}

	// The decide step (package pipeline): classify, estimate, admit. This
	// engine may block, so a parked request waits here; it leaves its
	// batch queue when its client hangs up.
	d, pend, decided := a.Decide(&x.t, x, client, start, gone, false, x.wake)
	if !decided {
		g := gone
		var unwatch func()
		if g == nil {
			if ch, stop, ok := watchGone(ctx.Conn()); ok {
				g, unwatch = ch, stop
			}
		}
		d = awaitPending(pend, x.wake, g)
		if unwatch != nil {
			unwatch()
		}
	}
	o := a.Admitted(&x.t, d)
	ae.Decided(&x.t)
	// A client that left while waiting gets no answer, and no backend is
	// spent on it.
	if o == pipeline.OutRelayed && a.Controller != nil && gone == nil && time.Since(start) > time.Millisecond && !connAlive(ctx.Conn()) {
		o = pipeline.OutClientGone
	}
	switch o {
	case pipeline.OutClientGone:
		// Close without writing a response; 499 is for the metrics and
		// the access log only.
		ctx.Response.SetStatusCode(pipeline.StatusOf(pipeline.OutClientGone))
		ctx.HijackSetNoResponse(true)
		ctx.Hijack(func(net.Conn) {})
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

	// Forwarding headers (pipeline.PlanForwarding): every incoming copy goes, then
	// one of each is set.
	if isTrusted {
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
	x.buf, fw = pipeline.PlanForwarding(x.buf, &x.in, peer, isTLS, h.Host(), &p.ids)
	id := fw.ID
	h.DelBytes(pipeline.HdrXFF)
	h.DelBytes(pipeline.HdrXFProto)
	h.DelBytes(pipeline.HdrXFHost)
	h.Del(a.ReqID)
	h.SetBytesKV(pipeline.HdrXFF, fw.XFF)
	h.SetBytesKV(pipeline.HdrXFProto, fw.Proto)
	h.SetBytesKV(pipeline.HdrXFHost, fw.Host)
	h.SetBytesV(a.ReqID, id)
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
		var lb [64]byte
		h.SetBytesV(a.LoadHeader, a.AppendLoad(lb[:0], x.t.Class, time.Now()))
	}

	if upgrade {
		o, u := p.upgrade(a, ctx)
		if ctx.Response.StatusCode() != fasthttp.StatusSwitchingProtocols {
			// Not a tunnel: the answer is cleaned as any other.
			if o == pipeline.OutRelayed {
				stripHopByHopResponse(&ctx.Response.Header)
			}
			ctx.Response.Header.SetBytesV(a.ReqID, id)
		}
		return o, u
	}
	h.ResetConnectionClose()
	if isTLS {
		// The backend hop is plain HTTP; fasthttp's HostClient refuses a
		// request whose URI says https.
		req.URI().SetSchemeBytes(strHTTP)
	}

	// A stream cancelled by now (h2: reset) is not sent to a backend.
	if gone != nil {
		select {
		case <-gone:
			return pipeline.OutClientGone, nil
		default:
		}
	}
	out := req
	var cb *clientBody
	if body != nil && body.client != nil {
		// A body that streams from the client. fasthttp owns the
		// request's stream (and releases it with the request), so a copy
		// of the request carries it, wrapped to tell the client's read
		// errors from the backend's: for a chunked body larger than the
		// buffer, the part read first and then the rest of the stream.
		cb = body.client
		if cut == nil && a.H2 != nil {
			cb.stop = readUnblocker(ctx.Conn()) // relayH2 may abandon it halfway
		}
		out = fasthttp.AcquireRequest()
		req.CopyTo(out)
		out.SetBodyStream(cb, body.cl)
		defer fasthttp.ReleaseRequest(out)
	}
	var ab *abortBody
	if cut != nil {
		// An h2 stream: its reset cuts the backend exchange (abort.go).
		ab = &abortBody{ab: cut, resp: x.backendResp(), b: req.Body(), cl: len(req.Body())}
		if cb != nil {
			ab.b, ab.src, ab.cl = nil, cb, body.cl
		}
	}
	// Selective early termination (term.go): never a body that streams
	// from the client (cb), never an upgrade (returned above).
	var tcl *sert.Class
	if cb == nil && a.H2 == nil { // not an HTTP/2 backend: see docs/request-path.md, "Backends over HTTP/2"
		tcl = a.TermClass(&x.t, h.Method())
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
	br := x.backendResp()
	o, u, inService := p.relay(a, out, br, cb, ab, &ae.Trace)
	if cb != nil && cb.unread {
		clientClose = true // the rest of the body must not be read as a request
	}
	if tcl != nil {
		x.stopTerm()
		if cut == nil {
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
	if o == pipeline.OutRelayed {
		// The complete step (package pipeline): the ticket is told the
		// outcome.
		now := time.Now()
		rh := &br.Header
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
			if cb != nil {
				// An HTTP/2 backend's: a body all sent before the response
				// head (a unary gRPC call; an HTTP/1.1 client's, sent whole)
				// gives the time from its end to the head. One still
				// streaming at the head (a bidirectional call) gives none.
				if at := cb.sentAt.Load(); at != 0 && at <= cb.headAt {
					measured, busy = time.Duration(cb.headAt-at), inService
				}
			}
		}
		if a.Observe(&x.t, admission.Result{ServerTiming: st, Measured: measured, InService: busy, End: now}) && len(st) > 0 {
			x.st = estimator.StripServerTiming(x.st[:0], st)
			if len(x.st) == 0 {
				rh.DelBytes(hdrServerTiming)
			} else {
				rh.SetBytesKV(hdrServerTiming, x.st)
			}
		}
	}
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
		if cl := br.Header.ContentLength(); cl >= 0 && cl <= streamThreshold && br.IsBodyStream() {
			if cut != nil {
				cut.unbind() // Body() hands the connection back
			}
			br.Body()
		}
		p.takeResponse(ctx, x, a, cut)
		stripHopByHopResponse(&ctx.Response.Header)
		if !ctx.Response.IsBodyStream() {
			quiescedEnd(a, u)
		}
	}
	ctx.Response.Header.SetBytesV(a.ReqID, id)
	if clientClose {
		ctx.SetConnectionClose()
	}
	return o, u
}

// quiescedEnd closes the idle connections to u when the operator took it
// out of rotation (lb's doc.go, "Operator state") while this exchange was
// in flight: the pool told the proxy at the exchange's Release, when its
// connection was still busy, and the connection has only now gone back
// to fasthttp's pool (or, to an HTTP/2 backend, become idle). A response
// body fasthttp streams to an HTTP/1.1 client goes back when fasthttp's
// server has written it, after the handler: that connection is closed by
// the idle timeout (30 s). One atomic load otherwise.
func quiescedEnd(a *pipeline.App, u *pipeline.Upstream) {
	if u == nil || !u.Quiesced.Load() {
		return
	}
	if c, _ := a.H2.(*h2Client); c != nil {
		c.tr.CloseIdleConnections()
		return
	}
	hostClient(u).CloseIdleConnections()
}

// relay sends req to the least-loaded healthy backend and reads the response
// head into resp. Connect failures are retried on another backend.
//
// It also returns the backend's in-flight count at dispatch (this request
// included), for the estimator's parallelism model.
//
// cb, if not nil, is the streamed body: an exchange that failed because
// the client's side of it did (too slow, gone) ends as that, without
// blaming the backend.
//
// ab, if not nil, is an h2 request's body (abort.go): set on req for each
// attempt, it binds the attempt's connection to the stream, and the
// binding ends here unless the response streams (the caller ends it then).
// An attempt cut by the stream's reset ends as outClientGone.
func (p *Proxy) relay(a *pipeline.App, req *fasthttp.Request, resp *fasthttp.Response, cb *clientBody, ab *abortBody, tr *pipeline.Trace) (pipeline.Outcome, *pipeline.Upstream, int) {
	if c, ok := a.H2.(*h2Client); ok && c != nil {
		return p.relayH2(a, c, req, resp, cb, ab, tr)
	}
	var last *pipeline.Upstream
	replay := cb == nil && idempotent(req) // pipeline.TryAgain: a body held whole
	stale := 0                             // connections found closed by a reset (errConnAborted)
	for attempt := 1; ; attempt++ {
		b := a.Pool.Pick()
		if b == nil {
			if last != nil {
				return pipeline.OutBackendFailed, last, 0 // every backend we tried refused
			}
			return pipeline.OutNoBackend, nil, 0
		}
		u := b.Attachment.(*pipeline.Upstream)
		inService := int(b.Inflight())
		if ab != nil {
			ab.attach(req)
		}
		err := doBackend(hostClient(u), req, resp)
		if ab != nil {
			if err != nil || !resp.IsBodyStream() {
				ab.ab.unbind()
			}
			if err != nil && (ab.ab.wasCut() || errors.Is(err, errTermCut)) {
				// The stream was reset, or termination cut it (the
				// caller tells which): never retried.
				a.Pool.Release(b, true)
				return pipeline.OutClientGone, u, inService
			}
		}
		if err != nil && errors.Is(err, errConnAborted) {
			// A pooled connection another stream's reset closed
			// (abort.go): not the backend's failure, and not an attempt
			// either (a burst of resets can leave several such in the
			// pool), up to pipeline.MaxStaleRetries; replayable requests only.
			a.Pool.Release(b, true)
			if !replay || stale >= pipeline.MaxStaleRetries {
				return pipeline.OutBackendFailed, u, 0
			}
			stale++
			attempt--
			last = u
			resp.Reset()
			continue
		}
		if err == nil {
			markChunked(resp)
			a.Pool.Release(b, true)
			if u.Answered() {
				p.log.Info("backend reachable again", "app", a.Name, "backend", u.Addr)
			}
			return pipeline.OutRelayed, u, inService
		}
		if cb != nil && cb.err != nil {
			a.Pool.Release(b, true)
			return cb.outcome(), u, 0
		}
		o := relayError(err)
		dial := isDialError(err)
		if dial {
			a.Pool.Eject(b) // connect refused/timed out is unambiguous
		} else {
			a.Pool.Release(b, !pipeline.CountsAsFailure(o))
		}
		if dial && u.Unreachable() {
			// Named once with its cause (a name that does not resolve
			// fails here too: fasthttp resolves on each dial), and again
			// only after it answered and failed anew.
			p.log.Warn("backend unreachable; ejected until it answers again",
				pipeline.LogRequest([]any{"app", a.Name, "backend", u.Addr, "error", err}, req.Header.Peek(a.ReqID), tr)...)
		} else if ae := u.Alert.Swap(nil); ae != nil && u.Unreachable() {
			// The handshake passed on sentry's side, but the backend
			// refused it after (TLS 1.3 sends a client-certificate
			// refusal with the first response), which fasthttp reports
			// as a closed connection: the alert is the cause, named once
			// like an unreachable backend's.
			p.log.Warn("backend refused the TLS connection",
				pipeline.LogRequest([]any{"app", a.Name, "backend", u.Addr, "error", *ae}, req.Header.Peek(a.ReqID), tr)...)
		} else if p.log.IsDebug() {
			p.log.Debug("relay failed", pipeline.LogRequest([]any{"app", a.Name, "backend", u.Addr, "error", err}, req.Header.Peek(a.ReqID), tr)...)
		}
		if !pipeline.TryAgain(failureOf(err), replay, attempt, false) {
			return o, u, 0
		}
		last = u
		resp.Reset()
	}
}

// doBackend is HostClient.Do, except for a HEAD that takes the last
// connection under max_conns_per_backend: HostClient hands a connection
// given back straight to its first waiter, whose request goes out at
// once, so a body the backend wrongly sends late with its answer to a
// HEAD would be read as that waiter's response. Such a HEAD asks the
// backend to close after its answer (a waiter then dials), as the loops
// close theirs (evloop finish). fasthttp does not let the same be done
// for a 204 or 304, known only once the connection is handed on
// (knownDifferences, "stray-body").
func doBackend(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response) error {
	if !req.Header.IsHead() || hc.MaxConns <= 0 || req.Header.ConnectionClose() || hc.ConnsCount()+1 < hc.MaxConns {
		return hc.Do(req, resp)
	}
	req.Header.SetConnectionClose()
	err := hc.Do(req, resp)
	req.Header.ResetConnectionClose() // the backend's, not the client's connection
	return err
}
