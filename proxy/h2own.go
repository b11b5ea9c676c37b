package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sentry-proxy/sentry/proxy/h2srv"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/valyala/fasthttp"
)

// h2own.go: the goroutine driver of sentry's own HTTP/2 server (package
// proxy/h2srv is its sans-IO core), the default h2 server of TLS and h2c
// listeners (H2Server). Per connection:
//
//   - one reader goroutine reads, feeds the core under the connection's
//     mutex and acts on its events: a request head is handed to a pooled
//     worker goroutine (h2Workers) that runs the request path
//     (serveH2Stream, as for x/net's streams); body bytes and resets wake
//     the stream's reader; a reset cancels the stream's context (ownStream
//     is the context: cancelled, it cuts the backend exchange, abort.go);
//   - the workers write responses through the core, under the same mutex,
//     into the connection's output buffer;
//   - one writer goroutine, started when there is output and gone when it
//     is all written (as h2Out's), writes everything ready in one TLS
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

// H2Server selects the h2 server of TLS and h2c listeners.
type H2Server uint8

const (
	// H2Auto is sentry's own server (h2own.go), unless the environment
	// has SENTRY_H2_SERVER=xnet (a diagnostic switch: x/net's server, for
	// comparison).
	H2Auto H2Server = iota
	// H2Own is sentry's own server whatever the environment says.
	H2Own
	// H2XNet is golang.org/x/net/http2's server (h2.go's bridge).
	H2XNet
)

// String names the server (test and log output).
func (s H2Server) String() string {
	switch s {
	case H2Own:
		return "own"
	case H2XNet:
		return "xnet"
	}
	return "auto"
}

// useOwnH2 reports whether the proxy serves h2 with its own server.
func (p *Proxy) useOwnH2() bool {
	switch p.opts.H2 {
	case H2Own:
		return true
	case H2XNet:
		return false
	}
	return !h2XNetFromEnv()
}

// h2XNetFromEnv reports the diagnostic switch SENTRY_H2_SERVER=xnet.
func h2XNetFromEnv() bool { return os.Getenv("SENTRY_H2_SERVER") == "xnet" }

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
	// ownReadBuf is the reader's buffer (a TLS record's plaintext is at
	// most 16 KiB).
	ownReadBuf = 16 << 10
	// ownSpare: the largest output buffer kept for the next batch.
	ownSpare = 32 << 10
)

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

	buf := make([]byte, ownReadBuf)
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
		n, rerr := c.Read(buf)
		oc.mu.Lock()
		var ferr error
		if n > 0 {
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
			if sv.ReadHeaderTimeout > 0 {
				dl = time.Now().Add(sv.ReadHeaderTimeout)
			}
			_ = c.SetReadDeadline(dl)
		}
		oc.mu.Unlock()
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
	if oc.werr != nil {
		oc.wakeLocked() // the reader ends the connection
	}
	oc.cond.Broadcast()
	oc.mu.Unlock()
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

// writeAll writes b under the idle write timeout (h2Out.writeAll).
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
		_ = oc.c.SetWriteDeadline(time.Now().Add(h2OutCloseWait))
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
	st.released = true
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
		}
	}
	oc.mu.Unlock()
}

// ---------------------------------------------------------------- streams

// ownStream is one stream of an ownConn, as the request path sees it
// (h2Exchange), and its context: done when the stream is reset or the
// connection ends.
type ownStream struct {
	oc *ownConn
	s  *h2srv.Stream
	// dataSig (body bytes, the body's end, a reset) and writeSig (queued
	// response data sent, a reset) are made under ownConn.mu by the first
	// wait that needs one (most streams never wait); signalling a nil one
	// does nothing.
	dataSig  chan struct{}
	writeSig chan struct{}

	cmu  sync.Mutex
	done chan struct{}
	cut  bool
	// afters are the context's callbacks (AfterFunc); a stopped one is
	// nil. The first two live in afterBuf.
	afters   []func()
	afterBuf [2]func()

	stopped   atomic.Bool // the request path gave up on the body
	released  bool        // the worker is done (ownConn.release); under ownConn.mu
	deadline  time.Time   // body read deadline
	sent100   bool
	status    int
	hdr       *fasthttp.ResponseHeader
	headSent  bool
	h2resp    *http.Response
	trailer   bool // h2resp's trailers are to be sent
	last      []byte
	bad       bool // a write to the client failed
	noTrailer bool
	cutFn     func() // afterCut's, under cmu
}

// Deadline, Done, Err and Value make ownStream a context.Context.
func (st *ownStream) Deadline() (time.Time, bool) { return time.Time{}, false }

func (st *ownStream) Done() <-chan struct{} {
	st.cmu.Lock()
	defer st.cmu.Unlock()
	if st.done == nil {
		st.done = make(chan struct{})
		if st.cut {
			close(st.done)
		}
	}
	return st.done
}

