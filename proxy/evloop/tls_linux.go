//go:build linux

package evloop

import (
	"crypto/tls"
	"io"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/sentry-proxy/sentry/internal/tls13"
)

// tls_linux.go: HTTP/1.1 over TLS on the loops. Package proxy does the
// TLS 1.3 handshake with crypto/tls in its own goroutine, takes the record
// state out of the *tls.Conn (package internal/tls13) and gives the
// socket to a loop (Front.Adopt). From then on the loop opens the
// client's records into c.in (readTLS) and seals c.out into records as it
// writes it (flushTLS); everything between -- parsing, admission, relay,
// the access log -- is the plain path's, unchanged. A connection the loop
// hands off goes to fasthttp as a tls13.Conn, a blocking net.Conn over the
// same record state.

// tlsConn is the TLS side of an adopted client connection.
type tlsConn struct {
	st *tls13.State
	cs *tls.ConnectionState // the handshake's, for a hand-off (fasthttp's IsTLS, ALPN)
	// wire is sealed bytes not yet written; sealed is how much of c.out
	// they hold. c.out keeps its plaintext until wire is written, so
	// that len(c.out) > 0 still means "the client has not taken the
	// response" everywhere the loop looks (backpressure, timeouts).
	wire   []byte
	sealed int
}

// adoption is a connection queued for a loop by Adopt.
type adoption struct {
	fd   int
	peer netip.Addr
	st   *tls13.State
	cs   *tls.ConnectionState
	h2   H2Conn // negotiated h2 (AdoptH2); nil for HTTP/1.1
}

// Adopt gives the loops a TLS 1.3 client connection whose handshake is
// done: fd is the socket (non-blocking, the loop's to close), st its
// record state, cs the handshake's outcome. It reports false, keeping
// nothing, when the front is draining or stopped; the caller then closes
// fd. The connection goes to the loop holding the fewest clients.
// The caller has counted it with Expect: true hands that count to the
// loop (Conns counts it until the loop has registered it or refused it),
// false leaves it to the caller's Unexpect.
func (ff *Front) Adopt(fd int, peer netip.Addr, st *tls13.State, cs *tls.ConnectionState) bool {
	return ff.adoptQ(adoption{fd: fd, peer: peer, st: st, cs: cs})
}

func (ff *Front) adoptQ(a adoption) bool {
	if ff.draining.Load() || ff.closing.Load() {
		return false
	}
	l := ff.loops[int(ff.next.Add(1))%len(ff.loops)]
	l.adoptMu.Lock()
	if l.adoptShut {
		l.adoptMu.Unlock()
		return false
	}
	l.adopting = append(l.adopting, a)
	l.adoptMu.Unlock()
	l.wake()
	return true
}

// Draining tells whether the front has started to drain (Adopt refuses).
func (ff *Front) Draining() bool { return ff.draining.Load() }

// takeAdopted registers the connections queued by Adopt.
func (l *eventLoop) takeAdopted() {
	l.adoptMu.Lock()
	q := l.adopting
	l.adopting = l.adoptSpare[:0]
	l.adoptMu.Unlock()
	for i := range q {
		a := q[i]
		q[i] = adoption{}
		l.adopt(a)
		l.ff.expected.Add(-1) // in conns now, or refused and closed
	}
	l.adoptSpare = q[:0]
}

func (l *eventLoop) adopt(a adoption) {
	fd := a.fd
	if max := l.ff.maxConns; max > 0 && l.ff.conns.Load()+int64(l.ff.cfg.OtherConns()) >= int64(max) {
		l.ff.cfg.TooManyConns()
		refusal := tooManyConns
		if a.h2 != nil {
			// h2: our SETTINGS and a GOAWAY (no stream processed: the
			// client may retry elsewhere).
			a.h2.GoAway()
			refusal = a.h2.TakeOutput(nil)
			a.h2.Closed()
		}
		_, _ = l.sys.Write(fd, a.st.Seal(nil, refusal))
		l.sys.Close(fd)
		return
	}
	c := &cconn{fd: fd, peer: a.peer, lastNs: l.nowNs, events: unix.EPOLLIN | unix.EPOLLRDHUP,
		xp: xpTLS, tls: &tlsConn{st: a.st, cs: a.cs}}
	if !l.addClient(c) {
		if a.h2 != nil {
			a.h2.Closed()
		}
		return
	}
	if a.h2 != nil {
		l.adoptH2(c, a.h2)
	} else if l.drainSeen {
		// Queued just as the drain started (Adopt checked before it):
		// treated as startDrain treats an idle connection.
		c.grace = l.nowNs + int64(l.ff.cfg.IdleGrace)
		c.closing = true
	}
	if a.st.Buffered() > 0 {
		// crypto/tls read past the handshake: the client's first
		// records, which epoll will not report again.
		c.in = l.getBuf()
		if l.openTLS(c) && c.n > 0 {
			c.gotAny = true
			l.opened(c)
		}
	}
}

// opened acts on plaintext newly opened into c.in: the h2 core takes it,
// or the next HTTP/1.1 request is served once no exchange runs.
func (l *eventLoop) opened(c *cconn) {
	if c.xp == xpH2 {
		l.h2Read(c)
	} else if !c.busy() {
		l.process(c)
	}
}

