package proxy

import (
	"errors"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/estimator"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/sentry-proxy/sentry/sert"
)

// relay.go: an admitted request's relay on the fasthttp path (serve's
// last steps: relayAdmitted, then outRequest, send, observe, reply), and
// the relay through fasthttp's HostClient, the client for backends over
// TLS or by name and the fasthttp front end's: one backend picked per
// attempt, the one retry policy (pipeline.TryAgain), and the end of an
// exchange for a backend the operator took out of rotation. An app with
// HTTP/2 backends goes to relayH2 (h2backend.go).

// relayAdmitted relays an admitted request that is not an upgrade, tells
// the ticket how it went (observe) and leaves the client's answer in
// ctx.Response (reply).
func (c *fhCall) relayAdmitted(p *Proxy, body *bodyBuf, ae *pipeline.AccessEntry) (pipeline.Outcome, *pipeline.Upstream) {
	req := &c.ctx.Request
	req.Header.ResetConnectionClose()
	if c.isTLS {
		// The backend hop is plain HTTP; fasthttp's HostClient refuses a
		// request whose URI says https.
		req.URI().SetSchemeBytes(strHTTP)
	}
	// A stream cancelled by now (h2: reset) is not sent to a backend.
	if c.gone != nil {
		select {
		case <-c.gone:
			return pipeline.OutClientGone, nil
		default:
		}
	}
	// HTTP/1.1: a client that closes its side while its request is
	// relayed is gone, as on the loops (fin_linux.go): it gets no answer.
	// The relay lasts to the body's end when the response streams
	// (bodyEnd), else to here.
	fc := c.finConn()
	if fc != nil && fc.relayStart() {
		fc.relayEnd()
		hangUp(c.ctx)
		return pipeline.OutClientGone, nil
	}
	out := c.outRequest(body)
	if out != req {
		defer fasthttp.ReleaseRequest(out)
	}
	o, u, dispatch, inService := c.send(p, out, body, &ae.Trace)
	if fc != nil && fc.finSeen() {
		fc.relayEnd()
		if o == pipeline.OutRelayed {
			// The backend answered: the ticket is told, as the loops
			// do at the head.
			c.observe(body, dispatch, inService, ae)
		}
		c.x.dropBackendResp()
		hangUp(c.ctx)
		return pipeline.OutClientGone, u
	}
	clientClose := c.clientClose
	if c.cb != nil && c.cb.unread {
		clientClose = true // the rest of the body must not be read as a request
	}
	if o == pipeline.OutRelayed {
		c.observe(body, dispatch, inService, ae)
	}
	c.reply(p, o, u, clientClose)
	// A FIN while observe and reply ran (reply may read a body whole)
	// ends it too, unanswered. A body that streams ends its relay at its
	// end (bodyEnd).
	if fc != nil && (o != pipeline.OutRelayed || !c.ctx.Response.IsBodyStream()) && fc.relayEnd() {
		hangUp(c.ctx)
		return pipeline.OutClientGone, u
	}
	return o, u
}

// finConn is the HTTP/1.1 connection whose FIN ends the request while
// it is relayed (fin_linux.go); nil for an h2 stream, whose reset does.
func (c *fhCall) finConn() *drainConn {
	if c.cut != nil {
		return nil
	}
	return drainConnOf(c.ctx.Conn())
}

// outRequest is the request that goes to the backend: the client's, or,
// for a body that streams from the client (c.cb, set here), a copy. fasthttp
// owns the request's stream (and releases it with the request), so the
// copy carries it, wrapped to tell the client's read errors from the
// backend's: for a chunked body larger than the buffer, the part read
// first and then the rest of the stream. The caller releases a copy.
func (c *fhCall) outRequest(body *bodyBuf) *fasthttp.Request {
	req := &c.ctx.Request
	if body == nil || body.client == nil {
		return req
	}
	c.cb = body.client
	if c.cut == nil && c.a.H2 != nil {
		c.cb.stop = readUnblocker(c.ctx.Conn()) // relayH2 may abandon it halfway
	}
	out := fasthttp.AcquireRequest()
	req.CopyTo(out)
	out.SetBodyStream(c.cb, body.cl)
	return out
}

