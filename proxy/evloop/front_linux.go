//go:build linux

package evloop

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sentry-proxy/sentry/proxy/exchange"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/sentry-proxy/sentry/proxy/respbuf"
)

// front_linux.go is the event-loop front end for HTTP/1.1 listeners (TLS
// ones through Adopt, tls_linux.go)
// (see "Engines" in proxy/doc.go). A few loops (one per GOMAXPROCS), each
// one goroutine around its own epoll set, share the listening socket and
// serve the common request themselves, client and backend sockets alike,
// with no goroutine per connection: a whole, plain HTTP/1.1 head (and any
// Content-Length body) in one read, decided by admission at once or, for a
// class that waits for its batch run, parked until the run wakes the loop
// (park, pollParked). Anything else -- a partial or unusual head, chunked
// or large bodies, Expect, Upgrade -- is handed off with the bytes read so
// far to the fasthttp front end, which serves that connection from then on.
//
// The loop is split by responsibility: this file starts and stops the
// loops and hands connections to fasthttp; conn_linux.go has the
// loop, its connection and exchange types, timers and syscalls;
// client_linux.go the client side and the pipeline as the loop
// runs it; backend_linux.go the backend side and retries;
// response_linux.go the response relay and the end of an exchange;
// reply_linux.go the answers sentry writes itself.
// Where an exchange is, is its State (state.go).

// The listening socket and the wake-up eventfd are registered under tags
// that no descriptor number can take: once the listener is closed, its
// number may come back as a backend socket of the same loop.
const (
	tagListen = -1
	tagWake   = -2
)

const (
	loopBufSize   = 16 << 10 // read buffer of a busy connection
	outBufSize    = 4 << 10  // an output buffer, as a connection's exchange takes it (getOut)
	maxOutPooled  = 16 << 10 // an output buffer that grew past this is not kept (putOut)
	maxPooled     = 1024     // buffers and exchanges a loop keeps for its next exchanges, of each kind
	maxAcceptOnce = 64
	sweepEvery    = 10 * time.Millisecond
	idleSweep     = 250 * time.Millisecond
	backendIdle   = 30 * time.Second // as the HostClient's MaxIdleConnDuration
)

// Config is what a front end of loops is given by package proxy,
// which starts it (startFast) and serves what it hands off: the
// listening socket, the server limits, the routes, and the few calls back
// into proxy. None of the calls is on the common path: BackendConns is
// asked when the loop dials, OtherConns on accept with max_conns set,
// TooManyConns on a refusal, and Access only when the route logs access
// (a path that formats and writes a line anyway).
type Config struct {
	Addr     string       // the listener's policy address (logs, metric labels)
	Listener net.Listener // its socket, closed by shutdown; nil for a TLS front (Adopt)
	LFD      int          // its descriptor; -1 for a TLS front
	Loops    int          // how many loops (one per GOMAXPROCS)
	// Routes is the listener's route table (Host → app), swapped by a
	// reload; the loop reads it once per request.
	Routes *atomic.Pointer[pipeline.Route]
	IDs    *pipeline.IDGen // tests only (exchange.Env.IDs); nil: each loop's own
	Log    hclog.Logger

	MaxHeader int           // server.max_header_bytes
	MaxConns  int           // server.max_conns, shared with the listener's other connections (OtherConns)
	Idle      time.Duration // server.idle_timeout
	Write     time.Duration // server.write_timeout (0: no limit)
	Header    time.Duration // server.read_header_timeout
	Linger    time.Duration // a lingering close's limit (as the fasthttp front end's)
	IdleGrace time.Duration // draining: an idle connection's time for one more request
	Handoff   int           // the hand-off queue's length (handoffListener)
	// Resp is the process's response buffers (server.response_buffer and
	// the rest), shared with every other front end; nil: responses are
	// not buffered.
	Resp *respbuf.Budget

	// OtherConns is the listener's client connections the loops do not
	// hold: fasthttp's, and those package proxy's TLS or h2c listener
	// has in a handshake, being sniffed or on HTTP/2 (max_conns counts
	// them all).
	OtherConns func() int
	// BackendConns is the fasthttp front end's connections to u
	// (max_conns_per_backend counts both); asked when the loop dials.
	BackendConns func(u *pipeline.Upstream) int
	// CloseIdle asks the fasthttp front end to close its idle connections
	// to u (the loops' exchanges wait for room under
	// max_conns_per_backend, which its pool counts in); may be nil.
	CloseIdle func(u *pipeline.Upstream)
	// TooManyConns counts a connection refused for max_conns
	// (sentry_client_errors_total).
	TooManyConns func()
	// Access writes an access-log line; called only when the route logs
	// access.
	// The entry and its byte slices are valid only during the call.
	Access func(e *pipeline.AccessEntry)
}

