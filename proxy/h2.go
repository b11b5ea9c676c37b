package proxy

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/sentry-proxy/sentry/proxy/exchange"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/valyala/fasthttp"
)

// h2.go: the request path of one h2 stream on goroutines (serveH2Stream),
// for the streams of sentry's h2 server (h2own.go) that its h2 workers run:
// every stream of a connection on the goroutine driver, and the streams
// of a connection on the event loops that the loops do not run themselves
// (a request body, an HTTP/2 or gRPC backend, an app the loops do not
// serve).

// h2RequestLineOK reports whether req's method is a token and its target
// origin-form (or "*") without spaces or controls: what the backend's
// request line is made of must not split it.
func h2RequestLineOK(req *fasthttp.Request) bool {
	m, u := req.Header.Method(), req.Header.RequestURI()
	if len(m) == 0 || len(u) == 0 || u[0] != '/' && string(u) != "*" {
		return false
	}
	for _, c := range m {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	for _, c := range u {
		if c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// serveH2Stream runs one h2 stream through the request path: the same
// routing, admission, balancing, headers and metrics as HTTP/1.1 (serve).
func (fe *frontend) serveH2Stream(x *ownStream) {
	// On a connection that resets many of its streams, wait a moment for
	// this one's reset before spending anything on it (h2SuspectDelay).
	sctx := x.context()
	if x.suspect() {
		t := time.NewTimer(h2SuspectDelay)
		select {
		case <-sctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	p := fe.p
	rt := fe.route.Load()
	if fe.serveCore(x, rt) {
		return
	}
	start := time.Now()
	peer := x.peer()
	hr := h2ReqPool.Get().(*h2Req)
	defer hr.release()
	hr.peer.ip = peer.As16()
	hr.peer.addr.IP = hr.peer.ip[:]
	ctx := &hr.ctx
	ctx.Init2(&hr.peer, fe.srv.Logger, false)
	req := &ctx.Request
	x.head(req)
	a := rt.Lookup(req.Header.Host())
	reqID, load := "", ""
	if a != nil {
		reqID, load = a.ReqID, a.LoadHeader
	}
	x.fields(req, reqID, load)

	var o pipeline.Outcome
	ae := pipeline.AccessEntry{Class: -1, Proto: "HTTP/2.0"} // what the access log is told
	var u *pipeline.Upstream
	var cut *abortable // the stream's hold on its backend exchange (abort.go)
	refused := false
	switch {
	case !pipeline.ValidHost(req.Header.Host()):
		// Missing, or with userinfo (which fasthttp would turn into an
		// Authorization header); the same check as HTTP/1.1's.
		o, refused = pipeline.OutBadRequest, true
	case !h2RequestLineOK(req):
		// A method or target that would not make one HTTP/1.1 request
		// line. (A field value with whitespace at an end never gets here:
		// h2srv resets its stream, RFC 9113 §8.2.1.)
		o, refused = pipeline.OutBadRequest, true
	case string(x.method()) == http.MethodConnect:
		o, refused = pipeline.OutMethodNotAllowed, true
	case a == nil:
		o = pipeline.OutNoApp
		p.writeError(ctx, nil, o)
	case sctx.Err() != nil:
		// Reset before it got here: no answer, nothing dispatched.
		x.finish(false)
		return
	default:
		ready := start
		var body *bodyBuf
		hasBody, cl := x.bodyInfo()
		if c := a.BodyCap(cl); hasBody && c != pipeline.OutRelayed {
			// As HTTP/1.1's checkFraming: refused before anything of the
			// body is read; a body without content-length is refused like
			// a chunked one (411), though buffering would learn its size.
			o = c
			p.writeError(ctx, a, o)
			break
		}
		if hasBody {
			hr.body = true
			var bb bodyBuf
			body = &bb
			defer bb.done(p, req)
			if a.H2 != nil {
				// An HTTP/2 backend: the body streams from the start,
				// without server.body_timeout, for as long as the stream
				// lives (a gRPC stream sends while it receives; waiting
				// for its end would deadlock it). Flow control is the
				// transports'.
				bb.client, bb.cl, bb.streamed = &clientBody{r: x.body(), stop: x.stopBody}, int(cl), true
			} else {
				if fe.bodyTimeout > 0 {
					x.setBodyDeadline(time.Now().Add(fe.bodyTimeout))
				}
				o = fe.h2Body(a, cl, x.body(), req, body)
			}
			ready = time.Now()
		}
		if o == pipeline.OutRelayed {
			cut = &abortable{done: sctx.Done(), ctx: sctx}
			stop := x.afterCut(cut.abort)
			defer stop()
			o, u = p.serve(a, ctx, peer, x.isTLS(), ready, cut, false, false, body, &ae)
		} else {
			p.writeError(ctx, a, o)
		}
		if o == pipeline.OutClientGone {
			// The stream was reset: nothing to write.
			_ = ctx.Response.CloseBodyStream()
			a.Complete(o, pipeline.StatusOf(o), u, start, ae.Class) // metrics only: no access line for a reset stream
			x.finish(false)
			return
		}
	}
	if refused {
		// Counted as on HTTP/1.1: a client error, not an app's request.
		p.writeError(ctx, a, o)
		p.metrics.clientErrors.WithLabelValues(fe.addr, pipeline.OutcomeReason[o]).Inc()
		a = nil
	}
	resp := &ctx.Response
	truncated := false
	var h2resp *http.Response
	if cut != nil {
		h2resp = cut.h2resp
	}
	x.respond(resp.StatusCode(), &resp.Header, h2resp)
	if string(x.method()) != http.MethodHead {
		ww := x.writer()
		if resp.IsBodyStream() {
			if _, err := io.Copy(ww, resp.BodyStream()); err != nil {
				// The backend connection holds the rest of the body (or
				// was cut): it must not go back to the pool.
				resp.SetConnectionClose()
				// Cut short on the backend's side (not a failed write to
				// this client): the stream is reset below, so the client
				// does not take what came as the whole body.
				truncated = !ww.failed()
			}
		} else {
			// Sent with the stream's end (finish): one DATA frame.
			ww.writeLast(resp.Body())
		}
	}
	if cut != nil {
		cut.unbind()
		if cut.wasCut() {
			resp.SetConnectionClose()
		}
	}
	if h2resp != nil && !truncated {
		// Known now that the body was read to its end (gRPC's status is
		// here).
		x.trailers(h2resp)
	}
	_ = resp.CloseBodyStream()
	if a != nil {
		quiescedEnd(a, u)
		p.recordCtx(a, rt.Access, ctx, o, u, start, &ae)
	}
	x.finish(truncated)
}

// serveCore serves x on the exchange core's goroutine driver (gdrive.go)
// when the driver covers what the stream needs: an app with plain
// HTTP/1.1 backends (LoopOK), a head exchange.StreamHead takes, and no
// body, one of a declared length that server.request_buffer holds whole
// (read here, as h2Body reads it, before the decision), or one a cap
// refuses (max_body_bytes: the core's Refuse). False leaves it to
// serveH2Stream's own path.
func (fe *frontend) serveCore(x *ownStream, rt *pipeline.Route) bool {
	w, s := x.w, x.s
	if w == nil || x.Err() != nil {
		return false
	}
	a := rt.Lookup(s.Authority())
	if a == nil || !a.LoopOK {
		return false
	}
	body := !s.EndedByHead()
	cl := s.ContentLength()
	o := pipeline.OutRelayed
	if body {
		o = a.BodyCap(cl)
	}
	if o == pipeline.OutRelayed && body && (cl < 0 || cl > fe.body.buffer || a.Policy.RequestBufferingOff) {
		return false
	}
	if w.d == nil {
		w.d = newGdriver(&fe.genv, fe.p.resp)
	}
	d := w.d
	if !d.takesStream(x, a, fe.p.cur.Load().snap.Server.MaxHeaderBytes) {
		return false
	}
	switch {
	case o != pipeline.OutRelayed:
		// Refused before anything of the body is read, as HTTP/1.1's
		// checkFraming refuses it; a body without content-length is
		// refused like a chunked one (411), though buffering would learn
		// its size. The access log counts the declared length in, as
		// fasthttp's record does.
		d.hd.Size += max(cl, 0)
	case body:
		var bb bodyBuf
		defer bb.done(fe.p, nil)
		o = fe.readWhole(x, cl, &bb, &d.hd)
	}
	d.serve(x, a, rt.Access, o)
	d.hd.Body = nil
	return true
}

// readWhole reads x's body of declared length cl (server.request_buffer
// holds it) into bb under body_timeout, as h2Body does, and hands it to
// hd: a body that came short is the client gone.
func (fe *frontend) readWhole(x *ownStream, cl int64, bb *bodyBuf, hd *exchange.Head) pipeline.Outcome {
	if fe.bodyTimeout > 0 {
		x.setBodyDeadline(time.Now().Add(fe.bodyTimeout))
	}
	b, _, o := fe.p.fillBody(x.body(), cl, bb, false)
	if o == pipeline.OutRelayed && int64(len(b)) != cl {
		o = pipeline.OutClientGone
	}
	hd.Body = b
	hd.Size += int64(len(b))
	return o
}

// s2b is s's bytes, not copied (read only).
func s2b(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// h2Body reads an h2 request body into sentry as the HTTP/1.1 path does
// (server.request_buffer, request_buffer_total; body_timeout is the
// stream's read deadline; body_min_rate is not applied to h2 streams,
// whose flow control is the h2 server's). A body larger than the buffer has its
// first request_buffer bytes read, then streams; with buffering off it
// streams from the start. Trailers (r.Trailer) are never copied.
func (fe *frontend) h2Body(a *pipeline.App, cl int64, rbody io.Reader, req *fasthttp.Request, bb *bodyBuf) pipeline.Outcome {
	lim := fe.body.buffer
	if lim <= 0 || a.Policy.RequestBufferingOff {
		bb.client, bb.cl, bb.streamed = &clientBody{r: rbody}, int(cl), true
		return pipeline.OutRelayed
	}
	want := cl
	switch {
	case cl < 0:
		want = lim + 1
	case cl > lim:
		want = lim // the first request_buffer bytes, then the rest streams
	}
	b, eof, o := fe.p.fillBody(rbody, want, bb, false)
	switch {
	case o != pipeline.OutRelayed:
		return o
	case cl > lim:
		if int64(len(b)) != lim {
			return pipeline.OutClientGone
		}
		bb.client, bb.cl, bb.streamed = &clientBody{r: io.MultiReader(bytesReader(b), rbody)}, int(cl), true
	case cl >= 0 && int64(len(b)) != cl:
		return pipeline.OutClientGone
	case cl >= 0 || eof:
		req.SetBodyRaw(b)
		req.Header.SetContentLength(len(b))
	default:
		bb.client, bb.cl, bb.streamed = &clientBody{r: io.MultiReader(bytesReader(b), rbody)}, -1, true
	}
	return pipeline.OutRelayed
}

// h2Req is what an h2 stream borrows to go through the fasthttp-shaped
// pipeline: the RequestCtx (with its Request and Response buffers) and
// the peer address fasthttp's RemoteAddr returns. Pooled: an h2 stream
// used to allocate a RequestCtx, an empty Request to Init it from and the
// address, about a third of the bytes allocated per stream.
type h2Req struct {
	ctx  fasthttp.RequestCtx
	peer h2Peer
	// body: the stream had a request body. Its h2Req is not pooled: an
	// HTTP/2 backend's transport may still be reading the body (from the
	// Request's buffer) for a moment after the response has ended.
	body bool
}

var h2ReqPool = sync.Pool{New: func() any { return new(h2Req) }}

// release resets the request and response (closing a body stream left
// open) and returns hr to the pool. Nothing of hr outlives
// serveH2Stream: the access log copies what it keeps, and the h2 core
// copies the response fields it sends.
func (hr *h2Req) release() {
	if hr.body {
		return // left to the collector (see h2Req.body)
	}
	hr.ctx.Request.Reset()
	hr.ctx.Response.Reset()
	hr.ctx.ResetUserValues()
	hr.peer.addr.IP = nil
	h2ReqPool.Put(hr)
}

// h2Peer is the connection the RequestCtx sees: its addresses only.
type h2Peer struct {
	net.Conn // nil: nothing but the addresses is asked of it
	ip       [16]byte
	addr     net.TCPAddr
}

func (p *h2Peer) RemoteAddr() net.Addr { return &p.addr }
func (p *h2Peer) LocalAddr() net.Addr  { return &h2Local }

var h2Local net.TCPAddr

// h2StackFrame is the frame h2GrowStack takes. A new worker goroutine
// (h2Workers) starts with a small stack, which would be grown, copied
// frame by frame, two or three times on the way down the request path
// (runtime.newstack was 6% of the h2 path's CPU with a goroutine per
// stream). One frame this large at the top, where the
// stack is still shallow, makes the runtime grow it once to a size the
// whole path fits in (16 KiB, still from the per-P stack cache), and the
// copy is of a few frames only.
const h2StackFrame = 10 << 10

//go:noinline
func h2GrowStack(i int) byte {
	var pad [h2StackFrame]byte
	return pad[i&(h2StackFrame-1)]
}
