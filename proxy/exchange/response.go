package exchange

import (
	"errors"
	"time"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/estimator"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/sentry-proxy/sentry/proxy/respbuf"
)

// response.go: the backend's response -- its head (the 1xx, 101 and
// malformed rules, the framing), the measured time, the response header
// policy, the body's framing -- and the end of a relayed exchange.

// How the response body is delimited (RFC 9112 §6.3).
const (
	bodyNone = iota
	bodyLength
	bodyChunked
	bodyClose
)

// errConnectTimeout is the cause logged for a connect that did not finish
// within the app's connect timeout.
var errConnectTimeout = errors.New("connect timed out")

// Read is the event "the backend sent data" (all it sent since the last
// Read that returned WriteHead, Forward or Finish: a driver keeps a head's
// bytes until it is whole). The first byte disarms termination; every
// read restarts the idle deadline. Before the response head: None (the
// head is not whole yet), WriteHead (n: its length), or, for a head that cannot be relayed,
// what Broke does (the response is never retried). After it, data is
// body: n of its bytes are passed on (Body's actions).
func (ex *Exchange) Read(data []byte, now time.Time) (n int, act Action) {
	if !ex.gotBytes {
		// The first response byte disarms termination, as on the
		// fasthttp path (idleConn.Read): a backend slow to finish its
		// head is not cut once it has started answering.
		ex.termAt = 0
		ex.term.Disarm()
	}
	ex.gotBytes = true
	ex.deadline = now.UnixNano() + ex.a.Shared.Idle.Load()
	if ex.state == Relaying {
		return ex.Body(data, false)
	}
	rh := &ex.sc.rh
	off := 0
	for {
		switch pipeline.ParseResponseHead(data[off:], rh) {
		case pipeline.HeadIncomplete:
			return 0, None
		case pipeline.HeadUnsure:
			return 0, ex.Broke(pipeline.FailNoRetry, now) // a broken response is not retried
		}
		if st := rh.Status; st >= 100 && st < 200 {
			if st == 101 {
				return 0, ex.Broke(pipeline.FailNoRetry, now)
			}
			// 100 Continue, 103 Early Hints: dropped, as fasthttp does.
			off += rh.N
			continue
		}
		break
	}
	ex.sc.resp = data[off:]
	ex.status = rh.Status
	switch {
	case ex.headReq || rh.Status == 204 || rh.Status == 304:
		ex.mode = bodyNone
	case rh.Chunked:
		if rh.TeOther {
			return 0, ex.Broke(pipeline.FailNoRetry, now)
		}
		ex.mode, ex.ct = bodyChunked, pipeline.ChunkTracker{}
	case rh.ContentLength >= 0:
		ex.mode, ex.remain = bodyLength, rh.ContentLength
	default:
		ex.mode = bodyClose
	}
	ex.bkClose = rh.ConnClose || rh.Minor == 0 && !rh.ConnKeepAlive
	resp := ex.sc.resp
	ex.mayBuffer = ex.mode != bodyNone && !ex.a.Policy.ResponseBufferingOff &&
		!respbuf.Streams(rh.ContentType.Of(resp), rh.AccelBuffering.Of(resp))
	return off + rh.N, WriteHead
}

// Relay goes on from WriteHead at now (a fresh time: the measured one ends
// here): termination is disarmed (the core's own timer is the only other
// party), the backend is released to the balancer as having answered,
// and the complete step's first part tells the ticket the outcome
// (pipeline.App.Observe: dispatch to head, the backend's Server-Timing,
// its in-flight count at dispatch). The exchange is Relaying from here.
//
// Decision: in flight ends at the response head, the one point that never
// depends on the client (docs/buffering.md); the body's end only ends the
// exchange.
func (ex *Exchange) Relay(now time.Time) {
	a := ex.a
	ex.termAt = 0
	ex.term.Disarm()
	ex.upstrm = now.Sub(ex.dispatch)
	if ex.u.Answered() {
		ex.env.Log.Info("backend reachable again", "app", a.Name, "backend", ex.u.Addr)
	}
	ex.release(true)
	st := ex.sc.rh.FindKind(ex.sc.resp, pipeline.KindServerTiming)
	ex.strip = a.Observe(&ex.t, admission.Result{ServerTiming: st, Measured: now.Sub(ex.dispatch), InService: ex.inService, End: now})
	ex.setState(Relaying)
}

// Response is the backend's response head, as Read parsed it: its bytes
// (from the status line) and their parse, valid until the driver's next
// Read; Status is its status.
func (ex *Exchange) Response() ([]byte, *pipeline.RawHead) { return ex.sc.resp, &ex.sc.rh }

// FieldSink takes a response head's fields one at a time (an h2 core's
// Field, which HPACK-encodes each into the stream's HEADERS).
type FieldSink interface{ Field(name, value []byte) }

// PutRespFields gives w the response head an h2 stream's HEADERS carry:
// every field of the backend's head the response policy keeps
// (RespField, with its replaced value where it has one), then reqID (the
// app's request ID header) with the exchange's ID. The status is the
// caller's. Every h2 driver writes the head through it.
func (ex *Exchange) PutRespFields(w FieldSink, reqID []byte) {
	data, rh := ex.sc.resp, &ex.sc.rh
	for i := 0; i < rh.NFields; i++ {
		v, keep := ex.RespField(i)
		if !keep {
			continue
		}
		f := &rh.Fields[i]
		if v == nil {
			v = f.Value.Of(data)
		}
		w.Field(f.Name.Of(data), v)
	}
	w.Field(reqID, ex.ID())
}

