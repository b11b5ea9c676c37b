//go:build linux

package proxy

import (
	"crypto/tls"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sentry-proxy/sentry/internal/tls13"
	"github.com/sentry-proxy/sentry/proxy/evloop"
)

// tlsloop_linux.go: HTTP/1.1 over TLS on the event loops (see "Engines" in
// doc.go). A TLS listener's handshakes stay in tlsListener's
// goroutines; a TLS 1.3 connection that did not negotiate h2 is then
// given to a Front of loops of its own (no listening socket: Adopt), which
// seals and opens its records (package internal/tls13). TLS 1.2, h2 and
// whatever the Tap cannot prove (Take) stay where they were.

// selfTestWarn logs a failed tls13.SelfTest once per process;
// takeWarn, once per process, a TLS 1.3 connection with a suite the loops
// handle whose record state Take could not prove (it stays on crypto/tls:
// safe, but a sign that this Go's crypto/tls does something the Tap does
// not follow).
var selfTestWarn, takeWarn sync.Once

// startTLSLoops starts the loops of a TLS front end (fe.tls set) when the
// engine is loops and the record layer passed its self-test. They take
// HTTP/1.1 and h2 connections over TLS 1.3 alike.
func (fe *frontend) startTLSLoops() {
	if !fe.p.loops() {
		return
	}
	if err := tls13.SelfTest(); err != nil {
		selfTestWarn.Do(func() {
			fe.p.log.Warn("TLS records on the event loops unavailable; HTTP/1.1 over TLS stays on crypto/tls", "error", err)
		})
		return
	}
	cfg := fe.loopSettings(nil, -1)
	l := fe.tls
	ff, err := evloop.Start(cfg)
	if err != nil {
		fe.p.log.Warn("event loop unavailable; HTTP/1.1 over TLS stays on crypto/tls", "addr", fe.addr, "error", err)
		return
	}
	fe.loops.Store(ff)
	l.adopt = fe.adoptTLS
	l.adoptH2 = fe.adoptTLSH2
	l.pumpHanded(ff.Handed)
}

// adoptTLS gives tc's connection to the loops if it is TLS 1.3 with a
// suite they handle: its record state is taken from tap, the Tap its
// handshake ran over (which leaves tc untouched when it refuses), the
// socket duplicated for the loop, and Go's descriptor closed -- without
// close_notify, the connection goes on. False leaves tc as it was.
func (fe *frontend) adoptTLS(tc *tls.Conn, raw net.Conn, tap *tls13.Tap) bool {
	return fe.adoptTLSConn(tc, raw, tap, false)
}

// adoptTLSH2 is adoptTLS for a connection that negotiated h2: its shared
// side is an ownConn in loop mode (h2loop_linux.go). False leaves tc as
// it was, for serveOwnConn.
func (fe *frontend) adoptTLSH2(tc *tls.Conn, raw net.Conn, tap *tls13.Tap) bool {
	return fe.adoptTLSConn(tc, raw, tap, true)
}

// adoptTLSConn is adoptTLS and adoptTLSH2. raw is in its TLS listener's
// live set (fe.tls) until the loops count it. Decision: the loops count it
// first (Expect), then it leaves live, then a loop may see it (Adopt); a
// refusal moves it back the same way, into live before out of Expect: a
// reader of both counts (max_conns at accept, the listener's connections)
// never finds it in neither, however long the loop takes to register it,
// and the loops' own max_conns check at adoption counts it once.
func (fe *frontend) adoptTLSConn(tc *tls.Conn, raw net.Conn, tap *tls13.Tap, h2 bool) bool {
	ff := fe.loops.Load()
	if ff == nil || ff.Draining() || tap == nil {
		return false
	}
	fd, peer, st, cs, ok := fe.takeTLS(tc, raw, tap)
	if !ok {
		return false
	}
	ff.Expect()
	fe.tls.leave(raw)
	if h2 {
		oc := fe.newLoopOwnConn(peer)
		if ok = ff.AdoptH2(fd, peer, st, cs, oc); !ok {
			oc.Closed()
		}
	} else {
		ok = ff.Adopt(fd, peer, st, cs)
	}
	if !ok {
		fe.tls.enter(raw)
		ff.Unexpect()
		unix.Close(fd)
		return false
	}
	_ = raw.Close() // the loop's duplicate keeps the socket open
	return true
}

// takeTLS takes tc's record state (from tap, which leaves tc untouched
// when it refuses) and a non-blocking duplicate of its socket, for a
// loop. False leaves tc as it was.
func (fe *frontend) takeTLS(tc *tls.Conn, raw net.Conn, tap *tls13.Tap) (fd int, peer netip.Addr, st *tls13.State, cs *tls.ConnectionState, ok bool) {
	sec, rest, err := tap.Take(tc)
	if err != nil {
		if err != tls13.ErrUnsupported { // TLS 1.2 or a suite the layer lacks: expected
			takeWarn.Do(func() {
				fe.p.log.Warn("a TLS 1.3 connection stays on crypto/tls: its record state could not be proved", "error", err)
			})
		}
		return -1, peer, nil, nil, false
	}
	st, err = tls13.New(sec, rest)
	if err != nil {
		return -1, peer, nil, nil, false
	}
	tcp, isTCP := raw.(*net.TCPConn)
	if !isTCP {
		return -1, peer, nil, nil, false
	}
	fd, err = dupSocket(tcp)
	if err != nil {
		return -1, peer, nil, nil, false
	}
	state := tc.ConnectionState()
	peer = tcp.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	return fd, peer, st, &state, true
}

// dupSocket duplicates c's descriptor (close-on-exec, non-blocking).
func dupSocket(c syscall.Conn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var derr error
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, derr
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
