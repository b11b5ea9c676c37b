//go:build linux

package evloop

import (
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sentry-proxy/sentry/proxy/exchange"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// backend_linux.go: the backend side of a loop -- connections to
// backends (the pool, the wait at max_conns_per_backend, dialling),
// sending the request and reading the response, as the exchange core
// (package proxy/exchange) asks: which backend, whether to retry and what
// a failure means are the core's.

// ---------------------------------------------------------------- backends

// connect carries out the core's Connect: a connection to the backend it
// picked, an idle one or a new one, and the core's answer to how that
// went.
func (l *eventLoop) connect(c *cconn) exchange.Action {
	ex := c.ex
	bc, err := l.backendConn(ex.Upstream(), ex.App())
	switch {
	case err == errBusy:
		return ex.Capped(l.now)
	case err != nil:
		return ex.ConnectFailed(err, l.now)
	}
	return l.bind(c, bc)
}

var errBusy = syscall.EBUSY

// waitConn carries out the core's Wait: c's exchange queues for a
// connection to u, its backend picked, as fasthttp's HostClient waits for
// a free connection (its MaxConnWaitTimeout is timeouts.connect, the
// core's deadline): a connection to u that an exchange of this loop gives
// back goes to the first waiter (finish), and the loop dials for waiters
// whenever the cap has room again (dialWaiters: after a close here, on a
// wake-up, and every sweep for the other loops' and fasthttp's closes).
// At the deadline the core answers 503 backend_busy (the sweep's Expire).
// Entries of exchanges that stopped waiting (answered, aborted, bound)
// stay in the queue and are skipped (waiter's seq tells an entry from a
// later wait of the same connection's).
//
// Across loops: while another loop's exchanges wait, a loop keeps no idle
// connection to u (shedIdle, finish), gives every other connection it gets
// back to the others instead of its own waiters while it holds more than
// its share of the cap (giveTo), and the first
// wait asks fasthttp to close its idle connections to u
// (Config.CloseIdle): its pool counts against the same cap.
func (l *eventLoop) waitConn(c *cconn, u *pipeline.Upstream) {
	l.endWait(c) // (a wait again, after a failed dial, ends the last one first)
	c.waitU = u
	l.waitN[u]++
	c.waitSeq++
	l.connWait[u] = append(l.connWait[u], waiter{c: c, seq: c.waitSeq})
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
	return w.c.ex.State() == exchange.Waiting && w.c.waitU == u && w.c.waitSeq == w.seq
}

// endWait ends c's wait for a connection, if it waits: once its exchange
// has left Waiting (act, done), or waits again (waitConn).
func (l *eventLoop) endWait(c *cconn) {
	u := c.waitU
	if u == nil {
		return
	}
	c.waitU = nil
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
			a := c.ex.App()
			if max := a.Policy.MaxConnsPerBackend; max > 0 && int(u.LoopConns.Load())+l.ff.cfg.BackendConns(u) >= max && len(l.idleBk[u]) == 0 {
				break // no room yet
			}
			bc, err := l.backendConn(u, a)
			if err == errBusy {
				break // taken meanwhile (fasthttp's side); it keeps its place
			}
			l.nextWaiter(u) // c, off the queue
			if err != nil {
				l.act(c, c.ex.ConnectFailed(err, l.now))
				continue
			}
			l.act(c, l.bind(c, bc))
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

// bind makes bc the connection of c's exchange, and tells the core
// (Bound): its next action.
func (l *eventLoop) bind(c *cconn, bc *bconn) exchange.Action {
	c.b, bc.c = bc, c
	if bc.in == nil {
		bc.in = l.getBuf()
	}
	bc.n = 0
	l.activate(c)
	connecting := bc.connecting
	bc.connecting = false // the exchange's state says it from here
	return c.ex.Bound(connecting, bc.reused, l.now)
}

// dropBackend closes the backend connection of c's exchange, if it has
// one: the core's Connect (the attempt failed), Reply, Abort and Cut.
func (l *eventLoop) dropBackend(c *cconn) {
	if bc := c.b; bc != nil {
		c.b, bc.c = nil, nil
		l.closeBackend(bc)
	}
}

// activate puts c in the loop's active list (the sweep's), once.
func (l *eventLoop) activate(c *cconn) {
	if c.activeIdx < 0 || c.activeIdx >= len(l.active) || l.active[c.activeIdx] != c {
		c.activeIdx = len(l.active)
		l.active = append(l.active, c)
	}
}

// send writes what is left of the request to bc.
func (l *eventLoop) send(bc *bconn) {
	ex := bc.c.ex
	for r := ex.Unsent(); len(r) > 0; r = ex.Unsent() {
		m, err := l.sys.Write(bc.fd, r)
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
		ex.Wrote(m)
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
	if c.ex.State() == exchange.Connecting {
		if ev&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) == 0 {
			return
		}
		if e, err := l.sys.ConnectError(bc.fd); err != nil || e != 0 {
			if err == nil {
				err = syscall.Errno(e)
			}
			l.act(c, c.ex.ConnectFailed(err, l.now)) // (Connect drops bc)
			return
		}
		l.act(c, c.ex.Connected(l.now))
		return
	}
	if ev&unix.EPOLLOUT != 0 && len(c.ex.Unsent()) > 0 {
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

// backendBroke: the connection failed while sending or before the head,
// or while relaying, in the way f says (pipeline.FailBroken, or
// pipeline.FailNoRetry for a response that cannot be relayed): the core
// retries, answers or aborts (Broke).
func (l *eventLoop) backendBroke(bc *bconn, f pipeline.Failure) {
	c := bc.c
	l.act(c, c.ex.Broke(f, l.now))
}

func (l *eventLoop) readBackend(bc *bconn) {
	c := bc.c
	ex := c.ex
	if bc.n == len(bc.in) {
		l.backendBroke(bc, pipeline.FailNoRetry) // a head larger than the buffer
		return
	}
	m, err := l.sys.Read(bc.fd, bc.in[bc.n:])
	if err == unix.EAGAIN || err == unix.EINTR {
		return
	}
	if m <= 0 {
		if ex.State() != exchange.Relaying {
			l.backendBroke(bc, pipeline.FailBroken)
		} else if act := ex.Closed(); act == exchange.Finish {
			l.finish(c) // a close-delimited body's end
		} else {
			l.act(c, act) // truncated
		}
		return
	}
	bc.n += m
	data := bc.in[:bc.n]
	switch n, act := ex.Read(data, l.now); act {
	case exchange.None: // the head is not whole yet
	case exchange.WriteHead:
		l.startResponse(c, bc, data, n)
	case exchange.Forward, exchange.Finish:
		l.forward(c, bc, data[:n], act)
	default:
		l.act(c, act)
	}
}
