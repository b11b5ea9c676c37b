//go:build linux

package proxy

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"
	"golang.org/x/sys/unix"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/estimator"
	"github.com/sentry-proxy/sentry/lb"
)

// evloop_linux.go is the event-loop front end for plain HTTP/1.1 listeners
// (see "Engine decision" in doc.go). A few loops (one per GOMAXPROCS), each
// one goroutine around its own epoll set, share the listening socket and
// serve the common request themselves, client and backend sockets alike,
// with no goroutine per connection: a whole, plain HTTP/1.1 head (and any
// Content-Length body) in one read, decided by admission at once or, for a
// class that waits for its batch run, parked until the run wakes the loop
// (park, pollParked). Anything else -- a partial or unusual head, chunked
// or large bodies, Expect, Upgrade -- is handed off with the bytes read so
// far to the fasthttp front end, which serves that connection from then on.

// The listening socket and the wake-up eventfd are registered under tags
// that no descriptor number can take: once the listener is closed, its
// number may come back as a backend socket of the same loop.
const (
	tagListen = -1
	tagWake   = -2
)

const (
	loopBufSize   = 16 << 10 // read buffer of a busy connection
	maxAcceptOnce = 64
	sweepEvery    = 10 * time.Millisecond
	idleSweep     = 250 * time.Millisecond
	backendIdle   = 30 * time.Second // as the HostClient's MaxIdleConnDuration
)

// fastFront is the event-loop half of a plain front end.
type fastFront struct {
	fe        *frontend
	ln        net.Listener
	lfd       int
	loops     []*evloop
	hand      *handoffListener
	conns     atomic.Int64 // client connections the loops hold
	draining  atomic.Bool
	closing   atomic.Bool
	wg        sync.WaitGroup
	unlisten  sync.WaitGroup // loops that still have the listener in their epoll set
	maxHeader int
	maxConns  int
	idle      time.Duration // server.idle_timeout
	write     time.Duration // server.write_timeout (0: idle_timeout)
	hdr       time.Duration // server.read_header_timeout

	served, handed atomic.Uint64 // requests answered by the loops; connections handed off
	illegal        atomic.Uint64 // illegal exchange-state transitions (exstate.go)
}

// fastDisabled turns the event loop off (SENTRY_EVLOOP=0) for EngineAuto:
// every connection is served by fasthttp. For comparison and as an escape
// hatch.
var fastDisabled = os.Getenv("SENTRY_EVLOOP") == "0"

// startFast starts the loops on ln and returns the listener fasthttp
// serves (connections handed off by the loops). ok is false when the event
// loop cannot be used; fasthttp then serves ln itself.
func (fe *frontend) startFast(ln net.Listener) (net.Listener, bool) {
	switch fe.p.opts.Engine {
	case EngineFastHTTP:
		return ln, false
	case EngineAuto:
		if fastDisabled {
			return ln, false
		}
	}
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return ln, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return ln, false
	}
	lfd := -1
	if rc.Control(func(fd uintptr) { lfd = int(fd) }) != nil || lfd < 0 {
		return ln, false
	}
	sv := fe.p.cur.Load().snap.Server
	ff := &fastFront{fe: fe, ln: ln, lfd: lfd, hand: newHandoffListener(ln.Addr(), handoffQueue),
		maxHeader: sv.MaxHeaderBytes, maxConns: sv.MaxConns, idle: sv.IdleTimeout, write: sv.WriteTimeout, hdr: sv.ReadHeaderTimeout}
	if ff.write <= 0 {
		ff.write = ff.idle
	}
	n := runtime.GOMAXPROCS(0)
	for i := 0; i < n; i++ {
		l, err := newEvloop(ff)
		if err != nil {
			for _, l := range ff.loops {
				l.closeFDs()
			}
			fe.p.log.Warn("event loop unavailable; serving with fasthttp only", "addr", fe.addr, "error", err)
			return ln, false
		}
		ff.loops = append(ff.loops, l)
	}
	for _, l := range ff.loops {
		ff.wg.Add(1)
		ff.unlisten.Add(1)
		go l.run()
	}
	fe.fast = ff
	return ff.hand, true
}

// shutdown stops accepting, lets the loops' connections finish (idle ones
// get idleGrace for one more request, all responses say Connection: close)
// until ctx is done, then closes what is left and stops the loops.
func (ff *fastFront) shutdown(ctx context.Context) {
	ff.draining.Store(true)
	for _, l := range ff.loops {
		l.wake()
	}
	unlistened := make(chan struct{})
	go func() { ff.unlisten.Wait(); close(unlistened) }()
	select {
	case <-unlistened:
	case <-ctx.Done():
	}
	_ = ff.ln.Close()
	tick := time.NewTicker(5 * time.Millisecond)
	for ff.conns.Load() > 0 {
		select {
		case <-tick.C:
			continue
		case <-ctx.Done():
		}
		break
	}
	tick.Stop()
	ff.closing.Store(true)
	for _, l := range ff.loops {
		l.wake()
	}
	ff.wg.Wait()
	for _, l := range ff.loops {
		l.closeFDs()
	}
}

// counts returns the requests the loops answered and the connections they
// handed off.
func (ff *fastFront) counts() (served, handed uint64) { return ff.served.Load(), ff.handed.Load() }

// illegalTransitions is the number of illegal exchange-state transitions
// the loops made (exstate.go): a bug counted, not a crash.
func (ff *fastFront) illegalTransitions() uint64 { return ff.illegal.Load() }

