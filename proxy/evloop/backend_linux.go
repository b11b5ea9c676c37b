//go:build linux

package evloop

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// backend_linux.go: the backend side of a loop -- picking a
// backend, connecting, sending the request, failures and retries
// (pipeline.TryAgain), and reading the response head.

// ---------------------------------------------------------------- backends

// dispatch picks a backend and sends the request.
func (l *eventLoop) dispatch(c *cconn, last *pipeline.Upstream) {
	ex := &c.ex
	for {
		bk := ex.a.Pool.Pick()
		if bk == nil {
			if last != nil {
				ex.u = last
				l.respond(c, ex.a, pipeline.OutBackendFailed, admission.Decision{})
			} else {
				l.respond(c, ex.a, pipeline.OutNoBackend, admission.Decision{})
			}
			return
		}
		u := bk.Attachment.(*pipeline.Upstream)
		ex.attempts++
		ex.lbb, ex.u, ex.released = bk, u, false
		ex.inService = int(bk.Inflight())
		bc, err := l.backendConn(u, ex.a)
		if err == errBusy {
			if wait := ex.a.Shared.Connect.Load(); wait > 0 {
				l.waitConn(c, u, wait)
				return
			}
			l.release(ex, true)
			l.respond(c, ex.a, pipeline.OutBackendBusy, admission.Decision{})
			return
		}
		if err != nil {
			if !l.connectFailed(c, err) {
				return
			}
			last = u
			continue
		}
		l.bind(c, bc)
		return
	}
}

var errBusy = syscall.EBUSY

// waitConn queues c's exchange for a connection to u, its backend picked,
// as fasthttp's HostClient waits for a free connection (its
// MaxConnWaitTimeout is timeouts.connect, wait here): a connection to u
// that an exchange of this loop gives back goes to the first waiter
// (finish), and the loop dials for waiters whenever the cap has room again
// (dialWaiters: after a close here, on a wake-up, and every sweep for the
// other loops' and fasthttp's closes). At the deadline it is answered 503
// backend_busy (the sweep). Entries of exchanges that stopped waiting
// (answered, aborted, bound) stay in the queue and are skipped (waiter's
// seq tells an entry from a later wait of the same connection's).
//
// Across loops: while another loop's exchanges wait, a loop keeps no idle
// connection to u (shedIdle, finish), gives every other connection it gets
// back to the others instead of its own waiters while it holds more than
// its share of the cap (giveTo), and the first
// wait asks fasthttp to close its idle connections to u
// (Config.CloseIdle): its pool counts against the same cap.
func (l *eventLoop) waitConn(c *cconn, u *pipeline.Upstream, wait int64) {
	ex := &c.ex
	l.setState(c, Waiting) // (a wait again, after a failed dial, ends the last one first)
	ex.waitU = u
	l.waitN[u]++
	ex.waitSeq++
	ex.deadline = l.nowNs + wait
	l.connWait[u] = append(l.connWait[u], waiter{c: c, seq: ex.waitSeq})
	l.activate(c)
	if u.LoopWaiting.Add(1) == 1 {
		// The other loops may hold the cap's connections idle: they
		// close them when woken (shedIdle); fasthttp's pool too.
		l.wakeOthers()
		if f := l.ff.cfg.CloseIdle; f != nil {
			f(u)
		}
	}
}

// waiter is an entry of a loop's queue for a backend connection.
type waiter struct {
	c   *cconn
	seq uint32 // the exchange's waitSeq when queued
}

func (w waiter) live(u *pipeline.Upstream) bool {
	return w.c.ex.state == Waiting && w.c.ex.waitU == u && w.c.ex.waitSeq == w.seq
}

// endWait is setState's part when an exchange leaves Waiting (or waits
// again).
func (l *eventLoop) endWait(ex *exch) {
	u := ex.waitU
	if u == nil {
		return
	}
	ex.waitU = nil
	u.LoopWaiting.Add(-1)
	if l.waitN[u]--; l.waitN[u] <= 0 {
		delete(l.waitN, u)
	}
}

func (l *eventLoop) wakeOthers() {
	for _, o := range l.ff.loops {
		if o != l {
			o.wake()
		}
	}
}

// othersWait tells whether another loop's exchanges wait for u.
func (l *eventLoop) othersWait(u *pipeline.Upstream) bool {
	n := int(u.LoopWaiting.Load())
	return n > 0 && n > l.waitN[u]
}

