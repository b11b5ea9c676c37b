//go:build linux

package proxy

import (
	"net/netip"

	"github.com/sentry-proxy/sentry/proxy/evloop"
	"github.com/sentry-proxy/sentry/proxy/h2srv"
)

// h2loop_linux.go: HTTP/2 over TLS on the event loops (see "Engines" in
// doc.go). A TLS 1.3 connection that negotiated h2 is
// given to the loops like an HTTP/1.1 one, with an ownConn in loop mode as
// its shared side (evloop.H2Conn): the loop reads, feeds the core, writes
// and times the connection, and runs the streams it can finish itself;
// every other stream runs here on the h2 workers (serveOwnStream),
// exactly as on a goroutine connection, its output taken by the loop,
// which the worker wakes (loopKickLocked).

// newLoopOwnConn makes the shared side of an h2 connection the loops serve.
func (fe *frontend) newLoopOwnConn(peer netip.Addr) *ownConn {
	sv := fe.p.cur.Load().snap.Server
	oc := &ownConn{fe: fe, peer: peer, isTLS: true, loop: true, idle: sv.IdleTimeout}
	oc.cond.L = &oc.mu
	oc.core = h2srv.NewConn(h2srv.Config{
		MaxConcurrentStreams: h2MaxStreams,
		MaxHeaderListSize:    sv.MaxHeaderBytes,
		ResetLimit:           h2ResetLimit,
		ResetWindow:          h2ResetWindow,
	})
	fe.ownTrack(oc, true)
	return oc
}

var _ evloop.H2Conn = (*ownConn)(nil)

// SetWake is evloop.H2Conn's.
func (oc *ownConn) SetWake(wake func()) {
	oc.mu.Lock()
	oc.loopWake = wake
	oc.mu.Unlock()
}

// Feed is evloop.H2Conn's: the goroutine reader's work for one read
// (serveOwnConn), with take deciding which new streams the loop runs.
func (oc *ownConn) Feed(b []byte, take func(*h2srv.Stream) bool, evs []h2srv.Event) ([]h2srv.Event, error) {
	oc.mu.Lock()
	oc.inLoop = true
	ferr := oc.core.Feed(b)
	all := oc.core.TakeEvents(oc.loopAll[:0])
	oc.loopTake, oc.loopEvs = take, evs
	start, cut := oc.eventsLocked(all, oc.loopStart[:0], oc.loopCut[:0])
	evs = oc.loopEvs
	oc.loopTake, oc.loopEvs = nil, nil
	clear(all)
	oc.loopAll = all[:0]
	oc.suspect.Store(oc.core.Suspect())
	if ferr != nil && oc.core.Flooded() {
		oc.fe.p.metrics.clientErrors.WithLabelValues(oc.fe.addr, "h2_reset_flood").Inc()
	}
	oc.inLoop = false
	oc.mu.Unlock()
	for _, st := range cut {
		st.cancel()
	}
	for _, st := range start {
		oc.fe.h2Workers.run(st)
	}
	clear(start)
	clear(cut)
	oc.loopStart, oc.loopCut = start[:0], cut[:0]
	return evs, ferr
}

// Lock is evloop.H2Conn's.
func (oc *ownConn) Lock() {
	oc.mu.Lock()
	oc.inLoop = true
}

// Unlock is evloop.H2Conn's.
func (oc *ownConn) Unlock() {
	oc.inLoop = false
	oc.mu.Unlock()
}

// Core is evloop.H2Conn's.
func (oc *ownConn) Core() *h2srv.Conn { return oc.core }

// TakeOutput is evloop.H2Conn's.
func (oc *ownConn) TakeOutput(spare []byte) []byte {
	oc.mu.Lock()
	b := oc.core.TakeOutput(spare)
	oc.cond.Broadcast() // room for waiting workers
	oc.mu.Unlock()
	return b
}

// Status is evloop.H2Conn's.
func (oc *ownConn) Status() evloop.H2Status {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	st := evloop.H2Status{Busy: oc.held > 0 || oc.core.Active() > 0, GoingAway: oc.core.GoingAway()}
	if id, ok := oc.core.HeadPending(); ok {
		st.Head = id
	}
	return st
}

// GoAway is evloop.H2Conn's.
func (oc *ownConn) GoAway() {
	oc.mu.Lock()
	oc.inLoop = true
	oc.core.GoAway()
	oc.inLoop = false
	oc.mu.Unlock()
}

// Closed is evloop.H2Conn's: teardown's part that is not the socket's.
func (oc *ownConn) Closed() {
	oc.mu.Lock()
	if oc.ended {
		oc.mu.Unlock()
		return
	}
	oc.inLoop = true
	oc.core.Close()
	_, cut := oc.eventsLocked(oc.core.TakeEvents(nil), nil, nil)
	oc.loopEvs = nil
	oc.ended = true
	oc.inLoop = false
	oc.cond.Broadcast()
	oc.mu.Unlock()
	for _, st := range cut {
		st.cancel()
	}
	oc.fe.ownTrack(oc, false)
}