// send relays out (relay, with its retries) under what may cut it: an h2
// stream's reset (abort.go) and selective early termination (term.go),
// never for a body that streams from the client nor an upgrade. It
// returns relay's outcome, or OutTerminated when the termination timer
// won; the upstream; when the request was dispatched; and the backend's
// in-flight count then.
func (c *fhCall) send(p *Proxy, out *fasthttp.Request, body *bodyBuf, tr *pipeline.Trace) (pipeline.Outcome, *pipeline.Upstream, time.Time, int) {
	x, a, req := c.x, c.a, &c.ctx.Request
	var ab *abortBody
	if c.cut != nil {
		// An h2 stream: its reset cuts the backend exchange (abort.go).
		ab = &abortBody{ab: c.cut, resp: x.backendResp(), b: req.Body(), cl: len(req.Body())}
		if c.cb != nil {
			ab.b, ab.src, ab.cl = nil, c.cb, body.cl
		}
	}
	var tcl *sert.Class
	if c.cb == nil && a.H2 == nil { // not an HTTP/2 backend: see docs/request-path.md, "Backends over HTTP/2"
		tcl = a.TermClass(&x.t, req.Header.Method())
	}
	if tcl != nil && ab == nil {
		// HTTP/1.1: the exchange's own hold on the backend connection,
		// bound the way an h2 stream's is (abort.go).
		x.ab.reset()
		x.abody = abortBody{ab: &x.ab, resp: x.backendResp(), b: req.Body(), cl: len(req.Body())}
		ab = &x.abody
	}
	dispatch := time.Now()
	if tcl != nil {
		x.armTerm(tcl, dispatch, ab.ab)
	}
	o, u, inService := p.relay(a, out, x.backendResp(), c.cb, ab, tr)
	if tcl != nil {
		x.stopTerm()
		if c.cut == nil {
			x.ab.unbind() // the timer is stopped: nothing cuts this hold any more
		}
		if x.term.Cut() {
			// The timer won the latch (term.go): the backend connection
			// was closed; whatever came back is dropped, and the request
			// is not retried (relay saw the cut).
			a.Terminated(&x.t, &x.term, time.Now(), inService)
			o = pipeline.OutTerminated
		} else {
			x.term.Disarm()
			x.term.Off()
		}
	}
	return o, u, dispatch, inService
}

// observe is the complete step (package pipeline) of a relayed request:
// the ticket is told the outcome, with the service time measured from
// dispatch and the backend's Server-Timing, which loses sentry's metric
// when Observe says so.
func (c *fhCall) observe(body *bodyBuf, dispatch time.Time, inService int, ae *pipeline.AccessEntry) {
	now := time.Now()
	rh := &c.x.backendResp().Header
	st := rh.PeekBytes(hdrServerTiming)
	// Measured service time runs from dispatch, when the body is in
	// sentry. A body that streams to the backend (larger than the
	// buffer, or buffering off) would add the client's upload time to
	// it, so such a request gives no measured sample: only the
	// backend's Server-Timing counts (the estimator cannot be
	// poisoned by a slow upload).
	measured, busy := now.Sub(dispatch), inService
	ae.Upstrm = measured
	if body != nil && body.streamed {
		measured, busy = 0, 0
		if cb := c.cb; cb != nil {
			// An HTTP/2 backend's: a body all sent before the response
			// head (a unary gRPC call; an HTTP/1.1 client's, sent whole)
			// gives the time from its end to the head. One still
			// streaming at the head (a bidirectional call) gives none.
			if at := cb.sentAt.Load(); at != 0 && at <= cb.headAt {
				measured, busy = time.Duration(cb.headAt-at), inService
			}
		}
	}
	x := c.x
	if c.a.Observe(&x.t, admission.Result{ServerTiming: st, Measured: measured, InService: busy, End: now}) && len(st) > 0 {
		x.st = estimator.StripServerTiming(x.st[:0], st)
		if len(x.st) == 0 {
			rh.DelBytes(hdrServerTiming)
		} else {
			rh.SetBytesKV(hdrServerTiming, x.st)
		}
	}
}