// Front is the event-loop half of a plain front end: its loops and the
// listener (Handed) through which they hand connections to fasthttp.
type Front struct {
	cfg    Config
	ln     net.Listener
	lfd    int
	loops  []*eventLoop
	Handed *handoffListener
	// conns is the client connections the loops hold; expected those on
	// their way to them (Expect) or queued for a loop (Adopt), not yet in
	// conns. Conns counts both, so that a connection a TLS listener moves
	// here is never counted by nobody.
	conns, expected atomic.Int64
	draining        atomic.Bool
	closing         atomic.Bool
	wg              sync.WaitGroup
	unlisten        sync.WaitGroup // loops that still have the listener in their epoll set
	maxHeader       int
	maxConns        int
	idle            time.Duration // server.idle_timeout
	write           time.Duration // server.write_timeout (0: no limit)
	hdr             time.Duration // server.read_header_timeout

	env            *exchange.Env // what the loops' exchanges share (the exchange core's)
	next           atomic.Uint32 // Adopt's round robin
	served, handed atomic.Uint64 // requests answered by the loops; connections handed off
	illegal        atomic.Uint64 // illegal exchange-state transitions (state.go)
}

// Start starts cfg.Loops loops on cfg's listening socket.
func Start(cfg Config) (*Front, error) {
	var addr net.Addr = &net.TCPAddr{}
	if cfg.Listener != nil {
		addr = cfg.Listener.Addr()
	}
	ff := &Front{cfg: cfg, ln: cfg.Listener, lfd: cfg.LFD, Handed: newHandoffListener(addr, cfg.Handoff),
		maxHeader: cfg.MaxHeader, maxConns: cfg.MaxConns, idle: cfg.Idle, write: cfg.Write, hdr: cfg.Header}
	ff.env = &exchange.Env{IDs: cfg.IDs, Log: cfg.Log, Access: cfg.Access, Illegal: &ff.illegal}
	for i := 0; i < cfg.Loops; i++ {
		l, err := newEvloop(ff)
		if err != nil {
			for _, l := range ff.loops {
				l.closeFDs()
			}
			return nil, err
		}
		ff.loops = append(ff.loops, l)
	}
	for _, l := range ff.loops {
		ff.wg.Add(1)
		ff.unlisten.Add(1)
		go l.run()
	}
	return ff, nil
}

// Shutdown stops accepting, lets the loops' connections finish (idle ones
// get idleGrace for one more request, all responses say Connection: close)
// until ctx is done, then closes what is left and stops the loops.
func (ff *Front) Shutdown(ctx context.Context) {
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
	if ff.ln != nil {
		_ = ff.ln.Close()
	}
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

// Counts returns the requests the loops answered and the connections they
// handed off.
func (ff *Front) Counts() (served, handed uint64) { return ff.served.Load(), ff.handed.Load() }

// Conns is the client connections the loops hold now, with those on
// their way to them (Expect, Adopt): server.max_conns counts them beside
// the listener's others. A connection moves from expected to conns by an
// increment of conns before the decrement of expected, so expected is
// read first: Conns never misses one in passing (it may count one twice
// for an instant).
func (ff *Front) Conns() int64 {
	e := ff.expected.Load()
	return e + ff.conns.Load()
}

// Expect counts a connection the caller is about to give the loops
// (Adopt, AdoptH2) in Conns from now on. A caller moving a connection from
// a count of its own calls Expect, then drops it from its own count, then
// adopts it: a reader of both counts (max_conns) never sees it nowhere,
// and the loops' check at adoption does not see it twice. Every Expect is
// matched by one Adopt or AdoptH2 that reports true (the loop takes the
// count over) or by one Unexpect.
func (ff *Front) Expect() { ff.expected.Add(1) }

// Unexpect withdraws an Expect whose connection the loops did not take.
func (ff *Front) Unexpect() { ff.expected.Add(-1) }

// IllegalTransitions is the number of illegal exchange-state transitions
// the loops made (state.go): a bug counted, not a crash.
func (ff *Front) IllegalTransitions() uint64 { return ff.illegal.Load() }

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
