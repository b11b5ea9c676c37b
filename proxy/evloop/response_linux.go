//go:build linux

package evloop

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/estimator"
	"github.com/sentry-proxy/sentry/proxy/h2srv"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// response_linux.go: the response side of a loop -- the head
// rewritten and the body relayed to the client (backpressure included),
// and the end of an exchange (finish, abort, respond, done).

// startResponse sends the response head (rewritten) and whatever body came
// with it.
func (l *eventLoop) startResponse(c *cconn, bc *bconn, data []byte) {
	ex := &c.ex
	a := ex.a
	rh := &l.rh
	ex.status = rh.Status
	switch {
	case ex.head || rh.Status == 204 || rh.Status == 304:
		ex.mode = bodyNone
	case rh.Chunked:
		if rh.TeOther {
			l.backendBroke(bc, pipeline.FailNoRetry)
			return
		}
		ex.mode, ex.ct = bodyChunked, pipeline.ChunkTracker{}
	case rh.ContentLength >= 0:
		ex.mode, ex.remain = bodyLength, rh.ContentLength
	default:
		ex.mode = bodyClose
		c.closing = true
	}
	ex.bkClose = rh.ConnClose || rh.Minor == 0 && !rh.ConnKeepAlive
	ex.buffer = l.bufferable(c, data, rh)
	// The first response byte disarms termination (one goroutine: the
	// loop's own sweep is the only other party, so Disarm always wins
	// here).
	ex.termAt = 0
	ex.term.Disarm()
	now := l.clock()
	ex.upstrm = now.Sub(ex.dispatch)
	if ex.u.Answered() {
		l.ff.cfg.Log.Info("backend reachable again", "app", a.Name, "backend", ex.u.Addr)
	}
	l.release(ex, true)
	// The complete step (package pipeline, pipeline.go): the ticket is told the outcome.
	st := rh.FindKind(data, pipeline.KindServerTiming)
	strip := a.Observe(&ex.t, admission.Result{ServerTiming: st, Measured: now.Sub(ex.dispatch), InService: ex.inService, End: now})

	if c.str != nil {
		// A stream: the head goes into the core as HEADERS at once
		// (h2_linux.go), the body follows through c.out.
		l.streamHead(c, data, rh, strip)
		l.setState(c, Relaying)
		l.forward(c, bc, data[rh.N:], false)
		return
	}
	out := c.out[:0]
	out = append(out, "HTTP/1.1"...)
	le := 8
	for data[le] != '\n' {
		le++
	}
	out = append(out, data[8:le+1]...)
	for i := 0; i < rh.NFields; i++ {
		switch v, keep := l.respField(data, rh, i, strip, a.ReqID, false); {
		case !keep:
		case v != nil:
			out = append(append(append(out, "Server-Timing: "...), v...), "\r\n"...)
		default:
			out = append(out, rh.Fields[i].Line.Of(data)...)
		}
	}
	out = append(append(append(append(out, a.ReqID...), ": "...), ex.id...), "\r\n"...)
	if c.closing {
		out = append(out, "Connection: close\r\n"...)
	}
	out = append(out, "\r\n"...)
	c.out = out
	l.setState(c, Relaying)
	l.forward(c, bc, data[rh.N:], true)
}

// respField is the response header policy for every client, field i of
// the backend's head rh (in data): keep false drops it (hop-by-hop fields,
// Content-Length beside chunked, the backend's request ID, and for an h2
// client the connection-specific Transfer-Encoding too); a non-nil v is
// the value that replaces it (Server-Timing stripped of what sentry reads,
// when strip; a field it empties is dropped).
func (l *eventLoop) respField(data []byte, rh *pipeline.RawHead, i int, strip bool, reqID string, h2 bool) (v []byte, keep bool) {
	f := &rh.Fields[i]
	switch rh.Kinds[i] {
	case pipeline.KindConnection, pipeline.KindHopByHop, pipeline.KindUpgrade:
		return nil, false
	case pipeline.KindTransferEncoding:
		return nil, !h2
	case pipeline.KindContentLength:
		// Transfer-Encoding overrides it; not passed on (RFC 9112 §6.3).
		return nil, !rh.Chunked
	case pipeline.KindServerTiming:
		if strip {
			l.st = estimator.StripServerTiming(l.st[:0], f.Value.Of(data))
			return l.st, len(l.st) > 0
		}
	case pipeline.KindOther:
		if n := f.Name.Of(data); pipeline.EqFoldString(n, reqID) || pipeline.IsAccelBuffering(n) {
			return nil, false // (X-Accel-Buffering is read, not passed on, as nginx does)
		}
	}
	return nil, true
}