func (st *ownStream) Err() error {
	st.cmu.Lock()
	defer st.cmu.Unlock()
	if st.cut {
		return context.Canceled
	}
	return nil
}

func (st *ownStream) Value(any) any { return nil }

// AfterFunc is what context.AfterFunc (and context.WithCancel on this
// context) use instead of a goroutine per call.
func (st *ownStream) AfterFunc(f func()) func() bool {
	st.cmu.Lock()
	if st.cut {
		st.cmu.Unlock()
		go f()
		return func() bool { return false }
	}
	i := len(st.afters)
	st.afters = append(st.afters, f)
	st.cmu.Unlock()
	return func() bool {
		st.cmu.Lock()
		defer st.cmu.Unlock()
		if i < len(st.afters) && st.afters[i] != nil {
			st.afters[i] = nil
			return true
		}
		return false // ran, or running
	}
}

// cancel marks the stream reset and runs the context's callbacks.
func (st *ownStream) cancel() {
	st.cmu.Lock()
	if st.cut {
		st.cmu.Unlock()
		return
	}
	st.cut = true
	if st.done != nil {
		close(st.done)
	}
	fs := st.afters
	st.afters = nil
	cf := st.cutFn
	st.cutFn = nil
	st.cmu.Unlock()
	if cf != nil {
		go cf()
	}
	for _, f := range fs {
		if f != nil {
			f()
		}
	}
}

func (st *ownStream) context() context.Context { return st }

// afterCut skips context.AfterFunc's wrapper (a context, a cancel
// propagation and a removal per stream): the stream is its own context.
// As with context.AfterFunc, f runs on a goroutine of its own (cancel):
// closing a TLS backend connection writes an alert, which the reader
// that cancels must not wait for.
func (st *ownStream) afterCut(f func()) func() bool {
	st.cmu.Lock()
	if st.cut {
		st.cmu.Unlock()
		go f()
		return func() bool { return false }
	}
	st.cutFn = f
	st.cmu.Unlock()
	return st.stopCut
}

// stopCut unregisters afterCut's function: true if it had not run.
func (st *ownStream) stopCut() bool {
	st.cmu.Lock()
	defer st.cmu.Unlock()
	had := st.cutFn != nil
	st.cutFn = nil
	return had
}

func (st *ownStream) suspect() bool    { return st.oc.suspect.Load() }
func (st *ownStream) peer() netip.Addr { return st.oc.peer }
func (st *ownStream) isTLS() bool      { return st.oc.isTLS }
func (st *ownStream) method() []byte   { return st.s.Method() }
func (st *ownStream) wellFormed() bool { return true } // h2srv checked the head

func (st *ownStream) head(req *fasthttp.Request) {
	req.Header.SetMethodBytes(st.s.Method())
	req.SetRequestURIBytes(st.s.Path())
	req.Header.SetHostBytes(st.s.Authority())
}

func (st *ownStream) fields(req *fasthttp.Request, reqID, load string) {
	s := st.s
	for i := range s.NumFields() {
		k, v := s.Field(i)
		if pipeline.H2Skip(k, reqID, load) {
			continue
		}
		req.Header.AddBytesKV(k, v)
	}
}

func (st *ownStream) bodyInfo() (bool, int64) {
	cl := st.s.ContentLength()
	return !st.s.EndedByHead() && cl != 0, cl
}

func (st *ownStream) body() io.Reader { return (*ownBody)(st) }

func (st *ownStream) stopBody() {
	st.oc.mu.Lock()
	st.stopped.Store(true)
	signal(st.dataSig)
	st.oc.mu.Unlock()
}

func (st *ownStream) setBodyDeadline(t time.Time) {
	st.oc.mu.Lock()
	st.deadline = t
	signal(st.dataSig)
	st.oc.mu.Unlock()
}

// ownBody is the stream's request body.
type ownBody ownStream

func (b *ownBody) Read(p []byte) (int, error) {
	st := (*ownStream)(b)
	oc := st.oc
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		oc.mu.Lock()
		if st.released {
			// The core may have given st.s to another stream.
			oc.mu.Unlock()
			return 0, errStreamReset
		}
		buffered, end, reset, _ := oc.core.BodyState(st.s)
		switch {
		case buffered > 0 && len(p) > 0:
			n, _ := oc.core.ReadBody(st.s, p)
			oc.kickLocked()
			oc.mu.Unlock()
			return n, nil
		case end:
			oc.mu.Unlock()
			return 0, io.EOF
		case reset || st.stopped.Load() || oc.ended || oc.core.Closed(st.s):
			// Closed without its end: reset, or the response ended
			// first (the rest of the body was refused).
			oc.mu.Unlock()
			return 0, errStreamReset
		case len(p) == 0:
			oc.mu.Unlock()
			return 0, nil
		}
		if !st.sent100 {
			// The client may wait for 100 Continue before its body.
			st.sent100 = true
			if st.expects100() {
				oc.core.Headers(100)
				oc.core.EndHeaders(st.s, false)
				oc.kickLocked()
			}
		}
		dl := st.deadline
		if st.dataSig == nil {
			st.dataSig = make(chan struct{}, 1)
		}
		sig := st.dataSig
		oc.mu.Unlock()
		var tc <-chan time.Time
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
			if t == nil {
				t = time.NewTimer(d)
			} else {
				t.Reset(d)
			}
			tc = t.C
		}
		select {
		case <-sig:
		case <-tc:
		}
	}
}