// reply leaves the client's answer in ctx.Response: the backend's, its
// hop-by-hop fields stripped, or the error outcome o calls for; either
// with the request ID, and closing the connection when clientClose says
// so.
func (c *fhCall) reply(p *Proxy, o pipeline.Outcome, u *pipeline.Upstream, clientClose bool) {
	ctx, a, x := c.ctx, c.a, c.x
	if o != pipeline.OutRelayed {
		x.dropBackendResp()
		p.writeError(ctx, a, o)
	} else {
		// A body of known size up to the stream threshold was read whole
		// by the client; fasthttp still hands it over as a stream, which
		// holds the backend connection until the client write ends and
		// costs a wrapper per response. Turn it back into a plain body:
		// the backend connection goes back to the pool now and the
		// response is written in one piece.
		br := x.backendResp()
		if cl := br.Header.ContentLength(); cl >= 0 && cl <= streamThreshold && br.IsBodyStream() {
			if c.cut != nil {
				c.cut.unbind() // Body() hands the connection back
			}
			br.Body()
		}
		p.takeResponse(ctx, x, a, c.cut)
		stripHopByHopResponse(&ctx.Response.Header)
		if !ctx.Response.IsBodyStream() {
			quiescedEnd(a, u)
		}
	}
	ctx.Response.Header.SetBytesV(a.ReqID, c.id)
	if clientClose {
		ctx.SetConnectionClose()
	}
}

// quiescedEnd closes the idle connections to u when the operator took it
// out of rotation (lb's doc.go, "Operator state") while this exchange was
// in flight: the pool told the proxy at the exchange's Release, when its
// connection was still busy, and the connection has only now gone back
// to fasthttp's pool (or, to an HTTP/2 backend, become idle). A response
// body fasthttp streams to an HTTP/1.1 client goes back when fasthttp's
// server has written it, after the handler: that connection is closed by
// the idle timeout (30 s). One atomic load otherwise.
func quiescedEnd(a *pipeline.App, u *pipeline.Upstream) {
	if u == nil || !u.Quiesced.Load() {
		return
	}
	if c, _ := a.H2.(*h2Client); c != nil {
		c.tr.CloseIdleConnections()
		return
	}
	hostClient(u).CloseIdleConnections()
}

