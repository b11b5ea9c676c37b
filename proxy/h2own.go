package proxy

import (
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sentry-proxy/sentry/proxy/h2srv"
)

// h2own.go: the goroutine driver of sentry's HTTP/2 server (package
// proxy/h2srv is its sans-IO core), the h2 server of TLS and h2c
// listeners. Per connection:
//
//   - one reader goroutine reads, feeds the core under the connection's
//     mutex and acts on its events: a request head is handed to a pooled
//     worker goroutine (h2Workers) that runs the request path
//     (h2workers.go, serveH2Stream in h2.go); body bytes and resets wake
//     the stream's reader; a reset cancels the stream's context (ownStream,
//     h2stream.go, is the context: cancelled, it cuts the backend
//     exchange, abort.go);
//   - the workers write responses through the core, under the same mutex,
//     into the connection's output buffer;
//   - one writer goroutine, started when there is output and gone when it
//     is all written, writes everything ready in one TLS
//     record and one write(2), under server.write_timeout as an idle
//     timeout.
//
// Memory is bounded everywhere: the stream's body waits in the core
// (bounded by the receive windows, refilled as the request path reads); a
// response waits in the core when the client's windows are shut, and its
// worker waits (at most write_timeout without progress, then RST_STREAM)
// once more than ownPendLimit bytes wait, and at the stream's end until
// all is sent; workers wait while ownOutLimit bytes of output are
// unwritten, and the reader stops reading at ownReadLimit (a client that
// sends PINGs or SETTINGS and reads nothing).
//
// In loop mode (h2loop_linux.go) an event loop is the reader and the
// writer, and times the connection; the workers are the same, and the
// loop runs the streams it can finish itself.
//
// Lock order: ownConn.mu, then ownStream.cmu; h2Workers.mu is taken alone.
// Nothing else is called under ownConn.mu but the core, channel sends that
// do not block, read deadlines (wake-ups) and the start of the writer
// goroutine; stream cancellation (abortable.abort, context callbacks) runs
// after it is released.

// The h2 server's limits (docs/request-path.md, "HTTP/2 limits"). Rapid reset
// (CVE-2023-44487) and its paced variant are the core's to detect
// (h2srv.ResetMeter: counts of streams opened and reset that decay with
// time constant h2ResetWindow; past h2ResetLimit resets that are more than
// a quarter of the streams, GOAWAY with ENHANCE_YOUR_CALM, counted as
// sentry_client_errors_total{reason="h2_reset_flood"}). The driver adds
// the suspect delay: on a connection where more than one stream in eight
// was reset, a new stream waits h2SuspectDelay before dispatch
// (serveH2Stream) and is dropped if reset meanwhile, so that a reset
// right behind its HEADERS is seen; a connection that resets nothing, or
// rarely, pays nothing. After a connection error, teardown reads and
// drops the client's bytes for h2GoawayLinger, so that the close is a FIN
// and the GOAWAY is read.
const (
	h2ResetLimit   = 100
	h2ResetWindow  = 10 * time.Second
	h2GoawayLinger = 250 * time.Millisecond
	h2MaxStreams   = 128 // concurrent streams per connection, as nginx
	h2SuspectDelay = 10 * time.Millisecond
)

const (
	// ownOutLimit: a worker waits while this much output waits to be
	// written (a client that stops reading stalls its writers).
	ownOutLimit = 64 << 10
	// ownPendLimit: a worker waits while this much of its stream's
	// response waits for the client's flow-control window.
	ownPendLimit = 64 << 10
	// ownReadLimit: the reader stops reading while this much output
	// waits (what a client's frames make the server answer is bounded).
	ownReadLimit = 4 * ownOutLimit
	// ownReadBuf is the reader's buffer while bytes keep coming (a TLS
	// record's plaintext is at most 16 KiB), taken from ownReadPool for
	// one read and given back after it.
	ownReadBuf = 16 << 10
	// ownIdleBuf is the reader's own buffer, the one it waits on: a
	// request's HEADERS and a client's SETTINGS and PINGs fit; a read
	// that fills it is followed by one into an ownReadBuf.
	ownIdleBuf = 1 << 10
	// ownSpare: the largest output buffer kept for the next batch.
	ownSpare = 32 << 10
	// ownOutBuf: an output buffer from ownOutPool, given to a connection
	// that has none (after shedIfIdleLocked) and back when it goes idle.
	ownOutBuf = 4 << 10
	// ownCloseWait: at teardown, what is buffered (a GOAWAY, the end of
	// the last response) is written for at most this long.
	ownCloseWait = time.Second
)

