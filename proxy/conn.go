package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// idleConn is a backend connection whose read and write deadlines are
// "idle" deadlines, like nginx's proxy_read_timeout: each Read or Write must
// make progress within timeout. fasthttp sets one absolute deadline per
// exchange, which would cut long streamed bodies; idleConn owns the
// deadlines instead and ignores the ones fasthttp sets.
//
// Deadlines are refreshed at most every timeout/16, so a busy connection
// pays for one SetDeadline call in sixteen reads, not one per read.
type idleConn struct {
	net.Conn
	timeout   *atomic.Int64 // nanoseconds; shared with the upstream so a reload applies at once
	readSet   int64         // when the read deadline was last pushed (monoBase ns; 0: push at the next Read)
	writeSet  int64
	readT     int64 // the timeout the last read deadline was pushed with
	writeT    int64
	readDead  bool // a timeout expired on this conn
	writeDead bool
	addr      connAddr // RemoteAddr: the address and this conn (abort.go)
	laddr     net.Addr // LocalAddr, taken once (fasthttp asks per response)
	// term is the termination state of the exchange in progress on this
	// connection, while its timer is armed (term.go): the first response
	// byte read disarms it. Nil for any other exchange: one atomic load
	// per Read.
	term atomic.Pointer[pipeline.Term]
	// owner is the h2 exchange bound to this connection (abortable.bind);
	// killed is set when that exchange's stream reset closed it
	// (abortable.abort). A connection fasthttp has already put back in
	// its pool can be closed so, before the exchange unbinds: whoever
	// uses it next fails with errConnAborted, which is not the backend's
	// failure (relay).
	owner  atomic.Pointer[abortable]
	killed atomic.Bool
	// alert: where a TLS alert read here is recorded (nil: plain TCP).
	alert *atomic.Pointer[error]
	// chunked is set while a chunked response body is read from this
	// connection (markChunked), until the next request is written: an end
	// of stream then is a truncated body, not the body's end.
	chunked atomic.Bool
}

// markChunked tells resp's connection that its chunked body is being
// read: fasthttp's body stream takes the connection closing where the
// next chunk's size should be as the body's end and gives io.EOF, and
// the client would get a complete-looking answer. Marked, the closing
// reads as io.ErrUnexpectedEOF, which fails the client's response (cut,
// not ended with a last chunk), as the event loops do.
func markChunked(resp *fasthttp.Response) {
	if !resp.IsBodyStream() || resp.Header.ContentLength() != -1 {
		return
	}
	if a, ok := resp.RemoteAddr().(*connAddr); ok {
		if ic, ok := a.c.(*idleConn); ok {
			ic.chunked.Store(true)
		}
	}
}

// RemoteAddr names the backend and this connection (abortBody.bind).
func (c *idleConn) RemoteAddr() net.Addr { return &c.addr }

// LocalAddr is the address taken at connect.
func (c *idleConn) LocalAddr() net.Addr { return c.laddr }

func (c *idleConn) refresh(last, pushed *int64, set func(time.Time) error) error {
	t := c.timeout.Load()
	if t != *pushed {
		// Changed by a reload (or off): push (or clear) at once.
		*pushed, *last = t, 0
		if t <= 0 {
			return set(time.Time{})
		}
	}
	if t <= 0 {
		return nil
	}
	now := time.Now()
	n := int64(now.Sub(monoBase)) // monotonic: a step of the wall clock moves nothing
	if *last != 0 && n-*last < t/16 {
		return nil
	}
	*last = n
	return set(now.Add(time.Duration(t)))
}

// monoBase is the origin of idleConn's push times (monotonic nanoseconds
// since it; never 0 after the first instant, which is what "never pushed"
// needs).
var monoBase = time.Now().Add(-time.Second)