func (st *ownStream) expects100() bool {
	s := st.s
	for i := range s.NumFields() {
		if k, v := s.Field(i); string(k) == "expect" && strings.EqualFold(string(v), "100-continue") {
			return true
		}
	}
	return false
}

func (st *ownStream) respond(status int, h *fasthttp.ResponseHeader, h2resp *http.Response) {
	st.status, st.hdr, st.h2resp = status, h, h2resp
	if h2resp != nil && h2resp.ContentLength != 0 {
		// From an HTTP/2 backend with a body to come: the head goes at
		// once (a gRPC stream's first message may be a while). One that
		// ended with its head (gRPC's Trailers-Only) waits for finish, to
		// go as one HEADERS frame with its trailers.
		oc := st.oc
		oc.mu.Lock()
		st.headLocked(false, false)
		oc.kickLocked()
		oc.mu.Unlock()
	}
}

// headLocked queues the response head (with the trailers too, for a
// Trailers-Only answer).
func (st *ownStream) headLocked(end, withTrailers bool) bool {
	core := st.oc.core
	st.headSent = true
	core.Headers(st.status)
	st.hdr.VisitAll(func(k, v []byte) {
		switch pipeline.FieldKind(k) {
		case pipeline.KindConnection, pipeline.KindTransferEncoding, pipeline.KindUpgrade, pipeline.KindHopByHop:
			return
		}
		core.Field(k, v)
	})
	if withTrailers {
		st.trailerFields()
	}
	return core.EndHeaders(st.s, end)
}

func (st *ownStream) trailerFields() {
	for k, vs := range st.h2resp.Trailer {
		for _, v := range vs {
			st.oc.core.Field(s2b(k), s2b(v))
		}
	}
}

func (st *ownStream) writer() h2BodyWriter { return st }

func (st *ownStream) failed() bool { return st.bad }

// Write queues b as response data, waiting while too much of it waits.
func (st *ownStream) Write(b []byte) (int, error) {
	oc := st.oc
	oc.mu.Lock()
	if err := oc.waitRoomLocked(); err != nil {
		oc.mu.Unlock()
		st.bad = true
		return 0, err
	}
	if !st.headSent {
		st.headLocked(false, false)
	}
	ok := oc.core.WriteData(st.s, b, false)
	oc.kickLocked()
	pend := oc.core.Pending(st.s)
	oc.mu.Unlock()
	if !ok {
		st.bad = true
		return 0, errOwnStreamClosed
	}
	if pend > ownPendLimit {
		if err := st.waitSent(); err != nil {
			st.bad = true
			return 0, err
		}
	}
	return len(b), nil
}

// writeLast takes the whole body, to go with the stream's end (finish).
func (st *ownStream) writeLast(b []byte) { st.last = b }

// waitSent waits until all queued response data of the stream is sent,
// at most write_timeout without progress; then the stream is reset.
func (st *ownStream) waitSent() error {
	oc := st.oc
	wt := oc.fe.writeTimeout
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	lastPend := -1
	for {
		oc.mu.Lock()
		pend, closed := oc.core.Pending(st.s), oc.core.Closed(st.s)
		if st.writeSig == nil {
			st.writeSig = make(chan struct{}, 1)
		}
		sig := st.writeSig
		oc.mu.Unlock()
		switch {
		case pend == 0:
			return nil
		case closed:
			return errOwnStreamClosed
		}
		var tc <-chan time.Time
		if wt > 0 {
			if t == nil {
				t = time.NewTimer(wt)
			} else if pend != lastPend {
				t.Reset(wt)
			}
			tc = t.C
		}
		lastPend = pend
		select {
		case <-sig:
		case <-tc:
			oc.mu.Lock()
			oc.core.ResetStream(st.s, h2srv.Cancel)
			oc.kickLocked()
			oc.mu.Unlock()
			return os.ErrDeadlineExceeded
		}
	}
}

func (st *ownStream) trailers(h2resp *http.Response) {
	st.trailer = len(h2resp.Trailer) > 0
}