// ownReadPool holds the readers' ownReadBuf buffers, ownOutPool the
// output's ownOutBuf ones.
var (
	ownReadPool = sync.Pool{New: func() any { return new([ownReadBuf]byte) }}
	ownOutPool  = sync.Pool{New: func() any { return new([ownOutBuf]byte) }}
)

// ownOut is an output buffer from ownOutPool, empty.
func ownOut() []byte { return ownOutPool.Get().(*[ownOutBuf]byte)[:0] }

// ownOutPut gives b back to ownOutPool if it is one of its buffers (an
// output that outgrew it was reallocated, and is left to the collector).
func ownOutPut(b []byte) {
	if cap(b) == ownOutBuf {
		ownOutPool.Put((*[ownOutBuf]byte)(b[:ownOutBuf]))
	}
}

var (
	errOwnStreamClosed = errors.New("h2: stream closed")
	errOwnConnClosed   = errors.New("h2: connection closed")
)

// ownConn is one connection served by the own h2 server.
type ownConn struct {
	fe    *frontend
	c     net.Conn
	tc    *tls.Conn // nil for h2c
	peer  netip.Addr
	isTLS bool

	mu      sync.Mutex
	cond    sync.Cond // output room; the writer stopping
	core    *h2srv.Conn
	writing bool          // the writer goroutine runs
	spare   []byte        // the writer's last buffer, for reuse
	werr    error         // first write error
	held    int           // streams the workers hold
	ended   bool          // torn down: no more output
	idle    time.Duration // server.idle_timeout
	idleSet bool          // the read deadline is the idle timeout's (or a pending head's)
	// headTimeout is server.read_header_timeout: a header block must end
	// within it of its start (headID, headSince), as an HTTP/1.1 head.
	headTimeout time.Duration
	headID      uint32
	headSince   time.Time
	woken       bool // the read deadline was set in the past to wake the reader

	suspect atomic.Bool // mirrors core.Suspect after each Feed

	// Loop mode (h2loop_linux.go): an event loop reads, writes and times
	// the connection; c is nil. loopWake asks the loop to take the
	// output or look at the connection; inLoop is set while the loop
	// holds mu (it flushes itself then); loopTake and loopEvs are Feed's
	// (eventsLocked: streams the loop takes, events of its streams).
	loop     bool
	loopWake func()
	inLoop   bool
	loopTake func(*h2srv.Stream) bool
	loopEvs  []h2srv.Event
	// Feed's buffers, kept.
	loopAll   []h2srv.Event
	loopStart []*ownStream
	loopCut   []*ownStream
}

