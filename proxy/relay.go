package proxy

import (
	"errors"

	"github.com/valyala/fasthttp"

	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// relay.go: the relay through fasthttp's HostClient, the client for
// backends over TLS or by name and the fasthttp front end's: one backend
// picked per attempt, the one retry policy (pipeline.TryAgain), and the
// end of an exchange for a backend the operator took out of rotation.
// An app with HTTP/2 backends goes to relayH2 (h2backend.go).

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
