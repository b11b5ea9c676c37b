//go:build linux

package evloop

import (
	"golang.org/x/sys/unix"

	"github.com/sentry-proxy/sentry/proxy/exchange"
	"github.com/sentry-proxy/sentry/proxy/h2srv"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// stream_linux.go: the HTTP/2 streams a loop runs itself, each a stream
// connection (a cconn without a socket, xpStream) whose exchange is the
// plain path's: taken from its connection's core (takeStream), read as a
// neutral head over the stream's arena (streamReqHead), answered into the
// core as HEADERS (streamHead, streamReply) and DATA (flushStream), and
// released (streamEnd). Where a stream is, as its connection sees it, is
// one streamState.

// h2str is the HTTP/2 side of a stream connection.
type h2str struct {
	p       *cconn // the client connection
	s       *h2srv.Stream
	idx     int         // in p.h2.streams
	state   streamState // changed only by setStream
	blocked bool        // response data waits for the client's window or the connection's output
	pend    int         // what waited for window when the stream was last looked at (stalled)
	chunked bool
	ct      pipeline.ChunkTracker
}

// streamState is where a stream connection is, as its h2 connection sees
// it (the exchange's own State is the core's):
//
//	taken ──start──> running ──head──> head ──end──> ended ──> tail
//	  │                 └──head, no body; reset──────────^
//	  └──reset before start──> refused
//
// and from any state released (streamEnd). A stream waiting for window
// is blocked: a condition of its writing, not a state.
type streamState uint8

const (
	// ssTaken: the loop took it in Feed; its exchange starts after
	// (h2Events).
	ssTaken streamState = iota
	// ssRefused: the client reset it before its exchange started: it is
	// released, never started.
	ssRefused
	// ssRunning: its exchange runs; no response head in the core yet.
	ssRunning
	// ssHead: the response head is in the core; the body follows.
	ssHead
	// ssEnded: the response's end (END_STREAM, or a reset) is in the
	// core.
	ssEnded
	// ssTail: the exchange ended, and the end waits for the client's
	// window (h2Events' EvWritable, a reset or h2Sweep's write timeout
	// ends it).
	ssTail
	numStreamStates
)

var streamStateNames = [numStreamStates]string{ssTaken: "taken", ssRefused: "refused", ssRunning: "running",
	ssHead: "head", ssEnded: "ended", ssTail: "tail"}

func (s streamState) String() string {
	if s < numStreamStates {
		return streamStateNames[s]
	}
	return "invalid"
}

// streamMoves[from] is the set of states a stream may go to, as bits.
var streamMoves = [numStreamStates]uint8{
	ssTaken:   1<<ssRefused | 1<<ssRunning,
	ssRunning: 1<<ssHead | 1<<ssEnded,
	ssHead:    1 << ssEnded,
	ssEnded:   1 << ssTail,
}

// legal tells whether a stream may go from s to to.
func (s streamState) legal(to streamState) bool {
	return s < numStreamStates && to < numStreamStates && streamMoves[s]&(1<<to) != 0
}

// setStream moves str to state to, checking the move by the rule the
// exchange core checks its own by (package exchange's doc): an illegal
// one panics under the tests' strict rule and is counted otherwise.
func (l *eventLoop) setStream(str *h2str, to streamState) {
	if !str.state.legal(to) {
		l.ff.illegal.Add(1)
		if l.ff.env.Strict {
			panic("evloop: illegal stream transition " + str.state.String() + " -> " + to.String())
		}
	}
	str.state = to
}

// started tells whether the stream's exchange began (startStream).
func (str *h2str) started() bool { return str.state >= ssRunning }

// ended tells whether the response's end is in the core.
func (str *h2str) ended() bool { return str.state >= ssEnded }

// headState is the state a head puts a stream in: ended with it when no
// body follows.
func headState(noBody bool) streamState {
	if noBody {
		return ssEnded
	}
	return ssHead
}

// takeStream decides, under the connection's lock (H2Conn.Feed), whether
// the loop runs s: a request that ended with its head, on a connection
// that is not suspect (the workers hold those a moment, h2guard), for an
// app the loops serve, whose head is one the HTTP/1.1 path would serve
// (streamReqHead). The stream connection is made here; its exchange
// starts after Feed (h2Events).
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
	if _, ok := l.streamReqHead(s, a, &l.h); !ok {
		return false
	}
	sc := &cconn{fd: -1, peer: c.peer, lastNs: l.nowNs, events: unix.EPOLLIN | unix.EPOLLRDHUP, ex: &l.noEx}
	sc.activeIdx, sc.parkIdx = -1, -1
	sc.xp, sc.str = xpStream, &h2str{p: c, s: s, idx: len(h.streams)}
	s.User = sc
	h.streams = append(h.streams, sc)
	h.started = append(h.started, sc)
	return true
}

