package proxy

import (
	"io"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/sentry-proxy/sentry/proxy/respbuf"
)

// respbody.go: a backend's response as the goroutine front ends write it
// (fasthttp's HTTP/1.1 and the h2 workers, which both run serve), and
// response buffering there (docs/buffering.md).
//
// relay reads the backend's answer into a fasthttp.Response of the
// exchange's own (exchange.bresp), and takeResponse moves it into the
// client's (ctx.Response): the head copied, a body read whole (up to 64
// KiB, streamThreshold) swapped in without a copy. A body that streams
// stays in the backend's Response, which only it can close the right way
// (its connection released or closed, HostClient's bufio reader given
// back); the client's Response gets a reader that owns it:
//
//   - bufBody, for a response that may be buffered: a goroutine (pump)
//     reads the backend at its own speed into a respbuf.Buffer under the
//     process's budget (the same one the event loops use), and the
//     backend connection goes back the moment the body is in; the
//     client's writer reads from the buffer. When the buffer can take no
//     more, the pump waits for the writer (the response goes at its
//     client's pace, as unbuffered).
//   - passBody, for a stream (respbuf.Streams), an app with
//     response_buffering off, or buffering off: the backend is read as
//     the client takes it.
//
// Either closes the backend connection, rather than give it back, when
// the body was not read to its end (the client left, a write failed).

// hdrAccel is nginx's X-Accel-Buffering: read from the backend, never
// passed on (stripHopByHopResponse).
var hdrAccel = []byte("X-Accel-Buffering")

// backendResp is the exchange's Response for the backend's answer.
func (x *fhExchange) backendResp() *fasthttp.Response {
	if x.bresp == nil {
		x.bresp = fasthttp.AcquireResponse()
	}
	return x.bresp
}

// takeResponse moves the backend's answer (x.bresp) into the client's
// response: the head copied, the body swapped in or, when it streams,
// handed to a reader that owns the backend's Response from then on.
// cut is an h2 stream's hold on the backend connection: it ends when the
// connection goes back (abort.go).
func (p *Proxy) takeResponse(ctx *fasthttp.RequestCtx, x *fhExchange, a *pipeline.App, cut *abortable) {
	br := x.bresp
	resp := &ctx.Response
	br.Header.CopyTo(&resp.Header)
	if !br.IsBodyStream() {
		b := br.SwapBody(nil)
		br.SwapBody(resp.SwapBody(b))
		br.Reset()
		return
	}
	x.bresp = nil // the body's now
	cl := br.Header.ContentLength()
	if p.resp.On() && !a.Policy.ResponseBufferingOff && !respbuf.Streams(br.Header.ContentType(), br.Header.PeekBytes(hdrAccel)) {
		resp.SetBodyStream(newBufBody(p.resp, br, cut), cl)
		return
	}
	resp.SetBodyStream(&passBody{br: br}, cl)
}

// dropBackendResp lets go of an answer that is not relayed: a body that
// streams closes its connection (never reused half read).
func (x *fhExchange) dropBackendResp() {
	br := x.bresp
	if br == nil {
		return
	}
	if br.IsBodyStream() {
		br.SetConnectionClose()
		_ = br.CloseBodyStream()
	}
	br.Reset()
}

// passBody is a backend's body relayed as the client takes it.
type passBody struct {
	br  *fasthttp.Response
	eof bool
	got int64 // bytes read from the backend
	end bodyEnd
}

func (b *passBody) Read(p []byte) (int, error) {
	n, err := b.br.BodyStream().Read(p)
	b.got += int64(n)
	switch {
	case err == io.EOF:
		b.eof = true
		b.end.finish(pipeline.OutRelayed, b.got)
	case err != nil:
		b.end.finish(relayError(err), b.got)
	}
	return n, err
}

// CloseWithError ends the body (fasthttp calls it when the response is
// written or abandoned, with the write's error): the backend connection
// goes back when the body was read to its end, else it is closed.
func (b *passBody) CloseWithError(err error) error {
	b.end.finish(pipeline.OutClientGone, b.got) // (when the body did not end first)
	if err != nil || !b.eof {
		b.br.SetConnectionClose()
	}
	e := b.br.CloseBodyStream()
	fasthttp.ReleaseResponse(b.br)
	b.br = nil
	return e
}

