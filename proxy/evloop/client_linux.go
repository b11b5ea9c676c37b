//go:build linux

package evloop

import (
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/sys/unix"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/internal/replayconn"
	"github.com/sentry-proxy/sentry/internal/tls13"
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

// strictStates makes an illegal exchange transition panic instead of
// being counted (the tests set it; package evloop's doc gives the
// decision).
var strictStates = false

// setState moves c's exchange to state to, checking the transition
// (state.go): an illegal one panics under strictStates (the tests) and
// is counted otherwise.
func (l *eventLoop) setState(c *cconn, to State) {
	ex := &c.ex
	if !ex.state.Legal(to) {
		l.ff.illegal.Add(1)
		if strictStates {
			panic("evloop: illegal exchange transition " + ex.state.String() + " -> " + to.String())
		}
	}
	if l.trace != nil {
		l.trace(c, ex.state, to)
	}
	if ex.state == Waiting {
		l.endWait(ex)
	}
	ex.state = to
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
}

// closeClient closes c now, ending any exchange on it.
func (l *eventLoop) closeClient(c *cconn) {
	if c.fd < 0 {
		return
	}
	if c.busy() {
		l.abort(c, pipeline.OutClientGone)
	}
	if c.h2 != nil {
		l.h2Close(c)
	}
	l.dropResp(c)
	l.forget(c)
	if c.tls != nil && c.linger == 0 {
		l.closeNotify(c)
	}
	l.sys.Close(c.fd)
	c.fd = -1
	l.ff.conns.Add(-1)
	l.idleTLS(c)
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
		if c.tls != nil {
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
	if c.tls != nil {
		// The records go on in the goroutine fasthttp gives it: the
		// same state, what the loop opened replayed first.
		l.ff.Handed.give(tls13.NewConn(nc, c.tls.st, *c.tls.cs, pre))
		return
	}
	l.ff.Handed.give(&replayconn.Conn{Conn: nc, Pre: pre})
}

func (l *eventLoop) clientEvent(c *cconn, ev uint32) {
	if c.linger != 0 {
		for k := 0; k < 16; k++ {
			m, err := l.sys.Read(c.fd, l.drop[:])
			if err == unix.EAGAIN || err == unix.EINTR {
				return
			}
			if m <= 0 {
				l.closeClient(c)
				return
			}
		}
		return
	}
	if ev&unix.EPOLLOUT != 0 {
		if c.h2 != nil {
			l.h2Flush(c) // and what the core holds since
		} else {
			l.flush(c)
		}
		if c.fd < 0 {
			return
		}
	}
	if ev&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		if c.tls != nil {
			l.readTLS(c, ev)
			return
		}
		l.readClient(c, ev)
	}
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
	for c.fd >= 0 && !c.busy() && c.linger == 0 && len(c.out) == 0 && (c.tls == nil || len(c.tls.wire) == 0) && (c.n > 0 || c.tls != nil) {
		if c.tls != nil && (!l.pullTLS(c) || c.n == 0 || len(c.tls.wire) > 0) {
			break
		}
		b := c.in[:c.n]
		if pipeline.ParseRequestHead(b, &l.h) != pipeline.HeadOK || !l.serve(c, b, &l.h) {
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
	if c.fd >= 0 && !c.busy() && c.n == 0 && c.in != nil {
		l.putBuf(c.in)
		c.in = nil
		l.idleTLS(c)
	}
}

// rawView is the classifier's view of a request head (classify.Request).
type rawView struct {
	b []byte
	h *pipeline.RawHead
}

func (v *rawView) Method() []byte { return v.h.Method.Of(v.b) }
func (v *rawView) Path() []byte {
	t := v.h.Target.Of(v.b)
	for i, c := range t {
		if c == '?' {
			return t[:i]
		}
	}
	return t
}
func (v *rawView) Host() []byte            { return v.h.Host.Of(v.b) }
func (v *rawView) Peek(name string) []byte { return v.h.Peek(v.b, name) }
func (v *rawView) Cookie(name string) []byte {
	for i := 0; i < v.h.NFields; i++ {
		f := &v.h.Fields[i]
		if !pipeline.EqFold(f.Name.Of(v.b), "cookie") {
			continue
		}
		if val := pipeline.CookieValue(f.Value.Of(v.b), name); val != nil {
			return val
		}
	}
	return nil
}

// serve runs one parsed request; false (before anything was done or
// counted) means the fast path does not take it.
func (l *eventLoop) serve(c *cconn, b []byte, h *pipeline.RawHead) bool {
	a, cl, ok := l.takes(c, b, h)
	if !ok {
		return false
	}
	ex := &c.ex
	ex.a, ex.total, ex.start = a, h.N+int(cl), l.now
	ex.status, ex.released, ex.lbb, ex.u, ex.b = 0, true, nil, nil, nil
	ex.id = ex.id[:0]
	if l.ff.draining.Load() || h.ConnClose {
		c.closing = true
	}
	ex.head = string(h.Method.Of(b)) == fasthttp.MethodHead // methods are case-sensitive
	ex.idem = pipeline.IdempotentMethod(h.Method.Of(b))
	ex.grpc = h.ContentType != (pipeline.Span{}) && pipeline.IsGRPC(h.ContentType.Of(b))
	client := l.forwarded(c, a, b, h)
	ex.client, ex.upstrm, ex.outBytes = client, 0, 0
	// The decide step (package pipeline, pipeline.go). This engine must not block: a
	// request whose decision is not made at once parks as an exchange.
	l.view = rawView{b: b, h: h}
	d, pend, decided := a.Decide(&ex.t, &l.view, client, l.now, nil, true, l)
	l.setState(c, Admitting)
	l.ff.served.Add(1)
	if !decided {
		l.park(c, pend)
		return true
	}
	l.admitted(c, d, b, h)
	return true
}

// takes tells whether the loop serves the request parsed as h from b (all
// of it in c.in), and for which app, with what body length.
func (l *eventLoop) takes(c *cconn, b []byte, h *pipeline.RawHead) (*pipeline.App, int64, bool) {
	// Connection lists other than close/keep-alive, Upgrade, and a Host
	// that is not plainly uri-host[:port] go to fasthttp, where the header
	// policy's checks answer them (pipeline/headers.go; proxy/doc.go "The header policy").
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

// forwarded reads what a trusted proxy sent (pipeline.PlanForwarding) into l.in and
// returns the client's address; its X-Forwarded-For lines are one list
// (RFC 9110 §5.3).
func (l *eventLoop) forwarded(c *cconn, a *pipeline.App, b []byte, h *pipeline.RawHead) netip.Addr {
	in := &l.in
	*in = pipeline.TrustedFwd{}
	if !a.TrustedPeer(c.peer) {
		return c.peer
	}
	chain := l.xff[:0]
	for i := 0; i < h.NFields; i++ {
		f := &h.Fields[i]
		switch k := h.Kinds[i]; k {
		case pipeline.KindXFF, pipeline.KindXFProto, pipeline.KindXFHost:
			chain = in.Add(k, f.Value.Of(b), chain)
		case pipeline.KindOther:
			if exact, _ := pipeline.NameMatch(f.Name.Of(b), a.ReqID); exact {
				in.Add(pipeline.KindOther, f.Value.Of(b), nil)
			}
		}
	}
	l.xff = chain
	return a.ClientAddr(c.peer, in.XFF)
}

// admitted acts on the admission decision d of c's exchange (busy, parsed
// as h from b, l.in filled by forwarded): relay or reject.
func (l *eventLoop) admitted(c *cconn, d admission.Decision, b []byte, h *pipeline.RawHead) {
	a := c.ex.a
	if a.Admitted(&c.ex.t, d) != pipeline.OutRelayed {
		// Rejected (a parked exchange whose client went was aborted,
		// never resumed).
		l.respond(c, a, pipeline.OutRejected, d)
		return
	}
	l.relay(c, b, h)
}

// relay sends c's admitted exchange (parsed as h from b, l.in filled by
// forwarded) to a backend.
func (l *eventLoop) relay(c *cconn, b []byte, h *pipeline.RawHead) {
	ex, a, in := &c.ex, c.ex.a, &l.in
	if a.Pool.Healthy() == 0 {
		l.respond(c, a, pipeline.OutNoBackend, admission.Decision{})
		return
	}

	// The request as the backend gets it.
	r := ex.req[:0]
	le := 0
	for b[le] != '\n' {
		le++
	}
	r = append(r, b[:le+1]...)
	// The header policy (pipeline/headers.go): hop-by-hop lines and every copy of
	// the forwarding headers (any spelling) go; one of each is added.
	for i := 0; i < h.NFields; i++ {
		f := &h.Fields[i]
		switch h.Kinds[i] {
		case pipeline.KindConnection, pipeline.KindHopByHop, pipeline.KindXFF, pipeline.KindXFProto, pipeline.KindXFHost, pipeline.KindFwdAlias:
			continue
		case pipeline.KindOther:
			if exact, alias := pipeline.NameMatch(f.Name.Of(b), a.ReqID); exact || alias || a.DropIncoming(f.Name.Of(b)) {
				continue
			}
		}
		r = append(r, f.Line.Of(b)...)
	}
	var fw pipeline.Forwarding
	l.fwd, fw = pipeline.PlanForwarding(l.fwd, in, c.peer, c.tls != nil || c.str != nil, h.Host.Of(b), l.ff.cfg.IDs)
	ex.id = append(ex.id[:0], fw.ID...)
	r = append(append(append(r, "X-Forwarded-For: "...), fw.XFF...), "\r\n"...)
	r = append(append(append(r, "X-Forwarded-Proto: "...), fw.Proto...), "\r\n"...)
	r = append(append(append(r, "X-Forwarded-Host: "...), fw.Host...), "\r\n"...)
	r = append(append(append(append(r, a.ReqID...), ": "...), fw.ID...), "\r\n"...)
	if a.Load != nil { // the degradation signal (pipeline/load.go)
		r = append(append(r, a.LoadHeader...), ": "...)
		r = append(a.AppendLoad(r, ex.t.Class, l.now), "\r\n"...)
	}
	r = append(r, "\r\n"...)
	r = append(r, b[h.N:ex.total]...)
	ex.req = r
	ex.attempts, ex.stale = 0, 0
	// Selective early termination (pipeline/term.go): the loop holds the
	// body whole and hands upgrades to fasthttp, so only the class and
	// the method decide. Armed at each dispatch (bind).
	ex.termCl = a.TermClass(&ex.t, h.Method.Of(b))
	l.dispatch(c, nil)
}

// park keeps c's exchange, whose admission pend has not decided, until the
// batch run that decides it wakes the loop. Nothing else is kept: the head
// stays in c.in (pipelined bytes that follow wait behind it, as for any
// exchange in progress), and resume parses it again; the arrival was
// counted once, by Estimate.
func (l *eventLoop) park(c *cconn, pend admission.Pending) {
	c.ex.pend = pend
	l.setState(c, Parked)
	c.ex.parkIdx = len(l.parked)
	l.parked = append(l.parked, c)
}

// unpark takes c out of l.parked (its ticket is then used or cancelled).
func (l *eventLoop) unpark(c *cconn) {
	ex := &c.ex
	if i := ex.parkIdx; i >= 0 && i < len(l.parked) && l.parked[i] == c {
		last := l.parked[len(l.parked)-1]
		l.parked[i] = last
		last.ex.parkIdx = i
		l.parked[len(l.parked)-1] = nil
		l.parked = l.parked[:len(l.parked)-1]
	}
	ex.pend, ex.parkIdx = nil, -1
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
		d, ok := c.ex.pend.Result()
		if !ok {
			continue
		}
		l.unpark(c)
		l.resume(c, d)
	}
}

// resume acts on the decision d of c's parked exchange: its head, still at
// the start of c.in, is parsed again and the request relayed or rejected
// as if decided at once.
func (l *eventLoop) resume(c *cconn, d admission.Decision) {
	l.setState(c, Admitting)
	b := c.in[:c.n]
	if pipeline.ParseRequestHead(b, &l.h) != pipeline.HeadOK {
		// Cannot happen: the same bytes parsed when the request came.
		l.abort(c, pipeline.OutBadRequest)
		return
	}
	l.forwarded(c, c.ex.a, b, &l.h)
	l.admitted(c, d, b, &l.h)
}
