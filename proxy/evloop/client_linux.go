//go:build linux

package evloop

import (
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/internal/replayconn"
	"github.com/sentry-proxy/sentry/internal/tls13"
	"github.com/sentry-proxy/sentry/proxy/exchange"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// client_linux.go: the client side of a loop -- accepting,
// reading, the hand-off to fasthttp, and the request pipeline
// (package pipeline, pipeline.go) as the loop runs it, parking included.

// ---------------------------------------------------------------- clients

func (l *eventLoop) accept() {
	if l.unlistened || l.ff.draining.Load() {
		// Draining: connections still queued are left to the next
		// process (an upgrade) or to the listener's close.
		return
	}
	for k := 0; k < maxAcceptOnce; k++ {
		fd, sa, err := l.sys.Accept(l.ff.lfd)
		if err != nil {
			switch err {
			case unix.EAGAIN, unix.EINTR, unix.ECONNABORTED, unix.EPERM, unix.EPROTO,
				// accept(2): pending network errors of the new socket,
				// to be treated as EAGAIN.
				unix.ENETDOWN, unix.ENOPROTOOPT, unix.EHOSTDOWN, unix.ENONET, unix.EHOSTUNREACH, unix.EOPNOTSUPP, unix.ENETUNREACH:
			case unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.ENOMEM:
				// Out of descriptors or memory: stop accepting for a
				// moment instead of spinning on the ready listener
				// (nginx does the same).
				l.ff.cfg.Log.Warn("accept failed; pausing accepts for 100ms", "addr", l.ff.cfg.Addr, "error", err)
				_ = l.sys.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, l.ff.lfd, 0, 0)
				l.acceptPaused = l.nowNs + int64(100*time.Millisecond)
			case unix.EINVAL:
				// The socket left the LISTEN state: a final stop takes it
				// out before draining (cmd/sentry stopListening).
				l.unlisten()
			default:
				l.ff.cfg.Log.Error("accept failed; this loop stops accepting", "addr", l.ff.cfg.Addr, "error", err)
				l.unlisten()
			}
			return
		}
		if max := l.ff.maxConns; max > 0 && l.ff.conns.Load()+int64(l.ff.cfg.OtherConns()) >= int64(max) {
			l.ff.cfg.TooManyConns()
			_, _ = l.sys.Write(fd, tooManyConns)
			l.sys.Close(fd)
			continue
		}
		l.addClient(&cconn{fd: fd, peer: sockaddrAddr(sa), lastNs: l.nowNs, events: unix.EPOLLIN | unix.EPOLLRDHUP})
	}
}

// addClient registers a new client connection with the loop (epoll, the
// fd table, the client list, the front's count); false, with the fd
// closed, when epoll refuses it. Accept and Adopt (TLS) both use it.
func (l *eventLoop) addClient(c *cconn) bool {
	fd := c.fd
	c.ex = &l.noEx
	if err := l.sys.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, c.events, int32(fd)); err != nil {
		l.sys.Close(fd)
		return false
	}
	l.ff.conns.Add(1)
	for fd >= len(l.cl) {
		l.cl = append(l.cl, make([]*cconn, len(l.cl)+64)...)
	}
	l.cl[fd] = c
	c.idx = len(l.clients)
	l.clients = append(l.clients, c)
	return true
}

var tooManyConns = []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 30\r\nConnection: close\r\n\r\nsentry: too many connections\r\n")

func sockaddrAddr(sa unix.Sockaddr) netip.Addr {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrFrom4(a.Addr)
	case *unix.SockaddrInet6:
		return netip.AddrFrom16(a.Addr).Unmap()
	}
	return netip.IPv6Unspecified()
}

func (l *eventLoop) setClientEvents(c *cconn, ev uint32) {
	if c.events == ev {
		return
	}
	c.events = ev
	_ = l.sys.EpollCtl(l.ep, unix.EPOLL_CTL_MOD, c.fd, ev, int32(c.fd))
}

// forget removes c from the loop's tables (the fd stays open).
func (l *eventLoop) forget(c *cconn) {
	l.cl[c.fd] = nil
	last := l.clients[len(l.clients)-1]
	l.clients[c.idx] = last
	last.idx = c.idx
	l.clients = l.clients[:len(l.clients)-1]
	l.putBuf(c.in)
	c.in = nil
	l.putOut(c.out)
	c.out = nil
	l.putEx(c)
}

// lingerClose sends FIN and reads and drops what the client still sends
// until it closes or lingerTimeout passes (as nginx's lingering_close), so
// a client that sent more gets the response, not a reset.
func (l *eventLoop) lingerClose(c *cconn) {
	if c.linger != 0 || c.fd < 0 {
		return
	}
	l.closeNotify(c)
	if l.sys.ShutdownWrite(c.fd) != nil {
		l.closeClient(c)
		return
	}
	c.linger = l.nowNs + int64(l.ff.cfg.Linger)
	l.setClientEvents(c, unix.EPOLLIN|unix.EPOLLRDHUP)
}