// pumpChunk is what the pump reads from the backend at a time.
const pumpChunk = 32 << 10

var pumpBufs = sync.Pool{New: func() any { b := make([]byte, pumpChunk); return &b }}

// bufBody is a backend's body read by its own goroutine (pump) at the
// backend's speed into a buffer, and by the client's writer from it.
type bufBody struct {
	br   *fasthttp.Response // the backend's answer: the pump's alone until it is done
	cut  *abortable
	stop func() // interrupts the pump's read (the connection closed, the h2 stream cancelled)

	mu      sync.Mutex
	cond    sync.Cond
	buf     respbuf.Buffer
	pend    []byte // read, not taken by the buffer (full): the pump waits until the writer took it
	chunk   *[]byte
	eof     bool  // the body ended (the pump saw io.EOF)
	err     error // the backend's error
	closed  bool  // the writer is done (CloseWithError)
	reading bool  // the pump may be in a read of the backend (stop may interrupt it)
	done    bool  // the pump ended
	rwait   bool  // the writer waits for bytes
	got     int64 // bytes read from the backend
	perr    error // the pump's last read error, once it stopped reading
	end     bodyEnd
}

func newBufBody(bud *respbuf.Budget, br *fasthttp.Response, cut *abortable) *bufBody {
	b := &bufBody{br: br, cut: cut, chunk: pumpBufs.Get().(*[]byte), reading: true}
	b.cond.L = &b.mu
	b.buf.Start(bud, respbuf.OSFiles{})
	switch s := br.BodyStream().(type) {
	case *h2RespBody:
		b.stop = s.cancel
	default:
		if a, ok := br.RemoteAddr().(*connAddr); ok {
			c := a.c
			b.stop = func() { _ = c.Close() }
		}
	}
	go b.pump()
	return b
}

// pump reads the backend's body into the buffer until its end, an error,
// or the writer's end; then it releases the backend connection (closed
// unless the body was read to its end).
func (b *bufBody) pump() {
	src := b.br.BodyStream()
	chunk := *b.chunk
	var err error
	for {
		var n int
		n, err = src.Read(chunk)
		b.mu.Lock()
		b.got += int64(n)
		if n > 0 && !b.closed {
			data := chunk[:n]
			k := b.buf.Write(data)
			if k < n {
				// The buffer is full: the rest waits for the writer, and
				// so does the backend (the client's pace).
				b.pend = data[k:]
				for len(b.pend) > 0 && !b.closed {
					b.wake()
					b.cond.Wait()
				}
			}
			b.wake()
		}
		if err != nil || b.closed {
			break
		}
		b.mu.Unlock()
	}
	// From here the connection may go back to the pool: nobody stops a
	// read on it any more.
	b.reading = false
	b.perr = err
	closed := b.closed
	if !closed {
		b.end.finishRead(err, b.got) // the backend's last byte (or its failure)
	}
	b.mu.Unlock()
	// The backend's part is over: its connection goes back now (read to
	// the end) or is closed, whatever the client still has to take.
	if b.cut != nil {
		b.cut.unbind()
	}
	if err != io.EOF || closed {
		b.br.SetConnectionClose()
	}
	_ = b.br.CloseBodyStream()
	b.mu.Lock()
	switch {
	case closed:
	case err == io.EOF:
		b.eof = true
	default:
		b.err = err
	}
	b.done = true
	b.wake()
	release := b.closed
	b.mu.Unlock()
	if release {
		b.release()
	}
}

// wake wakes the writer (and the pump) if one waits (mu held).
func (b *bufBody) wake() {
	if b.rwait {
		b.rwait = false
		b.cond.Broadcast()
	}
}

func (b *bufBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		switch {
		case b.buf.Len() > 0:
			return b.buf.Read(p)
		case len(b.pend) > 0:
			n := copy(p, b.pend)
			if b.pend = b.pend[n:]; len(b.pend) == 0 {
				b.pend = nil
				b.cond.Broadcast() // the pump reads on
			}
			return n, nil
		case b.eof:
			return 0, io.EOF
		case b.err != nil:
			return 0, b.err
		case b.done || b.closed:
			return 0, io.ErrUnexpectedEOF
		}
		b.rwait = true
		b.cond.Wait()
	}
}