// finish ends the stream: the head if not yet sent, the body held by
// writeLast, the trailers; or a reset when the body was cut short. What
// still waits for the client's window is waited for (waitSent: at most
// write_timeout without progress, then a reset), so that a stream never
// outlives its worker holding data a client will not take.
func (st *ownStream) finish(truncated bool) {
	oc := st.oc
	oc.mu.Lock()
	st.endLocked(truncated)
	oc.kickLocked()
	wait := !oc.core.Closed(st.s) && oc.core.Pending(st.s) > 0
	oc.mu.Unlock()
	if wait {
		_ = st.waitSent()
	}
}

func (st *ownStream) endLocked(truncated bool) {
	core := st.oc.core
	if core.Closed(st.s) {
		return
	}
	if truncated || st.hdr == nil {
		// Cut short (x/net's ErrAbortHandler gives INTERNAL_ERROR), or
		// ended without an answer (reset before it got one).
		core.ResetStream(st.s, h2srv.InternalError)
		return
	}
	if err := st.oc.waitRoomLocked(); err != nil {
		return
	}
	if !st.headSent {
		if len(st.last) == 0 {
			st.headLocked(true, st.trailer)
			return
		}
		st.headLocked(false, false)
	}
	if len(st.last) > 0 || !st.trailer {
		core.WriteData(st.s, st.last, !st.trailer)
	}
	if st.trailer {
		core.Trailers()
		st.trailerFields()
		core.EndTrailers(st.s)
	}
}

// ---------------------------------------------------------------- workers

// h2Workers runs streams on long-lived goroutines whose stacks have grown
// to what the request path needs (a goroutine per stream started small
// and grew its stack two or three times on the way down). Idle workers
// are a stack (the most recently parked runs next, its stack warm); one
// parked for longer than h2WorkerIdle is retired by a later dispatch,
// which finds the oldest at the bottom; stop (the front end's Shutdown)
// retires them all. A parked worker waits on its channel alone: a timer
// in that select cost 2.8% of the h2 path's CPU.
type h2Workers struct {
	serve   func(*ownStream) // the front end's serveOwnStream
	mu      sync.Mutex
	idle    []*h2Worker
	stopped bool
	live    atomic.Int32 // worker goroutines
}

type h2Worker struct {
	ch     chan *ownStream // nil: end
	parked int64           // when it went idle (Unix ns)
}

const h2WorkerIdle = 10 * time.Second

// run starts st on an idle worker, or a new one.
func (ws *h2Workers) run(st *ownStream) {
	ws.mu.Lock()
	var w *h2Worker
	if n := len(ws.idle); n > 0 {
		w = ws.idle[n-1]
		ws.idle[n-1] = nil
		ws.idle = ws.idle[:n-1]
		if len(ws.idle) > 0 && time.Now().UnixNano()-ws.idle[0].parked > int64(h2WorkerIdle) {
			ws.retireLocked()
		}
	}
	ws.mu.Unlock()
	if w != nil {
		w.ch <- st
		return
	}
	w = &h2Worker{ch: make(chan *ownStream, 1)}
	ws.live.Add(1)
	go ws.loop(w, st)
}

// retireLocked ends the workers parked for longer than h2WorkerIdle. The
// sends do not block: a parked worker's channel is empty.
func (ws *h2Workers) retireLocked() {
	limit := time.Now().UnixNano() - int64(h2WorkerIdle)
	k := 0
	for k < len(ws.idle) && ws.idle[k].parked < limit {
		ws.idle[k].ch <- nil
		k++
	}
	n := copy(ws.idle, ws.idle[k:])
	clear(ws.idle[n:])
	ws.idle = ws.idle[:n]
}

// stop ends the parked workers; the others end after their stream.
func (ws *h2Workers) stop() {
	ws.mu.Lock()
	ws.stopped = true
	for _, w := range ws.idle {
		w.ch <- nil
	}
	ws.idle = nil
	ws.mu.Unlock()
}

func (ws *h2Workers) loop(w *h2Worker, st *ownStream) {
	defer ws.live.Add(-1)
	h2GrowStack(0)
	for st != nil {
		ws.serve(st)
		ws.mu.Lock()
		if ws.stopped {
			ws.mu.Unlock()
			return
		}
		w.parked = time.Now().UnixNano()
		ws.idle = append(ws.idle, w)
		ws.mu.Unlock()
		st = <-w.ch
	}
}

// serveOwnStream runs one stream and gives it back to its connection.
func (fe *frontend) serveOwnStream(st *ownStream) {
	defer st.oc.release(st)
	defer func() {
		if r := recover(); r != nil {
			st.oc.mu.Lock()
			st.oc.core.ResetStream(st.s, h2srv.InternalError)
			st.oc.kickLocked()
			st.oc.mu.Unlock()
			if r != http.ErrAbortHandler {
				fe.p.log.Named("h2").Error("panic serving a stream", "panic", r)
			}
		}
	}()
	fe.serveH2Stream(st)
}
