//go:build linux

package evloop

import (
	"net/netip"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/proxy/exchange"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/sentry-proxy/sentry/proxy/respbuf"
)

// conn_linux.go: the loop itself -- its connections and exchanges
// (cconn, exch, bconn), its run loop, its timers (sweep) and the raw
// syscalls it makes.

// cconn is a client connection held by a loop.
type cconn struct {
	fd      int
	idx     int // in clients
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
	// xp is how its bytes travel (xprt_linux.go); the variants' own
	// state is tls (xpTLS, xpH2: the records the loop seals and opens,
	// tls_linux.go), h2 (xpH2: the connection's core and its streams,
	// h2_linux.go) or str (xpStream: the one HTTP/2 stream it is).
	xp  xprt
	tls *tlsConn
	h2  *h2Link
	str *h2str
	// rb holds what the client has not taken of a buffered response
	// beyond c.out (buffer_linux.go); made the first time one is needed.
	// Its bytes come after c.out's: while it holds any, c.out is not
	// empty (flush refills c.out from it), except on a stream, whose
	// c.out goes into the core at once (flushStream).
	rb *respbuf.Buffer
	// buffer: the response may be held in rb while its client is slower
	// than its backend (buffer_linux.go); false for streams
	// (respbuf.Streams), apps with response_buffering off, and with
	// response buffering off.
	buffer bool

	// The exchange in progress (package proxy/exchange: the steps, their
	// order and state are the core's), and what the loop keeps for it:
	// its backend connection, the request's bytes in c.in (head and
	// body), its place in the loop's lists, and the backend it waits for
	// a connection to (counted in its LoopWaiting and the loop's waitN
	// while it waits; waitSeq numbers its waits: its queue entries,
	// waiter). ex is taken from the loop when an exchange starts (serve)
	// and given back when it is done (done); between exchanges it is the
	// loop's idle one (eventLoop.noEx: Idle, never started), so an idle
	// connection holds no exchange and ex is never nil.
	ex        *exchange.Exchange
	b         *bconn
	total     int
	activeIdx int
	parkIdx   int
	waitU     *pipeline.Upstream
	waitSeq   uint32
}

// backlog tells whether response bytes wait for the client: in c.out or
// its response buffer, or, for a stream, for its flow-control window.
func (c *cconn) backlog() bool {
	return len(c.out) > 0 || c.xp == xpStream && c.str.blocked || c.buffered()
}

// waiting tells whether response bytes wait for the client itself: what
// a write left (EAGAIN, or a partial write: outAt), the buffer, or a
// stream's window -- not a head put in c.out and not written yet.
func (c *cconn) waiting() bool {
	return c.outAt != 0 || c.buffered() || c.xp == xpStream && c.str.blocked
}

// buffered tells whether c's response buffer holds bytes.
func (c *cconn) buffered() bool { return c.rb != nil && c.rb.Len() > 0 }

// busy tells whether an exchange is in progress on c (State).
func (c *cconn) busy() bool { return c.ex.Busy() }

// bconn is a backend connection held by a loop.
type bconn struct {
	fd         int
	u          *pipeline.Upstream
	in         []byte
	n          int
	c          *cconn // client being served; nil while idle
	connecting bool   // a new connection, its connect in progress, not yet bound (bind takes it)
	reused     bool
	lastNs     int64
	events     uint32
}