// forward relays body bytes (already in bc.in) to the client, and ends the
// exchange at the end of the body. held says that nothing of the response
// has gone to the client yet (its head is still in c.out): a malformed
// body is then answered 502 instead of cut.
func (l *eventLoop) forward(c *cconn, bc *bconn, data []byte, held bool) {
	ex := &c.ex
	done := false
	switch ex.mode {
	case bodyNone:
		if len(data) > 0 {
			ex.bkClose = true
		}
		data, done = data[:0], true
	case bodyLength:
		if int64(len(data)) >= ex.remain {
			if int64(len(data)) > ex.remain {
				ex.bkClose = true
			}
			data, done = data[:ex.remain], true
		}
		ex.remain -= int64(len(data))
	case bodyChunked:
		n, end, ok := ex.ct.Feed(data)
		if !ok {
			if held {
				// The head has not left: the client gets a 502 (the
				// backend connection is closed, never reused), as for
				// a malformed head.
				c.out = c.out[:0]
				l.respond(c, ex.a, pipeline.OutBackendFailed, admission.Decision{})
				return
			}
			l.abort(c, pipeline.OutBackendFailed)
			return
		}
		if end && n < len(data) {
			ex.bkClose = true
		}
		data, done = data[:n], end
	}
	ex.outBytes += int64(len(data))
	bc.n = 0
	waiting := ex.buffer && c.waiting()
	if waiting {
		// The client has not taken what came before: this waits in the
		// response buffer (room reserved it before the read).
		l.hold(c, data)
	} else {
		c.out = append(c.out, data...)
	}
	if done {
		// The exchange is recorded before its last bytes go out (as on
		// the fasthttp path): a client that has the response sees it in
		// the metrics. The backend connection is released now, whatever
		// still waits for the client.
		l.finish(c)
		if c.fd >= 0 && !waiting {
			l.flush(c)
		}
		return
	}
	if !waiting {
		l.flush(c)
	}
	if c.fd < 0 && c.str == nil {
		return
	}
	if c.backlog() && ex.b == bc && !l.room(c) {
		// The client is slower than the backend and no buffer can
		// take more: stop reading the backend until the client has
		// taken some (resumeBackend).
		l.setBackendEvents(bc, bc.events&^(unix.EPOLLIN|unix.EPOLLRDHUP))
	}
}

