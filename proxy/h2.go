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
// routing, admission, balancing, headers and metrics as HTTP/1.1 (serve),
// on the exchange core's goroutine driver where it covers the stream
// (serveCore), else on the fake RequestCtx (serveCtx).
func (fe *frontend) serveH2Stream(x *ownStream) {
	// On a connection that resets many of its streams, wait a moment for
	// this one's reset before spending anything on it (h2SuspectDelay).
	if x.suspect() {
		t := time.NewTimer(h2SuspectDelay)
		select {
		case <-x.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	rt := fe.route.Load()
	if fe.serveCore(x, rt) {
		return
	}
	fe.serveCtx(x, rt)
}

// h2Call is what the steps of one stream on the fake-RequestCtx path
// share (serveCtx). It lives on serveCtx's stack.
type h2Call struct {
	x     *ownStream
	a     *pipeline.App
	ctx   *fasthttp.RequestCtx
	start time.Time
	o     pipeline.Outcome
	u     *pipeline.Upstream
	cut   *abortable           // the stream's hold on its backend exchange (abort.go)
	ae    pipeline.AccessEntry // what the access log is told
}

// serveCtx runs x through the fake-RequestCtx path: the stream copied
// into a pooled fasthttp.RequestCtx (h2Req), Proxy.serve, and the
// response copied back into the stream (respond).
func (fe *frontend) serveCtx(x *ownStream, rt *pipeline.Route) {
	p := fe.p
	c := h2Call{x: x, start: time.Now(), ae: pipeline.AccessEntry{Class: -1, Proto: "HTTP/2.0"}}
	hr := h2ReqPool.Get().(*h2Req)
	defer hr.release()
	c.a = hr.fill(x, rt, fe.srv.Logger)
	c.ctx = &hr.ctx
	req := &c.ctx.Request
	switch o, refused := h2Refusal(x, req, c.a); {
	case refused:
		// Counted as on HTTP/1.1: a client error, not an app's request.
		p.writeError(c.ctx, c.a, o)
		fe.clientError(o)
		c.a = nil
	case o == pipeline.OutNoApp:
		c.o = o
		p.writeError(c.ctx, nil, o)
	case x.Err() != nil:
		// Reset before it got here: no answer, nothing dispatched.
		x.finish(false)
		return
	default:
		ready := c.start
		var bb bodyBuf
		hasBody, cl := x.bodyInfo()
		if c.o = c.a.BodyCap(cl); hasBody && c.o != pipeline.OutRelayed {
			// As HTTP/1.1's checkFraming: refused before anything of the
			// body is read; a body without content-length is refused like
			// a chunked one (411), though buffering would learn its size.
			p.writeError(c.ctx, c.a, c.o)
			break
		}
		c.o = pipeline.OutRelayed
		var body *bodyBuf
		if hasBody {
			hr.body, body = true, &bb
			defer bb.done(p, req)
			c.o = fe.h2ReadBody(x, c.a, cl, req, body)
			ready = time.Now()
		}
		if c.o == pipeline.OutRelayed {
			c.cut = &abortable{done: x.Done(), ctx: x}
			stop := x.afterCut(c.cut.abort)
			defer stop()
			c.o, c.u = p.serve(c.a, c.ctx, fhReq{peer: x.peer(), isTLS: x.isTLS(), ready: ready, cut: c.cut}, body, &c.ae)
		} else {
			p.writeError(c.ctx, c.a, c.o)
		}
		if c.o == pipeline.OutClientGone {
			// The stream was reset: nothing to write.
			_ = c.ctx.Response.CloseBodyStream()
			c.a.Complete(c.o, pipeline.StatusOf(c.o), c.u, c.start, c.ae.Class) // metrics only: no access line for a reset stream
			x.finish(false)
			return
		}
	}
	c.respond(p, rt.Access)
}

// fill copies x's head into hr's request -- the pseudo-fields, then the
// fields the header policy passes on from h2 -- with the peer's address
// for RemoteAddr, and returns the app rt routes it to (nil: none).
func (hr *h2Req) fill(x *ownStream, rt *pipeline.Route, log fasthttp.Logger) *pipeline.App {
	hr.peer.ip = x.peer().As16()
	hr.peer.addr.IP = hr.peer.ip[:]
	hr.ctx.Init2(&hr.peer, log, false)
	req := &hr.ctx.Request
	x.head(req)
	a := rt.Lookup(req.Header.Host())
	reqID, load := "", ""
	if a != nil {
		reqID, load = a.ReqID, a.LoadHeader
	}
	x.fields(req, reqID, load)
	return a
}

// h2Refusal is the outcome of the checks a stream's head gets before its
// app's: refused true for a client error (400, 405); OutNoApp when no app
// serves its host; OutRelayed when it goes on.
func h2Refusal(x *ownStream, req *fasthttp.Request, a *pipeline.App) (o pipeline.Outcome, refused bool) {
	switch {
	case !pipeline.ValidHost(req.Header.Host()):
		// Missing, or with userinfo (which fasthttp would turn into an
		// Authorization header); the same check as HTTP/1.1's.
		return pipeline.OutBadRequest, true
	case !h2RequestLineOK(req):
		// A method or target that would not make one HTTP/1.1 request
		// line. (A field value with whitespace at an end never gets here:
		// h2srv resets its stream, RFC 9113 §8.2.1.)
		return pipeline.OutBadRequest, true
	case string(x.method()) == http.MethodConnect:
		return pipeline.OutMethodNotAllowed, true
	case a == nil:
		return pipeline.OutNoApp, false
	}
	return pipeline.OutRelayed, false
}

// h2ReadBody takes x's request body (declared length cl; -1: none) for
// app a into bb: for an HTTP/2 backend it streams from the start,
// without server.body_timeout, for as long as the stream lives (a gRPC
// stream sends while it receives; waiting for its end would deadlock
// it; flow control is the transports'); otherwise as h2Body reads it,
// under body_timeout.
func (fe *frontend) h2ReadBody(x *ownStream, a *pipeline.App, cl int64, req *fasthttp.Request, bb *bodyBuf) pipeline.Outcome {
	if a.H2 != nil {
		bb.client, bb.cl, bb.streamed = &clientBody{r: x.body(), stop: x.stopBody}, int(cl), true
		return pipeline.OutRelayed
	}
	if fe.bodyTimeout > 0 {
		x.setBodyDeadline(time.Now().Add(fe.bodyTimeout))
	}
	return fe.h2Body(a, cl, x.body(), req, bb)
}

// respond copies the RequestCtx's response into the stream -- the head,
// the body (streamed from the backend, or sentry's own in one DATA
// frame), an HTTP/2 backend's trailers -- then records it (when an app
// served it) and ends the stream: reset when the backend's side cut the
// body short.
func (c *h2Call) respond(p *Proxy, access bool) {
	x, resp := c.x, &c.ctx.Response
	truncated := false
	var h2resp *http.Response
	if c.cut != nil {
		h2resp = c.cut.h2resp
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
	if c.cut != nil {
		c.cut.unbind()
		if c.cut.wasCut() {
			resp.SetConnectionClose()
		}
	}
	if h2resp != nil && !truncated {
		// Known now that the body was read to its end (gRPC's status is
		// here).
		x.trailers(h2resp)
	}
	_ = resp.CloseBodyStream()
	if c.a != nil {
		quiescedEnd(c.a, c.u)
		p.recordCtx(c.a, access, c.ctx, c.o, c.u, c.start, &c.ae)
	}
	x.finish(truncated)
}

// serveCore serves x on the exchange core's goroutine driver (gdrive.go)
// when the driver covers what the stream needs: an app with plain
// HTTP/1.1 backends (LoopOK), a head exchange.StreamHead takes, and no
// body, one of a declared length that server.request_buffer holds whole
// (read here, as h2Body reads it, before the decision), or one a cap
// refuses (max_body_bytes: the core's Refuse). False leaves it to the
// fake-RequestCtx path (serveCtx).
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