func (c *idleConn) Read(b []byte) (int, error) {
	if c.killed.Load() {
		return 0, errConnAborted
	}
	if err := c.refresh(&c.readSet, &c.readT, c.Conn.SetReadDeadline); err != nil {
		return 0, c.aborted(err)
	}
	n, err := c.Conn.Read(b)
	if err == io.EOF && c.chunked.Load() {
		err = io.ErrUnexpectedEOF
	}
	if err != nil && c.alert != nil && tlsRefused(err) {
		c.alert.Store(&err)
	}
	if err != nil {
		err = c.aborted(err)
	}
	if n > 0 {
		if t := c.term.Load(); t != nil {
			c.term.Store(nil)
			if !t.Disarm() {
				// The termination timer won the latch first and is
				// closing this connection: the bytes must not reach
				// fasthttp, or a whole small response would end the
				// exchange and put the connection back in the pool,
				// where the timer would then close it under another
				// request. Failing the read makes fasthttp drop it.
				return 0, errTermCut
			}
		}
	}
	return n, err
}

// errTermCut fails the read that lost the race to the termination timer
// (idleConn.Read); relay ends such an attempt as cut, never retried.
var errTermCut = errors.New("proxy: exchange cut by early termination")

func (c *idleConn) Write(b []byte) (int, error) {
	if c.killed.Load() {
		return 0, errConnAborted
	}
	if err := c.refresh(&c.writeSet, &c.writeT, c.Conn.SetWriteDeadline); err != nil {
		return 0, c.aborted(err)
	}
	if c.chunked.Load() {
		c.chunked.Store(false) // a new request: the last body ended
	}
	n, err := c.Conn.Write(b)
	if err != nil {
		err = c.aborted(err)
	}
	return n, err
}

// aborted names err errConnAborted when a stream reset closed the
// connection (killed).
func (c *idleConn) aborted(err error) error {
	if c.killed.Load() {
		return errConnAborted
	}
	return err
}

// errConnAborted is the error of a backend connection closed by an h2
// stream reset (abortable.abort): the exchange that reset it ends as
// client gone; any other that finds the connection so (it went back to
// the pool first) is retried as on a stale keep-alive connection, and the
// backend is not blamed.
var errConnAborted = errors.New("proxy: backend connection closed by a client's stream reset")

// fasthttp calls SetWriteDeadline before writing each request and
// SetReadDeadline after, with no deadline (HostClient sets no timeouts);
// idleConn owns the deadlines. The read call marks the start of the
// wait for the response, so the next Read pushes a fresh deadline: the
// backend gets the whole timeouts.response for its first byte. The write
// call is ignored: a request written on a connection back from the pool
// has at least 15/16 of the timeout (one pushed timeout/16 ago or more is
// pushed again by refresh), and a push per request there cost a runtime
// timer update, about 2% of the h2 path's CPU.
func (c *idleConn) SetReadDeadline(time.Time) error  { c.readSet = 0; return nil }
func (c *idleConn) SetWriteDeadline(time.Time) error { return nil }
func (c *idleConn) SetDeadline(time.Time) error      { c.readSet = 0; return nil }

// dialError marks a failure to connect: nothing was sent, so the request may
// safely be retried on another backend.
type dialError struct{ err error }

func (e *dialError) Error() string { return "connect: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

func isDialError(err error) bool {
	var d *dialError
	return errors.As(err, &d)
}

// dialer dials a backend with a connect timeout and wraps the conn. When
// the app speaks TLS to its backends (tlsCfg holds a config: backends.tls,
// read at each dial so a reload applies to new connections), the
// handshake runs inside the same connect timeout; its failure is a
// dialError too (nothing was sent), with the cause.
//
// alert, when not nil, receives a TLS alert read on the connection after
// its handshake (pipeline.Upstream.Alert).
func dialer(connect *atomic.Int64, idle *atomic.Int64, tlsCfg *atomic.Pointer[tls.Config], alert *atomic.Pointer[error]) func(addr string) (net.Conn, error) {
	return func(addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(connect.Load()))
		defer cancel()
		d := net.Dialer{KeepAlive: 30 * time.Second}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, &dialError{err: err}
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		if cfg := tlsCfg.Load(); cfg != nil {
			tc, err := tlsClient(ctx, c, addr, cfg)
			if err != nil {
				c.Close()
				return nil, &dialError{err: err}
			}
			c = tc
		}
		ic := &idleConn{Conn: c, timeout: idle}
		if _, ok := c.(*tls.Conn); ok {
			ic.alert = alert
		}
		ic.addr = connAddr{Addr: c.RemoteAddr(), c: ic}
		ic.laddr = c.LocalAddr()
		return ic, nil
	}
}
