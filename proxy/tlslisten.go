package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/sentry-proxy/sentry/internal/tls13"
)

// tlsListener terminates TLS for a front end and splits connections by
// ALPN: h2 connections are served here (sentry's own h2 server, h2own.go,
// or x/net/http2's), HTTP/1.1 ones are
// handed to fasthttp through Accept (in a drainConn). With cfg nil it is
// the h2c listener of a plain front end instead (h2c.go): no TLS, the
// split is by the first bytes, the HTTP/2 preface or not, and what it
// hands to fasthttp is the plain connection (drainListener wraps it).
//
// fasthttp cannot drain h2 connections handed to a NextProto handler: it
// counts them as new connections that never became active, and a shutdown
// closes any such connection older than five seconds, cutting the streams
// on it. Kept out of fasthttp's sight, h2 connections are drained the h2
// way instead: GOAWAY, then each connection closes once its streams end
// (see drain). Handshakes also move off fasthttp's workers into their own
// goroutines, bounded by the read-header timeout.
//
// With loops for TLS (tlsloop_linux.go), an HTTP/1.1 connection over TLS
// 1.3 is given to them after its handshake (adopt) instead of to fasthttp;
// what they hand back (pumpHanded) comes out of Accept like the rest. An h2
// connection over TLS 1.3 is given to them too (adoptH2, h2loop_linux.go)
// instead of being served here.
type tlsListener struct {
	net.Listener // the TCP listener
	fe           *frontend
	cfg          *tls.Config
	h2           func(net.Conn) // serves one h2 connection; returns when it ends
	timeout      time.Duration  // handshake deadline
	maxConns     int            // server.max_conns: live and fe.heldElsewhere together
	// adopt, when the event loops serve HTTP/1.1 over TLS
	// (tlsloop_linux.go), takes a TLS 1.3 connection from here, whose
	// handshake ran over tap (the record state is taken from it), and out
	// of live once the loops count it; false leaves it on crypto/tls and
	// fasthttp, in live.
	adopt func(tc *tls.Conn, raw net.Conn, tap *tls13.Tap) bool
	// adoptH2, when the event loops serve h2 over TLS (h2loop_linux.go),
	// gives them a handshaken h2 connection, as adopt does; false leaves
	// it here.
	adoptH2 func(tc *tls.Conn, raw net.Conn, tap *tls13.Tap) bool
	handed  net.Listener // the loops' hand-offs, fed to Accept (pumpHanded); nil without loops

	conns  chan net.Conn // handshaken HTTP/1.1 connections for fasthttp
	closed chan struct{}
	once   sync.Once
	err    error

	mu struct {
		sync.Mutex
		live map[net.Conn]struct{} // handshaking or serving h2 (raw conns)
	}
	wg sync.WaitGroup // the accept loop, handshakes and h2 connections
}

func newTLSListener(ln net.Listener, fe *frontend, cfg *tls.Config, timeout time.Duration, maxConns int, h2 func(net.Conn)) *tlsListener {
	l := &tlsListener{Listener: ln, fe: fe, cfg: cfg, h2: h2, timeout: timeout, maxConns: maxConns,
		conns: make(chan net.Conn), closed: make(chan struct{})}
	l.mu.live = map[net.Conn]struct{}{}
	return l
}

// start begins accepting. Decision: not in newTLSListener, so that
// startTLSLoops sets adopt and handed, which the handshakes and Close
// read, before any connection is taken (connections arriving meanwhile
// wait in the kernel's backlog).
func (l *tlsListener) start() {
	l.wg.Add(1)
	go l.acceptLoop()
}

func (l *tlsListener) acceptLoop() {
	defer l.wg.Done()
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			l.Close()
			return
		}
		if l.cfg == nil && !l.fe.route.Load().H2C {
			// h2c turned off by a reload: connections go to fasthttp
			// as they come, and a preface gets its 400 there.
			select {
			case l.conns <- c:
			case <-l.closed:
				c.Close()
			}
			continue
		}
		// Behind the event loops (h2c on a plain listener), every
		// connection here was taken by the loops under the same cap and
		// handed off; refusing it now would cut a request already read.
		capped := l.maxConns > 0 && (l.cfg != nil || l.fe.loops.Load() == nil)
		// live, then the others: a connection moving to the loops is
		// counted there before it leaves live (adoptTLSConn), so this
		// order sees it at least once. Only this goroutine adds new
		// connections to live, so the check and the add need not be
		// one critical section.
		full := false
		if capped {
			full = l.liveCount()+l.fe.heldElsewhere() >= l.maxConns
		}
		if !full {
			l.enter(c)
		}
		if full {
			// server.max_conns is one cap on the listener's
			// connections: those here (in the TLS handshake, being
			// sniffed for h2c, or serving h2) and those fasthttp and
			// the loops hold. Refuse at once, before any handshake
			// work; the loops' own check after a handshake (a sealed
			// 503) is left for the connections accepted meanwhile.
			c.Close()
			l.fe.p.metrics.clientErrors.WithLabelValues(l.fe.addr, "too_many_conns").Inc()
			continue
		}
		l.wg.Add(1)
		if l.cfg == nil {
			go l.sniff(c)
		} else {
			go l.handshake(c)
		}
	}
}