// shedIdle closes this loop's idle connections to backends another loop's
// exchanges wait for (max_conns_per_backend reached), and has the loop
// look for room for its own waiters (dialWaiters).
func (l *eventLoop) shedIdle() {
	for u, list := range l.idleBk {
		if len(list) == 0 || l.waitN[u] > 0 || !l.othersWait(u) {
			continue
		}
		for _, bc := range list {
			l.closeBackend(bc)
		}
		delete(l.idleBk, u)
	}
	if len(l.connWait) > 0 {
		l.waitKick = true
	}
}

// headWaiter drops the stale entries at the head of u's queue and returns
// the first live one, left in place (nil: none; the queue is gone).
func (l *eventLoop) headWaiter(u *pipeline.Upstream) *cconn {
	q := l.connWait[u]
	for len(q) > 0 && !q[0].live(u) {
		q[0] = waiter{}
		q = q[1:]
	}
	if len(q) == 0 {
		delete(l.connWait, u)
		return nil
	}
	l.connWait[u] = q
	return q[0].c
}

// nextWaiter takes the first exchange still waiting for u (nil: none).
func (l *eventLoop) nextWaiter(u *pipeline.Upstream) *cconn {
	c := l.headWaiter(u)
	if c != nil {
		q := l.connWait[u]
		q[0] = waiter{}
		if len(q) == 1 {
			delete(l.connWait, u)
		} else {
			l.connWait[u] = q[1:]
		}
	}
	return c
}

// giveTo is finish's choice for a connection to u given back (its app's
// cap max): this loop's first waiter, or nil -- none, or, while another
// loop's exchanges wait too and this loop holds more than its share of the
// cap, every other time (the connection is then closed for them), so that
// a loop that holds the cap cannot starve another's waiters. Within its
// share a loop keeps its connections: closing and dialling again under a
// steady overload would cost a connect per request.
func (l *eventLoop) giveTo(u *pipeline.Upstream, max int) *cconn {
	if u.LoopWaiting.Load() == 0 || l.waitN[u] == 0 {
		return nil // (nobody waits: the common case, one atomic load)
	}
	if max > 0 && l.othersWait(u) && l.nconn[u] > max/len(l.ff.loops) {
		if l.shareTurn = !l.shareTurn; l.shareTurn {
			return nil
		}
	}
	return l.nextWaiter(u)
}

// dialWaiters gives the exchanges waiting for a connection a new one, in
// their order, while the cap has room (counted as backendConn counts it).
func (l *eventLoop) dialWaiters() {
	l.waitKick = false
	for u := range l.connWait {
		for {
			c := l.headWaiter(u)
			if c == nil {
				break
			}
			ex := &c.ex
			if max := ex.a.Policy.MaxConnsPerBackend; max > 0 && int(u.LoopConns.Load())+l.ff.cfg.BackendConns(u) >= max && len(l.idleBk[u]) == 0 {
				break // no room yet
			}
			bc, err := l.backendConn(u, ex.a)
			if err == errBusy {
				break // taken meanwhile (fasthttp's side); it keeps its place
			}
			l.nextWaiter(u) // c, off the queue
			if err != nil {
				if l.connectFailed(c, err) {
					l.dispatch(c, u)
				}
				continue
			}
			l.bind(c, bc)
		}
	}
}

// backendConn returns an idle connection to u or starts a new one.
func (l *eventLoop) backendConn(u *pipeline.Upstream, a *pipeline.App) (*bconn, error) {
	for {
		list := l.idleBk[u]
		k := len(list)
		if k == 0 {
			break
		}
		bc := list[k-1]
		l.idleBk[u] = list[:k-1]
		if bc.fd >= 0 {
			bc.reused = true
			return bc, nil
		}
	}
	if max := a.Policy.MaxConnsPerBackend; max > 0 && int(u.LoopConns.Load())+l.ff.cfg.BackendConns(u) >= max {
		return nil, errBusy
	}
	addr, err := u.LoopSockaddr()
	if err != nil {
		return nil, err
	}
	fd, connecting, err := l.sys.Dial(addr)
	if err != nil {
		return nil, err
	}
	bc := &bconn{fd: fd, u: u, connecting: connecting, events: unix.EPOLLIN | unix.EPOLLRDHUP}
	if connecting {
		bc.events |= unix.EPOLLOUT
	}
	if err := l.sys.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, bc.events, int32(fd)); err != nil {
		l.sys.Close(fd)
		return nil, err
	}
	u.LoopConns.Add(1)
	l.nconn[u]++
	for fd >= len(l.bk) {
		l.bk = append(l.bk, make([]*bconn, len(l.bk)+64)...)
	}
	l.bk[fd] = bc
	return bc, nil
}