// serveOwnConn serves one h2 connection (TLS with ALPN h2, or h2c with its
// preface replayed) until it ends.
func (fe *frontend) serveOwnConn(c net.Conn) {
	sv := fe.p.cur.Load().snap.Server
	oc := &ownConn{fe: fe, c: c}
	oc.cond.L = &oc.mu
	oc.tc, oc.isTLS = c.(*tls.Conn)
	oc.peer = netip.IPv6Unspecified()
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		oc.peer = ap.Addr().Unmap()
	}
	oc.core = h2srv.NewConn(h2srv.Config{
		MaxConcurrentStreams: h2MaxStreams,
		MaxHeaderListSize:    sv.MaxHeaderBytes,
		ResetLimit:           h2ResetLimit,
		ResetWindow:          h2ResetWindow,
	})
	fe.ownTrack(oc, true)
	defer fe.ownTrack(oc, false)

	idle := sv.IdleTimeout
	oc.idle = idle
	oc.headTimeout = sv.ReadHeaderTimeout
	if sv.ReadHeaderTimeout > 0 {
		// The preface and first SETTINGS within the read-header timeout.
		_ = c.SetReadDeadline(time.Now().Add(sv.ReadHeaderTimeout))
	}
	oc.mu.Lock()
	oc.kickLocked()
	oc.mu.Unlock()

	// The reader waits on its small buffer, so that a connection with
	// nothing to read holds no large one; a read that filled its buffer
	// says more is likely there, and the next goes into a pooled one.
	small := make([]byte, ownIdleBuf) // not in ownConn: loop mode has no reader
	var big *[ownReadBuf]byte
	full := false
	var evs []h2srv.Event
	var start []*ownStream
	var cut []*ownStream
	first := true
	for {
		// A client that sends (PINGs, SETTINGS, resets) without reading
		// the answers is not read from while ownReadLimit bytes wait.
		oc.mu.Lock()
		for len(oc.core.Output()) >= ownReadLimit && oc.werr == nil && !oc.ended {
			oc.kickLocked()
			oc.cond.Wait()
		}
		oc.mu.Unlock()
		buf := small
		if full {
			big = ownReadPool.Get().(*[ownReadBuf]byte)
			buf = big[:]
		}
		n, rerr := c.Read(buf)
		full = n == len(buf)
		oc.mu.Lock()
		var ferr error
		if n > 0 {
			if cap(oc.core.Output()) == 0 {
				oc.core.TakeOutput(ownOut()) // shed while idle: a pooled one
			}
			ferr = oc.core.Feed(buf[:n])
		}
		if first && n > 0 {
			first = false
			if sv.ReadHeaderTimeout > 0 {
				oc.idleSet = false
				_ = c.SetReadDeadline(time.Time{})
			}
		}
		evs = oc.core.TakeEvents(evs[:0])
		start, cut = oc.eventsLocked(evs, start[:0], cut[:0])
		oc.suspect.Store(oc.core.Suspect())
		if ferr != nil && oc.core.Flooded() {
			// Counted before the GOAWAY can leave (kickLocked): whoever
			// reads it finds the count.
			fe.p.metrics.clientErrors.WithLabelValues(fe.addr, "h2_reset_flood").Inc()
		}
		oc.kickLocked()
		// Stop on a connection error, a failed write, or once a drained
		// connection (GOAWAY sent) has no stream left.
		stop := ferr != nil || oc.werr != nil || oc.core.GoingAway() && oc.held == 0 && oc.core.Active() == 0
		stop = oc.afterReadLocked(rerr, stop, first, idle, sv.ReadHeaderTimeout)
		if !full {
			oc.shedIfIdleLocked()
		}
		oc.mu.Unlock()
		if big != nil {
			// The core keeps nothing of what it was fed.
			ownReadPool.Put(big)
			big = nil
		}
		for _, st := range cut {
			st.cancel()
		}
		for _, st := range start {
			fe.h2Workers.run(st)
		}
		clear(start)
		clear(cut)
		if stop {
			oc.teardown(ferr != nil)
			return
		}
	}
}

// afterReadLocked is the reader's part after a read that returned rerr:
// stop (already decided) or a read error or the idle timeout stops the
// connection; otherwise the read deadline is set again (first: the
// preface has not come yet, under read_header_timeout hdr).
func (oc *ownConn) afterReadLocked(rerr error, stop, first bool, idle, hdr time.Duration) bool {
	woken := oc.woken
	oc.woken = false
	if rerr != nil {
		var ne net.Error
		timeout := errors.As(rerr, &ne) && ne.Timeout()
		switch {
		case !timeout:
			stop = true
		case !woken && (oc.idleSet || first):
			// Idle (or no preface) for idle_timeout: GOAWAY, close.
			oc.core.GoAway()
			oc.kickLocked()
			stop = true
		}
		// Otherwise a wake-up (drain, a stream's end): read on.
	}
	if !stop && !first {
		oc.setIdleLocked(idle, woken)
	} else if !stop && woken {
		// Woken before the preface came: its deadline again.
		var dl time.Time
		if hdr > 0 {
			dl = time.Now().Add(hdr)
		}
		_ = oc.c.SetReadDeadline(dl)
	}
	return stop
}

