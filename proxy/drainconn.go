package proxy

import (
	"crypto/tls"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

const (
	// idleGrace is how long a keep-alive connection that is idle when a
	// drain starts stays open for one more request.
	idleGrace = time.Second
	// lingerTimeout bounds a lingering close: how long a connection closed
	// while draining stays half-open waiting for the client to close its
	// side.
	lingerTimeout = time.Second
)

// drainListener wraps each accepted plain-HTTP connection in a drainConn.
type drainListener struct {
	net.Listener
	fe *frontend
}

func (l *drainListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &drainConn{Conn: c, fe: l.fe}, nil
}

// drainConn makes the closes of a draining front end graceful. It wraps
// each HTTP/1.1 connection fasthttp serves (over TLS, the tls.Conn).
//
// On shutdown fasthttp closes every keep-alive connection it sees as idle,
// at once. A client may be sending its next request at that moment: it
// gets a reset (the kernel's answer to a close with unread data) or an
// end of stream instead of a response, and only a client that retries on a
// new connection gets through. So, while the front end drains:
//
//   - A close of a connection that is between requests (fasthttp's
//     StateNew or StateIdle, followed through Server.ConnState) is put off
//     once: the connection stays open for idleGrace. A request arriving
//     meanwhile is served, with Connection: close (fasthttp adds it while
//     shutting down), and the connection's goroutine closes the connection
//     after it; otherwise the wait times out and the goroutine closes it.
//     If the goroutine has already gone, fasthttp's StateClosed ends the
//     wait at once.
//   - Every other close is a lingering close, as in nginx: FIN first, so
//     the client reads the end of the stream after everything sent, not a
//     reset; whatever the client still sends is read and dropped until it
//     closes its side or lingerTimeout passes; then the socket is closed.
//
// Outside a drain, Close is a plain close.
type drainConn struct {
	net.Conn
	fe   *frontend
	idle atomic.Bool // between requests, as fasthttp last reported

	mu        sync.Mutex
	deferred  bool
	lingering bool
	closed    bool

	// Touched only by the goroutine serving the connection (fasthttp's),
	// never by the lingering close.
	rate struct {
		bl    *bodyLimits // nil: reads are not under body_min_rate
		start time.Time   // the request's start (fasthttp's StateActive)
		got   int64       // bytes read since start
		asked time.Time   // the read deadline fasthttp last set
		set   time.Time   // the read deadline in force
	}
	writeSet int64 // when the write deadline was last pushed (monoBase ns; 0: never)
	peerEOF  bool  // a Read returned io.EOF: the client closed its side

	// fin: the watch of the client's FIN while a request is relayed
	// (fin_linux.go). fd, gen and over are the watcher's, under its lock.
	fin struct {
		tried    atomic.Bool // watchFIN ran (the conn's goroutine, at its first relay)
		seen     atomic.Bool // the client closed its side, or its socket failed
		relaying atomic.Bool // a request of this conn is being relayed
		fd, gen  int32       // the registration (gen 0: none)
		over     bool        // the conn closes: never watched again
	}
}

// relayStart tells the FIN watch that a request of c is relayed from
// now on (the first one adds c to the watch). gone: the client has
// closed its side already, and the request is not to be sent.
func (c *drainConn) relayStart() (gone bool) {
	if !c.fin.tried.Load() {
		c.watchFIN()
	}
	c.fin.relaying.Store(true)
	return c.fin.seen.Load()
}

// finSeen reports whether the client has closed its side.
func (c *drainConn) finSeen() bool { return c.fin.seen.Load() }

// relayEnd tells it that the relay is over. gone: the client closed its
// side before it ended, and its request ends as client_gone.
func (c *drainConn) relayEnd() (gone bool) {
	c.fin.relaying.Store(false)
	return c.fin.seen.Load()
}

// peerClosed reports whether the client has closed its side (rateConn).
func (c *drainConn) peerClosed() bool { return c.peerEOF }

// startBodyRate puts the connection's reads under body_min_rate from
// start, when fasthttp begins reading a request (rateConn).
func (c *drainConn) startBodyRate(bl *bodyLimits, start time.Time) {
	c.rate.bl, c.rate.start, c.rate.got = bl, start, 0
}

// stopBodyRate ends it: the request (head and body) is in, or the
// connection is idle or hijacked. fasthttp's own deadlines apply again.
func (c *drainConn) stopBodyRate() {
	if c.rate.bl == nil {
		return
	}
	c.rate.bl = nil
	if !c.rate.set.Equal(c.rate.asked) {
		c.rate.set = c.rate.asked
		_ = c.Conn.SetReadDeadline(c.rate.asked)
	}
}

// SetReadDeadline records fasthttp's deadline; under body_min_rate the
// earlier of it and the rate's applies (Read).
func (c *drainConn) SetReadDeadline(t time.Time) error {
	c.rate.asked, c.rate.set = t, t
	return c.Conn.SetReadDeadline(t)
}

func (c *drainConn) SetDeadline(t time.Time) error {
	c.rate.asked, c.rate.set = t, t
	return c.Conn.SetDeadline(t)
}

// Read, under body_min_rate, sets the read deadline to when the bytes so
// far plus the next must have arrived: start + read_header_timeout +
// got/body_min_rate (bodyLimits.deadline), or fasthttp's if earlier. A
// client that sends too slowly times out in the middle of a read; fasthttp
// (before the handler) or the handler (reading the body) answers 408.
func (c *drainConn) Read(b []byte) (int, error) {
	if bl := c.rate.bl; bl != nil {
		d := bl.deadline(c.rate.start, c.rate.got)
		if a := c.rate.asked; !a.IsZero() && a.Before(d) {
			d = a
		}
		if !d.Equal(c.rate.set) {
			c.rate.set = d
			_ = c.Conn.SetReadDeadline(d)
		}
		n, err := c.Conn.Read(b)
		c.rate.got += int64(n)
		if err == io.EOF {
			c.peerEOF = true
		}
		return n, err
	}
	n, err := c.Conn.Read(b)
	if err == io.EOF {
		c.peerEOF = true
	}
	return n, err
}

// Write applies server.write_timeout as an idle timeout, as the event
// loops do: each write must make progress within it, so a client that
// reads nothing is cut while a long download at any pace is not. fasthttp's
// own WriteTimeout is a deadline per response, which would cut those. The
// deadline is pushed at most every timeout/16.
func (c *drainConn) Write(b []byte) (int, error) {
	if t := c.fe.writeIdle; t > 0 {
		now := time.Now()
		if n := int64(now.Sub(monoBase)); c.writeSet == 0 || n-c.writeSet >= int64(t/16) {
			c.writeSet = n
			_ = c.Conn.SetWriteDeadline(now.Add(t))
		}
	}
	return c.Conn.Write(b)
}

// drainConnOf is the drainConn under fasthttp's connection nc (plain or
// TLS), if any.
func drainConnOf(nc net.Conn) *drainConn {
	switch x := nc.(type) {
	case *drainConn:
		return x
	case drainTLSConn:
		return x.drainConn
	}
	return nil
}

// connState is the front end's fasthttp Server.ConnState hook.
func (fe *frontend) connState(nc net.Conn, st fasthttp.ConnState) {
	c := drainConnOf(nc)
	if c == nil {
		return
	}
	switch st {
	case fasthttp.StateNew, fasthttp.StateIdle:
		c.idle.Store(true)
		c.stopBodyRate()
	case fasthttp.StateActive:
		c.idle.Store(false)
		if fe.body.minRate > 0 {
			c.startBodyRate(&fe.body, time.Now())
		}
	case fasthttp.StateClosed:
		// fasthttp closed the conn and its goroutine is gone: a close put
		// off for the next request would wait for nothing.
		if c.fe.draining.Load() {
			c.mu.Lock()
			wait := c.deferred && !c.lingering && !c.closed
			c.mu.Unlock()
			if wait {
				_ = c.linger(true)
			}
		}
	}
}

func (c *drainConn) Close() error {
	if !c.fe.draining.Load() {
		return c.closeNow()
	}
	return c.linger(false)
}

// linger is Close while draining; force skips putting the close off.
func (c *drainConn) linger(force bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return nil
	case c.lingering:
		// The linger is over (or the conn's goroutine saw the client
		// close first): close for real.
		c.closed = true
		c.fe.lingering.Add(-1)
		c.unwatchFIN()
		return c.Conn.Close()
	case !force && !c.deferred && c.idle.Load():
		c.deferred = true
		_ = c.Conn.SetReadDeadline(time.Now().Add(idleGrace))
		return nil
	}
	cw, ok := c.Conn.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		c.closed = true
		c.unwatchFIN()
		return c.Conn.Close()
	}
	c.lingering = true
	c.fe.lingering.Add(1)
	_ = c.Conn.SetReadDeadline(time.Now().Add(lingerTimeout))
	go func() {
		_, _ = io.Copy(io.Discard, c.Conn)
		_ = c.Close()
	}()
	return nil
}

func (c *drainConn) closeNow() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	if c.lingering {
		c.fe.lingering.Add(-1)
	}
	c.unwatchFIN()
	return c.Conn.Close()
}

// SyscallConn exposes the socket (connAlive uses it).
func (c *drainConn) SyscallConn() (syscall.RawConn, error) {
	nc := c.Conn
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	if sc, ok := nc.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, syscall.EINVAL
}

// drainTLSConn is a drainConn over a tls.Conn, or over a tls13.Conn (a
// connection the event loops handed off). fasthttp recognises TLS
// connections by these two methods (RequestCtx.IsTLS, ALPN).
type drainTLSConn struct {
	*drainConn
	tc tlsStater
}

// tlsStater is what a TLS connection tells about its handshake.
type tlsStater interface {
	Handshake() error
	ConnectionState() tls.ConnectionState
}

func (c drainTLSConn) Handshake() error                     { return c.tc.Handshake() }
func (c drainTLSConn) ConnectionState() tls.ConnectionState { return c.tc.ConnectionState() }