// streamReqHead is the neutral head (exchange.StreamHead) of s's
// request, for app a, its fields in h; ok is false when the loop does not
// serve it: a head the HTTP/1.1 path would not serve, or one whose
// HTTP/1.1 form does not fit a loop buffer and server.max_header_bytes
// (TestStreamReqHeadMatchesText).
func (l *eventLoop) streamReqHead(s *h2srv.Stream, a *pipeline.App, h *pipeline.RawHead) (exchange.Head, bool) {
	hd, ok := exchange.StreamHead(s, a, h, min(loopBufSize, l.ff.maxHeader))
	hd.TLS = true // (the loops serve h2 over TLS only)
	return hd, ok
}

// startStream runs a taken stream's exchange as the plain path runs a
// request (serve).
func (l *eventLoop) startStream(sc *cconn) {
	l.setStream(sc.str, ssRunning)
	s := sc.str.s
	a := l.ff.cfg.Routes.Load().Lookup(s.Authority())
	if a == nil || !a.LoopOK {
		// The route changed between take and now (a reload): the
		// stream was not processed, and the client may retry it.
		l.streamEnd(sc, h2srv.RefusedStream)
		return
	}
	hd, ok := l.streamReqHead(s, a, &l.h)
	if !ok {
		l.streamEnd(sc, h2srv.RefusedStream)
		return
	}
	sc.total = int(hd.Size)
	l.head = hd
	l.serve(sc, a, &l.head)
}

// flushStream is flush for a stream connection: the body the exchange
// relayed to c.out (its head went into the core as HEADERS: streamHead,
// streamReply) goes into the core as DATA (a chunked body decoded); at the
// exchange's end with END_STREAM, and the stream is released (the core
// sends what waits for window on its own). While data
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
		if !str.ended() {
			if str.state == ssRunning {
				// An exchange that ended with no head (its Reply and
				// WriteHead write one): cannot happen; the client is
				// not left waiting.
				if end {
					core.ResetStream(str.s, h2srv.InternalError)
					l.setStream(str, ssEnded)
				}
			} else if b := l.streamBody(str, c.out); len(b) > 0 || end {
				core.WriteData(str.s, b, end)
				if end {
					l.setStream(str, ssEnded)
				}
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
		if !more || str.ended() || pend > 0 || outFull {
			break
		}
		if !l.refill(c) {
			return
		}
	}
	l.h2Dirty(p)
	if end {
		if pend > 0 && str.state != ssTail {
			// The end waits for the client's window: the stream is
			// kept (its EvWritable, a reset or write_timeout without
			// progress ends it: h2Events, h2Sweep), so that a client
			// that never opens its window cannot hold it for ever.
			l.setStream(str, ssTail)
			str.pend, c.outAt = pend, l.nowNs
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
// under the same response policy as for an HTTP/1.1 client (the core's
// RespField, without the connection-specific fields h2 forbids), the
// request ID added, queued as HEADERS; with END_STREAM when no body
// follows.
func (l *eventLoop) streamHead(c *cconn) {
	str, ex := c.str, c.ex
	h := str.p.h2
	core := h.core
	_, rh := ex.Response()
	noBody := ex.NoBody()
	l.reqID = append(l.reqID[:0], ex.App().ReqID...)
	h.d.Lock()
	core.Headers(rh.Status)
	ex.PutRespFields(core, l.reqID)
	core.EndHeaders(str.s, noBody)
	h.d.Unlock()
	str.chunked = rh.Chunked
	l.setStream(str, headState(noBody))
	l.h2Dirty(str.p)
}

// streamReply is reply's answer on a stream: the reply's fields
// (replyFields: those of the HTTP/1.1 form, less Connection) as HEADERS,
// with END_STREAM when it has no body (a HEAD's, gRPC's form); the body
// goes to c.out, for flushStream.
func (l *eventLoop) streamReply(c *cconn) {
	str, ex := c.str, c.ex
	h := str.p.h2
	core := h.core
	r := ex.Reply()
	body := r.Body
	if ex.HeadRequest() {
		body = nil
	}
	fs := l.replyFields(r, ex.App().ReqID, ex.ID())
	h.d.Lock()
	core.Headers(r.Status)
	for _, f := range fs {
		core.Field(f.Name, f.Value)
	}
	core.EndHeaders(str.s, len(body) == 0)
	h.d.Unlock()
	str.chunked = false
	l.setStream(str, headState(len(body) == 0))
	c.out = append(c.out[:0], body...)
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
	c.xp, c.str = xpPlain, nil // (a closed client to whoever still holds it)
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
	l.putOut(c.out)
	c.out = nil
	l.putEx(c)
	p.lastNs = l.nowNs
	if p.fd >= 0 {
		l.h2Dirty(p)
	}
}
