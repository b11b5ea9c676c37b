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
// negotiated h2 carries an h2Link: the loop reads and opens its records as
// for HTTP/1.1 and feeds the plaintext to the connection's core (package
// proxy/h2srv) through H2Conn, which package proxy implements. Each stream
// the loop can finish itself -- a request that ended with its head, for an
// app the loops serve -- becomes a stream connection: a cconn with no
// socket (fd -1, str set) whose c.in is the stream's head written as an
// HTTP/1.1 request, and whose exchange is the plain path's, unchanged
// (admission, parking, relay, retries, termination, the access log). What
// that exchange writes to c.out, an HTTP/1.1 response, flushStream turns
// into the core's HEADERS and DATA; the connection's output is taken from
// the core, sealed and written once per loop round (flushDirty), however
// many streams answered in it. Every other stream (a body, a suspect
// connection, an app the loops do not serve) runs on package proxy's
// workers as on a goroutine connection, writing through the same core
// under H2Conn's lock; a worker that leaves output wakes the loop.

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
	headID  uint32
	headAt  int64
}

// h2str is the HTTP/2 side of a stream connection.
type h2str struct {
	p       *cconn // the client connection
	s       *h2srv.Stream
	idx     int  // in p.h2.streams
	started bool // its exchange began (startStream)
	reset   bool // reset by the client before it began
	headOut bool // the response head is in the core
	ended   bool // the response's end (or a reset) is in the core
	blocked bool // response data waits for the client's window
	tail    bool // the exchange ended; its last data waits for window (h2Sweep times it)
	pend    int  // what waited for window when the stream was last looked at (stalled)
	chunked bool
	ct      pipeline.ChunkTracker
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
	c.h2 = h
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
		out := h.d.TakeOutput(h.spare)
		h.spare = nil
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
	}
}

// h2Read feeds what readTLS opened into c.in to the core, records after
// records, and acts on what came of it.
func (l *eventLoop) h2Read(c *cconn) {
	h := c.h2
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
		if sc == nil || sc.str == nil || sc.str.s != e.S {
			continue
		}
		switch e.Kind {
		case h2srv.EvReset:
			switch {
			case !sc.str.started:
				sc.str.reset = true
			case sc.busy():
				l.abort(sc, pipeline.OutClientGone)
			default:
				l.streamEnd(sc, 0)
			}
		case h2srv.EvWritable:
			switch {
			case sc.str.tail:
				l.streamEnd(sc, 0)
			case sc.str.started && (sc.busy() || sc.buffered()):
				l.flushStream(sc)
			}
		}
	}
	h.evs = h.evs[:0]
	for i := 0; i < len(h.started); i++ {
		sc := h.started[i]
		h.started[i] = nil
		if sc.str == nil {
			continue
		}
		if c.fd < 0 || h.failed || sc.str.reset {
			l.streamEnd(sc, 0)
			continue
		}
		l.startStream(sc)
	}
	h.started = h.started[:0]
}

// takeStream decides, under the connection's lock (H2Conn.Feed), whether
// the loop runs s: a request that ended with its head, on a connection
// that is not suspect (the workers hold those a moment, h2guard), whose
// head written as HTTP/1.1 fits a buffer and is one the plain path serves
// (takes). The stream connection is made here; its exchange starts after
// Feed (h2Events).
func (l *eventLoop) takeStream(c *cconn, s *h2srv.Stream) bool {
	h := c.h2
	if !s.EndedByHead() || h.core.Suspect() || h.failed || c.fd < 0 || l.ff.draining.Load() ||
		string(s.Method()) == "CONNECT" {
		return false
	}
	rt := l.ff.cfg.Routes.Load()
	a := rt.Lookup(s.Authority())
	if a == nil || !a.LoopOK {
		return false
	}
	buf := l.getSmall()
	b := appendH2Request(buf[:0], s, a.ReqID, a.LoadHeader)
	if cap(b) != cap(buf) {
		// Larger than a small buffer: a loop buffer, if it fits.
		l.putBuf(buf)
		if len(b) > loopBufSize {
			return false
		}
		buf = l.getBuf()
		b = append(buf[:0], b...)
	}
	buf = buf[:cap(buf)]
	sc := &cconn{fd: -1, peer: c.peer, in: buf, n: len(b), lastNs: l.nowNs, events: unix.EPOLLIN | unix.EPOLLRDHUP}
	sc.ex.activeIdx, sc.ex.parkIdx = -1, -1
	if pipeline.ParseRequestHead(buf[:sc.n], &l.h) != pipeline.HeadOK {
		l.putBuf(buf)
		return false
	}
	if _, _, ok := l.takes(sc, buf[:sc.n], &l.h); !ok {
		l.putBuf(buf)
		return false
	}
	sc.str = &h2str{p: c, s: s, idx: len(h.streams)}
	s.User = sc
	h.streams = append(h.streams, sc)
	h.started = append(h.started, sc)
	return true
}