// handoffListener hands connections from the loops to fasthttp.
//
// It never drops a connection it is given while open: when its queue is
// full, give waits for fasthttp's accept loop to take one (backpressure:
// the loop that hands off stalls for that long, and accepts nothing new
// meanwhile), so a burst of hand-offs larger than the queue is served, not
// closed. Only Close (the front end is gone) closes what is queued.
type handoffListener struct {
	addr      net.Addr
	ch        chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

// handoffQueue is the queue's length: enough to absorb a burst without
// stalling a loop while fasthttp's accept loop catches up.
var handoffQueue = 256 // a variable for tests

func newHandoffListener(addr net.Addr, size int) *handoffListener {
	return &handoffListener{addr: addr, ch: make(chan net.Conn, size), done: make(chan struct{})}
}

func (h *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-h.ch:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and closes connections handed off but not yet
// accepted (their clients see the connection close, as in a drain).
func (h *handoffListener) Close() error {
	h.closeOnce.Do(func() { close(h.done) })
	h.closeQueued()
	return nil
}

func (h *handoffListener) closeQueued() {
	for {
		select {
		case c := <-h.ch:
			_ = c.Close()
		default:
			return
		}
	}
}

func (h *handoffListener) Addr() net.Addr { return h.addr }

// give queues c for fasthttp, waiting while the queue is full; it closes c
// only if the listener is closed (the front end has stopped).
func (h *handoffListener) give(c net.Conn) bool {
	select {
	case h.ch <- c:
	case <-h.done:
		_ = c.Close()
		return false
	}
	// Queued after Close emptied the queue: nobody will accept it.
	select {
	case <-h.done:
		h.closeQueued()
		return false
	default:
		return true
	}
}

// prefixConn replays the bytes the loop had read before handing off.
type prefixConn struct {
	net.Conn
	pre []byte
}

func (c *prefixConn) Read(b []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(b, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

func (c *prefixConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}

func (c *prefixConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// cconn is a client connection held by a loop.
type cconn struct {
	fd      int
	idx     int // in evloop.clients
	peer    netip.Addr
	in      []byte // nil while idle with nothing buffered
	n       int
	out     []byte // response bytes not yet written
	outAt   int64  // when out became pending (write timeout)
	lastNs  int64
	events  uint32 // registered epoll events
	inProc  bool   // process is running on it (no recursion)
	gotAny  bool   // a byte has arrived
	closing bool   // close once out is written (Connection: close)
	linger  int64  // lingering close until (0: not lingering)
	grace   int64  // draining: close if still idle at
	ex      exch
}

// busy tells whether an exchange is in progress on c (exState).
func (c *cconn) busy() bool { return c.ex.state != exIdle }

// exch is the exchange in progress on a client connection.
type exch struct {
	state     exState // where the exchange is (exstate.go); changed only by setState
	a         *app
	lbb       *lb.Backend
	u         *upstream
	b         *bconn
	req       []byte // the request as sent to the backend (kept for a retry)
	sent      int
	total     int // request bytes (head + body) in cconn.in
	idem      bool
	head      bool // HEAD request
	start     time.Time
	dispatch  time.Time
	inService int
	t         ticket // the request's admission (pipeline.go)
	id        []byte
	attempts  int // attempts to relay so far, the current one included (tryAgain)
	deadline  int64
	activeIdx int
	// pend is the admission ticket of an exchange parked for its batch
	// decision (nil otherwise); parkIdx is its place in evloop.parked.
	pend    admission.Pending
	parkIdx int
	// response
	status   int
	mode     uint8
	remain   int64
	ct       chunkTracker
	bkClose  bool
	gotBytes bool
	released bool
}

const (
	bodyNone = iota
	bodyLength
	bodyChunked
	bodyClose
)

// bconn is a backend connection held by a loop.
type bconn struct {
	fd         int
	u          *upstream
	in         []byte
	n          int
	c          *cconn // client being served; nil while idle
	connecting bool   // a new connection, its connect in progress, not yet bound (bind takes it)
	reused     bool
	lastNs     int64
	events     uint32
}

// evloop is one event loop.
type evloop struct {
	ff      *fastFront
	ep, efd int

	cl        []*cconn // by fd
	bk        []*bconn // by fd
	clients   []*cconn
	active    []*cconn // with an exchange in progress
	parked    []*cconn // with an exchange parked for its batch decision
	idleBk    map[*upstream][]*bconn
	bufs      [][]byte
	now       time.Time
	nowNs     int64
	nextSweep int64
	nextIdle  int64
	drainSeen bool
	h         rawHead
	rh        rawHead
	view      rawView
	date      []byte
	dateSec   int64
	st        []byte     // stripped Server-Timing
	xff       []byte     // a trusted proxy's X-Forwarded-For lines, merged
	in        trustedFwd // what a trusted proxy sent (planForwarding)
	fwd       []byte     // the forwarding header values (planForwarding)
	yieldAt   int64      // next runtime.Gosched

	unlistened   bool  // the listening socket is out of this loop's epoll set
	acceptPaused int64 // accepts paused until (EMFILE and the like)

	// efdMu guards efd against a wake-up after closeFDs: a batch run may
	// call Wake for a request the loop has already cancelled, after the
	// loop stopped.
	efdMu     sync.RWMutex
	efdClosed bool
}

// unlisten takes the listening socket out of this loop's epoll set, once,
// and tells shutdown: only then may it close the listener (its descriptor
// number could otherwise be reused under a loop still accepting on it).
func (l *evloop) unlisten() {
	if l.unlistened {
		return
	}
	l.unlistened = true
	_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, l.ff.lfd, nil)
	l.ff.unlisten.Done()
}

func newEvloop(ff *fastFront) (*evloop, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(ep)
		return nil, err
	}
	l := &evloop{ff: ff, ep: ep, efd: efd, idleBk: map[*upstream][]*bconn{}}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, efd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: tagWake}); err != nil {
		l.closeFDs()
		return nil, err
	}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, ff.lfd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLEXCLUSIVE, Fd: tagListen}); err != nil {
		l.closeFDs()
		return nil, err
	}
	return l, nil
}

func (l *evloop) closeFDs() {
	unix.Close(l.ep)
	l.efdMu.Lock()
	l.efdClosed = true
	unix.Close(l.efd)
	l.efdMu.Unlock()
}

func (l *evloop) wake() {
	var one = [8]byte{1}
	l.efdMu.RLock()
	if !l.efdClosed {
		_, _ = unix.Write(l.efd, one[:])
	}
	l.efdMu.RUnlock()
}

// Wake is the loop's admission.Waker: a batch run that decided some of the
// loop's parked exchanges writes its eventfd, and the loop polls them
// (pollParked). It never blocks.
func (l *evloop) Wake() { l.wake() }

var _ admission.Waker = (*evloop)(nil)

func (l *evloop) getBuf() []byte {
	if k := len(l.bufs); k > 0 {
		b := l.bufs[k-1]
		l.bufs = l.bufs[:k-1]
		return b
	}
	return make([]byte, loopBufSize)
}

func (l *evloop) putBuf(b []byte) {
	if b != nil && len(l.bufs) < 1024 {
		l.bufs = append(l.bufs, b)
	}
}

func (l *evloop) tick() {
	l.now = time.Now()
	l.nowNs = l.now.UnixNano()
}

