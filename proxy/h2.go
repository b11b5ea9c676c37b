package proxy

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2"
)

// serveH2Conn serves one TLS connection that negotiated h2 via ALPN, or
// one h2c connection (prior knowledge, h2c.go) with its preface replayed. It
// runs golang.org/x/net/http2 on the connection and hands each stream to
// the same request path as HTTP/1.1 (serve): same routing, admission,
// balancing, headers and metrics. Only the framing differs.
func (fe *frontend) serveH2Conn(c net.Conn) error {
	if fe.p.useOwnH2() {
		fe.serveOwnConn(c)
		return nil
	}
	ctx := context.Background()
	tc, _ := c.(*tls.Conn)
	// x/net's writes are gathered into batches (h2out.go); the guard
	// reads the client's frames and follows x/net's output above that.
	c = newH2Out(c, fe.writeTimeout)
	g := newH2Guard(c, tc, fe)
	ctx = context.WithValue(ctx, h2GuardKey{}, g)
	if tc != nil {
		c = h2GuardTLS{g}
	} else {
		// h2c (prior knowledge on a plain listener, h2c.go): the same
		// guard, without the TLS methods.
		c = g
	}
	fe.h2.ServeConn(c, &http2.ServeConnOpts{
		Context:    ctx,
		Handler:    http.HandlerFunc(fe.serveH2),
		BaseConfig: fe.h2cfg,
	})
	return nil
}

// h2Exchange is one h2 stream as the request path sees it, whichever
// server carries it: x/net's (xnetExchange, below) or sentry's own
// (h2own.go). serveH2Stream is the path; the exchange supplies the
// request's head and body and takes the response.
type h2Exchange interface {
	// context is done when the stream is reset or its connection ends.
	context() context.Context
	// afterCut runs f once the context is done, as context.AfterFunc
	// (the own server's stream runs it without context's wrapper).
	afterCut(f func()) (stop func() bool)
	// suspect: the connection resets streams often (h2guard.go); a new
	// stream waits h2SuspectDelay before dispatch.
	suspect() bool
	peer() netip.Addr
	isTLS() bool
	// wellFormed reports whether the head's field values are what RFC
	// 9113 §8.2.1 allows: x/net's server takes values with leading or
	// trailing whitespace, which the own server refuses (h2srv resets
	// the stream with PROTOCOL_ERROR) before a stream exists.
	wellFormed() bool
	// method is :method; head sets the method, the request target
	// (:path) and Host (:authority) on req.
	method() []byte
	head(req *fasthttp.Request)
	// fields adds the regular fields to req, leaving out what H2Skip
	// says.
	fields(req *fasthttp.Request, reqID, load string)
	// bodyInfo: whether the stream has a body, and its content-length
	// (-1: none).
	bodyInfo() (has bool, cl int64)
	// body is the request body; stopBody ends a read in progress (the
	// exchange gave up on the body); setBodyDeadline bounds reads.
	body() io.Reader
	stopBody()
	setBodyDeadline(t time.Time)
	// respond sends (or prepares) the response head: status and the
	// fields of h, hop-by-hop ones left out. h2resp is the HTTP/2
	// backend's response, if any (its declared trailers; a head flushed
	// at once unless the stream ended with it, gRPC's Trailers-Only).
	respond(status int, h *fasthttp.ResponseHeader, h2resp *http.Response)
	// writer writes the response body, under server.write_timeout as an
	// idle timeout.
	writer() h2BodyWriter
	// trailers adds an HTTP/2 backend's trailers (read to its end) to
	// the response.
	trailers(h2resp *http.Response)
	// finish ends the stream: cleanly, or with a reset when the body was
	// cut short (truncated) so the client does not take it as whole.
	finish(truncated bool)
}

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

// h2BodyWriter is the response body's writer; failed tells whether a
// write to the client failed (rather than the backend's side).
type h2BodyWriter interface {
	io.Writer
	failed() bool
}

// serveH2 adapts one x/net h2 stream to the request path (serveH2Stream).
// It costs a header copy each way per request, into and out of a pooled
// RequestCtx (h2Req).
func (fe *frontend) serveH2(w http.ResponseWriter, r *http.Request) {
	h2GrowStack(0)
	x := xnetExchange{w: w, r: r, rc: http.NewResponseController(w), fe: fe}
	fe.serveH2Stream(&x)
}

