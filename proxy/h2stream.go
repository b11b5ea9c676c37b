package proxy

import (
	"context"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sentry-proxy/sentry/proxy/h2srv"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/valyala/fasthttp"
)

// h2stream.go: one stream of sentry's h2 server (h2own.go) as the h2
// workers' request path sees it (serveH2Stream, h2.go): its context (a
// reset cancels it), its request body (ownBody), and its response, queued
// into the connection's h2 core under the connection's mutex. Where the
// response is, is the stream's phase (h2phase.go).

// ownStream is one stream of an ownConn, as the request path sees it
// (serveH2Stream), and its context: done when the stream is reset or the
// connection ends.
type ownStream struct {
	oc *ownConn
	s  *h2srv.Stream
	w  *h2Worker // the worker running it
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

	stopped  atomic.Bool // the request path gave up on the body
	phase    streamPhase // where the response is (h2phase.go); changed under ownConn.mu
	deadline time.Time   // body read deadline
	status   int
	hdr      *fasthttp.ResponseHeader
	h2resp   *http.Response
	trailer  bool // h2resp's trailers are to be sent
	last     []byte
	cutFn    func() // afterCut's, under cmu
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
		if st.phase == phReleased {
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
		if st.phase == phOpen {
			// The client may wait for 100 Continue before its body
			// (never after the response head: a gRPC stream's body may
			// be read after its head went).
			st.setPhase(phContinued)
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
	st.setPhase(phHead)
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

// writer is the response body's writer (the stream itself); its failed
// tells whether a write to the client failed (rather than the backend's
// side).
func (st *ownStream) writer() *ownStream { return st }

func (st *ownStream) failed() bool { return st.phase == phBroken }

// broke records a failed write to the client.
func (st *ownStream) broke() {
	st.oc.mu.Lock()
	st.setPhase(phBroken)
	st.oc.mu.Unlock()
}

// Write queues b as response data, waiting while too much of it waits.
func (st *ownStream) Write(b []byte) (int, error) {
	oc := st.oc
	oc.mu.Lock()
	if err := oc.waitRoomLocked(); err != nil {
		st.setPhase(phBroken)
		oc.mu.Unlock()
		return 0, err
	}
	if !st.headSent() {
		st.headLocked(false, false)
	}
	ok := oc.core.WriteData(st.s, b, false)
	oc.kickLocked()
	pend := oc.core.Pending(st.s)
	oc.mu.Unlock()
	if !ok {
		st.broke()
		return 0, errOwnStreamClosed
	}
	if pend > ownPendLimit {
		if err := st.waitSent(); err != nil {
			st.broke()
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
	st.writeEndLocked(truncated)
	st.setPhase(phEnded)
}

// writeEndLocked queues the response's end (endLocked).
func (st *ownStream) writeEndLocked(truncated bool) {
	core := st.oc.core
	if core.Closed(st.s) {
		return
	}
	if truncated || st.hdr == nil {
		// Cut short (net/http's ErrAbortHandler gives INTERNAL_ERROR), or
		// ended without an answer (reset before it got one).
		core.ResetStream(st.s, h2srv.InternalError)
		return
	}
	if err := st.oc.waitRoomLocked(); err != nil {
		return
	}
	if !st.headSent() {
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
