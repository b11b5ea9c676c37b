//go:build linux

package evloop

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/sentry-proxy/sentry/proxy/exchange"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// response_linux.go: the response side of a loop -- the head written
// to the client, the body relayed (backpressure included), and the end of
// an exchange as the core says it ends (finish, reply, aborted, done).

// startResponse carries out the core's WriteHead: the response's head
// (the first n bytes of data) goes to the client, and whatever body came
// with it.
func (l *eventLoop) startResponse(c *cconn, bc *bconn, data []byte, n int) {
	ex := c.ex
	if ex.CloseDelimited() {
		c.closing = true
	}
	c.buffer = l.bufferable(c)
	ex.Relay(l.clock())
	if c.xp == xpStream {
		// A stream: the head goes into the core as HEADERS at once
		// (h2_linux.go), the body follows through c.out.
		l.streamHead(c)
		l.body(c, bc, data[n:], false)
		return
	}
	l.h1Head(c)
	l.body(c, bc, data[n:], true)
}

// h1Head writes the response head to c.out for an HTTP/1.1 client: the
// backend's status line (as HTTP/1.1) and the fields the core's policy
// keeps (RespField), as the backend wrote them, then the request ID and,
// when the connection closes after it, Connection: close.
func (l *eventLoop) h1Head(c *cconn) {
	ex := c.ex
	data, rh := ex.Response()
	out := c.out[:0]
	out = append(out, "HTTP/1.1"...)
	le := 8
	for data[le] != '\n' {
		le++
	}
	out = append(out, data[8:le+1]...)
	for i := 0; i < rh.NFields; i++ {
		switch v, keep := ex.RespField(i); {
		case !keep:
		case v != nil:
			out = append(append(append(out, "Server-Timing: "...), v...), "\r\n"...)
		default:
			out = append(out, rh.Fields[i].Line.Of(data)...)
		}
	}
	out = append(append(append(append(out, ex.App().ReqID...), ": "...), ex.ID()...), "\r\n"...)
	if c.closing {
		out = append(out, "Connection: close\r\n"...)
	}
	c.out = append(out, "\r\n"...)
}

// body hands body bytes (in bc.in) to the core (Body) and carries out its
// action. held says the head still waits in c.out: a malformed body is
// then answered 502 instead of cut, the head dropped.
func (l *eventLoop) body(c *cconn, bc *bconn, data []byte, held bool) {
	n, act := c.ex.Body(data, held)
	switch act {
	case exchange.Forward, exchange.Finish:
		l.forward(c, bc, data[:n], act)
	case exchange.Reply:
		c.out = c.out[:0]
		l.act(c, act)
	default:
		l.act(c, act)
	}
}

