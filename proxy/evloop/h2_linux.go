//go:build linux

package evloop

import (
	"crypto/tls"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/sentry-proxy/sentry/internal/tls13"
	"github.com/sentry-proxy/sentry/proxy/h2srv"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// h2_linux.go: HTTP/2 over TLS on the loops. An adopted connection that
// negotiated h2 (xpH2) carries an h2Link: the loop reads and opens its
// records as for HTTP/1.1 and feeds the plaintext to the connection's
// core (package proxy/h2srv) through H2Conn, which package proxy
// implements. Each stream the loop can finish itself -- a request that
// ended with its head, for an app the loops serve -- becomes a stream
// connection (stream_linux.go) whose exchange is the plain path's: the
// same core (package proxy/exchange), from a neutral head over the
// stream's arena, its answer going into the connection's core as HEADERS
// and DATA. The connection's output is taken from the core, sealed and
// written once per loop round (flushDirty), however many streams answered
// in it. Every other stream (a body, a suspect connection, an app the
// loops do not serve) runs on package proxy's workers as on a goroutine
// connection, writing through the same core under H2Conn's lock; a worker
// that leaves output wakes the loop.

// H2Conn is the shared side of an HTTP/2 connection a loop serves: its core
// under a lock, and the workers that run the streams the loop does not
// take. Package proxy's ownConn implements it (loop mode).
type H2Conn interface {
	// SetWake gives the connection the call by which a worker tells the
	// loop that there is output or that the connection may be done
	// (never called with the connection's lock held by the loop).
	SetWake(wake func())
	// Feed feeds b, plaintext read from the client, to the core and acts
	// on the events: take is asked, under the lock, about every new
	// stream (true: the loop runs it, and has set its User); the other
	// streams go to the workers. Events of the loop's streams are
	// appended to evs. An error is a connection error: the output holds
	// the GOAWAY, and the connection is to be closed once it is written.
	Feed(b []byte, take func(*h2srv.Stream) bool, evs []h2srv.Event) ([]h2srv.Event, error)
	// Lock and Unlock guard Core's use by the loop (its streams' answers).
	Lock()
	Unlock()
	Core() *h2srv.Conn
	// TakeOutput takes the core's output (locking), spare becoming its
	// buffer; workers waiting for room are told.
	TakeOutput(spare []byte) []byte
	// Status is what the loop's timers and closes need (locking).
	Status() H2Status
	// GoAway starts a graceful close (locking).
	GoAway()
	// Closed tells that the loop closed the connection: the workers'
	// streams are cancelled and nothing more is written.
	Closed()
}

// H2Status is an h2 connection's state as H2Conn.Status reports it.
type H2Status struct {
	Busy      bool   // a stream is open or a worker holds one
	GoingAway bool   // GOAWAY sent
	Head      uint32 // a header block is in progress on this stream (0: none)
}

// h2Link is the HTTP/2 side of a client connection served by a loop.
type h2Link struct {
	d       H2Conn
	core    *h2srv.Conn
	take    func(*h2srv.Stream) bool // takeStream bound to the connection
	evs     []h2srv.Event
	started []*cconn // streams taken by the last Feed, to start
	streams []*cconn // the loop's streams not yet released
	spare   []byte
	queued  bool // in the loop's wake queue (under eventLoop.h2mu)
	dirty   bool // in the loop's dirty list
	failed  bool // a connection error: close once the GOAWAY is out
	outWait bool // a stream waits for the connection's output to be written
	closed  bool // h2Close ran
	bare    bool // the core holds no output buffer (idleBufs)
	headID  uint32
	headAt  int64
}

const (
	// h2OutLimit: the loop stops taking a connection's output from the
	// core while this much is unwritten (workers then wait for room, as
	// on a goroutine connection), and stops reading the client.
	h2OutLimit = 256 << 10
)

// AdoptH2 is Adopt for a connection that negotiated h2: h2 is its shared
// side (H2Conn), whose initial SETTINGS the loop writes first.
func (ff *Front) AdoptH2(fd int, peer netip.Addr, st *tls13.State, cs *tls.ConnectionState, h2 H2Conn) bool {
	return ff.adoptQ(adoption{fd: fd, peer: peer, st: st, cs: cs, h2: h2})
}

// adoptH2 sets up an adopted h2 connection (adopt, after addClient).
func (l *eventLoop) adoptH2(c *cconn, d H2Conn) {
	h := &h2Link{d: d, core: d.Core()}
	c.xp, c.h2 = xpH2, h
	h.take = func(s *h2srv.Stream) bool { return l.takeStream(c, s) }
	d.SetWake(func() { l.h2Wake(c) })
	if l.drainSeen {
		c.closing = true
		d.GoAway()
	}
	l.h2Dirty(c) // our SETTINGS
}

// h2Wake queues c for the loop (a worker left output, or the connection
// may be done) and wakes it.
func (l *eventLoop) h2Wake(c *cconn) {
	l.h2mu.Lock()
	if !c.h2.queued {
		c.h2.queued = true
		l.h2q = append(l.h2q, c)
	}
	l.h2mu.Unlock()
	l.wake()
}

// takeH2Wakes marks the connections workers woke the loop for.
func (l *eventLoop) takeH2Wakes() {
	l.h2mu.Lock()
	q := l.h2q
	l.h2q = l.h2qSpare[:0]
	for _, c := range q {
		c.h2.queued = false
	}
	l.h2mu.Unlock()
	for i, c := range q {
		q[i] = nil
		if c.fd >= 0 {
			c.lastNs = l.nowNs
			l.h2Dirty(c)
		}
	}
	l.h2qSpare = q[:0]
}

// h2Dirty marks c's output to be taken and written at the end of the
// loop's round (flushDirty).
func (l *eventLoop) h2Dirty(c *cconn) {
	if !c.h2.dirty {
		c.h2.dirty = true
		l.dirty = append(l.dirty, c)
	}
}

// flushDirty writes the output of every connection marked in this round:
// one record and one write for all the streams that answered.
func (l *eventLoop) flushDirty() {
	for i := 0; i < len(l.dirty); i++ {
		c := l.dirty[i]
		l.dirty[i] = nil
		c.h2.dirty = false
		if c.fd >= 0 {
			l.h2Flush(c)
		}
	}
	l.dirty = l.dirty[:0]
}

// h2Flush takes c's output from the core and writes it.
func (l *eventLoop) h2Flush(c *cconn) {
	h := c.h2
	if c.linger != 0 {
		return
	}
	if len(c.out) < h2OutLimit {
		spare := h.spare
		if spare == nil {
			spare = l.getOut()
		}
		out := h.d.TakeOutput(spare)
		h.spare, h.bare = nil, false
		switch {
		case len(out) == 0:
			h.spare = out
		case len(c.out) == 0:
			if cap(c.out) <= 64<<10 {
				h.spare = c.out[:0]
			}
			c.out = out
		default:
			c.out = append(c.out, out...)
			if cap(out) <= 64<<10 {
				h.spare = out[:0]
			}
		}
	}
	l.flush(c)
	if c.fd < 0 || c.linger != 0 {
		return
	}
	if len(c.out) >= h2OutLimit {
		if c.events&unix.EPOLLIN != 0 {
			// A client that sends without reading what it is answered.
			l.setClientEvents(c, c.events&^(unix.EPOLLIN|unix.EPOLLRDHUP))
		}
		return
	}
	if h.outWait {
		// Room again: the streams that stopped for the connection's
		// output look again (their new output is taken next round).
		h.outWait = false
		for i := 0; i < len(h.streams); i++ {
			sc := h.streams[i]
			if sc.str.blocked && (sc.busy() || sc.buffered()) {
				l.flushStream(sc) // (may end it: streamEnd moves the last stream into i)
				if i < len(h.streams) && h.streams[i] != sc {
					i--
				}
			}
		}
	}
}

// h2After is after for an h2 connection: reading resumes once the output
// is written; a connection that failed, or is going away with no stream
// left, closes.
func (l *eventLoop) h2After(c *cconn) {
	if c.fd < 0 || len(c.out) > 0 || c.linger != 0 {
		return
	}
	h := c.h2
	if h.failed {
		l.h2Close(c)
		l.lingerClose(c)
		return
	}
	if c.events&unix.EPOLLIN == 0 {
		l.setClientEvents(c, c.events|unix.EPOLLIN|unix.EPOLLRDHUP)
	}
	if len(h.streams) > 0 {
		return
	}
	if st := h.d.Status(); !st.Busy && (st.GoingAway || c.closing) {
		l.h2Close(c)
		l.lingerClose(c)
		return
	}
	if !c.inProc {
		l.idleBufs(c)
	}
}

// h2Read feeds what readTLS opened into c.in to the core, records after
// records, and acts on what came of it.
func (l *eventLoop) h2Read(c *cconn) {
	h := c.h2
	if h.bare {
		// The core gave its output buffer back while idle (idleBufs):
		// it gets one for what this read makes it write, unless a
		// worker's writing made it one meanwhile.
		h.bare = false
		h.d.Lock()
		if cap(h.core.Output()) == 0 {
			h.core.TakeOutput(l.getOut())
		}
		h.d.Unlock()
	}
	for c.n > 0 && !h.failed {
		var err error
		h.evs, err = h.d.Feed(c.in[:c.n], h.take, h.evs[:0])
		c.n = 0
		if err != nil {
			h.failed = true // nothing taken in this read starts
		}
		l.h2Events(c)
		if c.fd < 0 || h.failed || c.tls.st.Buffered() == 0 {
			break
		}
		if !l.openTLS(c) {
			return
		}
	}
	if c.fd >= 0 {
		l.h2Dirty(c)
	}
}

// h2Events acts on the events of the loop's streams, then starts the
// streams the last Feed gave the loop.
func (l *eventLoop) h2Events(c *cconn) {
	h := c.h2
	for i := range h.evs {
		e := h.evs[i]
		h.evs[i] = h2srv.Event{}
		sc, _ := e.S.User.(*cconn)
		if sc == nil || sc.xp != xpStream || sc.str.s != e.S {
			continue
		}
		switch e.Kind {
		case h2srv.EvReset:
			switch {
			case !sc.str.started():
				l.setStream(sc.str, ssRefused)
			case sc.busy():
				l.abort(sc, pipeline.OutClientGone)
			default:
				l.streamEnd(sc, 0)
			}
		case h2srv.EvWritable:
			switch {
			case sc.str.state == ssTail:
				l.streamEnd(sc, 0)
			case sc.str.started() && (sc.busy() || sc.buffered()):
				l.flushStream(sc)
			}
		}
	}
	h.evs = h.evs[:0]
	for i := 0; i < len(h.started); i++ {
		sc := h.started[i]
		h.started[i] = nil
		if sc.xp != xpStream {
			continue
		}
		if c.fd < 0 || h.failed || sc.str.state == ssRefused {
			l.streamEnd(sc, 0)
			continue
		}
		l.startStream(sc)
	}
	h.started = h.started[:0]
}

// h2Close ends every stream the loop runs on c (as gone) and tells the
// shared side (H2Conn.Closed); before c's close.
func (l *eventLoop) h2Close(c *cconn) {
	h := c.h2
	if h.closed {
		return
	}
	h.closed = true
	for len(h.streams) > 0 {
		sc := h.streams[len(h.streams)-1]
		if sc.busy() {
			l.abort(sc, pipeline.OutClientGone)
		}
		l.streamEnd(sc, 0)
	}
	h.d.Closed()
}

// h2Sweep is the sweep's look at an h2 connection with no timeout of the
// plain kind pending: a header block that takes longer than
// read_header_timeout (idle_timeout without one) gets GOAWAY and closes
// it; a stream whose end has waited for window without progress for
// write_timeout is reset; idle for idle_timeout with no stream, it gets
// GOAWAY and closes. It reports whether c left the client list.
func (l *eventLoop) h2Sweep(c *cconn) bool {
	h := c.h2
	st := h.d.Status()
	if st.Head != 0 {
		if h.headID != st.Head {
			h.headID, h.headAt = st.Head, l.nowNs
		}
		t := int64(l.ff.hdr)
		if t <= 0 {
			t = int64(l.ff.idle)
		}
		if t > 0 && l.nowNs-h.headAt > t {
			// GOAWAY, then the close once it is written (h2After).
			h.d.GoAway()
			h.failed = true
			l.h2Flush(c)
			return c.fd < 0
		}
		return false
	}
	h.headID = 0
	if w := int64(l.ff.write); w > 0 {
		for i := 0; i < len(h.streams); i++ {
			sc := h.streams[i]
			if (sc.str.state == ssTail || !sc.busy() && sc.buffered()) && sc.outAt != 0 && l.nowNs-sc.outAt > w && l.stalled(sc) {
				l.streamEnd(sc, h2srv.Cancel) // moves the last stream into i
				i--
			}
		}
	}
	if idle := int64(l.ff.idle); idle > 0 && !st.Busy && len(h.streams) == 0 && len(c.out) == 0 && l.nowNs-c.lastNs > idle {
		h.d.GoAway()
		c.closing = true
		l.h2Flush(c)
		return c.fd < 0
	}
	return false
}
