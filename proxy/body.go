package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/valyala/bytebufferpool"
	"github.com/valyala/fasthttp"
)

// bodyLimits are a front end's request-body settings (server.*), fixed when
// it starts serving (changing them needs a restart, like the other server
// settings).
type bodyLimits struct {
	buffer  int64         // request_buffer; 0: no buffering
	minRate int64         // body_min_rate, bytes/s; 0: no rate check
	grace   time.Duration // the rate check's allowance (read_header_timeout)
	timeout time.Duration // body_timeout
}

// deadline is when n bytes of a request that started at head must be in:
// head + grace + n/minRate, and never after head + body_timeout.
func (bl *bodyLimits) deadline(head time.Time, n int64) time.Time {
	end := head.Add(bl.timeout)
	if bl.minRate <= 0 {
		return end
	}
	d := head.Add(bl.grace + time.Duration(float64(n)/float64(bl.minRate)*float64(time.Second)))
	if d.After(end) {
		return end
	}
	return d
}

// bodyBuffers is the process-wide account of buffered request-body bytes
// (server.request_buffer_total).
type bodyBuffers struct {
	used atomic.Int64
	cap  atomic.Int64 // 0: no cap
}

// reserve takes n bytes from the account; false (nothing taken) if that
// would pass the cap.
func (b *bodyBuffers) reserve(n int64) bool {
	c := b.cap.Load()
	if c <= 0 {
		b.used.Add(n)
		return true
	}
	for {
		u := b.used.Load()
		if u+n > c {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

func (b *bodyBuffers) release(n int64) { b.used.Add(-n) }

// bodyBuf is one request's body as read by sentry: the buffered bytes,
// their share of the account, and for a body that streams, the reader the
// relay sends it from.
type bodyBuf struct {
	bb       *bytebufferpool.ByteBuffer
	reserved int64
	// streamed: the body goes to the backend as it arrives (not buffered,
	// or larger than the buffer), so the exchange's measured time is not
	// the backend's alone.
	streamed bool
	// client reads the streamed body and keeps the client's read error,
	// so that a client too slow or gone is not taken for a backend
	// failure (relay); cl is its declared length (-1: chunked).
	client *clientBody
	cl     int
}

// clientBody is a streamed request body that remembers the error of the
// client's side. truncated, if set, tells at the end of a chunked body
// whether it was cut short (rateConn.peerClosed); the end is then an
// error, so the backend never receives a cut body as a whole one.
type clientBody struct {
	r         io.Reader
	err       error
	truncated func() bool
	h1        bool // fasthttp's body reader: its parse errors are the client's (400)
	// unread: relayed, but not read to its end (relayH2: an HTTP/2
	// backend answered without taking it all); the rest is still in the
	// client's connection, which must close after the response.
	unread bool
	// sentAt is when an HTTP/2 backend's transport read the body's end
	// (Unix ns; 0: not yet), and headAt when the response head came
	// (relayH2): a body all sent before the head gives a measured
	// service time from then (serve).
	sentAt atomic.Int64
	headAt int64
	// stop, when set, makes a Read blocked on the client return at once,
	// from another goroutine (h2ReqBody.Close): the h2 stream's body
	// closed, or the HTTP/1.1 connection's read deadline put in the past
	// (readUnblocker).
	stop func()
}

// readUnblocker returns clientBody.stop for an HTTP/1.1 connection c: a
// read deadline in the past, set below drainConn (whose deadline
// bookkeeping belongs to the goroutine reading). It is used only when
// the body is abandoned halfway, and the connection then closes after its
// response (clientBody.unread).
func readUnblocker(c net.Conn) func() {
	if d := drainConnOf(c); d != nil {
		c = d.Conn
	}
	if c == nil {
		return nil
	}
	return func() { _ = c.SetReadDeadline(time.Unix(1, 0)) }
}

func (c *clientBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err == io.EOF && c.truncated != nil && c.truncated() {
		err = io.ErrUnexpectedEOF
	}
	if err != nil && err != io.EOF && c.err == nil {
		c.err = err
	}
	return n, err
}

// outcome maps the client's read error to how the exchange ended: too
// slow (408), malformed (400, a broken chunk) or gone.
func (c *clientBody) outcome() pipeline.Outcome { return readOutcome(c.err, c.h1) }

var bodyBufPool bytebufferpool.Pool

// rateConn is the connection-level part of body_min_rate: from the start
// of a request until its body is in, each Read's deadline is the deadline
// for the bytes received so far (bodyLimits.deadline), so a client sending
// too slowly times out in the middle of a read. fasthttp's ConnState hook
// starts it (frontend.connState); the handler stops it once a body is
// buffered, or after relaying a body that streamed. Implemented by
// drainConn.
//
// peerClosed tells whether the client closed its side. fasthttp's chunked
// body reader reports a connection closed between chunks as the body's
// end (io.EOF), so a chunked body is taken as complete only if the client
// is still there.
type rateConn interface {
	stopBodyRate()
	peerClosed() bool
}

// rateConnOf finds the rateConn under a fasthttp connection.
func rateConnOf(c net.Conn) rateConn {
	if d := drainConnOf(c); d != nil {
		return d
	}
	return nil // not a typed nil in the interface
}

// errBufferFull: the process-wide buffer cap is reached.
var errBufferFull = errors.New("request buffer cap reached")

// bodyStep is the first share of request_buffer_total a body takes; it
// grows by doubling as bytes arrive, so a client is charged about what it
// has sent (at most twice), never what it declared.
const bodyStep = 16 << 10

// readBody reads a streamed request body into sentry before admission
// (server.request_buffer): a body of known length up to the buffer is read
// whole; a larger one (known length or chunked) has its first
// request_buffer bytes read (a chunked one: one more, to tell that it is
// larger), and the rest streams afterwards behind them. So a request is
// dispatched only once its body is in, or once the client has sent
// request_buffer bytes of it.
//
// Trailers of a chunked body are dropped (dropTrailers): they arrive after
// the header policy ran, and nginx does not forward request trailers
// either.
//
// It returns the outcome to answer with when the body cannot be had:
// pipeline.OutBodyTimeout for a client too slow (408), pipeline.OutBufferFull when the
// process-wide cap is reached (503), pipeline.OutBadRequest for a malformed chunked
// body (400), pipeline.OutClientGone when the client broke the body off. The
// caller releases the buffer with done.
func (fe *frontend) readBody(ctx *fasthttp.RequestCtx, a *pipeline.App, bb *bodyBuf) (pipeline.Outcome, bool) {
	req := &ctx.Request
	cl := int64(req.Header.ContentLength())
	lim := fe.body.buffer
	if cl == 0 || cl == -2 {
		return pipeline.OutRelayed, false
	}
	var truncated func() bool
	if rc := rateConnOf(ctx.Conn()); rc != nil && cl < 0 {
		truncated = rc.peerClosed
	}
	if lim <= 0 || a.Policy.RequestBufferingOff {
		// Streams from the start (on a copy of the request, see serve).
		// Trailers land in the request's header after the copy was sent.
		bb.client = &clientBody{r: req.BodyStream(), truncated: truncated, h1: true}
		bb.cl = int(cl)
		return pipeline.OutRelayed, false
	}
	src := req.BodyStream()
	want := cl // read whole
	switch {
	case cl < 0:
		want = lim + 1
		markTrailers(&req.Header)
		defer dropTrailers(&req.Header)
	case cl > lim:
		want = lim
	}
	b, eof, o := fe.p.fillBody(src, want, bb, true)
	if o == pipeline.OutBadRequest && truncated != nil && truncated() {
		o = pipeline.OutClientGone // cut off, not malformed
	}
	if o != pipeline.OutRelayed {
		return o, true
	}
	switch {
	case cl >= 0 && cl <= lim:
		if int64(len(b)) != cl {
			return pipeline.OutClientGone, true
		}
		req.SetBodyRaw(b) // closes the stream, which has been read to its end
		return pipeline.OutRelayed, true
	case cl > lim:
		if int64(len(b)) != lim {
			return pipeline.OutClientGone, true
		}
		// The first request_buffer bytes go first, the rest streams.
		bb.client = &clientBody{r: io.MultiReader(bytesReader(b), src), h1: true}
		bb.cl = int(cl)
		return pipeline.OutRelayed, true
	}
	if eof && truncated != nil && truncated() {
		return pipeline.OutClientGone, true
	}
	if eof {
		// A whole chunked body: sent with its length.
		req.SetBodyRaw(b)
		req.Header.SetContentLength(len(b))
		return pipeline.OutRelayed, true
	}
	// Larger than the buffer: what was read goes first, the rest streams.
	// The stream stays the request's (fasthttp releases it with the
	// request), so the relay sends a copy of the request (serve), made
	// before any trailer arrives.
	bb.client = &clientBody{r: io.MultiReader(bytesReader(b), src), truncated: truncated, h1: true}
	bb.cl = -1
	return pipeline.OutRelayed, true
}

// trailerMark is a header name no request can carry (fasthttp refuses a
// trailer name with a space): set before a chunked body is read, it tells
// which header fields the body's trailers added.
var trailerMark = []byte("Sentry Trailer Mark")

func markTrailers(h *fasthttp.RequestHeader) { h.AddBytesKV(trailerMark, nil) }

// dropTrailers removes the fields fasthttp appended to h while reading a
// chunked body (its trailers, after trailerMark), keeping the head's own
// fields of the same names, and removes the mark. The trailers arrive
// after the header policy ran (dropListed, the forwarding headers), so
// they would otherwise reach the backend as ordinary headers.
func dropTrailers(h *fasthttp.RequestHeader) {
	// The common case, no trailers: one pass, nothing copied.
	after, found := false, false
	h.VisitAll(func(k, _ []byte) {
		switch {
		case bytes.EqualFold(k, trailerMark):
			after, found = true, false
		case after && !bytes.EqualFold(k, strConnection):
			found = true
		}
	})
	if !found {
		h.DelBytes(trailerMark)
		return
	}
	type kv struct{ k, v []byte }
	var head, trail []kv
	after = false
	h.VisitAll(func(k, v []byte) {
		switch {
		case bytes.EqualFold(k, trailerMark):
			// The last mark counts (a head could not add one after it).
			after, trail = true, trail[:0]
		case after && bytes.EqualFold(k, strConnection):
			// "Connection: close" is visited last; never a trailer.
		case after:
			trail = append(trail, kv{k: append([]byte(nil), k...)})
		default:
			head = append(head, kv{append([]byte(nil), k...), append([]byte(nil), v...)})
		}
	})
	h.DelBytes(trailerMark)
	for i, t := range trail {
		seen := false
		for _, u := range trail[:i] {
			seen = seen || bytes.EqualFold(u.k, t.k)
		}
		if seen {
			continue
		}
		h.DelBytes(t.k)
		for _, f := range head {
			if bytes.EqualFold(f.k, t.k) {
				h.AddBytesKV(f.k, f.v)
			}
		}
	}
}

var strConnection = []byte(fasthttp.HeaderConnection)

// fillBody reads up to want bytes of a body from src into bb, reserving
// them in the process-wide account as they arrive: the first bodyStep
// bytes, then by doubling. eof says src ended (a body read whole); a body
// of which want bytes were read is left at that point. h1: src is
// fasthttp's body reader (readOutcome).
func (p *Proxy) fillBody(src io.Reader, want int64, bb *bodyBuf, h1 bool) (b []byte, eof bool, o pipeline.Outcome) {
	bb.bb = bodyBufPool.Get()
	step := min(want, bodyStep)
	if !p.bufs.reserve(step) {
		return nil, false, pipeline.OutBufferFull
	}
	bb.reserved = step
	back := bb.bb.B[:0]
	if int64(cap(back)) < step {
		back = make([]byte, 0, step)
	}
	b = back[:0:step]
	for !eof {
		if len(b) == cap(b) {
			if int64(len(b)) >= want {
				break
			}
			next := min(2*int64(cap(b)), want)
			if !p.bufs.reserve(next - int64(cap(b))) {
				bb.bb.B = back
				return nil, false, pipeline.OutBufferFull
			}
			bb.reserved += next - int64(cap(b))
			if int64(cap(back)) < next {
				back = append(back[:0], b...)
				back = append(back, make([]byte, next-int64(len(b)))...)
			}
			b = back[:len(b):next]
		}
		m, err := src.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		switch {
		case err == io.EOF:
			eof = true
		case err != nil:
			bb.bb.B = back
			return nil, false, readOutcome(err, h1)
		}
	}
	bb.bb.B = back
	return b, eof, pipeline.OutRelayed
}

// readOutcome maps an error reading a request body: a timeout is 408, a
// connection that ended or broke is the client gone, and anything else (a
// malformed chunk, a malformed trailer) is the client's bad request (400,
// as nginx answers). That last holds for fasthttp's reader only (h1): an
// h2 body's other errors are the h2 server's for a reset or closed
// stream (errStreamReset), the client gone.
func readOutcome(err error, h1 bool) pipeline.Outcome {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return pipeline.OutBodyTimeout
	case !h1:
		return pipeline.OutClientGone
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return pipeline.OutClientGone
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return pipeline.OutClientGone
	}
	// fasthttp wraps the read errors met between chunks in ErrBrokenChunk
	// without Unwrap; its messages for them start "cannot read" ("cannot
	// unread"), the others name the malformed byte.
	var bc fasthttp.ErrBrokenChunk
	if errors.As(err, &bc) && strings.HasPrefix(bc.Error(), "cannot ") {
		if strings.Contains(bc.Error(), "timeout") {
			return pipeline.OutBodyTimeout
		}
		return pipeline.OutClientGone
	}
	return pipeline.OutBadRequest
}

// done returns the buffer and its account.
func (bb *bodyBuf) done(p *Proxy, req *fasthttp.Request) {
	if bb.bb == nil {
		return
	}
	if req != nil && !req.IsBodyStream() {
		// The request no longer points into the pooled bytes.
		req.ResetBody()
	}
	p.bufs.release(bb.reserved)
	bb.bb.B = bb.bb.B[:0]
	if cap(bb.bb.B) <= 4<<20 {
		bodyBufPool.Put(bb.bb)
	}
	*bb = bodyBuf{}
}

type sliceReader struct{ b []byte }

func bytesReader(b []byte) *sliceReader { return &sliceReader{b: b} }

func (r *sliceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}