// appendH2Request writes s's head as an HTTP/1.1 request: the request
// line, Host from :authority, the fields the header policy keeps for the
// HTTP/1.1 path (pipeline.H2Skip: as the workers' copy does), and the
// cookie fields joined into one (RFC 9113 §8.2.3).
func appendH2Request(b []byte, s *h2srv.Stream, reqID, load string) []byte {
	b = append(b, s.Method()...)
	b = append(b, ' ')
	b = append(b, s.Path()...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, s.Authority()...)
	b = append(b, "\r\n"...)
	cookies := 0
	for i := range s.NumFields() {
		k, v := s.Field(i)
		if string(k) == "cookie" {
			cookies++
			continue
		}
		if pipeline.H2Skip(k, reqID, load) {
			continue
		}
		b = append(append(append(append(b, k...), ": "...), v...), "\r\n"...)
	}
	if cookies > 0 {
		b = append(b, "cookie: "...)
		first := true
		for i := range s.NumFields() {
			if k, v := s.Field(i); string(k) == "cookie" {
				if !first {
					b = append(b, "; "...)
				}
				first = false
				b = append(b, v...)
			}
		}
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

// startStream runs a taken stream's exchange as the plain path runs a
// request (serve).
func (l *eventLoop) startStream(sc *cconn) {
	sc.str.started = true
	b := sc.in[:sc.n]
	if pipeline.ParseRequestHead(b, &l.h) != pipeline.HeadOK || !l.serve(sc, b, &l.h) {
		// The route changed between take and now (a reload): the
		// stream was not processed, and the client may retry it.
		l.streamEnd(sc, h2srv.RefusedStream)
	}
}

// flushStream is flush for a stream connection: the HTTP/1.1 response the
// exchange wrote to c.out goes into the core as HEADERS (hop-by-hop
// fields dropped, as the workers' copy does) and DATA (a chunked body
// decoded); at the exchange's end with END_STREAM, and the stream is
// released (the core sends what waits for window on its own). While data
// waits for the client's window the backend is not read, as while c.out
// waits for a plain client.
func (l *eventLoop) flushStream(c *cconn) {
	str := c.str
	p := str.p
	h := p.h2
	core := h.core
	var end, outFull bool
	pend := 0
	for {
		// What the response buffer holds goes into the core piece by
		// piece while the stream's window takes it (the core holds at
		// most a window and a piece); its end is the response's end.
		more := c.buffered()
		end = !c.busy() && !more
		h.d.Lock()
		if !str.ended {
			b := c.out
			if !str.headOut {
				if len(b) == 0 || pipeline.ParseResponseHead(b, &l.sh) != pipeline.HeadOK {
					if end || len(b) > 0 {
						core.ResetStream(str.s, h2srv.InternalError)
						str.ended = true
					}
					b = nil
				} else {
					sh := &l.sh
					str.headOut, str.chunked = true, sh.Chunked
					core.Headers(sh.Status)
					for i := 0; i < sh.NFields; i++ {
						switch sh.Kinds[i] {
						case pipeline.KindConnection, pipeline.KindTransferEncoding, pipeline.KindUpgrade, pipeline.KindHopByHop:
							continue
						}
						f := &sh.Fields[i]
						core.Field(f.Name.Of(b), f.Value.Of(b))
					}
					b = l.streamBody(str, b[sh.N:])
					if end && len(b) == 0 {
						core.EndHeaders(str.s, true)
						str.ended = true
					} else {
						core.EndHeaders(str.s, false)
					}
				}
			} else {
				b = l.streamBody(str, b)
			}
			if !str.ended && str.headOut && (len(b) > 0 || end) {
				core.WriteData(str.s, b, end)
				str.ended = end
			}
		}
		pend = 0
		if !core.Closed(str.s) {
			pend = core.Pending(str.s)
		}
		// A client whose windows are open but which reads slowly: the
		// connection's output is bounded too (h2Flush resumes the stream).
		outFull = len(core.Output()) >= h2OutLimit || len(p.out) >= h2OutLimit
		h.d.Unlock()
		c.out = c.out[:0]
		if !more || str.ended || pend > 0 || outFull {
			break
		}
		if !l.refill(c) {
			return
		}
	}
	l.h2Dirty(p)
	if end {
		if pend > 0 && !str.tail {
			// The end waits for the client's window: the stream is
			// kept (its EvWritable, a reset or write_timeout without
			// progress ends it: h2Events, h2Sweep), so that a client
			// that never opens its window cannot hold it for ever.
			str.tail, str.pend, c.outAt = true, pend, l.nowNs
			return
		}
		if pend == 0 {
			l.streamEnd(c, 0)
		}
		return
	}
	str.blocked = pend > 0 || outFull
	if outFull {
		h.outWait = true
	}
	if pend > 0 {
		// Waiting for the client's window: write_timeout runs (the
		// sweep, stalled); waiting for the connection's output alone,
		// the connection's own write timeout does.
		if c.outAt == 0 || pend != str.pend {
			c.outAt, str.pend = l.nowNs, pend
		}
	} else {
		c.outAt = 0
	}
	// The backend is read again once the window took everything, or
	// while the response buffer has room.
	l.resumeBackend(c)
}

// stalled tells whether a stream connection whose write timeout has run
// out made no progress meanwhile: the client took none of what waits for
// its window. Progress restarts the timeout (as a worker's waitSent does).
func (l *eventLoop) stalled(c *cconn) bool {
	str := c.str
	if str == nil {
		return true
	}
	h := str.p.h2
	h.d.Lock()
	pend := 0
	if !h.core.Closed(str.s) {
		pend = h.core.Pending(str.s)
	}
	h.d.Unlock()
	if pend > 0 && pend != str.pend {
		str.pend, c.outAt = pend, l.nowNs
		return false
	}
	return true
}

// streamHead is startResponse's head for a stream: the backend's head
// (parsed as rh from data) under the same response policy as for an
// HTTP/1.1 client (respField, without the connection-specific fields h2
// forbids), the request ID added, queued as HEADERS; with END_STREAM when
// no body follows.
func (l *eventLoop) streamHead(c *cconn, data []byte, rh *pipeline.RawHead, strip bool) {
	str, ex := c.str, &c.ex
	h := str.p.h2
	core := h.core
	noBody := ex.mode == bodyNone || ex.mode == bodyLength && ex.remain == 0
	l.reqID = append(l.reqID[:0], ex.a.ReqID...)
	h.d.Lock()
	core.Headers(rh.Status)
	for i := 0; i < rh.NFields; i++ {
		v, keep := l.respField(data, rh, i, strip, ex.a.ReqID, true)
		if !keep {
			continue
		}
		f := &rh.Fields[i]
		if v == nil {
			v = f.Value.Of(data)
		}
		core.Field(f.Name.Of(data), v)
	}
	core.Field(l.reqID, ex.id)
	core.EndHeaders(str.s, noBody)
	h.d.Unlock()
	str.headOut, str.chunked, str.ended = true, rh.Chunked, noBody
	l.h2Dirty(str.p)
}

// streamBody is the DATA of body bytes b: b itself, or decoded from
// chunked (into the loop's scratch).
func (l *eventLoop) streamBody(str *h2str, b []byte) []byte {
	if !str.chunked || len(b) == 0 {
		return b
	}
	out, _, _, _ := str.ct.Decode(l.dechunk[:0], b)
	l.dechunk = out
	return out
}

// streamEnd releases a stream connection's stream (reset with code first
// when it is still open and code is not 0) and forgets it. The cconn
// then reads as a closed client (fd -1, str nil) to whoever still holds
// it.
func (l *eventLoop) streamEnd(c *cconn, code h2srv.ErrCode) {
	str := c.str
	if str == nil {
		return
	}
	c.str = nil
	p := str.p
	h := p.h2
	h.d.Lock()
	if code != 0 && !h.core.Closed(str.s) {
		h.core.ResetStream(str.s, code)
	}
	h.core.Release(str.s)
	h.d.Unlock()
	if i := str.idx; i < len(h.streams) && h.streams[i] == c {
		last := h.streams[len(h.streams)-1]
		h.streams[i] = last
		if last != c {
			last.str.idx = i
		}
		h.streams[len(h.streams)-1] = nil
		h.streams = h.streams[:len(h.streams)-1]
	}
	l.dropResp(c)
	l.putBuf(c.in)
	c.in, c.n = nil, 0
	p.lastNs = l.nowNs
	if p.fd >= 0 {
		l.h2Dirty(p)
	}
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
			if (sc.str.tail || !sc.busy() && sc.buffered()) && sc.outAt != 0 && l.nowNs-sc.outAt > w && l.stalled(sc) {
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