func (l *evloop) run() {
	defer l.ff.wg.Done()
	evs := make([]unix.EpollEvent, 256)
	for {
		timeout := int(idleSweep / time.Millisecond)
		if len(l.active) > 0 || l.ff.draining.Load() {
			timeout = int(sweepEvery / time.Millisecond)
		}
		// A loop that always finds work never parks; it yields every
		// millisecond so the goroutines of handed-off connections, the
		// batch policer and the admin listener need not wait for
		// preemption. (Yielding every round made Ms hand the loop
		// goroutine around: futex sleeps and wakes, ~2% of CPU.)
		if l.nowNs >= l.yieldAt {
			runtime.Gosched()
			l.yieldAt = l.nowNs + int64(time.Millisecond)
		}
		n, err := l.wait(evs, timeout)
		l.tick()
		if err != nil && err != unix.EINTR {
			l.ff.fe.p.log.Error("epoll_wait failed; event loop stops", "error", err)
			l.closeAll()
			return
		}
		for i := 0; i < n; i++ {
			fd := int(evs[i].Fd)
			ev := evs[i].Events
			switch {
			case fd == tagListen:
				l.accept()
			case fd == tagWake:
				var b [8]byte
				_, _ = unix.Read(l.efd, b[:])
				l.pollParked()
			case fd < len(l.cl) && l.cl[fd] != nil:
				l.clientEvent(l.cl[fd], ev)
			case fd < len(l.bk) && l.bk[fd] != nil:
				l.backendEvent(l.bk[fd], ev)
			}
		}
		if l.ff.closing.Load() {
			l.closeAll()
			return
		}
		if l.ff.draining.Load() && !l.drainSeen {
			l.startDrain()
		}
		if l.nowNs >= l.nextSweep {
			l.sweep()
		}
	}
}

// ---------------------------------------------------------------- clients

func (l *evloop) accept() {
	if l.unlistened || l.ff.draining.Load() {
		// Draining: connections still queued are left to the next
		// process (an upgrade) or to the listener's close.
		return
	}
	for k := 0; k < maxAcceptOnce; k++ {
		fd, sa, err := unix.Accept4(l.ff.lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
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
				l.ff.fe.p.log.Warn("accept failed; pausing accepts for 100ms", "addr", l.ff.fe.addr, "error", err)
				_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, l.ff.lfd, nil)
				l.acceptPaused = l.nowNs + int64(100*time.Millisecond)
			case unix.EINVAL:
				// The socket left the LISTEN state: a final stop takes it
				// out before draining (cmd/sentry stopListening).
				l.unlisten()
			default:
				l.ff.fe.p.log.Error("accept failed; this loop stops accepting", "addr", l.ff.fe.addr, "error", err)
				l.unlisten()
			}
			return
		}
		if max := l.ff.maxConns; max > 0 && l.ff.conns.Load()+int64(l.ff.fe.srv.GetOpenConnectionsCount()) >= int64(max) {
			l.ff.fe.p.metrics.clientErrors.WithLabelValues(l.ff.fe.addr, "too_many_conns").Inc()
			_, _ = unix.Write(fd, tooManyConns)
			unix.Close(fd)
			continue
		}
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		c := &cconn{fd: fd, peer: sockaddrAddr(sa), lastNs: l.nowNs, events: unix.EPOLLIN | unix.EPOLLRDHUP}
		if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: c.events, Fd: int32(fd)}); err != nil {
			unix.Close(fd)
			continue
		}
		l.ff.conns.Add(1)
		for fd >= len(l.cl) {
			l.cl = append(l.cl, make([]*cconn, len(l.cl)+64)...)
		}
		l.cl[fd] = c
		c.idx = len(l.clients)
		l.clients = append(l.clients, c)
	}
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

func (l *evloop) setClientEvents(c *cconn, ev uint32) {
	if c.events == ev {
		return
	}
	c.events = ev
	_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_MOD, c.fd, &unix.EpollEvent{Events: ev, Fd: int32(c.fd)})
}

// setState moves c's exchange to state to, checking the transition
// (exstate.go): an illegal one panics under strictStates (the tests) and
// is counted otherwise.
func (l *evloop) setState(c *cconn, to exState) {
	ex := &c.ex
	if !ex.state.legal(to) {
		l.ff.illegal.Add(1)
		if strictStates {
			panic("evloop: illegal exchange transition " + ex.state.String() + " -> " + to.String())
		}
	}
	ex.state = to
}

// forget removes c from the loop's tables (the fd stays open).
func (l *evloop) forget(c *cconn) {
	l.cl[c.fd] = nil
	last := l.clients[len(l.clients)-1]
	l.clients[c.idx] = last
	last.idx = c.idx
	l.clients = l.clients[:len(l.clients)-1]
	l.putBuf(c.in)
	c.in = nil
}

// closeClient closes c now, ending any exchange on it.
func (l *evloop) closeClient(c *cconn) {
	if c.fd < 0 {
		return
	}
	if c.busy() {
		l.abort(c, outClientGone)
	}
	l.forget(c)
	unix.Close(c.fd)
	c.fd = -1
	l.ff.conns.Add(-1)
}

// lingerClose sends FIN and reads and drops what the client still sends
// until it closes or lingerTimeout passes (as nginx's lingering_close), so
// a client that sent more gets the response, not a reset.
func (l *evloop) lingerClose(c *cconn) {
	if c.linger != 0 || c.fd < 0 {
		return
	}
	if unix.Shutdown(c.fd, unix.SHUT_WR) != nil {
		l.closeClient(c)
		return
	}
	c.linger = l.nowNs + int64(lingerTimeout)
	l.setClientEvents(c, unix.EPOLLIN|unix.EPOLLRDHUP)
}

// handoff gives c, with the bytes read so far, to fasthttp.
func (l *evloop) handoff(c *cconn) {
	_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, c.fd, nil)
	pre := append([]byte(nil), c.in[:c.n]...)
	l.forget(c)
	f := os.NewFile(uintptr(c.fd), "client")
	c.fd = -1
	l.ff.conns.Add(-1)
	nc, err := net.FileConn(f)
	if err != nil {
		_, _ = rawWrite(int(f.Fd()), tooManyConns)
		_ = f.Close()
		l.ff.fe.p.metrics.clientErrors.WithLabelValues(l.ff.fe.addr, "too_many_conns").Inc()
		l.ff.fe.p.log.Warn("hand-off to fasthttp failed; connection refused", "addr", l.ff.fe.addr, "error", err)
		return
	}
	_ = f.Close()
	// Counted before fasthttp can have served it (the counter must not
	// lag the response); give closes it if fasthttp is not accepting.
	l.ff.handed.Add(1)
	l.ff.hand.give(&prefixConn{Conn: nc, pre: pre})
}

func (l *evloop) clientEvent(c *cconn, ev uint32) {
	if c.linger != 0 {
		var buf [4096]byte
		for k := 0; k < 16; k++ {
			m, err := rawRead(c.fd, buf[:])
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
		l.flush(c)
		if c.fd < 0 {
			return
		}
	}
	if ev&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		l.readClient(c, ev)
	}
}