// handoff gives c, with the bytes read so far, to fasthttp.
func (l *eventLoop) handoff(c *cconn) {
	_ = l.sys.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, c.fd, 0, 0)
	pre := append([]byte(nil), c.in[:c.n]...)
	l.forget(c)
	f := os.NewFile(uintptr(c.fd), "client")
	c.fd = -1
	l.ff.conns.Add(-1)
	nc, err := net.FileConn(f)
	if err != nil {
		refusal := tooManyConns
		if c.xp.sealed() {
			refusal = c.tls.st.Seal(nil, tooManyConns)
		}
		_, _ = l.sys.Write(int(f.Fd()), refusal)
		_ = f.Close()
		l.ff.cfg.TooManyConns()
		l.ff.cfg.Log.Warn("hand-off to fasthttp failed; connection refused", "addr", l.ff.cfg.Addr, "error", err)
		return
	}
	_ = f.Close()
	// Counted before fasthttp can have served it (the counter must not
	// lag the response); give closes it if fasthttp is not accepting.
	l.ff.handed.Add(1)
	if c.xp.sealed() {
		// The records go on in the goroutine fasthttp gives it: the
		// same state, what the loop opened replayed first.
		l.ff.Handed.give(tls13.NewConn(nc, c.tls.st, *c.tls.cs, pre))
		return
	}
	l.ff.Handed.give(&replayconn.Conn{Conn: nc, Pre: pre})
}

func (l *eventLoop) readClient(c *cconn, ev uint32) {
	if c.in == nil {
		c.in = l.getBuf()
	}
	if c.n == len(c.in) {
		if ev&(unix.EPOLLHUP|unix.EPOLLERR) != 0 {
			l.closeClient(c)
			return
		}
		// Full while an exchange runs (pipelined requests): stop reading
		// until it ends.
		l.setClientEvents(c, c.events&^(unix.EPOLLIN|unix.EPOLLRDHUP))
		return
	}
	m, err := l.sys.Read(c.fd, c.in[c.n:])
	if err == unix.EAGAIN || err == unix.EINTR {
		if !c.inProc {
			l.idleBufs(c) // (nothing came: an idle connection holds no buffer)
		}
		return
	}
	if m <= 0 {
		l.closeClient(c)
		return
	}
	c.n += m
	c.lastNs = l.nowNs
	c.gotAny = true
	if !c.busy() {
		l.process(c)
	}
}

// process serves the requests buffered on c, one at a time.
func (l *eventLoop) process(c *cconn) {
	c.inProc = true
	defer func() { c.inProc = false }()
	// A TLS connection also waits for sealed bytes still unwritten with
	// c.out empty (a KeyUpdate alone, on EAGAIN): a hand-off would leave
	// them behind with the write key already updated (flush comes back
	// here through after once they are written).
	tls := c.xp.sealed()
	for c.fd >= 0 && !c.busy() && c.linger == 0 && len(c.out) == 0 && (!tls || len(c.tls.wire) == 0) && (c.n > 0 || tls) {
		if tls && (!l.pullTLS(c) || c.n == 0 || len(c.tls.wire) > 0) {
			break
		}
		b := c.in[:c.n]
		if pipeline.ParseRequestHead(b, &l.h) != pipeline.HeadOK || !l.serveH1(c, b, &l.h) {
			if l.ff.draining.Load() {
				// fasthttp is draining too: nothing to hand off to. The
				// client sees the connection close, as for any
				// connection a drain closes.
				c.n = 0
				l.lingerClose(c)
				return
			}
			l.handoff(c)
			return
		}
	}
	if c.fd >= 0 {
		l.idleBufs(c)
	}
}

// serveH1 runs one parsed HTTP/1.1 request; false (before anything was
// done or counted) means the fast path does not take it.
func (l *eventLoop) serveH1(c *cconn, b []byte, h *pipeline.RawHead) bool {
	a, cl, ok := l.takes(c, b, h)
	if !ok {
		return false
	}
	c.total = h.N + int(cl)
	if h.ConnClose {
		c.closing = true
	}
	l.head = reqHead(c, b, h)
	l.serve(c, a, &l.head)
	return true
}

