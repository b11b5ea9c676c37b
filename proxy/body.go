package proxy

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"time"

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

// outcome maps the client's read error to how the exchange ended.
func (c *clientBody) outcome() outcome {
	var ne net.Error
	if errors.As(c.err, &ne) && ne.Timeout() {
		return outBodyTimeout
	}
	return outClientGone
}

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
	switch x := c.(type) {
	case *drainConn:
		return x
	case drainTLSConn:
		return x.drainConn
	}
	return nil
}

// errBufferFull: the process-wide buffer cap is reached.
var errBufferFull = errors.New("request buffer cap reached")

// readBody reads a streamed request body into sentry before admission
// (server.request_buffer): a body of known length up to the buffer is read
// whole; a chunked body is read until it ends or passes the buffer, and
// what passes it streams afterwards (rest). A body of known length over
// the buffer is not read here: it streams from the start.
//
// It returns the outcome to answer with when the body cannot be had:
// outBodyTimeout for a client too slow (408), outBufferFull when the
// process-wide cap is reached (503), outClientGone when the client broke
// the body off. The caller releases the buffer with done.
func (fe *frontend) readBody(ctx *fasthttp.RequestCtx, a *app, bb *bodyBuf) (outcome, bool) {
	req := &ctx.Request
	cl := int64(req.Header.ContentLength())
	lim := fe.body.buffer
	if cl == 0 || cl == -2 {
		return outRelayed, false
	}
	var truncated func() bool
	if rc := rateConnOf(ctx.Conn()); rc != nil && cl < 0 {
		truncated = rc.peerClosed
	}
	if lim <= 0 || a.cfg.RequestBufferingOff || cl > lim {
		// Streams from the start (on a copy of the request, see serve).
		bb.client = &clientBody{r: req.BodyStream(), truncated: truncated}
		bb.cl = int(cl)
		return outRelayed, false
	}
	src := req.BodyStream()
	b, eof, o := fe.p.fillBody(src, cl, lim, bb)
	if o != outRelayed {
		return o, true
	}
	if cl >= 0 {
		if int64(len(b)) != cl {
			return outClientGone, true
		}
		req.SetBodyRaw(b) // closes the stream, which has been read to its end
		return outRelayed, true
	}
	if eof && truncated != nil && truncated() {
		return outClientGone, true
	}
	if eof {
		// A whole chunked body: sent with its length.
		req.SetBodyRaw(b)
		req.Header.SetContentLength(len(b))
		return outRelayed, true
	}
	// Larger than the buffer: what was read goes first, the rest streams.
	// The stream stays the request's (fasthttp releases it with the
	// request), so the relay sends a copy of the request (serve).
	bb.client = &clientBody{r: io.MultiReader(bytesReader(b), src), truncated: truncated}
	bb.cl = -1
	return outRelayed, true
}

// fillBody reads a body from src into bb, reserving its bytes in the
// process-wide account: a body of known length cl whole, a chunked one
// (cl < 0) until its end or until it passes lim (eof false then: b holds
// lim+1 bytes and the rest is still in src).
func (p *Proxy) fillBody(src io.Reader, cl, lim int64, bb *bodyBuf) (b []byte, eof bool, o outcome) {
	bb.bb = bodyBufPool.Get()
	// want: bytes reserved and the capacity read into. A body of known
	// length is reserved whole; a chunked one grows by doubling up to
	// lim+1 (one byte more than the buffer tells that it is larger).
	want := cl
	if cl < 0 {
		want = min(lim+1, 16<<10)
	}
	if !p.bufs.reserve(want) {
		return nil, false, outBufferFull
	}
	bb.reserved = want
	back := bb.bb.B[:0]
	if int64(cap(back)) < want {
		back = make([]byte, 0, want)
	}
	b = back[:0:want]
	eof = false
	for !eof {
		if len(b) == cap(b) {
			if cl >= 0 || int64(len(b)) > lim {
				break
			}
			next := min(2*int64(cap(b)), lim+1)
			if !p.bufs.reserve(next - int64(cap(b))) {
				bb.bb.B = back
				return nil, false, outBufferFull
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
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return nil, false, outBodyTimeout
			}
			return nil, false, outClientGone
		}
	}
	bb.bb.B = back
	return b, eof, outRelayed
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