// serveH2Stream runs one h2 stream through the request path: the same
// routing, admission, balancing, headers and metrics as HTTP/1.1 (serve).
func (fe *frontend) serveH2Stream(x h2Exchange) {
	// On a connection that resets many of its streams, wait a moment for
	// this one's reset before spending anything on it (h2guard.go).
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
	start := time.Now()
	p := fe.p
	rt := fe.route.Load()
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
	case !h2RequestLineOK(req), !x.wellFormed():
		// A method or target that would not make one HTTP/1.1 request
		// line, or a field value with whitespace at an end (x/net lets
		// them through; the own server refuses them earlier, h2srv).
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
		} else if wl, ok := ww.(interface{ writeLast([]byte) }); ok {
			// Sent with the stream's end (finish): one DATA frame.
			wl.writeLast(resp.Body())
		} else {
			_, _ = ww.Write(resp.Body())
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

// xnetExchange is an x/net stream (serveH2).
type xnetExchange struct {
	w  http.ResponseWriter
	r  *http.Request
	rc *http.ResponseController
	fe *frontend
	ww h2Writer
}

func (x *xnetExchange) context() context.Context { return x.r.Context() }

func (x *xnetExchange) afterCut(f func()) func() bool { return context.AfterFunc(x.r.Context(), f) }

func (x *xnetExchange) suspect() bool {
	g, _ := x.r.Context().Value(h2GuardKey{}).(*h2Guard)
	return g != nil && g.suspect()
}

func (x *xnetExchange) peer() netip.Addr {
	if ap, err := netip.ParseAddrPort(x.r.RemoteAddr); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.IPv6Unspecified()
}

func (x *xnetExchange) isTLS() bool { return x.r.TLS != nil }

func (x *xnetExchange) method() []byte { return s2b(x.r.Method) }

func (x *xnetExchange) wellFormed() bool {
	spaced := func(v string) bool {
		n := len(v)
		return n > 0 && (v[0] == ' ' || v[0] == '\t' || v[n-1] == ' ' || v[n-1] == '\t')
	}
	if spaced(x.r.Host) {
		return false
	}
	for _, vs := range x.r.Header {
		for _, v := range vs {
			if spaced(v) {
				return false
			}
		}
	}
	return true
}

func (x *xnetExchange) head(req *fasthttp.Request) {
	r := x.r
	req.Header.SetMethod(r.Method)
	// The request target as the client sent it (":path"), as HTTP/1.1
	// forwards its request line's; x/net parsed it into r.URL.
	if strings.HasPrefix(r.RequestURI, "/") {
		req.SetRequestURI(r.RequestURI)
	} else {
		req.SetRequestURI(r.URL.RequestURI())
	}
	req.Header.SetHost(r.Host) // ":authority" (x/net/http2 falls back to a host header)
}

func (x *xnetExchange) fields(req *fasthttp.Request, reqID, load string) {
	for k, vs := range x.r.Header {
		if pipeline.H2Skip([]byte(k), reqID, load) {
			continue
		}
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
}

func (x *xnetExchange) bodyInfo() (bool, int64) {
	r := x.r
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0, r.ContentLength
}

func (x *xnetExchange) body() io.Reader { return x.r.Body }

func (x *xnetExchange) stopBody() { _ = x.r.Body.Close() }

func (x *xnetExchange) setBodyDeadline(t time.Time) { _ = x.rc.SetReadDeadline(t) }

func (x *xnetExchange) respond(status int, h *fasthttp.ResponseHeader, h2resp *http.Response) {
	hdr := x.w.Header()
	copyH2Header(hdr, h)
	// server.write_timeout is an idle timeout here too: each write must
	// progress within it (h2Writer), so long downloads are not cut.
	x.ww = h2Writer{w: x.w, rc: x.rc, t: x.fe.writeTimeout}
	x.ww.push()
	if h2resp != nil {
		// From an HTTP/2 backend: each piece goes out as it comes (a
		// gRPC stream's messages must not wait in a buffer), the head
		// first, and the trailers the backend declared follow the body.
		// A response whose stream ended with its head (ContentLength 0:
		// gRPC's Trailers-Only form, every error a server returns before
		// its first message) is not flushed early: the handler's return
		// sends it as one HEADERS frame that ends the stream, grpc-status
		// in it. Flushed, it would be a head, then an empty DATA frame
		// ending the stream without trailers, which a gRPC client reads
		// as INTERNAL, "server closed the stream without sending
		// trailers".
		x.ww.flush = h2resp.ContentLength != 0
		for k := range h2resp.Trailer {
			hdr.Add("Trailer", k)
		}
	}
	x.w.WriteHeader(status)
	if x.ww.flush {
		_ = x.rc.Flush()
	}
}

func (x *xnetExchange) writer() h2BodyWriter { return &x.ww }

func (x *xnetExchange) trailers(h2resp *http.Response) {
	// A trailer the backend sent without declaring it goes out too
	// (net/http's TrailerPrefix).
	hdr := x.w.Header()
	for k, vs := range h2resp.Trailer {
		if _, declared := hdr["Trailer"]; !declared || !containsFold(hdr.Values("Trailer"), k) {
			k = http.TrailerPrefix + k
		}
		for _, v := range vs {
			hdr.Add(k, v)
		}
	}
}

func (x *xnetExchange) finish(truncated bool) {
	if truncated {
		// RST_STREAM (x/net's server resets the stream of a handler that
		// panics with ErrAbortHandler, and logs nothing): ending the
		// stream cleanly would present a cut body as complete (and a
		// gRPC call as ended without its status).
		panic(http.ErrAbortHandler)
	}
}

// s2b is s's bytes, not copied (read only).
func s2b(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// h2Body reads an h2 request body into sentry as the HTTP/1.1 path does
// (server.request_buffer, request_buffer_total; body_timeout is the
// stream's read deadline; body_min_rate is not applied to h2 streams,
// whose flow control is x/net's). A body larger than the buffer has its
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

// h2Writer writes a response body with an idle write deadline; with
// flush set, every write is flushed to the client at once.
type h2Writer struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	t     time.Duration
	last  time.Time
	flush bool
	bad   bool // a write (or flush) to the client failed
}

// containsFold reports whether vs holds k, any case.
func containsFold(vs []string, k string) bool {
	for _, v := range vs {
		if strings.EqualFold(v, k) {
			return true
		}
	}
	return false
}

func (w *h2Writer) push() {
	if w.t > 0 {
		w.last = time.Now()
		_ = w.rc.SetWriteDeadline(w.last.Add(w.t))
	}
}

func (w *h2Writer) failed() bool { return w.bad }

func (w *h2Writer) Write(b []byte) (int, error) {
	if w.t > 0 && time.Since(w.last) >= w.t/16 {
		w.push()
	}
	n, err := w.w.Write(b)
	if w.flush && err == nil {
		err = w.rc.Flush()
	}
	if err != nil {
		w.bad = true
	}
	return n, err
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
// open) and returns hr to the pool. Nothing of hr outlives serveH2: the
// access log copies what it keeps, and the response header x/net gets
// holds strings of its own.
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

// copyHeader copies the response header to x/net's, without the
// hop-by-hop fields h2 forbids. fasthttp's names are canonical already,
// so they go into the map as they are; the common names are not
// allocated (h2Name).
func copyH2Header(hdr http.Header, h *fasthttp.ResponseHeader) {
	h.VisitAll(func(k, v []byte) {
		switch pipeline.FieldKind(k) {
		case pipeline.KindConnection, pipeline.KindTransferEncoding, pipeline.KindUpgrade, pipeline.KindHopByHop:
			return
		}
		name := h2Name(k)
		hdr[name] = append(hdr[name], string(v))
	})
}

// h2Name returns k as a string, without allocating for the names most
// responses carry.
func h2Name(k []byte) string {
	switch string(k) {
	case "Content-Type":
		return "Content-Type"
	case "Content-Length":
		return "Content-Length"
	case "Date":
		return "Date"
	case "Server":
		return "Server"
	case "Cache-Control":
		return "Cache-Control"
	case "Etag":
		return "Etag"
	case "Last-Modified":
		return "Last-Modified"
	case "Vary":
		return "Vary"
	case "Set-Cookie":
		return "Set-Cookie"
	case "Content-Encoding":
		return "Content-Encoding"
	case "X-Request-Id":
		return "X-Request-Id"
	case "Server-Timing":
		return "Server-Timing"
	case "Retry-After":
		return "Retry-After"
	}
	return string(k)
}

// h2StackFrame is the frame h2GrowStack takes. x/net starts a goroutine per
// stream, and its stack began small and was grown, copied frame by frame,
// two or three times on the way down the request path (runtime.newstack
// was 6% of the h2 path's CPU). One frame this large at the top, where the
// stack is still shallow, makes the runtime grow it once to a size the
// whole path fits in (16 KiB, still from the per-P stack cache), and the
// copy is of a few frames only.
const h2StackFrame = 10 << 10

//go:noinline
func h2GrowStack(i int) byte {
	var pad [h2StackFrame]byte
	return pad[i&(h2StackFrame-1)]
}