// refuseAdopted closes what Adopt queued and stops it queueing more (the
// loop is stopping).
func (l *eventLoop) refuseAdopted() {
	l.adoptMu.Lock()
	q := l.adopting
	l.adopting, l.adoptShut = nil, true
	l.adoptMu.Unlock()
	for _, a := range q {
		l.sys.Close(a.fd)
		if a.h2 != nil {
			a.h2.Closed()
		}
		l.ff.expected.Add(-1)
	}
}

// readTLS is readClient for a TLS connection: one read of ciphertext,
// then every whole record opened into c.in. A connection left with
// nothing buffered and no exchange gives its buffers back (idleBufs).
func (l *eventLoop) readTLS(c *cconn, ev uint32) {
	l.readRecords(c, ev)
	if c.fd >= 0 && !c.inProc {
		l.idleBufs(c)
	}
}

func (l *eventLoop) readRecords(c *cconn, ev uint32) {
	t := c.tls
	if c.in == nil {
		c.in = l.getBuf()
	}
	if before := c.n; !l.openTLS(c) {
		return
	} else if c.n > before {
		// What the state held opens now: acted on at once, as if just
		// read -- nothing opened may wait in c.in for a socket event,
		// which bytes already taken from the socket never bring.
		c.lastNs = l.nowNs
		c.gotAny = true
		l.opened(c)
		if c.fd < 0 {
			return
		}
		if c.in == nil {
			c.in = l.getBuf() // process gave it back: idle again
		}
	}
	l.giveRaw(c)
	sp := t.st.RawSpace()
	if c.n == len(c.in) || len(sp) == 0 {
		if ev&(unix.EPOLLHUP|unix.EPOLLERR) != 0 {
			l.closeClient(c)
			return
		}
		// Opened bytes wait for the exchange in progress (pipelined
		// requests): stop reading until it ends (done, after).
		l.setClientEvents(c, c.events&^(unix.EPOLLIN|unix.EPOLLRDHUP))
		return
	}
	m, err := l.sys.Read(c.fd, sp)
	if err == unix.EAGAIN || err == unix.EINTR {
		return
	}
	if m <= 0 {
		l.closeClient(c)
		return
	}
	t.st.Filled(m)
	before := c.n
	if !l.openTLS(c) {
		return
	}
	if c.n == before {
		// Ciphertext that opened to nothing (part of a record, empty
		// records, a KeyUpdate) is no progress towards a request: it
		// must not hold off the read-header and idle timeouts, which a
		// client trickling a record a byte at a time would otherwise do
		// for ever (crypto/tls's reads are bounded by fasthttp's
		// deadlines whatever arrives).
		return
	}
	c.lastNs = l.nowNs
	c.gotAny = true
	l.opened(c)
}

// openTLS opens the buffered records into c.in while there is room; false
// means c was closed (a close_notify, an alert, a bad record). A KeyUpdate
// the client asked for is sent at once.
func (l *eventLoop) openTLS(c *cconn) bool {
	st := c.tls.st
	for c.n < len(c.in) {
		m, err := st.Read(c.in[c.n:])
		c.n += m
		if err != nil {
			if err != io.EOF {
				// The fatal alert the failure calls for, instead of
				// a close_notify (RFC 8446 §6.2).
				l.tlsAlert(c)
			}
			l.closeClient(c)
			return false
		}
		if m == 0 {
			break
		}
	}
	if st.WriteDue() {
		l.flush(c)
		return c.fd >= 0
	}
	return true
}

// tlsAlert writes the fatal alert a read error calls for (tls13.State's
// Alert), after whatever sealed bytes are still unwritten, best effort:
// one write, the connection closing next. The state seals nothing more.
func (l *eventLoop) tlsAlert(c *cconn) {
	t := c.tls
	t.wire = t.st.Alert(t.wire)
	for len(t.wire) > 0 {
		m, err := l.sys.Write(c.fd, t.wire)
		if err == unix.EINTR {
			continue
		}
		if m > 0 {
			t.wire = t.wire[:copy(t.wire, t.wire[m:])]
		}
		return
	}
}

// pullTLS moves records opened or buffered since c.in filled into it,
// before the loop looks for the next request (process, after).
func (l *eventLoop) pullTLS(c *cconn) bool {
	if !c.xp.sealed() || c.tls.st.Buffered() == 0 {
		return true
	}
	if c.in == nil {
		c.in = l.getBuf()
	}
	return l.openTLS(c)
}

// flushTLS is flush for a TLS connection: c.out not yet sealed is sealed
// (with a KeyUpdate first when one is due), and the records are written.
// It reports whether everything was written (c.out is then empty).
func (l *eventLoop) flushTLS(c *cconn) bool {
	t := c.tls
	if t.sealed < len(c.out) || t.st.WriteDue() {
		if t.wire == nil {
			t.wire = l.getOut()
		}
		t.wire = t.st.Seal(t.wire, c.out[t.sealed:])
		t.sealed = len(c.out)
	}
	var ok bool
	if t.wire, ok = l.writeAll(c, t.wire); !ok {
		return false
	}
	c.out = c.out[:0]
	t.sealed = 0
	if cap(t.wire) > 64<<10 {
		t.wire = nil
	}
	return true
}

// closeNotify sends close_notify, best effort, before the loop closes or
// half-closes c (not when records are half written: it would be read as
// part of them).
func (l *eventLoop) closeNotify(c *cconn) {
	t := c.tls
	if !c.xp.sealed() || len(t.wire) > 0 {
		return
	}
	var b [64]byte
	if w := t.st.CloseNotify(b[:0]); len(w) > 0 {
		_, _ = l.sys.Write(c.fd, w)
	}
}