func (l *eventLoop) setBackendEvents(bc *bconn, ev uint32) {
	if bc.events == ev {
		return
	}
	bc.events = ev
	_ = l.sys.EpollCtl(l.ep, unix.EPOLL_CTL_MOD, bc.fd, ev, int32(bc.fd))
}

func (l *eventLoop) closeBackend(bc *bconn) {
	if bc.fd < 0 {
		return
	}
	l.bk[bc.fd] = nil
	l.sys.Close(bc.fd)
	bc.fd = -1
	bc.u.LoopConns.Add(-1)
	if l.nconn[bc.u]--; l.nconn[bc.u] <= 0 {
		delete(l.nconn, bc.u)
	}
	if len(l.connWait[bc.u]) > 0 {
		l.waitKick = true // room for a waiter: dialled at the end of the round
	}
	l.putBuf(bc.in)
	bc.in = nil
}

// bind starts the exchange of c on bc.
func (l *eventLoop) bind(c *cconn, bc *bconn) {
	ex := &c.ex
	ex.b, bc.c = bc, c
	ex.sent, ex.gotBytes, ex.bkClose = 0, false, false
	ex.dispatch = l.now
	if ex.termCl != nil && ex.attempts == 1 {
		// The termination clock starts at the first dispatch; a retry
		// does not restart it (as on the fasthttp path, whose timer spans
		// relay's attempts).
		ex.termAt = l.nowNs + int64(ex.term.Arm(ex.termCl, l.now))
	}
	if bc.in == nil {
		bc.in = l.getBuf()
	}
	bc.n = 0
	l.activate(c)
	if bc.connecting {
		bc.connecting = false // the exchange's state says it from here
		l.setState(c, Connecting)
		ex.deadline = l.nowNs + ex.a.Shared.Connect.Load()
		return
	}
	l.setState(c, Sending)
	ex.deadline = l.nowNs + ex.a.Shared.Idle.Load()
	l.send(bc)
}

// activate puts c in the loop's active list (the sweep's), once.
func (l *eventLoop) activate(c *cconn) {
	ex := &c.ex
	if ex.activeIdx < 0 || ex.activeIdx >= len(l.active) || l.active[ex.activeIdx] != c {
		ex.activeIdx = len(l.active)
		l.active = append(l.active, c)
	}
}

// send writes what is left of the request to bc.
func (l *eventLoop) send(bc *bconn) {
	ex := &bc.c.ex
	for ex.sent < len(ex.req) {
		m, err := l.sys.Write(bc.fd, ex.req[ex.sent:])
		if err == unix.EAGAIN {
			l.setBackendEvents(bc, unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLOUT)
			return
		}
		if err == unix.EINTR {
			continue
		}
		if m <= 0 {
			l.backendBroke(bc, pipeline.FailBroken)
			return
		}
		ex.sent += m
	}
	l.setBackendEvents(bc, unix.EPOLLIN|unix.EPOLLRDHUP)
}

func (l *eventLoop) backendEvent(bc *bconn, ev uint32) {
	c := bc.c
	if c == nil {
		// Idle: the backend closed it (or sent garbage).
		l.closeBackend(bc)
		return
	}
	if c.ex.state == Connecting {
		if ev&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) == 0 {
			return
		}
		if e, err := l.sys.ConnectError(bc.fd); err != nil || e != 0 {
			if err == nil {
				err = syscall.Errno(e)
			}
			l.dialFailed(bc, err)
			return
		}
		l.setState(c, Sending)
		c.ex.deadline = l.nowNs + c.ex.a.Shared.Idle.Load()
		l.send(bc)
		return
	}
	if ev&unix.EPOLLOUT != 0 && c.ex.sent < len(c.ex.req) {
		l.send(bc)
		if bc.fd < 0 || bc.c != c {
			return
		}
	}
	// EPOLLHUP and EPOLLERR come even while reading is paused (a slow
	// client); the read then tells the error, and the loop does not spin.
	if ev&(unix.EPOLLHUP|unix.EPOLLERR) != 0 || ev&(unix.EPOLLIN|unix.EPOLLRDHUP) != 0 && bc.events&unix.EPOLLIN != 0 {
		l.readBackend(bc)
	}
}

// dialFailed: the connect failed; eject the backend and try another.
func (l *eventLoop) dialFailed(bc *bconn, cause error) {
	c := bc.c
	ex := &c.ex
	l.closeBackend(bc)
	ex.b = nil
	if l.connectFailed(c, cause) {
		l.dispatch(c, ex.u)
	}
}

