package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// Cutting a backend exchange whose HTTP/2 stream was reset.
//
// A client that resets a stream after sentry has sent it to a backend is
// gone; the backend should not go on working for it. nginx closes the
// upstream connection in that case (proxy_ignore_client_abort off), and so
// does sentry: the backend sees its client close, and a backend that stops
// work on a closed connection (Go's r.Context(), Node's req.on('close'))
// stops.
//
// fasthttp's HostClient takes no context and does not tell its caller which
// pooled connection it picked, so the connection is learnt in the goroutine
// that runs the exchange, from fasthttp's own order of work: it takes a
// connection, tells the Response the connection's address
// (Response.RemoteAddr), and only then writes the request, body last. A
// backend connection (idleConn) reports itself as its address (connAddr),
// and the request's body is an abortBody, which asks the Response for that
// address before it gives its first byte and binds the connection to the
// stream's abortable. A reset closes the bound connection; fasthttp's
// read or write then fails and it drops the connection.
// TestH2ResetAfterDispatchCutsBackend pins that order against a fasthttp
// upgrade.
//
// The binding ends when the exchange is over: right after HostClient.Do
// for a response read whole, and before the stream is closed for one that
// streams, so a connection back in the pool is never closed for a stream
// it no longer serves. The only window left is the instant between Do's
// return (the connection is back in the pool) and the unbind that
// follows; a reset that lands there closes an idle pooled connection, and
// the next exchange on it fails as on any connection its backend closed
// (net.ErrClosed is pipeline.FailBroken: retried when replayable).
// Early termination cannot leave that window open: its timer must win a
// latch that the response's first read disarms, and a read that loses
// fails (errTermCut, idleConn.Read), so an exchange the timer cuts never
// returns its connection to the pool (TestReadLosingToTheCutFails).
//
// Cost: an h2 request's body on this path always goes as a stream (one
// small object), so a body-less request here (one the exchange core's
// driver does not take: an app with HTTP/2, TLS or named backends)
// carries Content-Length: 0 to the backend, and no h2 request takes
// fasthttp's own retry of a stale keep-alive connection
// (sentry's retry policy, pipeline.TryAgain, still applies: a body held whole is
// replayable).

// abortable is one h2 stream's hold on the backend connection its
// exchange runs on.
type abortable struct {
	done <-chan struct{} // the stream's context: closed on reset
	// ctx is the stream's context itself, for an HTTP/2 backend stream
	// (relayH2) to end with it; h2resp is that backend's response, whose
	// trailers serveCtx copies after the body (h2Call.respond).
	ctx    context.Context
	h2resp *http.Response

	mu struct {
		sync.Mutex
		conn net.Conn       // the backend connection of the exchange in progress
		cut  bool           // the stream was reset
		term *pipeline.Term // termination armed (term.go): the bound connection's first byte disarms it
	}
}

// bind records c as the exchange's connection; false if the stream was
// reset already (then c is closed).
func (ab *abortable) bind(c net.Conn) bool {
	ab.mu.Lock()
	defer ab.mu.Unlock()
	ic, _ := c.(*idleConn)
	if ab.mu.cut {
		if ic != nil {
			ic.killed.Store(true)
		}
		_ = c.Close()
		return false
	}
	if ic != nil {
		ic.owner.Store(ab)
	}
	if ab.mu.term != nil {
		if ic, ok := ab.mu.conn.(*idleConn); ok {
			ic.term.Store(nil) // an earlier attempt's connection
		}
		if ic, ok := c.(*idleConn); ok {
			ic.term.Store(ab.mu.term)
		}
	}
	ab.mu.conn = c
	return true
}

// track sets (t) or ends (nil) the watch of the bound connection's first
// response byte for termination (term.go).
func (ab *abortable) track(t *pipeline.Term) {
	ab.mu.Lock()
	ab.mu.term = t
	if ic, ok := ab.mu.conn.(*idleConn); ok {
		ic.term.Store(t)
	}
	ab.mu.Unlock()
}

// unbind ends the hold: the connection is no longer this exchange's.
func (ab *abortable) unbind() {
	ab.mu.Lock()
	if ic, ok := ab.mu.conn.(*idleConn); ok {
		ic.owner.CompareAndSwap(ab, nil)
	}
	ab.mu.conn = nil
	ab.mu.Unlock()
}

// abort is called once when the stream is reset (ownStream.afterCut): it
// closes the bound connection, if any. Closing a TCP socket does not
// block, so it is done under the lock, and unbind cannot hand the
// connection back in between.
func (ab *abortable) abort() {
	ab.mu.Lock()
	ab.mu.cut = true
	if c := ab.mu.conn; c != nil {
		ab.mu.conn = nil
		if ic, ok := c.(*idleConn); !ok {
			_ = c.Close()
		} else if ic.owner.CompareAndSwap(ab, nil) {
			// Still this exchange's as far as any exchange has said.
			// fasthttp may have put it back in its pool already: killed
			// tells its next user (errConnAborted).
			ic.killed.Store(true)
			_ = c.Close()
		}
		// Otherwise it went back to the pool and another exchange has
		// bound it since: not this stream's to close.
	}
	ab.mu.Unlock()
}

// wasCut reports whether the stream was reset.
func (ab *abortable) wasCut() bool {
	ab.mu.Lock()
	defer ab.mu.Unlock()
	return ab.mu.cut
}

// errStreamReset is the body's error when its stream was reset before the
// exchange bound its connection.
var errStreamReset = errors.New("proxy: client reset the stream")

// abortBody is an h2 request's body as fasthttp writes it: the bytes held
// whole (b) and then, for a body that streams, src. Its first read binds
// the exchange's connection (see above). rewind makes it ready for another
// attempt (relay's retry; only a body without src is replayable).
type abortBody struct {
	ab    *abortable
	resp  *fasthttp.Response
	b     []byte
	src   io.Reader
	cl    int // declared length: len(b), or the streamed body's (-1: chunked)
	off   int
	bound bool
}

// attach sets the body on req for one attempt.
func (r *abortBody) attach(req *fasthttp.Request) {
	r.off, r.bound = 0, false
	req.SetBodyStream(r, r.cl)
}

func (r *abortBody) bind() error {
	if r.bound {
		return nil
	}
	r.bound = true
	if a, ok := r.resp.RemoteAddr().(*connAddr); ok && !r.ab.bind(a.c) {
		return errStreamReset
	}
	return nil
}

func (r *abortBody) Read(p []byte) (int, error) {
	if err := r.bind(); err != nil {
		return 0, err
	}
	if r.off < len(r.b) {
		n := copy(p, r.b[r.off:])
		r.off += n
		return n, nil
	}
	if r.src == nil {
		return 0, io.EOF
	}
	return r.src.Read(p)
}

// WriteTo is what fasthttp uses for a body of known length (one write of
// the held bytes, no copy buffer).
func (r *abortBody) WriteTo(w io.Writer) (int64, error) {
	if err := r.bind(); err != nil {
		return 0, err
	}
	n, err := w.Write(r.b[r.off:])
	r.off += n
	if err != nil || r.src == nil {
		return int64(n), err
	}
	m, err := io.Copy(w, r.src)
	return int64(n) + m, err
}

// connAddr is a backend connection's remote address that also names the
// connection (for abortBody.bind). It is made once per connection.
type connAddr struct {
	net.Addr
	c net.Conn
}