// CloseWithError ends the body for the writer (fasthttp, with its write's
// error; serveCtx): a pump still reading is stopped (the backend
// connection closes, as nginx closes it when its client goes), and
// whichever of the two ends last gives the buffer and the backend's
// Response back.
func (b *bufBody) CloseWithError(error) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.end.finish(pipeline.OutClientGone, b.got) // (when the body did not end first)
	b.cond.Broadcast()
	done, reading := b.done, b.reading
	if reading && b.stop != nil {
		// Under the lock: the pump cannot have let the connection go
		// (reading is cleared under it first).
		b.stop()
	}
	b.mu.Unlock()
	if done {
		b.release()
	}
	return nil
}

// release gives back the buffer, the pump's chunk and the backend's
// Response (once both sides are done).
func (b *bufBody) release() {
	b.buf.Close()
	pumpBufs.Put(b.chunk)
	b.chunk = nil
	fasthttp.ReleaseResponse(b.br)
	b.br = nil
}

// bodyEnd is the complete step (metrics, access line) of a relayed
// HTTP/1.1 response whose body streams, as the loops do it: the exchange
// ends at the last byte read from the backend (with response buffering,
// at the backend's pace), or earlier when the client goes (499) or the
// backend fails; a client's FIN before that end is its going
// (fin_linux.go). handle sets it (endAtBody) before the client's writer
// starts; until then it does nothing.
type bodyEnd struct {
	p      *Proxy
	a      *pipeline.App
	u      *pipeline.Upstream
	start  time.Time
	status int
	fc     *drainConn // the client's connection, relaying since the relay began (nil: not watched)
	logged bool       // e is filled (fillAccess)
	set    bool
	ended  bool
	e      pipeline.AccessEntry
}

// finishRead ends the exchange at the backend's last read: err is io.EOF
// when the body was read to its end.
func (r *bodyEnd) finishRead(err error, n int64) {
	if err == io.EOF {
		r.finish(pipeline.OutRelayed, n)
	} else {
		r.finish(relayError(err), n)
	}
}

// finish records the exchange's end once: o is how it ended, n the bytes
// read from the backend.
func (r *bodyEnd) finish(o pipeline.Outcome, n int64) {
	if !r.set || r.ended {
		return
	}
	r.ended = true
	if r.fc != nil && r.fc.relayEnd() && o == pipeline.OutRelayed {
		o = pipeline.OutClientGone
	}
	// The head was sent: the status is the one the client got, but for
	// client_gone (499), as on the loops.
	status := r.status
	if o == pipeline.OutClientGone {
		status = pipeline.StatusOf(o)
	}
	r.a.Complete(o, status, r.u, r.start, r.e.Class)
	if r.logged {
		e := &r.e
		e.Outcome, e.Status, e.Duration, e.BytesOut = o, status, time.Since(r.start), n
		if o == pipeline.OutClientGone {
			e.BytesOut = 0
		}
		r.p.accessEntry(e)
	}
}

// endAtBody hands the complete step of a relayed response whose body
// streams to the body's end (bodyEnd); false when the response does not
// stream, and the caller completes it now. fc (nil: none) is the client's
// connection, still relaying when the body streams.
func (p *Proxy) endAtBody(a *pipeline.App, access bool, ctx *fasthttp.RequestCtx, u *pipeline.Upstream, start time.Time, fc *drainConn, e *pipeline.AccessEntry) bool {
	var end *bodyEnd
	var bb *bufBody
	switch s := ctx.Response.BodyStream().(type) {
	case *passBody:
		end = &s.end
	case *bufBody:
		end, bb = &s.end, s
	default:
		if fc != nil {
			fc.relayEnd()
		}
		return false
	}
	status := ctx.Response.StatusCode()
	// Filled aside: the pump (bufBody) reads end under bb.mu.
	r := bodyEnd{p: p, a: a, u: u, start: start, status: status, fc: fc, e: *e}
	r.logged = access && p.fillAccess(a, ctx, pipeline.OutRelayed, u, start, status, &r.e)
	r.set = true
	if bb == nil {
		*end = r
		return true
	}
	bb.mu.Lock()
	*end = r
	if !bb.reading {
		end.finishRead(bb.perr, bb.got) // the pump read it all already
	}
	bb.mu.Unlock()
	return true
}