// eventsLocked acts on the core's events: new streams to start, streams
// to cancel (after the lock), readers and writers to wake.
func (oc *ownConn) eventsLocked(evs []h2srv.Event, start, cut []*ownStream) ([]*ownStream, []*ownStream) {
	for _, e := range evs {
		if e.Kind == h2srv.EvRequest {
			if oc.loopTake != nil && oc.loopTake(e.S) {
				continue // the loop runs it
			}
			st := &ownStream{oc: oc, s: e.S}
			st.afters = st.afterBuf[:0]
			e.S.User = st
			oc.held++
			start = append(start, st)
			continue
		}
		if e.S == nil {
			continue // a connection's event (a GOAWAY from the client)
		}
		st, _ := e.S.User.(*ownStream)
		if st == nil {
			if oc.loop && e.S.User != nil {
				oc.loopEvs = append(oc.loopEvs, e) // one of the loop's streams
			}
			continue
		}
		switch e.Kind {
		case h2srv.EvData:
			signal(st.dataSig)
		case h2srv.EvWritable:
			signal(st.writeSig)
		case h2srv.EvReset:
			signal(st.dataSig)
			signal(st.writeSig)
			cut = append(cut, st)
		}
	}
	return start, cut
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// setIdleLocked keeps the read deadline at idle_timeout while the
// connection has no stream, and none otherwise; but while a header block
// is in progress, at read_header_timeout (idle_timeout without one) from
// its start: a client that begins a head and never ends it holds a
// stream no worker has, and no other timeout would end it.
func (oc *ownConn) setIdleLocked(idle time.Duration, woken bool) {
	if oc.loop {
		return // the loop's sweep times the connection
	}
	if id, ok := oc.core.HeadPending(); ok {
		if oc.headSince.IsZero() || id != oc.headID {
			oc.headID, oc.headSince = id, time.Now()
		}
		t := oc.headTimeout
		if t <= 0 {
			t = idle
		}
		if t > 0 {
			_ = oc.c.SetReadDeadline(oc.headSince.Add(t))
		} else if oc.idleSet || woken {
			_ = oc.c.SetReadDeadline(time.Time{})
		}
		oc.idleSet = t > 0
		return
	}
	oc.headSince = time.Time{}
	want := idle > 0 && oc.held == 0 && oc.core.Active() == 0
	if want {
		_ = oc.c.SetReadDeadline(time.Now().Add(idle))
	} else if oc.idleSet || woken {
		_ = oc.c.SetReadDeadline(time.Time{})
	}
	oc.idleSet = want
}

// kickLocked starts the writer if there is output and it is not running.
func (oc *ownConn) kickLocked() {
	if oc.loop {
		oc.loopKickLocked()
		return
	}
	if oc.writing || oc.werr != nil || oc.ended || len(oc.core.Output()) == 0 {
		return
	}
	oc.writing = true
	go oc.writer()
}

// loopKickLocked is kickLocked in loop mode: a worker that left output
// wakes the loop, which takes it (the loop itself flushes after its own
// calls).
func (oc *ownConn) loopKickLocked() {
	if oc.inLoop || oc.ended || oc.loopWake == nil || len(oc.core.Output()) == 0 {
		return
	}
	oc.loopWake()
}

// writer writes batches until the output is empty or a write fails. It
// first yields once: the workers already runnable (streams whose backend
// answered in the same poll) queue their responses before the batch is
// taken. Under h2load -c64 -m10 that made 0.27 writes per response
// instead of 0.97, and the writer's share of the CPU fell from 16% to
// 10%; on an idle process the yield returns at once.
func (oc *ownConn) writer() {
	runtime.Gosched()
	oc.mu.Lock()
	for len(oc.core.Output()) > 0 && oc.werr == nil {
		if oc.spare == nil {
			oc.spare = ownOut()
		}
		b := oc.core.TakeOutput(oc.spare)
		oc.spare = nil
		oc.cond.Broadcast() // room for waiting workers
		oc.mu.Unlock()
		err := oc.writeAll(b)
		oc.mu.Lock()
		if err != nil && oc.werr == nil {
			oc.werr = err
		}
		if cap(b) <= ownSpare {
			oc.spare = b[:0]
		}
	}
	oc.writing = false
	oc.shedIfIdleLocked()
	if oc.werr != nil {
		oc.wakeLocked() // the reader ends the connection
	}
	oc.cond.Broadcast()
	oc.mu.Unlock()
}

// shedIfIdleLocked gives back the output buffers (the core's and the
// writer's spare) and the core's partial-frame buffer once the connection
// has no stream and nothing to write: an idle connection holds no buffer
// but the reader's small one. Not in loop mode: the loop keeps its own.
func (oc *ownConn) shedIfIdleLocked() {
	if oc.loop || oc.writing || oc.held > 0 || oc.core.Active() > 0 || len(oc.core.Output()) > 0 {
		return
	}
	ownOutPut(oc.spare)
	oc.spare = nil
	ownOutPut(oc.core.TakeOutput(nil)) // empty
	oc.core.ShedBuffers()
}

// wakeLocked makes the reader's Read return at once (a timeout it takes
// for a wake-up, not the idle timeout).
func (oc *ownConn) wakeLocked() {
	if oc.ended {
		return
	}
	if oc.loop {
		if !oc.inLoop && oc.loopWake != nil {
			oc.loopWake()
		}
		return
	}
	oc.woken = true
	_ = oc.c.SetReadDeadline(time.Unix(1, 0))
}

// writeAll writes b under the idle write timeout: the deadline moves on as
// long as each write(2) makes progress, so a slow client that reads is
// not cut, and one that stopped reading is.
func (oc *ownConn) writeAll(b []byte) error {
	t := oc.fe.writeTimeout
	if t <= 0 {
		_, err := oc.c.Write(b)
		return err
	}
	for {
		_ = oc.c.SetWriteDeadline(time.Now().Add(t))
		n, err := oc.c.Write(b)
		b = b[n:]
		if len(b) == 0 || n == 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
	}
}

// waitRoomLocked waits while too much output waits to be written.
func (oc *ownConn) waitRoomLocked() error {
	for len(oc.core.Output()) >= ownOutLimit && oc.werr == nil && !oc.ended {
		oc.kickLocked()
		oc.cond.Wait()
	}
	switch {
	case oc.werr != nil:
		return oc.werr
	case oc.ended:
		return errOwnConnClosed
	}
	return nil
}

// teardown ends the connection: every stream still held is cancelled,
// what is buffered (a GOAWAY) is written, and the socket closed. After a
// connection error the client's bytes are read and dropped for
// h2GoawayLinger first, so that the close is a FIN and the GOAWAY is read.
func (oc *ownConn) teardown(connErr bool) {
	oc.mu.Lock()
	oc.core.Close()
	evs := oc.core.TakeEvents(nil)
	_, cut := oc.eventsLocked(evs, nil, nil)
	oc.kickLocked() // what is buffered (a GOAWAY) still goes
	// No more wake-ups (the read below is teardown's), no more output
	// taken from workers.
	oc.ended = true
	oc.mu.Unlock()
	for _, st := range cut {
		st.cancel()
	}
	if connErr {
		_ = oc.c.SetReadDeadline(time.Now().Add(h2GoawayLinger))
		var b [512]byte
		for {
			if _, err := oc.c.Read(b[:]); err != nil {
				break
			}
		}
	}
	oc.mu.Lock()
	if oc.writing {
		// A writer stuck on a client that reads nothing is cut short.
		_ = oc.c.SetWriteDeadline(time.Now().Add(ownCloseWait))
		for oc.writing {
			oc.cond.Wait()
		}
	}
	broken := oc.werr != nil
	oc.cond.Broadcast()
	oc.mu.Unlock()
	if oc.tc != nil && broken {
		_ = oc.tc.NetConn().Close() // no close_notify to a client that stopped reading
		return
	}
	_ = oc.c.Close()
}

// ownTrack adds or removes a connection of the front end's (ownGoAway).
func (fe *frontend) ownTrack(oc *ownConn, add bool) {
	fe.own.mu.Lock()
	defer fe.own.mu.Unlock()
	if add {
		if fe.own.conns == nil {
			fe.own.conns = make(map[*ownConn]struct{})
		}
		fe.own.conns[oc] = struct{}{}
		if fe.own.draining {
			oc.goAway()
		}
		return
	}
	delete(fe.own.conns, oc)
}

// ownGoAway starts the graceful close of every connection (Shutdown).
func (fe *frontend) ownGoAway() {
	fe.own.mu.Lock()
	defer fe.own.mu.Unlock()
	fe.own.draining = true
	for oc := range fe.own.conns {
		oc.goAway()
	}
}

// goAway sends GOAWAY and wakes the reader, which ends the connection once
// its streams are done.
func (oc *ownConn) goAway() {
	oc.mu.Lock()
	oc.core.GoAway()
	oc.kickLocked()
	oc.wakeLocked()
	oc.mu.Unlock()
}

// release ends a worker's hold on st.
func (oc *ownConn) release(st *ownStream) {
	oc.mu.Lock()
	st.setPhase(phReleased)
	oc.core.Release(st.s)
	oc.held--
	oc.kickLocked()
	if oc.held == 0 && oc.core.Active() == 0 && !oc.woken && !oc.ended {
		// (A wake-up pending is left alone: the reader, woken, sets the
		// deadline itself.)
		if oc.loop {
			oc.wakeLocked() // the loop times the idle connection from now
		} else if oc.core.GoingAway() || oc.werr != nil {
			oc.wakeLocked() // the reader ends the connection
		} else {
			// Idle from now: the reader's Read times out at
			// idle_timeout (no wake-up per request).
			oc.setIdleLocked(oc.idle, false)
			oc.shedIfIdleLocked()
		}
	}
	oc.mu.Unlock()
}