func (l *tlsListener) handshake(raw net.Conn) {
	defer l.wg.Done()
	handedOff := false
	defer func() {
		if !handedOff {
			raw.Close()
		}
		l.leave(raw)
	}()
	// With loops to take it over, the handshake runs over a Tap, from
	// which the loops take the record state (package internal/tls13); a
	// connection they do not take goes on over the Tap released, which
	// then passes everything through.
	var tap *tls13.Tap
	conn := raw
	if l.adopt != nil || l.adoptH2 != nil {
		tap = tls13.NewTap(raw, true)
		conn = tap
	}
	tc := tls.Server(conn, l.cfg)
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		return
	}
	if tc.ConnectionState().NegotiatedProtocol == "h2" {
		// The loops take it out of live once they count it.
		if l.adoptH2 != nil && l.adoptH2(tc, raw, tap) {
			handedOff = true
			return
		}
		if tap != nil {
			tap.Release()
		}
		l.h2(tc)
		return
	}
	if l.adopt != nil && l.adopt(tc, raw, tap) {
		handedOff = true
		return
	}
	if tap != nil {
		tap.Release()
	}
	// Out of live before fasthttp has it: max_conns must not count it
	// twice (an accept meanwhile would be refused for a connection on its
	// way). fasthttp counts it once its Accept has returned it, so a
	// reader may miss it for that instant; fasthttp has no earlier hook.
	l.leave(raw)
	select {
	case l.conns <- (drainTLSConn{drainConn: &drainConn{Conn: tc, fe: l.fe}, tc: tc}):
		handedOff = true
	case <-l.closed:
	}
}

// Accept returns the next handshaken HTTP/1.1 connection.
func (l *tlsListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// pumpHanded feeds Accept the connections the loops hand off (already
// TLS: tls13.Conn), until the listener closes.
func (l *tlsListener) pumpHanded(h net.Listener) {
	l.handed = h
	go func() {
		for {
			c, err := h.Accept()
			if err != nil {
				return
			}
			st, ok := c.(tlsStater)
			if !ok {
				c.Close()
				continue
			}
			select {
			case l.conns <- (drainTLSConn{drainConn: &drainConn{Conn: c, fe: l.fe}, tc: st}):
			case <-l.closed:
				c.Close()
			}
		}
	}()
}

// enter puts c back in live (an adoption the loops refused).
func (l *tlsListener) enter(c net.Conn) {
	l.mu.Lock()
	l.mu.live[c] = struct{}{}
	l.mu.Unlock()
}

// leave takes c out of live: it is closed, or handed to the loops or
// fasthttp, which count it from then on. A second call does nothing.
func (l *tlsListener) leave(c net.Conn) {
	l.mu.Lock()
	delete(l.mu.live, c)
	l.mu.Unlock()
}

// liveCount is the connections handshaking or serving h2 (max_conns
// counts them beside the loops' and fasthttp's).
func (l *tlsListener) liveCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.mu.live)
}

// Close stops accepting. Connections being handshaken or served over h2
// are left to drain.
func (l *tlsListener) Close() error {
	l.once.Do(func() {
		close(l.closed)
		l.err = l.Listener.Close()
		if l.handed != nil {
			_ = l.handed.Close()
		}
	})
	return l.err
}

// drain waits for the h2 connections (and handshakes) to end, calling
// goaway every 100ms so that connections that appear meanwhile are told
// too. When ctx is done first, whatever is left is closed.
func (l *tlsListener) drain(ctx context.Context, goaway func()) error {
	l.Close()
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		goaway()
		select {
		case <-done:
			return nil
		case <-t.C:
		case <-ctx.Done():
			l.mu.Lock()
			for c := range l.mu.live {
				c.Close()
			}
			l.mu.Unlock()
			<-done
			return ctx.Err()
		}
	}
}