// relay sends req to the least-loaded healthy backend and reads the response
// head into resp. Connect failures are retried on another backend.
//
// It also returns the backend's in-flight count at dispatch (this request
// included), for the estimator's parallelism model.
//
// cb, if not nil, is the streamed body: an exchange that failed because
// the client's side of it did (too slow, gone) ends as that, without
// blaming the backend.
//
// ab, if not nil, is an h2 request's body (abort.go): set on req for each
// attempt, it binds the attempt's connection to the stream, and the
// binding ends here unless the response streams (the caller ends it then).
// An attempt cut by the stream's reset ends as outClientGone.
func (p *Proxy) relay(a *pipeline.App, req *fasthttp.Request, resp *fasthttp.Response, cb *clientBody, ab *abortBody, tr *pipeline.Trace) (pipeline.Outcome, *pipeline.Upstream, int) {
	if c, ok := a.H2.(*h2Client); ok && c != nil {
		return p.relayH2(a, c, req, resp, cb, ab, tr)
	}
	var last *pipeline.Upstream
	replay := cb == nil && idempotent(req) // pipeline.TryAgain: a body held whole
	stale := 0                             // connections found closed by a reset (errConnAborted)
	for attempt := 1; ; attempt++ {
		b := a.Pool.Pick()
		if b == nil {
			if last != nil {
				return pipeline.OutBackendFailed, last, 0 // every backend we tried refused
			}
			return pipeline.OutNoBackend, nil, 0
		}
		u := b.Attachment.(*pipeline.Upstream)
		inService := int(b.Inflight())
		if ab != nil {
			ab.attach(req)
		}
		err := doBackend(hostClient(u), req, resp)
		if ab != nil {
			if err != nil || !resp.IsBodyStream() {
				ab.ab.unbind()
			}
			if err != nil && (ab.ab.wasCut() || errors.Is(err, errTermCut)) {
				// The stream was reset, or termination cut it (the
				// caller tells which): never retried.
				a.Pool.Release(b, true)
				return pipeline.OutClientGone, u, inService
			}
		}
		if err != nil && errors.Is(err, errConnAborted) {
			// A pooled connection another stream's reset closed
			// (abort.go): not the backend's failure, and not an attempt
			// either (a burst of resets can leave several such in the
			// pool), up to pipeline.MaxStaleRetries; replayable requests only.
			a.Pool.Release(b, true)
			if !replay || stale >= pipeline.MaxStaleRetries {
				return pipeline.OutBackendFailed, u, 0
			}
			stale++
			attempt--
			last = u
			resp.Reset()
			continue
		}
		if err == nil {
			markChunked(resp)
			a.Pool.Release(b, true)
			if u.Answered() {
				p.log.Info("backend reachable again", "app", a.Name, "backend", u.Addr)
			}
			return pipeline.OutRelayed, u, inService
		}
		if cb != nil && cb.err != nil {
			a.Pool.Release(b, true)
			return cb.outcome(), u, 0
		}
		o := relayError(err)
		dial := isDialError(err)
		if dial {
			a.Pool.Eject(b) // connect refused/timed out is unambiguous
		} else {
			a.Pool.Release(b, !pipeline.CountsAsFailure(o))
		}
		if dial && u.Unreachable() {
			// Named once with its cause (a name that does not resolve
			// fails here too: fasthttp resolves on each dial), and again
			// only after it answered and failed anew.
			p.log.Warn("backend unreachable; ejected until it answers again",
				pipeline.LogRequest([]any{"app", a.Name, "backend", u.Addr, "error", err}, req.Header.Peek(a.ReqID), tr)...)
		} else if ae := u.Alert.Swap(nil); ae != nil && u.Unreachable() {
			// The handshake passed on sentry's side, but the backend
			// refused it after (TLS 1.3 sends a client-certificate
			// refusal with the first response), which fasthttp reports
			// as a closed connection: the alert is the cause, named once
			// like an unreachable backend's.
			p.log.Warn("backend refused the TLS connection",
				pipeline.LogRequest([]any{"app", a.Name, "backend", u.Addr, "error", *ae}, req.Header.Peek(a.ReqID), tr)...)
		} else if p.log.IsDebug() {
			p.log.Debug("relay failed", pipeline.LogRequest([]any{"app", a.Name, "backend", u.Addr, "error", err}, req.Header.Peek(a.ReqID), tr)...)
		}
		if !pipeline.TryAgain(failureOf(err), replay, attempt, false) {
			return o, u, 0
		}
		last = u
		resp.Reset()
	}
}

// doBackend is HostClient.Do, except for a HEAD that takes the last
// connection under max_conns_per_backend: HostClient hands a connection
// given back straight to its first waiter, whose request goes out at
// once, so a body the backend wrongly sends late with its answer to a
// HEAD would be read as that waiter's response. Such a HEAD asks the
// backend to close after its answer (a waiter then dials), as the loops
// close theirs (evloop finish). fasthttp does not let the same be done
// for a 204 or 304, known only once the connection is handed on
// (knownDifferences, "stray-body").
func doBackend(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response) error {
	if !req.Header.IsHead() || hc.MaxConns <= 0 || req.Header.ConnectionClose() || hc.ConnsCount()+1 < hc.MaxConns {
		return hc.Do(req, resp)
	}
	req.Header.SetConnectionClose()
	err := hc.Do(req, resp)
	req.Header.ResetConnectionClose() // the backend's, not the client's connection
	return err
}
