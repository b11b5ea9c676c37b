package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/estimator"
)

// exchange is the per-request scratch space, pooled so the request path
// does not allocate.
type exchange struct {
	ar  admission.Request
	ctx *fasthttp.RequestCtx
	buf []byte // forwarding headers and the request ID
	st  []byte // stripped Server-Timing
}

// exchange is the classifier's view of the request (classify.Request).
func (x *exchange) Method() []byte            { return x.ctx.Method() }
func (x *exchange) Path() []byte              { return x.ctx.Path() }
func (x *exchange) Host() []byte              { return x.ctx.Host() }
func (x *exchange) Peek(h string) []byte      { return x.ctx.Request.Header.Peek(h) }
func (x *exchange) Cookie(name string) []byte { return x.ctx.Request.Header.Cookie(name) }

var exchangePool = sync.Pool{New: func() any { return &exchange{buf: make([]byte, 0, 128)} }}

// maxDialAttempts bounds retries after connect failures (nothing was sent,
// so a retry on another backend is always safe).
const maxDialAttempts = 3

var (
	hdrXFF          = []byte("X-Forwarded-For")
	hdrXFProto      = []byte("X-Forwarded-Proto")
	hdrXFHost       = []byte("X-Forwarded-Host")
	hdrRetryAfter   = []byte("Retry-After")
	hdrReject       = []byte("X-Sentry-Reject")
	hdrServerTiming = []byte("Server-Timing")
	strHTTP         = []byte("http")
	strHTTPS        = []byte("https")
	strTextPlain    = []byte("text/plain; charset=utf-8")
	strContentLen   = []byte("content-length")
	hopByHopCommon  = []string{"Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Proxy-Authorization", "Proxy-Authenticate"}
)

// lookup returns the app for a Host header on this route.
func (rt *route) lookup(host []byte) *app {
	if len(rt.hosts) == 0 {
		return rt.def
	}
	h := hostOnly(host)
	if a, ok := rt.hosts[string(h)]; ok {
		return a
	}
	if !lowerASCII(h) {
		var tmp [256]byte
		if len(h) <= len(tmp) {
			l := tmp[:len(h)]
			for i, c := range h {
				if 'A' <= c && c <= 'Z' {
					c += 'a' - 'A'
				}
				l[i] = c
			}
			if a, ok := rt.hosts[string(l)]; ok {
				return a
			}
		}
	}
	return rt.def
}