// connectFailed ejects the backend a connect to failed (unambiguous, as on
// the fasthttp path) and answers 502 when the retry policy (pipeline.TryAgain) says
// so; true means try another backend. The first failure since the
// backend last answered is logged at WARN with its cause
// (pipeline.Upstream.Unreachable).
func (l *eventLoop) connectFailed(c *cconn, cause error) bool {
	ex := &c.ex
	ex.a.Pool.Eject(ex.lbb)
	ex.released = true
	if ex.u.Unreachable() {
		l.ff.cfg.Log.Warn("backend unreachable; ejected until it answers again", "app", ex.a.Name, "backend", ex.u.Addr, "error", cause)
	} else if log := l.ff.cfg.Log; log.IsDebug() {
		log.Debug("relay failed", "app", ex.a.Name, "backend", ex.u.Addr, "error", cause)
	}
	if !pipeline.TryAgain(pipeline.FailConnect, ex.idem, ex.attempts-ex.stale, false) {
		l.respond(c, ex.a, pipeline.OutBackendFailed, admission.Decision{})
		return false
	}
	return true
}

// backendBroke: the connection failed while sending or before the head,
// in the way f says (pipeline.FailBroken, or pipeline.FailNoRetry for a response that cannot
// be relayed).
func (l *eventLoop) backendBroke(bc *bconn, f pipeline.Failure) {
	c := bc.c
	ex := &c.ex
	if ex.state == Relaying {
		// Part of the response is out: the client connection cannot
		// carry an error response now.
		l.abort(c, pipeline.OutBackendFailed)
		return
	}
	reused := bc.reused
	l.closeBackend(bc)
	ex.b = nil
	if reused && f == pipeline.FailBroken && !ex.gotBytes && ex.idem && ex.stale < pipeline.MaxStaleRetries {
		ex.stale++ // a keep-alive connection closed under it: not an attempt
	}
	if pipeline.TryAgain(f, ex.idem, ex.attempts-ex.stale, ex.gotBytes) {
		// The loop holds the body whole, so an idempotent request is
		// replayable. A stale keep-alive connection (reused) is not the
		// backend's fault.
		if !reused {
			l.release(ex, false)
		} else {
			l.release(ex, true)
		}
		l.dispatch(c, ex.u)
		return
	}
	l.release(ex, false)
	l.respond(c, ex.a, pipeline.OutBackendFailed, admission.Decision{})
}

func (l *eventLoop) release(ex *exch, ok bool) {
	if !ex.released && ex.lbb != nil {
		ex.a.Pool.Release(ex.lbb, ok)
	}
	ex.released = true
}

func (l *eventLoop) readBackend(bc *bconn) {
	c := bc.c
	ex := &c.ex
	if bc.n == len(bc.in) {
		l.backendBroke(bc, pipeline.FailNoRetry) // a head larger than the buffer
		return
	}
	m, err := l.sys.Read(bc.fd, bc.in[bc.n:])
	if err == unix.EAGAIN || err == unix.EINTR {
		return
	}
	if m <= 0 {
		switch {
		case ex.state != Relaying:
			l.backendBroke(bc, pipeline.FailBroken)
		case ex.mode == bodyClose:
			ex.bkClose = true
			l.finish(c)
		default:
			l.abort(c, pipeline.OutBackendFailed) // truncated body
		}
		return
	}
	bc.n += m
	if !ex.gotBytes {
		// The first response byte disarms termination, as on the
		// fasthttp path (idleConn.Read): a backend slow to finish its
		// head is not cut once it has started answering.
		ex.termAt = 0
		ex.term.Disarm()
	}
	ex.gotBytes = true
	ex.deadline = l.nowNs + ex.a.Shared.Idle.Load()
	data := bc.in[:bc.n]
	if ex.state != Relaying {
		for {
			switch pipeline.ParseResponseHead(data, &l.rh) {
			case pipeline.HeadIncomplete:
				return
			case pipeline.HeadUnsure:
				l.backendBroke(bc, pipeline.FailNoRetry) // a broken response is not retried
				return
			}
			if st := l.rh.Status; st >= 100 && st < 200 {
				if st == 101 {
					l.backendBroke(bc, pipeline.FailNoRetry)
					return
				}
				// 100 Continue, 103 Early Hints: dropped, as fasthttp does.
				data = data[l.rh.N:]
				continue
			}
			break
		}
		l.startResponse(c, bc, data)
		return
	}
	l.forward(c, bc, data, false)
}

// errConnectTimeout is the cause logged for a connect that did not finish
// within the app's connect timeout.
var errConnectTimeout = errors.New("connect timed out")