// flush writes c.out, and after it what the response buffer holds; on
// EAGAIN it waits for EPOLLOUT.
func (l *eventLoop) flush(c *cconn) {
	if c.str != nil {
		l.flushStream(c)
		return
	}
	for {
		if c.tls != nil {
			if !l.flushTLS(c) {
				l.resumeBackend(c) // the buffer may have room again
				return
			}
		} else if !l.writeOut(c) {
			if c.fd >= 0 {
				l.resumeBackend(c)
			}
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

// writeOut writes c.out to c's socket: true when all of it went, false
// when the rest waits for EPOLLOUT or c was closed.
func (l *eventLoop) writeOut(c *cconn) bool {
	for len(c.out) > 0 {
		m, err := l.sys.Write(c.fd, c.out)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			if c.outAt == 0 {
				c.outAt = l.nowNs
			}
			l.setClientEvents(c, c.events|unix.EPOLLOUT)
			return false
		}
		if m <= 0 {
			l.closeClient(c)
			return false
		}
		if m < len(c.out) {
			c.outAt = l.nowNs
			n := copy(c.out, c.out[m:])
			c.out = c.out[:n]
			continue
		}
		c.out = c.out[:0]
		if c.outAt != 0 {
			c.outAt = l.nowNs // progress: the write timeout starts again (flush may refill c.out)
		}
	}
	return true
}

// after runs when an exchange has ended and its response is written: the
// connection closes (Connection: close) or serves what is buffered next.
func (l *eventLoop) after(c *cconn) {
	switch {
	case c.str != nil:
		l.flushStream(c) // the end of the stream's response
		return
	case c.h2 != nil:
		l.h2After(c)
		return
	}
	if !c.busy() && len(c.out) == 0 {
		// An idle connection keeps small buffers only (and no
		// response buffer: its memory and file go back).
		l.dropResp(c)
		if cap(c.out) > 4<<10 {
			c.out = nil
		}
		if cap(c.ex.req) > 4<<10 {
			c.ex.req = nil
		}
	}
	if c.fd >= 0 && c.tls != nil && !c.busy() && len(c.out) == 0 && c.linger == 0 && !c.closing {
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
	}
}

// finish ends a relayed exchange.
func (l *eventLoop) finish(c *cconn) {
	ex := &c.ex
	if bc := ex.b; bc != nil {
		ex.b, bc.c = nil, nil
		// A backend that answered before taking the whole request (an
		// early 413, say) still expects the rest: never reuse it.
		if ex.bkClose || bc.fd < 0 || ex.sent < len(ex.req) || bc.u.Quiesced.Load() {
			// (Quiesced: the operator drained the backend; no idle
			// connection is kept to it.)
			l.closeBackend(bc)
		} else if ex.mode == bodyNone && bc.u.LoopWaiting.Load() > 0 {
			// An answer without a body (HEAD, 204, 304) from a backend
			// that wrongly sends one anyway: its bytes may come after
			// the head. Handed straight to a waiting exchange, whose
			// request goes out at once, they would be read as that
			// exchange's response; closed, the connection makes room
			// under the cap for the waiter instead. (Kept idle, a late
			// stray body closes it: backendEvent.)
			l.closeBackend(bc)
			if l.othersWait(bc.u) {
				l.wakeOthers()
			}
		} else if w := l.giveTo(bc.u, ex.a.Policy.MaxConnsPerBackend); w != nil {
			// An exchange waits for a connection to this backend: it
			// gets this one, as fasthttp's HostClient hands a released
			// connection to its first waiter.
			bc.n, bc.reused, bc.lastNs = 0, true, l.nowNs
			l.bind(w, bc)
		} else if l.othersWait(bc.u) {
			// Another loop's exchange waits for room under the cap.
			l.closeBackend(bc)
			l.wakeOthers()
		} else {
			bc.n, bc.reused, bc.lastNs = 0, true, l.nowNs
			l.putBuf(bc.in)
			bc.in = nil
			l.setBackendEvents(bc, unix.EPOLLIN|unix.EPOLLRDHUP)
			l.idleBk[bc.u] = append(l.idleBk[bc.u], bc)
		}
	}
	l.done(c, pipeline.OutRelayed, ex.status)
	l.after(c)
}

// abort ends an exchange that cannot complete; the client connection is
// closed unless it is the client that went away.
func (l *eventLoop) abort(c *cconn, o pipeline.Outcome) {
	ex := &c.ex
	if ex.state == Parked {
		// Parked: the request leaves its batch queue, counted as gone
		// (o is pipeline.OutClientGone: only a client close or the loop's close
		// ends a parked exchange).
		pend := ex.pend
		l.unpark(c)
		pend.Cancel()
		ex.a.Admitted(&ex.t, admission.Decision{Verdict: admission.RejectGone})
	}
	if bc := ex.b; bc != nil {
		ex.b, bc.c = nil, nil
		l.closeBackend(bc)
	}
	l.release(ex, o != pipeline.OutBackendFailed && o != pipeline.OutBackendTimeout)
	st := ex.status
	if ex.state != Relaying {
		st = pipeline.StatusOf(o)
	}
	if o == pipeline.OutClientGone {
		st = pipeline.StatusOf(pipeline.OutClientGone)
	}
	l.done(c, o, st)
	if c.str != nil {
		// A stream: RST_STREAM (CANCEL when the client went or stopped
		// reading, INTERNAL_ERROR for a response cut short), the
		// connection goes on.
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

// done records the exchange and makes the connection ready for the next
// request.
func (l *eventLoop) done(c *cconn, o pipeline.Outcome, status int) {
	ex := &c.ex
	if i := ex.activeIdx; i >= 0 && i < len(l.active) && l.active[i] == c {
		last := l.active[len(l.active)-1]
		l.active[i] = last
		last.ex.activeIdx = i
		l.active = l.active[:len(l.active)-1]
	}
	ex.activeIdx = -1
	// The complete step's last part (package pipeline, pipeline.go): metrics, access log.
	a, access := ex.a, l.ff.cfg.Routes.Load().Access
	a.Complete(o, status, ex.u, ex.start, ex.t.Class)
	if access && !(c.str != nil && o == pipeline.OutClientGone) {
		// (A stream the client reset, or whose connection went, gets
		// no line: metrics only, as on the workers' h2 path.)
		l.access(c, o, status)
	}
	ex.lbb, ex.u, ex.a = nil, nil, nil
	ex.termCl, ex.termAt = nil, 0
	ex.term.Off()
	l.setState(c, Idle)
	c.lastNs = l.nowNs
	if c.in != nil && ex.total <= c.n {
		c.n = copy(c.in, c.in[ex.total:c.n])
	}
	ex.total = 0
	if c.events&unix.EPOLLIN == 0 && c.linger == 0 {
		l.setClientEvents(c, c.events|unix.EPOLLIN|unix.EPOLLRDHUP)
	}
}

// access fills the loop's access-log entry for c's finished exchange
// (the request's head is still at the start of c.in) and hands it to the
// access log. Only when the route logs access.
func (l *eventLoop) access(c *cconn, o pipeline.Outcome, status int) {
	ex := &c.ex
	e := &l.acc
	*e = pipeline.AccessEntry{
		Start: ex.start, Duration: l.clock().Sub(ex.start), Client: ex.client, Proto: "HTTP/1.1",
		Status: status, BytesIn: int64(ex.total), BytesOut: ex.outBytes, ID: ex.id,
		App: ex.a, Outcome: o, Backend: ex.u, Upstrm: ex.upstrm,
	}
	if c.str != nil {
		e.Proto = "HTTP/2.0"
	}
	e.Decided(&ex.t)
	if c.in != nil && ex.total <= c.n {
		b := c.in[:ex.total]
		if pipeline.ParseRequestHead(b, &l.ah) == pipeline.HeadOK {
			h := &l.ah
			e.Method, e.URI, e.Host = h.Method.Of(b), h.Target.Of(b), h.Host.Of(b)
			e.Agent, e.Referer = h.Peek(b, "User-Agent"), h.Peek(b, "Referer")
		}
	}
	l.ff.cfg.Access(e)
	*e = pipeline.AccessEntry{} // drop the references to the connection's buffers
}

// respond writes a response sentry makes itself (rejection or error) and
// ends the exchange. The request was read whole, so the connection stays
// usable.
func (l *eventLoop) respond(c *cconn, a *pipeline.App, o pipeline.Outcome, d admission.Decision) {
	ex := &c.ex
	if bc := ex.b; bc != nil {
		ex.b, bc.c = nil, nil
		l.closeBackend(bc)
	}
	l.release(ex, !pipeline.CountsAsFailure(o))
	r := pipeline.ReplyFor(a, o, d, c.ex.grpc)
	status := r.Status
	// Every answer carries a request ID, a rejection's too (it got no
	// forwarding plan, so the ID is made here).
	if len(ex.id) == 0 {
		ex.id = l.ff.cfg.IDs.AppendID(ex.id[:0])
	}
	id := ex.id
	ex.outBytes = int64(len(r.Body))
	if ex.head {
		ex.outBytes = 0
	}
	if l.ff.draining.Load() {
		c.closing = true
	}
	out := appendReply(c.out, r, l.httpDate(), a.ReqID, id, c.closing, ex.head)
	c.out = out
	l.done(c, o, status)
	l.flush(c)
}

// httpDate returns the Date header value, refreshed once a second.
func (l *eventLoop) httpDate() []byte {
	if s := l.nowNs / int64(time.Second); s != l.dateSec || l.date == nil {
		l.dateSec = s
		l.date = l.now.UTC().AppendFormat(l.date[:0], http1Date)
	}
	return l.date
}

const http1Date = "Mon, 02 Jan 2006 15:04:05 GMT"
