package proxy

import (
	"github.com/sentry-proxy/sentry/proxy/exchange"
	"github.com/sentry-proxy/sentry/proxy/h2srv"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// h2core.go: a worker's stream answered by the exchange core's goroutine
// driver (gdrive.go): the backend's head under the core's response policy
// and sentry's own replies go into the connection's h2 core as HEADERS,
// body bytes as DATA, as on the event loops' stream connections -- never
// through a fasthttp.Response.

// gfield is one field of a head the stream is given whole (coreReply).
type gfield = pipeline.Field

// coreHead queues the head of a response with a body that the core
// relays (WriteHead): the backend's status and the fields its policy
// keeps (RespField), the request ID added (reqID: the app's header name).
// False: the stream or its connection is gone. (The head of a response
// without a body waits for the exchange's record: gdriver.holdHead.)
func (st *ownStream) coreHead(ex *exchange.Exchange, reqID []byte) bool {
	oc := st.oc
	oc.mu.Lock()
	defer oc.mu.Unlock()
	if oc.waitRoomLocked() != nil {
		st.setPhase(phBroken)
		return false
	}
	core := oc.core
	_, rh := ex.Response()
	core.Headers(rh.Status)
	ex.PutRespFields(core, reqID)
	ok := core.EndHeaders(st.s, false)
	oc.kickLocked()
	if !ok {
		st.setPhase(phBroken)
		return false
	}
	st.setPhase(phHead)
	return true
}

// coreReply queues sentry's own answer: fields as HEADERS, then body as
// DATA; END_STREAM with the last of them.
func (st *ownStream) coreReply(status int, fields []gfield, body []byte) bool {
	oc := st.oc
	oc.mu.Lock()
	if oc.waitRoomLocked() != nil {
		st.setPhase(phBroken)
		oc.mu.Unlock()
		return false
	}
	core := oc.core
	core.Headers(status)
	for _, f := range fields {
		core.Field(f.Name, f.Value)
	}
	ok := core.EndHeaders(st.s, len(body) == 0)
	oc.kickLocked()
	if !ok {
		st.setPhase(phBroken)
		oc.mu.Unlock()
		return false
	}
	st.setPhase(phHead)
	if len(body) == 0 {
		st.setPhase(phEnded)
		oc.mu.Unlock()
		return true
	}
	oc.mu.Unlock()
	return st.coreData(body, true)
}

// coreData queues body bytes as DATA (end: with END_STREAM), waiting
// while too much output waits, and, before the end, while more than
// ownPendLimit bytes of the stream wait for the client's window (at most
// write_timeout without progress: waitSent). False: the stream or its
// connection is gone, or the client took nothing for write_timeout.
func (st *ownStream) coreData(b []byte, end bool) bool {
	oc := st.oc
	oc.mu.Lock()
	if oc.waitRoomLocked() != nil {
		st.setPhase(phBroken)
		oc.mu.Unlock()
		return false
	}
	ok := oc.core.WriteData(st.s, b, end)
	oc.kickLocked()
	pend := oc.core.Pending(st.s)
	switch {
	case !ok:
		st.setPhase(phBroken)
	case end:
		st.setPhase(phEnded)
	}
	oc.mu.Unlock()
	if !ok {
		return false
	}
	if !end && pend > ownPendLimit && st.waitSent() != nil {
		st.broke()
		return false
	}
	return true
}

// coreTry queues body bytes as DATA only if they go without a wait: the
// connection's output has room and the stream has at most ownPendLimit
// bytes waiting for the client's window. False: nothing queued (ok
// false: the stream or its connection is gone).
func (st *ownStream) coreTry(b []byte) (queued, ok bool) {
	oc := st.oc
	oc.mu.Lock()
	defer oc.mu.Unlock()
	switch {
	case oc.werr != nil || oc.ended || oc.core.Closed(st.s):
		st.setPhase(phBroken)
		return false, false
	case len(oc.core.Output()) >= ownOutLimit || oc.core.Pending(st.s) > ownPendLimit:
		oc.kickLocked()
		return false, true
	}
	if !oc.core.WriteData(st.s, b, false) {
		st.setPhase(phBroken)
		return false, false
	}
	oc.kickLocked()
	return true, true
}

// coreReset ends the stream with a reset (code), unless it is closed.
func (st *ownStream) coreReset(code h2srv.ErrCode) {
	oc := st.oc
	oc.mu.Lock()
	if !oc.core.Closed(st.s) {
		oc.core.ResetStream(st.s, code)
		oc.kickLocked()
	}
	if st.phase != phEnded {
		st.setPhase(phEnded)
	}
	oc.mu.Unlock()
}

// coreDrain waits, after the stream's end, for what still waits for the
// client's window (at most write_timeout without progress, then a
// reset), so that a stream never outlives its worker holding data a
// client will not take.
func (st *ownStream) coreDrain() {
	oc := st.oc
	oc.mu.Lock()
	wait := !oc.core.Closed(st.s) && oc.core.Pending(st.s) > 0
	oc.mu.Unlock()
	if wait {
		_ = st.waitSent()
	}
}