// Status is the response's status (0 before its head).
func (ex *Exchange) Status() int { return ex.status }

// MayBuffer tells whether the response may be held back for a slow client
// (docs/buffering.md): it has a body, its app buffers, and it is not a
// stream (respbuf.Streams: server-sent events, gRPC, X-Accel-Buffering:
// no). The driver adds whether it buffers at all.
func (ex *Exchange) MayBuffer() bool { return ex.mayBuffer }

// CloseDelimited tells whether the response's body ends with the backend
// connection: an HTTP/1.1 client's connection then closes after it.
func (ex *Exchange) CloseDelimited() bool { return ex.mode == bodyClose }

// NoBody tells whether the response has no body (HEAD, 204, 304, or an
// empty Content-Length one).
func (ex *Exchange) NoBody() bool {
	return ex.mode == bodyNone || ex.mode == bodyLength && ex.remain == 0
}

// Bodiless tells whether the response is one that never has a body
// (HEAD, 204, 304) whatever the backend sends.
func (ex *Exchange) Bodiless() bool { return ex.mode == bodyNone }

// Chunked tells whether the response's body is chunked (an h2 client
// gets it decoded).
func (ex *Exchange) Chunked() bool { return ex.mode == bodyChunked }

// RespField is the response header policy for every client, on field i of
// the response head: keep false drops it (hop-by-hop fields,
// Content-Length beside chunked, the backend's request ID,
// X-Accel-Buffering, and for an h2 client the connection-specific
// Transfer-Encoding too); a non-nil v is the value that replaces it
// (Server-Timing stripped of what sentry reads; a field it empties is
// dropped), valid until the next call. The driver adds the request ID,
// and on HTTP/1.1 Connection: close when it closes.
func (ex *Exchange) RespField(i int) (v []byte, keep bool) {
	rh, data := &ex.sc.rh, ex.sc.resp
	f := &rh.Fields[i]
	switch rh.Kinds[i] {
	case pipeline.KindConnection, pipeline.KindHopByHop, pipeline.KindUpgrade:
		return nil, false
	case pipeline.KindTransferEncoding:
		return nil, !ex.h2
	case pipeline.KindContentLength:
		// Transfer-Encoding overrides it; not passed on (RFC 9112 §6.3).
		return nil, !rh.Chunked
	case pipeline.KindServerTiming:
		if ex.strip {
			ex.sc.st = estimator.StripServerTiming(ex.sc.st[:0], f.Value.Of(data))
			return ex.sc.st, len(ex.sc.st) > 0
		}
	case pipeline.KindOther:
		if n := f.Name.Of(data); pipeline.EqFoldString(n, ex.a.ReqID) || pipeline.IsAccelBuffering(n) {
			return nil, false // (X-Accel-Buffering is read, not passed on, as nginx does)
		}
	}
	return nil, true
}

// Body is the event "body bytes came" (after the head in the same read
// or in a later one): n of them belong to the response and are passed
// on: Forward, or Finish at the body's end (bytes past it make the
// backend connection one not to keep). held says that nothing of the
// response has gone to the client yet (its head waits in the driver): a
// malformed chunked body is then answered 502 (Reply: the driver drops
// the head) instead of cut (Abort).
func (ex *Exchange) Body(data []byte, held bool) (n int, act Action) {
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
		k, end, ok := ex.ct.Feed(data)
		if !ok {
			if held {
				// The head has not left: the client gets a 502 (the
				// backend connection is closed, never reused), as for
				// a malformed head.
				return 0, ex.reply(pipeline.OutBackendFailed, admission.Decision{})
			}
			return 0, ex.abort(pipeline.OutBackendFailed)
		}
		if end && k < len(data) {
			ex.bkClose = true
		}
		data, done = data[:k], end
	}
	ex.outBytes += int64(len(data))
	if done {
		ex.out, ex.outStatus = pipeline.OutRelayed, ex.status
		return len(data), Finish
	}
	return len(data), Forward
}

// Closed is the event "the backend closed the connection" (or a read
// failed) once the head was relayed: the end of a close-delimited body
// (Finish), else a truncated one (Abort). Before the head, the driver
// says Broke(pipeline.FailBroken).
func (ex *Exchange) Closed() Action {
	if ex.mode == bodyClose {
		ex.bkClose = true
		ex.out, ex.outStatus = pipeline.OutRelayed, ex.status
		return Finish
	}
	return ex.abort(pipeline.OutBackendFailed)
}

// Reusable tells, at Finish, whether the backend connection may be kept:
// the backend did not ask to close, sent nothing past the body, and took
// the whole request (one that answered early -- a 413, say -- still
// expects the rest).
func (ex *Exchange) Reusable() bool { return !ex.bkClose && ex.sent == len(ex.req) }

// ReadAgain is the event "the driver reads the backend again" after it
// paused reading for a slow client (its backlog, with no buffer to take
// more): the idle deadline, held off meanwhile, restarts.
func (ex *Exchange) ReadAgain(now time.Time) {
	ex.deadline = now.UnixNano() + ex.a.Shared.Idle.Load()
}

// Trim drops the exchange's request buffer if it grew past limit bytes:
// an idle connection keeps small buffers only.
func (ex *Exchange) Trim(limit int) {
	if cap(ex.req) > limit {
		ex.req = nil
	}
}