// forward relays body bytes (in bc.in) to the client, and ends the
// exchange at the body's end (act: the core's Forward or Finish).
func (l *eventLoop) forward(c *cconn, bc *bconn, data []byte, act exchange.Action) {
	bc.n = 0
	waiting := c.buffer && c.waiting()
	if waiting {
		// The client has not taken what came before: this waits in the
		// response buffer (room reserved it before the read).
		l.hold(c, data)
	} else {
		c.out = append(c.out, data...)
	}
	if act == exchange.Finish {
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
	if c.fd < 0 && c.xp != xpStream {
		return
	}
	if c.backlog() && c.b == bc && !l.room(c) {
		// The client is slower than the backend and no buffer can
		// take more: stop reading the backend until the client has
		// taken some (resumeBackend).
		l.setBackendEvents(bc, bc.events&^(unix.EPOLLIN|unix.EPOLLRDHUP))
	}
}

// finish carries out the core's Finish: the backend connection is kept
// (or handed to an exchange that waits for one) or closed, and the
// exchange is done.
func (l *eventLoop) finish(c *cconn) {
	ex := c.ex
	if bc := c.b; bc != nil {
		c.b, bc.c = nil, nil
		// (Quiesced: the operator drained the backend; no idle
		// connection is kept to it.)
		if !ex.Reusable() || bc.fd < 0 || bc.u.Quiesced.Load() {
			l.closeBackend(bc)
		} else if ex.Bodiless() && bc.u.LoopWaiting.Load() > 0 {
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
		} else if w := l.giveTo(bc.u, ex.App().Policy.MaxConnsPerBackend); w != nil {
			// An exchange waits for a connection to this backend: it
			// gets this one, as fasthttp's HostClient hands a released
			// connection to its first waiter.
			bc.n, bc.reused, bc.lastNs = 0, true, l.nowNs
			l.act(w, l.bind(w, bc))
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
	l.done(c)
	l.after(c)
}

// abort ends c's exchange, which cannot complete (the core's Abort for
// outcome o); the client connection is closed unless it is the client
// that went away.
func (l *eventLoop) abort(c *cconn, o pipeline.Outcome) {
	if c.ex.State() == exchange.Parked {
		l.unpark(c) // (the core takes the request out of its batch queue)
	}
	l.act(c, c.ex.Abort(o))
}

// aborted carries out the core's Abort: the backend connection closes,
// the exchange is done, and the client's response is cut -- a stream
// reset (CANCEL when the client went or stopped reading, INTERNAL_ERROR
// for a response cut short; the connection goes on), or the connection
// closed -- unless the client is what went.
func (l *eventLoop) aborted(c *cconn) {
	l.dropBackend(c)
	o := c.ex.Outcome()
	l.done(c)
	l.cut(c, o)
}

// done records c's exchange (the core's Done) and makes the connection
// ready for the next request.
func (l *eventLoop) done(c *cconn) {
	if i := c.activeIdx; i >= 0 && i < len(l.active) && l.active[i] == c {
		last := l.active[len(l.active)-1]
		l.active[i] = last
		last.activeIdx = i
		l.active = l.active[:len(l.active)-1]
	}
	c.activeIdx = -1
	now := l.now
	if c.ex.Logs() {
		now = l.clock() // the access log's duration ends here
	}
	c.ex.Done(now)
	l.putEx(c)
	l.endWait(c)
	c.lastNs = l.nowNs
	if c.in != nil && c.total <= c.n {
		c.n = copy(c.in, c.in[c.total:c.n])
	}
	c.total = 0
	if c.events&unix.EPOLLIN == 0 && c.linger == 0 {
		l.setClientEvents(c, c.events|unix.EPOLLIN|unix.EPOLLRDHUP)
	}
}

// reply carries out the core's Reply: sentry's own answer (a rejection
// or an error) is written and the exchange is done. The request was read
// whole, so the connection stays usable.
func (l *eventLoop) reply(c *cconn) {
	l.dropBackend(c)
	ex := c.ex
	if l.ff.draining.Load() {
		c.closing = true
	}
	if c.xp == xpStream {
		l.streamReply(c) // HEADERS now, the body through c.out
	} else {
		c.out = l.appendReply(c.out, ex.Reply(), ex.App().ReqID, ex.ID(), c.closing, ex.HeadRequest())
	}
	l.done(c)
	l.flush(c)
}

// act carries out the action the exchange core returned for c's exchange,
// and those that follow from it, until one leaves the exchange to wait
// for an event. (WriteHead, Forward and Finish come with response bytes:
// readBackend and body carry them out.)
func (l *eventLoop) act(c *cconn, act exchange.Action) {
	ex := c.ex
	for {
		if c.waitU != nil && ex.State() != exchange.Waiting {
			l.endWait(c)
		}
		switch act {
		case exchange.Park:
			l.park(c)
			return
		case exchange.Connect:
			l.dropBackend(c)
			act = l.connect(c)
		case exchange.Wait:
			l.waitConn(c, ex.Upstream())
			return
		case exchange.Send:
			l.send(c.b)
			return
		case exchange.Reply:
			l.reply(c)
			return
		case exchange.Abort:
			l.aborted(c)
			return
		case exchange.Cut:
			l.dropBackend(c)
			act = ex.Terminate(l.now)
		default:
			return
		}
	}
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