// eventLoop is one event loop.
type eventLoop struct {
	ff      *Front
	ep, efd int
	sys     Sys        // the kernel (RawSys) or a script
	clock   Clock      // time.Now or a manual clock
	efdBuf  [8]byte    // the eventfd's counter, read on a wake-up
	drop    [4096]byte // what a lingering close reads and drops

	cl        []*cconn // by fd
	bk        []*bconn // by fd
	clients   []*cconn
	active    []*cconn // with an exchange in progress
	parked    []*cconn // with an exchange parked for its batch decision
	idleBk    map[*pipeline.Upstream][]*bconn
	connWait  map[*pipeline.Upstream][]waiter // exchanges waiting for a connection (waitConn)
	waitN     map[*pipeline.Upstream]int      // how many of them are live
	nconn     map[*pipeline.Upstream]int      // this loop's connections to each backend (giveTo's share)
	waitKick  bool                            // room may have come: dialWaiters this round
	shareTurn bool                            // finish: own waiters and the other loops' in turn (giveTo)
	// What connections take while an exchange runs and give back when
	// it ends (mem_linux.go): read buffers (getBuf), TLS record buffers
	// (idleTLS), output buffers (getOut) and exchanges (getEx); noEx is
	// the exchange of every idle connection.
	bufs    freeList[[]byte]
	rawBufs freeList[[]byte]
	outs    freeList[[]byte]
	exs     freeList[*exchange.Exchange]
	noEx    exchange.Exchange

	now       time.Time
	nowNs     int64
	nextSweep int64
	nextIdle  int64
	drainSeen bool
	h         pipeline.RawHead
	rh        pipeline.RawHead
	ah        pipeline.RawHead     // the access log's parse of a finished request's head
	acc       pipeline.AccessEntry // the access log's entry, reused
	head      exchange.Head        // the neutral head of the request being served
	sc        exchange.Scratch     // what the exchange core's steps use one at a time
	date      []byte
	dateSec   int64
	st        []byte // stripped Server-Timing
	yieldAt   int64  // next runtime.Gosched

	unlistened   bool  // the listening socket is out of this loop's epoll set
	acceptPaused int64 // accepts paused until (EMFILE and the like)

	// efdMu guards efd against a wake-up after closeFDs: a batch run may
	// call Wake for a request the loop has already cancelled, after the
	// loop stopped.
	efdMu     sync.RWMutex
	efdClosed bool

	// adoptMu guards adopting: TLS connections Front.Adopt queued for
	// this loop (tls_linux.go), taken on the next wake-up.
	adoptMu    sync.Mutex
	adopting   []adoption
	adoptShut  bool       // the loop has stopped: Adopt refuses
	adoptSpare []adoption // the loop's own, swapped with adopting

	// h2mu guards h2q: h2 connections a worker woke the loop for
	// (h2_linux.go); taken alone, never with a connection's lock held by
	// the loop.
	h2mu     sync.Mutex
	h2q      []*cconn
	h2qSpare []*cconn
	dirty    []*cconn // h2 connections whose output is to be written this round
	dechunk  []byte   // a stream's chunked body, decoded
	reqID    []byte   // the app's request-ID header name, for a stream's HEADERS

	// An answer sentry writes itself (replyFields): its fields, the
	// number among them, the request-ID header's name.
	rf   []replyField
	rnum []byte
	rid  []byte
}

// unlisten takes the listening socket out of this loop's epoll set, once,
// and tells shutdown: only then may it close the listener (its descriptor
// number could otherwise be reused under a loop still accepting on it).
func (l *eventLoop) unlisten() {
	if l.unlistened {
		return
	}
	l.unlistened = true
	if l.ff.lfd >= 0 {
		_ = l.sys.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, l.ff.lfd, 0, 0)
	}
	l.ff.unlisten.Done()
}

func newEvloop(ff *Front) (*eventLoop, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(ep)
		return nil, err
	}
	l := &eventLoop{ff: ff, ep: ep, efd: efd, sys: RawSys{}, clock: time.Now, idleBk: map[*pipeline.Upstream][]*bconn{},
		connWait: map[*pipeline.Upstream][]waiter{}, waitN: map[*pipeline.Upstream]int{}, nconn: map[*pipeline.Upstream]int{}}
	if err := l.sys.EpollCtl(ep, unix.EPOLL_CTL_ADD, efd, unix.EPOLLIN, tagWake); err != nil {
		l.closeFDs()
		return nil, err
	}
	if ff.lfd < 0 {
		return l, nil // a TLS front: no listener, connections are adopted
	}
	if err := l.sys.EpollCtl(ep, unix.EPOLL_CTL_ADD, ff.lfd, unix.EPOLLIN|unix.EPOLLEXCLUSIVE, tagListen); err != nil {
		l.closeFDs()
		return nil, err
	}
	return l, nil
}

func (l *eventLoop) closeFDs() {
	l.sys.Close(l.ep)
	l.efdMu.Lock()
	l.efdClosed = true
	l.sys.Close(l.efd)
	l.efdMu.Unlock()
}

func (l *eventLoop) wake() {
	l.efdMu.RLock()
	if !l.efdClosed {
		_, _ = l.sys.Write(l.efd, wakeOne[:])
	}
	l.efdMu.RUnlock()
}

// Wake is the loop's admission.Waker: a batch run that decided some of the
// loop's parked exchanges writes its eventfd, and the loop polls them
// (pollParked). It never blocks.
func (l *eventLoop) Wake() { l.wake() }

// wakeOne is what a wake-up adds to the eventfd's counter.
var wakeOne = [8]byte{1}

var _ admission.Waker = (*eventLoop)(nil)

func (l *eventLoop) tick() {
	l.now = l.clock()
	l.nowNs = l.now.UnixNano()
}