// serve runs the request whose neutral head is hd, for app a: the core
// decides, and the loop carries out what it says.
func (l *eventLoop) serve(c *cconn, a *pipeline.App, hd *exchange.Head) {
	if l.ff.draining.Load() {
		c.closing = true
	}
	l.ff.served.Add(1)
	ex := l.getEx(c)
	if c.out == nil {
		c.out = l.getOut()
	}
	ex.Init(l.ff.env, &l.sc)
	logs := l.ff.cfg.Routes.Load().Access
	// This engine must not block: a request whose decision is not made
	// at once parks (Park).
	l.act(c, ex.Start(a, hd, c.peer, l, logs, l.now))
}

// takes tells whether the loop serves the request parsed as h from b (all
// of it in c.in), and for which app, with what body length.
func (l *eventLoop) takes(c *cconn, b []byte, h *pipeline.RawHead) (*pipeline.App, int64, bool) {
	// Connection lists other than close/keep-alive, Upgrade, and a Host
	// that is not plainly uri-host[:port] go to fasthttp, where the header
	// policy's checks answer them (pipeline/headers.go; docs/request-path.md "The header policy").
	if h.HostCount != 1 || h.Chunked || h.TeOther || h.Expect || h.Upgrade || h.ConnOther || h.N > l.ff.maxHeader ||
		!pipeline.ValidHost(h.Host.Of(b)) {
		return nil, 0, false
	}
	cl := h.ContentLength
	if cl < 0 {
		cl = 0
	}
	if int64(h.N)+cl > int64(c.n) {
		return nil, 0, false // the body is not all here: fasthttp streams it
	}
	rt := l.ff.cfg.Routes.Load()
	a := rt.Lookup(h.Host.Of(b))
	if a == nil || !a.LoopOK {
		return nil, 0, false
	}
	if a.BodyCap(cl) != pipeline.OutRelayed {
		return nil, 0, false // fasthttp answers it (413)
	}
	return a, cl, true
}

// reqHead is the neutral head (exchange.Head) of c's HTTP/1.1 request,
// parsed as h from b (all of it in c.in, c.total bytes).
func reqHead(c *cconn, b []byte, h *pipeline.RawHead) exchange.Head {
	return exchange.Head{B: b, Raw: h, Body: b[h.N:c.total], TLS: c.xp.sealed(), Size: int64(c.total)}
}

// headOf is the neutral head of c's exchange in progress, its fields
// parsed into h again: from c.in (HTTP/1.1), or from its stream; false if
// it does not parse (cannot happen: it did when the request came).
func (l *eventLoop) headOf(c *cconn, h *pipeline.RawHead) (exchange.Head, bool) {
	if c.xp == xpStream {
		return l.streamReqHead(c.str.s, c.ex.App(), h)
	}
	b := c.in[:c.n]
	if pipeline.ParseRequestHead(b, h) != pipeline.HeadOK {
		return exchange.Head{}, false
	}
	return reqHead(c, b, h), true
}

// park keeps c's exchange, whose admission has not decided (the core's
// Park), until the batch run that decides it wakes the loop. Nothing
// else is kept: the head stays in c.in (pipelined bytes that follow wait
// behind it, as for any exchange in progress), and resume reads it again;
// the arrival was counted once, by Estimate.
func (l *eventLoop) park(c *cconn) {
	c.parkIdx = len(l.parked)
	l.parked = append(l.parked, c)
}

// unpark takes c out of l.parked (its ticket is then used or cancelled).
func (l *eventLoop) unpark(c *cconn) {
	if i := c.parkIdx; i >= 0 && i < len(l.parked) && l.parked[i] == c {
		last := l.parked[len(l.parked)-1]
		l.parked[i] = last
		last.parkIdx = i
		l.parked[len(l.parked)-1] = nil
		l.parked = l.parked[:len(l.parked)-1]
	}
	c.parkIdx = -1
}

// pollParked takes the decisions made for the loop's parked exchanges and
// acts on each as on an immediate one. It runs on every wake-up; a batch
// run wakes the loop once however many of its exchanges it decided.
// Walking down from the end visits every entry once even when acting on
// one unparks others (unpark moves the last entry into the hole) or parks
// a pipelined request (appended; its run will wake the loop again).
func (l *eventLoop) pollParked() {
	for i := len(l.parked) - 1; i >= 0; i-- {
		if i >= len(l.parked) {
			continue
		}
		c := l.parked[i]
		d, ok := c.ex.Pending().Result()
		if !ok {
			continue
		}
		l.unpark(c)
		l.resume(c, d)
	}
}

// resume acts on the decision d of c's parked exchange: its head, still at
// the start of c.in (or its stream's), is read again and the request
// relayed or rejected as if decided at once (the core's Resume).
func (l *eventLoop) resume(c *cconn, d admission.Decision) {
	var hp *exchange.Head
	if hd, ok := l.headOf(c, &l.h); ok {
		l.head = hd
		hp = &l.head
	}
	l.act(c, c.ex.Resume(d, hp, l.now))
}