// closeIfBodyUnread closes the connection after a response sentry made
// itself when the request had a body: the body streams, so fasthttp has
// read at most a prefix of it, and the rest would otherwise be parsed as
// the next request on this connection (a request-smuggling desync).
func closeIfBodyUnread(ctx *fasthttp.RequestCtx, o outcome) {
	if o == outRelayed {
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

// handle is the HTTP/1.1 request path.
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
	a := rt.lookup(ctx.Request.Header.Host())
	if a == nil {
		p.writeError(ctx, nil, outNoApp)
		closeIfBodyUnread(ctx, outNoApp)
		return
	}
	// A body that has not arrived whole is read into sentry first
	// (server.request_buffer), under body_timeout and body_min_rate, so
	// the request is classified, admitted and counted in flight only once
	// it is ready: a slow client costs memory, never a backend connection.
	// Requests without a body skip all of this.
	ready := start
	var body *bodyBuf
	if ctx.Request.IsBodyStream() {
		var bb bodyBuf
		body = &bb
		if o := p.checkFraming(a, ctx); o != outRelayed {
			a.m.observe(o, ctx.Response.StatusCode(), nil, start)
			if rt.access {
				p.logAccess(a, ctx, o, nil, start)
			}
			return
		}
		o, used := fe.readBody(ctx, a, body)
		defer body.done(p, &ctx.Request)
		if o != outRelayed {
			if o == outClientGone {
				ctx.Response.SetStatusCode(statusOf(o))
				ctx.HijackSetNoResponse(true)
				ctx.Hijack(func(net.Conn) {})
			} else {
				p.writeError(ctx, a, o)
				ctx.SetConnectionClose()
			}
			a.m.observe(o, ctx.Response.StatusCode(), nil, start)
			if rt.access {
				p.logAccess(a, ctx, o, nil, start)
			}
			return
		}
		body.streamed = !used || body.client != nil
		if rc != nil && !body.streamed {
			rc.stopBodyRate()
		}
		ready = time.Now()
	}
	o, b := p.serve(a, ctx, peerAddr(ctx), ctx.IsTLS(), ready, nil, body)
	closeIfBodyUnread(ctx, o)
	a.m.observe(o, ctx.Response.StatusCode(), b, start)
	if rt.access {
		p.logAccess(a, ctx, o, b, start)
	}
}

// checkFraming refuses, before anything of the body is read, what serve
// would refuse anyway: Transfer-Encoding with Content-Length (smuggling,
// 400) and a body over the app's max_body_bytes (413, or 411 for a
// chunked one). The response is written and the connection set to close.
func (p *Proxy) checkFraming(a *app, ctx *fasthttp.RequestCtx) outcome {
	h := &ctx.Request.Header
	o := outRelayed
	if h.ContentLength() == -1 && hasHeaderName(h.RawHeaders(), strContentLen) {
		o = outBadRequest
	} else if lim := a.cfg.MaxBodyBytes; lim > 0 {
		if cl := h.ContentLength(); cl > 0 && int64(cl) > lim {
			o = outBodyTooLarge
		} else if cl == -1 {
			o = outLengthRequired
		}
	}
	if o != outRelayed {
		ctx.SetConnectionClose()
		p.writeError(ctx, a, o)
	}
	return o
}

// serve runs one request through admission and relay. The response (relayed
// or generated) is left in ctx.Response. It returns the outcome and the
// upstream that served it (nil if none).
//
// gone, if not nil, is closed when the client disconnects (h2 streams); for
// HTTP/1.1 the connection is checked after a wait instead.
//
// start is when the request became ready to admit: after its head, or
// after its body when the body was buffered. body (nil: no streamed body)
// says how the body was read.
func (p *Proxy) serve(a *app, ctx *fasthttp.RequestCtx, peer netip.Addr, isTLS bool, start time.Time, gone <-chan struct{}, body *bodyBuf) (outcome, *upstream) {
	req := &ctx.Request
	h := &req.Header

	// Request smuggling: Transfer-Encoding with Content-Length. fasthttp
	// already rejects duplicate Content-Length and unknown encodings; a
	// chunked request that also carries Content-Length is refused here.
	if h.ContentLength() == -1 && hasHeaderName(h.RawHeaders(), strContentLen) {
		ctx.SetConnectionClose()
		p.writeError(ctx, a, outBadRequest)
		return outBadRequest, nil
	}

	// Per-app body cap (max_body_bytes): a declared length over it is
	// refused before anything is read. A chunked body cannot be capped
	// while it streams, so an app with a cap requires Content-Length.
	if lim := a.cfg.MaxBodyBytes; lim > 0 {
		if cl := h.ContentLength(); cl > 0 && int64(cl) > lim {
			ctx.SetConnectionClose()
			p.writeError(ctx, a, outBodyTooLarge)
			return outBodyTooLarge, nil
		} else if cl == -1 {
			ctx.SetConnectionClose()
			p.writeError(ctx, a, outLengthRequired)
			return outLengthRequired, nil
		}
	}

	x := exchangePool.Get().(*exchange)
	x.ctx = ctx
	defer func() { x.ctx = nil; exchangePool.Put(x) }()

	isTrusted := a.trusted && trusted(a.cfg.TrustedProxies, peer)
	client := peer
	if isTrusted {
		client = clientFromXFF(a.cfg.TrustedProxies, peer, h.PeekBytes(hdrXFF))
	}

	// Classify, estimate, admit (DESIGN.md: the way a request travels).
	ctl := a.ctl
	var key []byte
	x.ar = admission.Request{Gone: gone}
	if ctl != nil {
		x.ar.Class, key = ctl.Classify(x, client)
		x.ar.S, x.ar.Bucket = ctl.Estimate(x.ar.Class, key, start)
		if !a.off {
			// A request that may wait in a batch queue is told when its
			// client hangs up, so it leaves the queue.
			var unwatch func()
			if gone == nil && ctl.Waits(x.ar.Class) {
				if ch, stop, ok := watchGone(ctx.Conn()); ok {
					x.ar.Gone, unwatch = ch, stop
				}
			}
			d := ctl.Admit(&x.ar)
			if unwatch != nil {
				unwatch()
			}
			a.decision(x.ar.Class, d.Verdict)
			// A client that left while waiting gets no answer, and no
			// backend is spent on it.
			if d.Verdict == admission.RejectGone ||
				d.Verdict == admission.Admit && gone == nil && time.Since(start) > time.Millisecond && !connAlive(ctx.Conn()) {
				// Close without writing a response; 499 is for the
				// metrics and the access log only.
				ctx.Response.SetStatusCode(statusOf(outClientGone))
				ctx.HijackSetNoResponse(true)
				ctx.Hijack(func(net.Conn) {})
				return outClientGone, nil
			}
			if d.Verdict != admission.Admit {
				a.writeReject(ctx, d)
				return outRejected, nil
			}
		} else {
			a.decision(x.ar.Class, admission.Admit)
		}
	}

	// No healthy backend: answer before spending anything on the request.
	if a.pool.Healthy() == 0 {
		p.writeError(ctx, a, outNoBackend)
		return outNoBackend, nil
	}

	// Forwarding headers.
	x.buf = x.buf[:0]
	if isTrusted {
		if v := h.PeekBytes(hdrXFF); len(v) > 0 {
			x.buf = append(append(x.buf, v...), ", "...)
		}
	}
	x.buf = peer.AppendTo(x.buf)
	h.SetBytesKV(hdrXFF, x.buf)
	if !isTrusted || len(h.PeekBytes(hdrXFProto)) == 0 {
		if isTLS {
			h.SetBytesKV(hdrXFProto, strHTTPS)
		} else {
			h.SetBytesKV(hdrXFProto, strHTTP)
		}
	}
	if !isTrusted || len(h.PeekBytes(hdrXFHost)) == 0 {
		h.SetBytesKV(hdrXFHost, h.Host())
	}
	id := h.Peek(a.reqID)
	if !isTrusted || len(id) == 0 {
		x.buf = p.ids.append(x.buf[:0])
		h.SetBytesV(a.reqID, x.buf)
		id = x.buf
	}

	if h.ConnectionUpgrade() && len(h.Peek(fasthttp.HeaderUpgrade)) > 0 {
		return p.upgrade(a, ctx)
	}
	stripHopByHop(h)
	clientClose := h.ConnectionClose()
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
			return outClientGone, nil
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
		out = fasthttp.AcquireRequest()
		req.CopyTo(out)
		out.SetBodyStream(cb, body.cl)
		defer fasthttp.ReleaseRequest(out)
	}
	dispatch := time.Now()
	o, u, inService := p.relay(a, out, &ctx.Response, cb)
	if o == outRelayed && ctl != nil {
		now := time.Now()
		rh := &ctx.Response.Header
		st := rh.PeekBytes(hdrServerTiming)
		// Measured service time runs from dispatch, when the body is in
		// sentry. A body that streams to the backend (larger than the
		// buffer, or buffering off) would add the client's upload time to
		// it, so such a request gives no measured sample: only the
		// backend's Server-Timing counts (the estimator cannot be
		// poisoned by a slow upload).
		measured, busy := now.Sub(dispatch), inService
		if body != nil && body.streamed {
			measured, busy = 0, 0
		}
		ctl.Observe(x.ar.Class, key, st, measured, busy, x.ar.S, now.Sub(start), now)
		if len(st) > 0 && ctl.StripServerTiming() {
			x.st = estimator.StripServerTiming(x.st[:0], st)
			if len(x.st) == 0 {
				rh.DelBytes(hdrServerTiming)
			} else {
				rh.SetBytesKV(hdrServerTiming, x.st)
			}
		}
	}
	if o != outRelayed {
		p.writeError(ctx, a, o)
	} else {
		// A body of known size up to the stream threshold was read whole
		// by the client; fasthttp still hands it over as a stream, which
		// holds the backend connection until the client write ends and
		// costs a wrapper per response. Turn it back into a plain body:
		// the backend connection goes back to the pool now and the
		// response is written in one piece.
		if cl := ctx.Response.Header.ContentLength(); cl >= 0 && cl <= streamThreshold && ctx.Response.IsBodyStream() {
			ctx.Response.Body()
		}
		rh := &ctx.Response.Header
		rh.ResetConnectionClose()
		for _, k := range hopByHopCommon {
			rh.Del(k)
		}
		rh.Del(fasthttp.HeaderConnection)
		rh.Del(fasthttp.HeaderUpgrade)
	}
	ctx.Response.Header.SetBytesV(a.reqID, id)
	if clientClose {
		ctx.SetConnectionClose()
	}
	return o, u
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
func (p *Proxy) relay(a *app, req *fasthttp.Request, resp *fasthttp.Response, cb *clientBody) (outcome, *upstream, int) {
	var last *upstream
	for attempt := 1; ; attempt++ {
		b := a.pool.Pick()
		if b == nil {
			if last != nil {
				return outBackendFailed, last, 0 // every backend we tried refused
			}
			return outNoBackend, nil, 0
		}
		u := b.Attachment.(*upstream)
		inService := int(b.Inflight())
		err := u.hc.Do(req, resp)
		if err == nil {
			a.pool.Release(b, true)
			return outRelayed, u, inService
		}
		if cb != nil && cb.err != nil {
			a.pool.Release(b, true)
			return cb.outcome(), u, 0
		}
		o := relayError(err)
		if isDialError(err) {
			a.pool.Eject(b) // connect refused/timed out is unambiguous
		} else {
			a.pool.Release(b, !countsAsFailure(o))
		}
		if p.log.IsDebug() {
			p.log.Debug("relay failed", "app", a.name, "backend", u.addr, "error", err)
		}
		if attempt >= maxDialAttempts || !(isDialError(err) || retryable(req, err)) {
			return o, u, 0
		}
		last = u
		resp.Reset()
	}
}

// retryable reports whether a failed exchange may be sent to another
// backend although the connection was up: like nginx's default
// proxy_next_upstream "error", an idempotent request whose body was not
// streamed, failed by the connection breaking (reset, closed, EOF) before
// any response. Timeouts are never retried: the backend may still be
// working on the request.
func retryable(req *fasthttp.Request, err error) bool {
	if req.IsBodyStream() || !idempotent(req) {
		return false
	}
	return errors.Is(err, fasthttp.ErrConnectionClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// idempotent reports whether the request's method is idempotent (RFC 9110
// §9.2.2), so sending it twice is harmless.
func idempotent(req *fasthttp.Request) bool { return idempotentMethod(req.Header.Method()) }

// idempotentMethod is idempotent for a method name (both front ends).
func idempotentMethod(m []byte) bool {
	switch string(m) {
	case fasthttp.MethodGet, fasthttp.MethodHead, fasthttp.MethodOptions, fasthttp.MethodTrace, fasthttp.MethodPut, fasthttp.MethodDelete:
		return true
	}
	return false
}

// stripHopByHop removes hop-by-hop request headers (RFC 9110 §7.6.1),
// including any listed in Connection. fasthttp keeps framing headers
// (Transfer-Encoding, Content-Length) itself.
func stripHopByHop(h *fasthttp.RequestHeader) {
	if c := h.Peek(fasthttp.HeaderConnection); len(c) > 0 {
		for len(c) > 0 {
			var tok []byte
			if i := bytes.IndexByte(c, ','); i >= 0 {
				tok, c = bytes.TrimSpace(c[:i]), c[i+1:]
			} else {
				tok, c = bytes.TrimSpace(c), nil
			}
			if len(tok) > 0 && !bytes.EqualFold(tok, []byte("close")) && !bytes.EqualFold(tok, []byte("keep-alive")) {
				h.DelBytes(tok)
			}
		}
		h.Del(fasthttp.HeaderConnection)
	}
	for _, k := range hopByHopCommon {
		h.Del(k)
	}
	h.Del(fasthttp.HeaderUpgrade)
	// The 100-continue handshake was done with the client already.
	h.Del(fasthttp.HeaderExpect)
}

// hasHeaderName reports whether raw request headers contain name
// (lower-case), case-insensitively, as a header name.
func hasHeaderName(raw, name []byte) bool {
	for len(raw) > 0 {
		i := bytes.IndexByte(raw, '\n')
		line := raw
		if i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		if c := bytes.IndexByte(line, ':'); c == len(name) && bytes.EqualFold(line[:c], name) {
			return true
		}
	}
	return false
}

// writeReject writes the prebuilt rejection: nothing reaches a backend.
func (a *app) writeReject(ctx *fasthttp.RequestCtx, d admission.Decision) {
	r := &a.reject
	status, secs := a.rejectStatus(d)
	resp := &ctx.Response
	resp.SetStatusCode(status)
	resp.Header.SetContentTypeBytes(strTextPlain)
	resp.Header.SetBytesKV(hdrRetryAfter, retryAfterBytes(secs))
	resp.Header.SetBytesKV(hdrReject, verdictBytes[d.Verdict])
	resp.SetBodyRaw(r.body)
}

// rejectStatus returns the status and Retry-After seconds of a rejection.
func (a *app) rejectStatus(d admission.Decision) (status, secs int) {
	secs = a.reject.retryAfter
	if d.RetryAfter > 0 {
		secs = int((d.RetryAfter + time.Second - 1) / time.Second)
	}
	if d.Verdict == admission.RejectNoBackend {
		return fasthttp.StatusServiceUnavailable, secs // not the client's rate: never 429
	}
	return a.reject.status, secs
}

// writeError writes a proxy-generated error. a may be nil.
func (p *Proxy) writeError(ctx *fasthttp.RequestCtx, a *app, o outcome) {
	resp := &ctx.Response
	resp.Reset()
	if o == outNoBackend && a != nil {
		a.writeReject(ctx, admission.Decision{Verdict: admission.RejectNoBackend})
		return
	}
	resp.SetStatusCode(statusOf(o))
	resp.Header.SetContentTypeBytes(strTextPlain)
	if o == outBackendBusy || o == outBufferFull {
		resp.Header.SetBytesKV(hdrRetryAfter, retryAfterBytes(1))
	}
	resp.SetBodyString(errorBody(o))
}

// retryAfterBytes returns the decimal bytes for small second counts without
// allocating.
func retryAfterBytes(secs int) []byte {
	if secs >= 0 && secs < len(smallInts) {
		return smallInts[secs]
	}
	return retryAfterValue(secs)
}

var smallInts = func() [121][]byte {
	var t [121][]byte
	for i := range t {
		t[i] = retryAfterValue(i)
	}
	t[0] = t[1]
	return t
}()

// verdictBytes holds each verdict's name for the X-Sentry-Reject header.
var verdictBytes = func() (t [16][]byte) {
	for _, v := range admission.Verdicts() {
		t[v] = []byte(v.String())
	}
	return t
}()