func (l *eventLoop) run() {
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
		n, err := l.sys.EpollWait(l.ep, evs, timeout)
		l.tick()
		if err != nil && err != unix.EINTR {
			l.ff.cfg.Log.Error("epoll_wait failed; event loop stops", "error", err)
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
				_, _ = l.sys.Read(l.efd, l.efdBuf[:])
				l.takeAdopted()
				l.takeH2Wakes()
				l.pollParked()
				l.shedIdle()
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
		if l.waitKick {
			l.dialWaiters()
		}
		if len(l.dirty) > 0 {
			l.flushDirty()
		}
	}
}

// ---------------------------------------------------------------- time

// sweep enforces timeouts: connect and response (idle) deadlines of
// exchanges, slow client writes, idle keep-alive connections, lingering
// closes and the drain grace.
func (l *eventLoop) sweep() {
	l.nextSweep = l.nowNs + int64(sweepEvery)
	if l.acceptPaused != 0 && l.nowNs >= l.acceptPaused {
		l.acceptPaused = 0
		if !l.unlistened && !l.ff.draining.Load() {
			_ = l.sys.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, l.ff.lfd, unix.EPOLLIN|unix.EPOLLEXCLUSIVE, tagListen)
		}
	}
	l.shedIdle() // and look for room for this loop's waiters (the others' closes)
	for i := 0; i < len(l.active); i++ {
		c := l.active[i]
		ex := c.ex
		st, dl := ex.State(), ex.Deadline()
		if st == exchange.Waiting {
			if l.nowNs > dl {
				l.act(c, ex.Expire(l.now)) // 503 backend_busy
				i--
			}
			continue
		}
		// While the backend is not read because the client has not
		// taken what was relayed (and no buffer could take more), its
		// idle deadline waits (the write timeout covers the client);
		// resumeBackend restarts it.
		if c.b != nil && dl != 0 && l.nowNs > dl && !(st == exchange.Relaying && c.b.events&unix.EPOLLIN == 0) {
			l.act(c, ex.Expire(l.now)) // a connect timeout, 504, or cut
			i--
			continue
		}
		if t := ex.TermAt(); t != 0 && l.nowNs >= t && l.terminate(c) {
			i--
			continue
		}
		if c.outAt != 0 && l.ff.write > 0 && l.nowNs-c.outAt > int64(l.ff.write) && (c.xp != xpStream || l.stalled(c)) {
			l.abort(c, pipeline.OutClientGone)
			l.closeClient(c)
			i--
		}
	}
	if l.nowNs < l.nextIdle {
		return
	}
	l.nextIdle = l.nowNs + int64(idleSweep)
	l.trimPools()
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
		case c.outAt != 0 && l.ff.write > 0 && l.nowNs-c.outAt > int64(l.ff.write):
			l.closeClient(c)
			i--
		case c.xp == xpH2:
			if !c.gotAny && l.ff.hdr > 0 && l.nowNs-c.lastNs > int64(l.ff.hdr) {
				l.closeClient(c) // no preface within the read-header timeout
				i--
			} else if l.h2Sweep(c) {
				i--
			}
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
			if bc.fd >= 0 && l.nowNs-bc.lastNs < int64(backendIdle) && !u.Closed.Load() && !u.Quiesced.Load() {
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

// terminate is the termination timer of c's exchange, looked at by the
// sweep once its time has come (TermAt): the core decides (Tick), and a
// Cut closes the backend connection (never reused) and answers 503
// terminated (act). It reports whether the exchange ended.
func (l *eventLoop) terminate(c *cconn) bool {
	act := c.ex.Tick(l.now)
	if act != exchange.Cut {
		return false
	}
	l.act(c, act)
	return true
}

// startDrain: idle connections get idleGrace for one more request, busy
// ones close after their response.
func (l *eventLoop) startDrain() {
	l.drainSeen = true
	l.unlisten()
	for _, c := range l.clients {
		if c.xp == xpH2 {
			// GOAWAY; the connection closes once its streams end (h2After).
			c.closing = true
			c.h2.d.GoAway()
			l.h2Dirty(c)
			continue
		}
		if c.busy() || len(c.out) > 0 {
			c.closing = true
		} else if c.linger == 0 {
			c.grace = l.nowNs + int64(l.ff.cfg.IdleGrace)
			c.closing = true
		}
	}
	l.nextIdle = 0
}

// closeAll closes every connection and the loop's own descriptors.
func (l *eventLoop) closeAll() {
	l.unlisten()
	l.refuseAdopted()
	for len(l.clients) > 0 {
		l.closeClient(l.clients[len(l.clients)-1])
	}
	for _, list := range l.idleBk {
		for _, bc := range list {
			l.closeBackend(bc)
		}
	}
	l.idleBk = map[*pipeline.Upstream][]*bconn{}
	// ep and efd stay open until shutdown has stopped every loop: a
	// wake() after a close could write into a reused descriptor.
}

// ---------------------------------------------------------------- helpers
