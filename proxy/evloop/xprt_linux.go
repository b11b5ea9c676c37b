//go:build linux

package evloop

import (
	"golang.org/x/sys/unix"

	"github.com/sentry-proxy/sentry/proxy/h2srv"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// xprt_linux.go: a client connection's transport, as HAProxy's xprt_ops
// make "plain or TLS" one pointer rather than checks spread over the
// code: what differs between a plain socket, TLS records the loop seals
// and opens, an HTTP/2 connection and one of its streams is in the
// operations here -- read, flush, after, cut and close -- each one switch
// on the connection's xprt. The exchange code above them does not look
// at the transport. Decision: a switch on a small enum, not an interface:
// the variants' data (tlsConn, h2Link, h2str) stay plain pointers the
// switch's arms use, and the hot path makes no indirect call.

// xprt is how a client connection's bytes travel.
type xprt uint8

const (
	// xpPlain: a socket; HTTP/1.1 in the clear. (Also a stream
	// connection once released: fd -1, a closed client to whoever still
	// holds it.)
	xpPlain xprt = iota
	// xpTLS: a socket; HTTP/1.1 in TLS records the loop opens into c.in
	// and seals c.out into (c.tls, tls_linux.go).
	xpTLS
	// xpH2: a socket; HTTP/2 over TLS (c.tls, c.h2, h2_linux.go): its
	// requests are stream connections of their own.
	xpH2
	// xpStream: no socket (fd -1): one HTTP/2 stream of an xpH2
	// connection (c.str), its response going into the connection's core.
	xpStream
)

// sealed tells whether the transport seals records (TLS).
func (x xprt) sealed() bool { return x == xpTLS || x == xpH2 }

// clientEvent is a client socket's epoll event.
func (l *eventLoop) clientEvent(c *cconn, ev uint32) {
	if c.linger != 0 {
		for k := 0; k < 16; k++ {
			m, err := l.sys.Read(c.fd, l.drop[:])
			if err == unix.EAGAIN || err == unix.EINTR {
				return
			}
			if m <= 0 {
				l.closeClient(c)
				return
			}
		}
		return
	}
	if ev&unix.EPOLLOUT != 0 {
		if c.xp == xpH2 {
			l.h2Flush(c) // and what the core holds since
		} else {
			l.flush(c)
		}
		if c.fd < 0 {
			return
		}
	}
	if ev&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		if c.xp.sealed() {
			l.readTLS(c, ev)
			return
		}
		l.readClient(c, ev)
	}
}

// flush writes c.out, and after it what the response buffer holds; on
// EAGAIN it waits for EPOLLOUT. A stream's goes into its connection's
// core (flushStream).
func (l *eventLoop) flush(c *cconn) {
	if c.xp == xpStream {
		l.flushStream(c)
		return
	}
	for {
		if !l.writeOut(c) {
			l.resumeBackend(c) // the buffer may have room again
			return
		}
		if !c.buffered() || !l.refill(c) {
			break
		}
	}
	if c.fd < 0 {
		return
	}
	c.outAt = 0
	if c.events&unix.EPOLLOUT != 0 {
		l.setClientEvents(c, c.events&^unix.EPOLLOUT)
	}
	if c.busy() {
		l.resumeBackend(c)
		return
	}
	l.after(c)
}

// writeOut writes c.out to c's socket, sealed for TLS (flushTLS): true
// when all of it went, false when the rest waits for EPOLLOUT or c was
// closed.
func (l *eventLoop) writeOut(c *cconn) bool {
	if c.xp.sealed() {
		return l.flushTLS(c)
	}
	var ok bool
	c.out, ok = l.writeAll(c, c.out)
	return ok
}

// writeAll writes b to c's socket: the plaintext of a plain connection
// or a TLS connection's records. It returns what is left of b (moved to
// its start) and whether all of it went; the rest waits for EPOLLOUT
// (c.outAt set: the write timeout runs), or c was closed (nil: its
// buffers went back). A partial write is progress: the write timeout
// starts again.
func (l *eventLoop) writeAll(c *cconn, b []byte) ([]byte, bool) {
	for len(b) > 0 {
		m, err := l.sys.Write(c.fd, b)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			if c.outAt == 0 {
				c.outAt = l.nowNs
			}
			l.setClientEvents(c, c.events|unix.EPOLLOUT)
			return b, false
		}
		if m <= 0 {
			l.closeClient(c)
			return nil, false
		}
		if m < len(b) {
			c.outAt = l.nowNs
			b = b[:copy(b, b[m:])]
			continue
		}
		b = b[:0]
		if c.outAt != 0 {
			c.outAt = l.nowNs // progress: the write timeout starts again (flush may refill c.out)
		}
	}
	return b, true
}

// after runs when an exchange has ended and its response is written: the
// connection closes (Connection: close) or serves what is buffered next;
// a stream's response ends (flushStream), an h2 connection reads again
// or closes (h2After).
func (l *eventLoop) after(c *cconn) {
	switch c.xp {
	case xpStream:
		l.flushStream(c) // the end of the stream's response
		return
	case xpH2:
		l.h2After(c)
		return
	}
	if !c.busy() && len(c.out) == 0 {
		// (The response buffer's memory and file go back.)
		l.dropResp(c)
	}
	if c.fd >= 0 && c.xp == xpTLS && !c.busy() && len(c.out) == 0 && c.linger == 0 && !c.closing {
		before := c.n
		if !l.pullTLS(c) {
			return
		}
		if c.n > before {
			c.gotAny = true
		}
	}
	switch {
	case c.fd < 0 || c.busy() || len(c.out) > 0 || c.linger != 0:
	case c.closing:
		l.lingerClose(c)
	case c.n > 0 && !c.inProc:
		l.process(c)
	case !c.inProc:
		// Idle, nothing buffered: its buffers go back (process gives
		// them back itself when it ends).
		l.idleBufs(c)
	}
}

// cut cuts the client's response of an exchange aborted for o (aborted):
// a stream is reset (CANCEL when the client went or stopped reading,
// INTERNAL_ERROR for a response cut short; its connection goes on);
// a connection is closed, unless the client is what went.
func (l *eventLoop) cut(c *cconn, o pipeline.Outcome) {
	if c.xp == xpStream {
		code := h2srv.InternalError
		if o == pipeline.OutClientGone {
			code = h2srv.Cancel
		}
		l.streamEnd(c, code)
		return
	}
	l.dropResp(c) // the rest of the response is not sent
	if c.fd >= 0 && o != pipeline.OutClientGone {
		c.out = c.out[:0]
		l.closeClient(c)
	}
}

// closeClient closes c now, ending any exchange on it: an h2
// connection's streams first (h2Close), a TLS connection's close_notify
// before the close (not in a lingering close, which sent it).
func (l *eventLoop) closeClient(c *cconn) {
	if c.fd < 0 {
		return
	}
	if c.busy() {
		l.abort(c, pipeline.OutClientGone)
	}
	if c.xp == xpH2 {
		l.h2Close(c)
	}
	l.dropResp(c)
	l.forget(c)
	if c.xp.sealed() && c.linger == 0 {
		l.closeNotify(c)
	}
	l.sys.Close(c.fd)
	c.fd = -1
	l.ff.conns.Add(-1)
	l.idleTLS(c)
}