func (l *evloop) readClient(c *cconn, ev uint32) {
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
	m, err := rawRead(c.fd, c.in[c.n:])
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
func (l *evloop) process(c *cconn) {
	c.inProc = true
	defer func() { c.inProc = false }()
	for c.fd >= 0 && !c.busy() && c.linger == 0 && len(c.out) == 0 && c.n > 0 {
		b := c.in[:c.n]
		if parseRequestHead(b, &l.h) != headOK || !l.serve(c, b, &l.h) {
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
	}
}

// rawView is the classifier's view of a request head (classify.Request).
type rawView struct {
	b []byte
	h *rawHead
}

func (v *rawView) Method() []byte { return v.h.method.of(v.b) }
func (v *rawView) Path() []byte {
	t := v.h.target.of(v.b)
	for i, c := range t {
		if c == '?' {
			return t[:i]
		}
	}
	return t
}
func (v *rawView) Host() []byte            { return v.h.host.of(v.b) }
func (v *rawView) Peek(name string) []byte { return v.h.peek(v.b, name) }
func (v *rawView) Cookie(name string) []byte {
	for i := 0; i < v.h.nfields; i++ {
		f := &v.h.fields[i]
		if !eqFold(f.name.of(v.b), "cookie") {
			continue
		}
		if val := cookieValue(f.value.of(v.b), name); val != nil {
			return val
		}
	}
	return nil
}

// serve runs one parsed request; false (before anything was done or
// counted) means the fast path does not take it.
func (l *evloop) serve(c *cconn, b []byte, h *rawHead) bool {
	// Connection lists other than close/keep-alive, Upgrade, and a Host
	// that is not plainly uri-host[:port] go to fasthttp, where the header
	// policy's checks answer them (headers.go; doc.go "The header policy").
	if h.hostCount != 1 || h.chunked || h.teOther || h.expect || h.upgrade || h.connOther || h.n > l.ff.maxHeader ||
		!validHost(h.host.of(b)) {
		return false
	}
	cl := h.contentLength
	if cl < 0 {
		cl = 0
	}
	if int64(h.n)+cl > int64(c.n) {
		return false // the body is not all here: fasthttp streams it
	}
	rt := l.ff.fe.route.Load()
	a := rt.lookup(h.host.of(b))
	if a == nil || !a.loopOK {
		return false
	}
	if lim := a.cfg.MaxBodyBytes; lim > 0 && cl > lim {
		return false
	}
	ex := &c.ex
	ex.a, ex.total, ex.start = a, h.n+int(cl), l.now
	ex.status, ex.released, ex.lbb, ex.u, ex.b = 0, true, nil, nil, nil
	ex.id = ex.id[:0]
	if l.ff.draining.Load() || h.connClose {
		c.closing = true
	}
	ex.head = string(h.method.of(b)) == fasthttp.MethodHead // methods are case-sensitive
	ex.idem = idempotentMethod(h.method.of(b))
	client := l.forwarded(c, a, b, h)
	// The decide step (pipeline.go). This engine must not block: a
	// request whose decision is not made at once parks as an exchange.
	l.view = rawView{b: b, h: h}
	d, pend, decided := a.decide(&ex.t, &l.view, client, l.now, nil, true, l)
	l.setState(c, exAdmitting)
	l.ff.served.Add(1)
	if !decided {
		l.park(c, pend)
		return true
	}
	l.admitted(c, d, b, h)
	return true
}

// forwarded reads what a trusted proxy sent (planForwarding) into l.in and
// returns the client's address; its X-Forwarded-For lines are one list
// (RFC 9110 §5.3).
func (l *evloop) forwarded(c *cconn, a *app, b []byte, h *rawHead) netip.Addr {
	in := &l.in
	*in = trustedFwd{}
	if !a.trustedPeer(c.peer) {
		return c.peer
	}
	chain := l.xff[:0]
	for i := 0; i < h.nfields; i++ {
		f := &h.fields[i]
		switch k := h.kinds[i]; k {
		case hXFF, hXFProto, hXFHost:
			chain = in.add(k, f.value.of(b), chain)
		case hOther:
			if exact, _ := nameMatch(f.name.of(b), a.reqID); exact {
				in.add(hOther, f.value.of(b), nil)
			}
		}
	}
	l.xff = chain
	return a.clientAddr(c.peer, in.xff)
}

// admitted acts on the admission decision d of c's exchange (busy, parsed
// as h from b, l.in filled by forwarded): relay or reject.
func (l *evloop) admitted(c *cconn, d admission.Decision, b []byte, h *rawHead) {
	a := c.ex.a
	if a.admitted(&c.ex.t, d) != outRelayed {
		// Rejected (a parked exchange whose client went was aborted,
		// never resumed).
		l.respond(c, a, outRejected, d)
		return
	}
	l.relay(c, b, h)
}

// relay sends c's admitted exchange (parsed as h from b, l.in filled by
// forwarded) to a backend.
func (l *evloop) relay(c *cconn, b []byte, h *rawHead) {
	ex, a, in, p := &c.ex, c.ex.a, &l.in, l.ff.fe.p
	if a.pool.Healthy() == 0 {
		l.respond(c, a, outNoBackend, admission.Decision{})
		return
	}

	// The request as the backend gets it.
	r := ex.req[:0]
	le := 0
	for b[le] != '\n' {
		le++
	}
	r = append(r, b[:le+1]...)
	// The header policy (headers.go): hop-by-hop lines and every copy of
	// the forwarding headers (any spelling) go; one of each is added.
	for i := 0; i < h.nfields; i++ {
		f := &h.fields[i]
		switch h.kinds[i] {
		case hConnection, hHopByHop, hXFF, hXFProto, hXFHost, hFwdAlias:
			continue
		case hOther:
			if exact, alias := nameMatch(f.name.of(b), a.reqID); exact || alias {
				continue
			}
		}
		r = append(r, f.line.of(b)...)
	}
	var fw forwarding
	l.fwd, fw = planForwarding(l.fwd, in, c.peer, false, h.host.of(b), p.ids)
	ex.id = append(ex.id[:0], fw.id...)
	r = append(append(append(r, "X-Forwarded-For: "...), fw.xff...), "\r\n"...)
	r = append(append(append(r, "X-Forwarded-Proto: "...), fw.proto...), "\r\n"...)
	r = append(append(append(r, "X-Forwarded-Host: "...), fw.host...), "\r\n"...)
	r = append(append(append(append(r, a.reqID...), ": "...), fw.id...), "\r\n"...)
	r = append(r, "\r\n"...)
	r = append(r, b[h.n:ex.total]...)
	ex.req = r
	ex.attempts = 0
	l.dispatch(c, nil)
}

// park keeps c's exchange, whose admission pend has not decided, until the
// batch run that decides it wakes the loop. Nothing else is kept: the head
// stays in c.in (pipelined bytes that follow wait behind it, as for any
// exchange in progress), and resume parses it again; the arrival was
// counted once, by Estimate.
func (l *evloop) park(c *cconn, pend admission.Pending) {
	c.ex.pend = pend
	l.setState(c, exParked)
	c.ex.parkIdx = len(l.parked)
	l.parked = append(l.parked, c)
}

// unpark takes c out of l.parked (its ticket is then used or cancelled).
func (l *evloop) unpark(c *cconn) {
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
func (l *evloop) pollParked() {
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
func (l *evloop) resume(c *cconn, d admission.Decision) {
	l.setState(c, exAdmitting)
	b := c.in[:c.n]
	if parseRequestHead(b, &l.h) != headOK {
		// Cannot happen: the same bytes parsed when the request came.
		l.abort(c, outBadRequest)
		return
	}
	l.forwarded(c, c.ex.a, b, &l.h)
	l.admitted(c, d, b, &l.h)
}

// ---------------------------------------------------------------- backends

// dispatch picks a backend and sends the request.
func (l *evloop) dispatch(c *cconn, last *upstream) {
	ex := &c.ex
	for {
		bk := ex.a.pool.Pick()
		if bk == nil {
			if last != nil {
				ex.u = last
				l.respond(c, ex.a, outBackendFailed, admission.Decision{})
			} else {
				l.respond(c, ex.a, outNoBackend, admission.Decision{})
			}
			return
		}
		u := bk.Attachment.(*upstream)
		ex.attempts++
		ex.lbb, ex.u, ex.released = bk, u, false
		ex.inService = int(bk.Inflight())
		bc, err := l.backendConn(u, ex.a)
		if err == errBusy {
			l.release(ex, true)
			l.respond(c, ex.a, outBackendBusy, admission.Decision{})
			return
		}
		if err != nil {
			if !l.connectFailed(c) {
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

// backendConn returns an idle connection to u or starts a new one.
func (l *evloop) backendConn(u *upstream, a *app) (*bconn, error) {
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
	if max := a.cfg.MaxConnsPerBackend; max > 0 && int(u.loopConns.Load())+u.hc.ConnsCount() >= max {
		return nil, errBusy
	}
	addr, err := u.sockaddr()
	if err != nil {
		return nil, err
	}
	// connect(2) through x/sys writes into the Sockaddr it is given, so
	// each call gets its own copy (loops share the upstream's).
	fam := unix.AF_INET
	switch sa := addr.(type) {
	case *unix.SockaddrInet4:
		c := *sa
		addr = &c
	case *unix.SockaddrInet6:
		fam = unix.AF_INET6
		c := *sa
		addr = &c
	}
	fd, err := unix.Socket(fam, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	connecting := false
	if err := unix.Connect(fd, addr); err != nil {
		if err != unix.EINPROGRESS && err != unix.EINTR {
			unix.Close(fd)
			return nil, err
		}
		connecting = true
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	bc := &bconn{fd: fd, u: u, connecting: connecting, events: unix.EPOLLIN | unix.EPOLLRDHUP}
	if connecting {
		bc.events |= unix.EPOLLOUT
	}
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: bc.events, Fd: int32(fd)}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	u.loopConns.Add(1)
	for fd >= len(l.bk) {
		l.bk = append(l.bk, make([]*bconn, len(l.bk)+64)...)
	}
	l.bk[fd] = bc
	return bc, nil
}

// fastAddr is a backend's address for the event loops.
type fastAddr struct{ sa unix.Sockaddr }

// sockaddr returns the backend's address for connect(2); it is resolved
// once (backends are IP:port; DNS names are resolved by the pool).
func (u *upstream) sockaddr() (unix.Sockaddr, error) {
	if sa := u.sa.Load(); sa != nil {
		return sa.sa, nil
	}
	ap, err := netip.ParseAddrPort(u.addr)
	if err != nil {
		ta, rerr := net.ResolveTCPAddr("tcp", u.addr)
		if rerr != nil {
			return nil, rerr
		}
		ap = ta.AddrPort()
	}
	var sa unix.Sockaddr
	if a := ap.Addr().Unmap(); a.Is4() {
		sa = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: a.As4()}
	} else {
		sa = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: a.As16()}
	}
	u.sa.Store(&fastAddr{sa: sa})
	return sa, nil
}

func (l *evloop) setBackendEvents(bc *bconn, ev uint32) {
	if bc.events == ev {
		return
	}
	bc.events = ev
	_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_MOD, bc.fd, &unix.EpollEvent{Events: ev, Fd: int32(bc.fd)})
}

func (l *evloop) closeBackend(bc *bconn) {
	if bc.fd < 0 {
		return
	}
	l.bk[bc.fd] = nil
	unix.Close(bc.fd)
	bc.fd = -1
	bc.u.loopConns.Add(-1)
	l.putBuf(bc.in)
	bc.in = nil
}

// bind starts the exchange of c on bc.
func (l *evloop) bind(c *cconn, bc *bconn) {
	ex := &c.ex
	ex.b, bc.c = bc, c
	ex.sent, ex.gotBytes, ex.bkClose = 0, false, false
	ex.dispatch = l.now
	if bc.in == nil {
		bc.in = l.getBuf()
	}
	bc.n = 0
	if ex.activeIdx < 0 || ex.activeIdx >= len(l.active) || l.active[ex.activeIdx] != c {
		ex.activeIdx = len(l.active)
		l.active = append(l.active, c)
	}
	if bc.connecting {
		bc.connecting = false // the exchange's state says it from here
		l.setState(c, exConnecting)
		ex.deadline = l.nowNs + ex.a.shared.connect.Load()
		return
	}
	l.setState(c, exSending)
	ex.deadline = l.nowNs + ex.a.shared.idle.Load()
	l.send(bc)
}

// send writes what is left of the request to bc.
func (l *evloop) send(bc *bconn) {
	ex := &bc.c.ex
	for ex.sent < len(ex.req) {
		m, err := rawWrite(bc.fd, ex.req[ex.sent:])
		if err == unix.EAGAIN {
			l.setBackendEvents(bc, unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLOUT)
			return
		}
		if err == unix.EINTR {
			continue
		}
		if m <= 0 {
			l.backendBroke(bc, failBroken)
			return
		}
		ex.sent += m
	}
	l.setBackendEvents(bc, unix.EPOLLIN|unix.EPOLLRDHUP)
}

func (l *evloop) backendEvent(bc *bconn, ev uint32) {
	c := bc.c
	if c == nil {
		// Idle: the backend closed it (or sent garbage).
		l.closeBackend(bc)
		return
	}
	if c.ex.state == exConnecting {
		if ev&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) == 0 {
			return
		}
		if e, err := unix.GetsockoptInt(bc.fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || e != 0 {
			l.dialFailed(bc)
			return
		}
		l.setState(c, exSending)
		c.ex.deadline = l.nowNs + c.ex.a.shared.idle.Load()
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
func (l *evloop) dialFailed(bc *bconn) {
	c := bc.c
	ex := &c.ex
	l.closeBackend(bc)
	ex.b = nil
	if l.connectFailed(c) {
		l.dispatch(c, ex.u)
	}
}

// connectFailed ejects the backend a connect to failed (unambiguous, as on
// the fasthttp path) and answers 502 when the retry policy (tryAgain) says
// so; true means try another backend.
func (l *evloop) connectFailed(c *cconn) bool {
	ex := &c.ex
	ex.a.pool.Eject(ex.lbb)
	ex.released = true
	if p := l.ff.fe.p; p.log.IsDebug() {
		p.log.Debug("relay failed", "app", ex.a.name, "backend", ex.u.addr, "error", "connect failed")
	}
	if !tryAgain(failConnect, ex.idem, ex.attempts, false) {
		l.respond(c, ex.a, outBackendFailed, admission.Decision{})
		return false
	}
	return true
}

// backendBroke: the connection failed while sending or before the head,
// in the way f says (failBroken, or failNoRetry for a response that cannot
// be relayed).
func (l *evloop) backendBroke(bc *bconn, f failure) {
	c := bc.c
	ex := &c.ex
	if ex.state == exRelaying {
		// Part of the response is out: the client connection cannot
		// carry an error response now.
		l.abort(c, outBackendFailed)
		return
	}
	reused := bc.reused
	l.closeBackend(bc)
	ex.b = nil
	if tryAgain(f, ex.idem, ex.attempts, ex.gotBytes) {
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
	l.respond(c, ex.a, outBackendFailed, admission.Decision{})
}

func (l *evloop) release(ex *exch, ok bool) {
	if !ex.released && ex.lbb != nil {
		ex.a.pool.Release(ex.lbb, ok)
	}
	ex.released = true
}

func (l *evloop) readBackend(bc *bconn) {
	c := bc.c
	ex := &c.ex
	if bc.n == len(bc.in) {
		l.backendBroke(bc, failNoRetry) // a head larger than the buffer
		return
	}
	m, err := rawRead(bc.fd, bc.in[bc.n:])
	if err == unix.EAGAIN || err == unix.EINTR {
		return
	}
	if m <= 0 {
		switch {
		case ex.state != exRelaying:
			l.backendBroke(bc, failBroken)
		case ex.mode == bodyClose:
			ex.bkClose = true
			l.finish(c)
		default:
			l.abort(c, outBackendFailed) // truncated body
		}
		return
	}
	bc.n += m
	ex.gotBytes = true
	ex.deadline = l.nowNs + ex.a.shared.idle.Load()
	data := bc.in[:bc.n]
	if ex.state != exRelaying {
		for {
			switch parseResponseHead(data, &l.rh) {
			case headIncomplete:
				return
			case headUnsure:
				l.backendBroke(bc, failNoRetry) // a broken response is not retried
				return
			}
			if st := l.rh.status; st >= 100 && st < 200 {
				if st == 101 {
					l.backendBroke(bc, failNoRetry)
					return
				}
				// 100 Continue, 103 Early Hints: dropped, as fasthttp does.
				data = data[l.rh.n:]
				continue
			}
			break
		}
		l.startResponse(c, bc, data)
		return
	}
	l.forward(c, bc, data)
}

// startResponse sends the response head (rewritten) and whatever body came
// with it.
func (l *evloop) startResponse(c *cconn, bc *bconn, data []byte) {
	ex := &c.ex
	a := ex.a
	rh := &l.rh
	ex.status = rh.status
	switch {
	case ex.head || rh.status == 204 || rh.status == 304:
		ex.mode = bodyNone
	case rh.chunked:
		if rh.teOther {
			l.backendBroke(bc, failNoRetry)
			return
		}
		ex.mode, ex.ct = bodyChunked, chunkTracker{}
	case rh.contentLength >= 0:
		ex.mode, ex.remain = bodyLength, rh.contentLength
	default:
		ex.mode = bodyClose
		c.closing = true
	}
	ex.bkClose = rh.connClose || rh.minor == 0 && !rh.connKeepAlive
	now := time.Now()
	l.release(ex, true)
	// The complete step (pipeline.go): the ticket is told the outcome.
	st := rh.findKind(data, hServerTiming)
	strip := a.observe(&ex.t, admission.Result{ServerTiming: st, Measured: now.Sub(ex.dispatch), InService: ex.inService, End: now})

	out := c.out[:0]
	out = append(out, "HTTP/1.1"...)
	le := 8
	for data[le] != '\n' {
		le++
	}
	out = append(out, data[8:le+1]...)
	for i := 0; i < rh.nfields; i++ {
		f := &rh.fields[i]
		switch rh.kinds[i] {
		case hConnection, hHopByHop, hUpgrade:
			continue
		case hContentLength:
			if rh.chunked {
				continue // Transfer-Encoding overrides it; not passed on (RFC 9112 §6.3)
			}
		case hServerTiming:
			if strip {
				l.st = estimator.StripServerTiming(l.st[:0], f.value.of(data))
				if v := l.st; len(v) > 0 {
					out = append(append(append(out, "Server-Timing: "...), v...), "\r\n"...)
				}
				continue
			}
		case hOther:
			if eqFoldString(f.name.of(data), a.reqID) {
				continue
			}
		}
		out = append(out, f.line.of(data)...)
	}
	out = append(append(append(append(out, a.reqID...), ": "...), ex.id...), "\r\n"...)
	if c.closing {
		out = append(out, "Connection: close\r\n"...)
	}
	out = append(out, "\r\n"...)
	c.out = out
	l.setState(c, exRelaying)
	l.forward(c, bc, data[rh.n:])
}

// forward relays body bytes (already in bc.in) to the client, and ends the
// exchange at the end of the body.
func (l *evloop) forward(c *cconn, bc *bconn, data []byte) {
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
		n, end, ok := ex.ct.feed(data)
		if !ok {
			l.abort(c, outBackendFailed)
			return
		}
		if end && n < len(data) {
			ex.bkClose = true
		}
		data, done = data[:n], end
	}
	c.out = append(c.out, data...)
	bc.n = 0
	if done {
		// The exchange is recorded before its last bytes go out (as on
		// the fasthttp path): a client that has the response sees it in
		// the metrics.
		l.finish(c)
		if c.fd >= 0 {
			l.flush(c)
		}
		return
	}
	l.flush(c)
	if c.fd < 0 {
		return
	}
	if len(c.out) > 0 {
		// The client is slower than the backend: stop reading the
		// backend until the client has taken this.
		l.setBackendEvents(bc, bc.events&^(unix.EPOLLIN|unix.EPOLLRDHUP))
	}
}

// flush writes c.out; on EAGAIN it waits for EPOLLOUT.
func (l *evloop) flush(c *cconn) {
	for len(c.out) > 0 {
		m, err := rawWrite(c.fd, c.out)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			if c.outAt == 0 {
				c.outAt = l.nowNs
			}
			l.setClientEvents(c, c.events|unix.EPOLLOUT)
			return
		}
		if m <= 0 {
			l.closeClient(c)
			return
		}
		if m < len(c.out) {
			c.outAt = l.nowNs
			n := copy(c.out, c.out[m:])
			c.out = c.out[:n]
			continue
		}
		c.out = c.out[:0]
	}
	c.outAt = 0
	if c.events&unix.EPOLLOUT != 0 {
		l.setClientEvents(c, c.events&^unix.EPOLLOUT)
	}
	if c.busy() {
		if bc := c.ex.b; bc != nil && bc.fd >= 0 && c.ex.state == exRelaying && bc.events&unix.EPOLLIN == 0 {
			l.setBackendEvents(bc, bc.events|unix.EPOLLIN|unix.EPOLLRDHUP)
			c.ex.deadline = l.nowNs + c.ex.a.shared.idle.Load()
		}
		return
	}
	l.after(c)
}

// after runs when an exchange has ended and its response is written: the
// connection closes (Connection: close) or serves what is buffered next.
func (l *evloop) after(c *cconn) {
	if !c.busy() && len(c.out) == 0 {
		// An idle connection keeps small buffers only.
		if cap(c.out) > 4<<10 {
			c.out = nil
		}
		if cap(c.ex.req) > 4<<10 {
			c.ex.req = nil
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
func (l *evloop) finish(c *cconn) {
	ex := &c.ex
	if bc := ex.b; bc != nil {
		ex.b, bc.c = nil, nil
		// A backend that answered before taking the whole request (an
		// early 413, say) still expects the rest: never reuse it.
		if ex.bkClose || bc.fd < 0 || ex.sent < len(ex.req) {
			l.closeBackend(bc)
		} else {
			bc.n, bc.reused, bc.lastNs = 0, true, l.nowNs
			l.putBuf(bc.in)
			bc.in = nil
			l.setBackendEvents(bc, unix.EPOLLIN|unix.EPOLLRDHUP)
			l.idleBk[bc.u] = append(l.idleBk[bc.u], bc)
		}
	}
	l.done(c, outRelayed, ex.status)
	l.after(c)
}

// abort ends an exchange that cannot complete; the client connection is
// closed unless it is the client that went away.
func (l *evloop) abort(c *cconn, o outcome) {
	ex := &c.ex
	if ex.state == exParked {
		// Parked: the request leaves its batch queue, counted as gone
		// (o is outClientGone: only a client close or the loop's close
		// ends a parked exchange).
		pend := ex.pend
		l.unpark(c)
		pend.Cancel()
		ex.a.admitted(&ex.t, admission.Decision{Verdict: admission.RejectGone})
	}
	if bc := ex.b; bc != nil {
		ex.b, bc.c = nil, nil
		l.closeBackend(bc)
	}
	l.release(ex, o != outBackendFailed && o != outBackendTimeout)
	st := ex.status
	if ex.state != exRelaying {
		st = statusOf(o)
	}
	if o == outClientGone {
		st = statusOf(outClientGone)
	}
	l.done(c, o, st)
	if c.fd >= 0 && o != outClientGone {
		c.out = c.out[:0]
		l.closeClient(c)
	}
}

// done records the exchange and makes the connection ready for the next
// request.
func (l *evloop) done(c *cconn, o outcome, status int) {
	ex := &c.ex
	if i := ex.activeIdx; i >= 0 && i < len(l.active) && l.active[i] == c {
		last := l.active[len(l.active)-1]
		l.active[i] = last
		last.ex.activeIdx = i
		l.active = l.active[:len(l.active)-1]
	}
	ex.activeIdx = -1
	// The complete step's last part (pipeline.go): metrics, access log.
	a, access := ex.a, l.ff.fe.route.Load().access
	var method, uri []byte
	if access {
		method, uri = l.requestLine(c)
	}
	l.ff.fe.p.record(a, access, o, status, ex.u, ex.start, method, uri, ex.id)
	ex.lbb, ex.u, ex.a = nil, nil, nil
	l.setState(c, exIdle)
	c.lastNs = l.nowNs
	if c.in != nil && ex.total <= c.n {
		c.n = copy(c.in, c.in[ex.total:c.n])
	}
	ex.total = 0
	if c.events&unix.EPOLLIN == 0 && c.linger == 0 {
		l.setClientEvents(c, c.events|unix.EPOLLIN|unix.EPOLLRDHUP)
	}
}

// requestLine returns the method and target of c's exchange, for the
// access log.
func (l *evloop) requestLine(c *cconn) (method, uri []byte) {
	ex := &c.ex
	if c.in != nil && ex.total <= c.n {
		line := c.in[:ex.total]
		if i := bytes.IndexByte(line, ' '); i > 0 {
			method = line[:i]
			rest := line[i+1:]
			if j := bytes.IndexByte(rest, ' '); j > 0 {
				uri = rest[:j]
			}
		}
	}
	return method, uri
}

// respond writes a response sentry makes itself (rejection or error) and
// ends the exchange. The request was read whole, so the connection stays
// usable.
func (l *evloop) respond(c *cconn, a *app, o outcome, d admission.Decision) {
	ex := &c.ex
	if bc := ex.b; bc != nil {
		ex.b, bc.c = nil, nil
		l.closeBackend(bc)
	}
	l.release(ex, !countsAsFailure(o))
	r := replyFor(a, o, d)
	status := r.status
	var id []byte
	if o != outRejected && o != outNoBackend {
		id = ex.id
	}
	if l.ff.draining.Load() {
		c.closing = true
	}
	out := appendReply(c.out, r, l.httpDate(), a.reqID, id, c.closing, ex.head)
	c.out = out
	l.done(c, o, status)
	l.flush(c)
}

// httpDate returns the Date header value, refreshed once a second.
func (l *evloop) httpDate() []byte {
	if s := l.nowNs / int64(time.Second); s != l.dateSec || l.date == nil {
		l.dateSec = s
		l.date = l.now.UTC().AppendFormat(l.date[:0], http1Date)
	}
	return l.date
}

const http1Date = "Mon, 02 Jan 2006 15:04:05 GMT"

// ---------------------------------------------------------------- time

// sweep enforces timeouts: connect and response (idle) deadlines of
// exchanges, slow client writes, idle keep-alive connections, lingering
// closes and the drain grace.
func (l *evloop) sweep() {
	l.nextSweep = l.nowNs + int64(sweepEvery)
	if l.acceptPaused != 0 && l.nowNs >= l.acceptPaused {
		l.acceptPaused = 0
		if !l.unlistened && !l.ff.draining.Load() {
			_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, l.ff.lfd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLEXCLUSIVE, Fd: tagListen})
		}
	}
	for i := 0; i < len(l.active); i++ {
		c := l.active[i]
		ex := &c.ex
		// While the client has not taken what was relayed, the backend
		// is not read, so its idle deadline waits (the write timeout
		// covers the client); flush restarts it.
		if ex.b != nil && ex.deadline != 0 && l.nowNs > ex.deadline && !(ex.state == exRelaying && len(c.out) > 0) {
			if ex.state == exConnecting {
				l.dialFailed(ex.b)
			} else if ex.state != exRelaying {
				l.release(ex, false)
				l.respond(c, ex.a, outBackendTimeout, admission.Decision{})
			} else {
				l.abort(c, outBackendTimeout)
			}
			i--
			continue
		}
		if c.outAt != 0 && l.nowNs-c.outAt > int64(l.ff.write) {
			l.abort(c, outClientGone)
			l.closeClient(c)
			i--
		}
	}
	if l.nowNs < l.nextIdle {
		return
	}
	l.nextIdle = l.nowNs + int64(idleSweep)
	idle := int64(l.ff.idle)
	for i := 0; i < len(l.clients); i++ {
		c := l.clients[i]
		switch {
		case c.linger != 0:
			if l.nowNs > c.linger {
				l.closeClient(c)
				i--
			}
		case c.busy():
		case c.outAt != 0 && l.nowNs-c.outAt > int64(l.ff.write):
			l.closeClient(c)
			i--
		case c.grace != 0 && l.nowNs > c.grace && c.n == 0 && len(c.out) == 0:
			l.lingerClose(c)
		case !c.gotAny && l.ff.hdr > 0 && l.nowNs-c.lastNs > int64(l.ff.hdr):
			// Nothing received yet: the read-header timeout, as
			// fasthttp applies it, not the keep-alive idle timeout.
			l.closeClient(c)
			i--
		case idle > 0 && c.n == 0 && len(c.out) == 0 && l.nowNs-c.lastNs > idle:
			l.closeClient(c)
			i--
		}
	}
	for u, list := range l.idleBk {
		keep := list[:0]
		for _, bc := range list {
			if bc.fd >= 0 && l.nowNs-bc.lastNs < int64(backendIdle) && !u.closed.Load() {
				keep = append(keep, bc)
			} else {
				l.closeBackend(bc)
			}
		}
		if len(keep) == 0 {
			delete(l.idleBk, u)
		} else {
			l.idleBk[u] = keep
		}
	}
}

// startDrain: idle connections get idleGrace for one more request, busy
// ones close after their response.
func (l *evloop) startDrain() {
	l.drainSeen = true
	l.unlisten()
	for _, c := range l.clients {
		if c.busy() || len(c.out) > 0 {
			c.closing = true
		} else if c.linger == 0 {
			c.grace = l.nowNs + int64(idleGrace)
			c.closing = true
		}
	}
	l.nextIdle = 0
}

// closeAll closes every connection and the loop's own descriptors.
func (l *evloop) closeAll() {
	l.unlisten()
	for len(l.clients) > 0 {
		l.closeClient(l.clients[len(l.clients)-1])
	}
	for _, list := range l.idleBk {
		for _, bc := range list {
			l.closeBackend(bc)
		}
	}
	l.idleBk = map[*upstream][]*bconn{}
	// ep and efd stay open until shutdown has stopped every loop: a
	// wake() after a close could write into a reused descriptor.
}

// ---------------------------------------------------------------- helpers

// peek returns the value of the first field named name, any case.
func (h *rawHead) peek(b []byte, name string) []byte {
	for i := 0; i < h.nfields; i++ {
		f := &h.fields[i]
		if eqFoldString(f.name.of(b), name) {
			return f.value.of(b)
		}
	}
	return nil
}

// The loops' socket calls never block (every socket is non-blocking), so
// they are made as raw system calls: the Go scheduler is not told, no P is
// handed off, and sysmon is not woken to retake one. epoll_wait is polled
// raw first and only blocks through the scheduler when nothing is ready.

func rawRead(fd int, p []byte) (int, error) {
	var ptr unsafe.Pointer
	if len(p) > 0 {
		ptr = unsafe.Pointer(&p[0])
	}
	r, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(ptr), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

func rawWrite(fd int, p []byte) (int, error) {
	var ptr unsafe.Pointer
	if len(p) > 0 {
		ptr = unsafe.Pointer(&p[0])
	}
	r, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(ptr), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// pollNow is a non-blocking epoll_wait.
func pollNow(ep int, evs []unix.EpollEvent) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(ep), uintptr(unsafe.Pointer(&evs[0])), uintptr(len(evs)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// wait returns ready events: at once if there are any (a raw call, no
// scheduler work), else from a blocking epoll_wait of at most msec.
//
// Blocking in epoll_wait keeps the loop on its thread, which the kernel
// wakes directly when a socket is ready, as an nginx worker is. We also
// tried parking in Go's netpoller instead (the epoll descriptor registered
// there): at light load it was better (wrk -c4: 16-18k against 13-13.5k
// req/s, p50 200 against 260 us), since no P waits in a syscall for sysmon
// to retake; at 64 connections on 2 cores it was 10-20% slower on the
// reject path (72-84k against 80-102k req/s, same runs), each park and
// wake costing the scheduler's thread hand-offs. Overload is what sentry
// is for, so the loop blocks.
func (l *evloop) wait(evs []unix.EpollEvent, msec int) (int, error) {
	if n, err := pollNow(l.ep, evs); n > 0 || err != nil && err != unix.EINTR {
		return n, err
	}
	return unix.EpollWait(l.ep, evs, msec)
}
