package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/valyala/fasthttp"
)

// fasthttp_adapt.go: the parts of the header policy, the status map and
// the retry policy that read fasthttp's own types (its request and
// response headers, its HostClient's errors). The engine-neutral rest is
// in package pipeline.

// relayError classifies an error returned by the backend client.
func relayError(err error) pipeline.Outcome {
	switch {
	case errors.Is(err, fasthttp.ErrNoFreeConns), errors.Is(err, fasthttp.ErrConnPoolStrategyNotImpl):
		return pipeline.OutBackendBusy
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, fasthttp.ErrDialTimeout):
		if isDialError(err) {
			return pipeline.OutBackendFailed
		}
		return pipeline.OutBackendTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		if isDialError(err) {
			return pipeline.OutBackendFailed // connect timeout: 502, the backend never answered
		}
		return pipeline.OutBackendTimeout
	}
	return pipeline.OutBackendFailed
}

// failureOf maps an error of fasthttp's HostClient to its failure kind.
func failureOf(err error) pipeline.Failure {
	switch {
	case isDialError(err):
		return pipeline.FailConnect
	case errors.Is(err, fasthttp.ErrConnectionClosed), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, net.ErrClosed), errors.Is(err, errConnAborted): // a pooled connection an h2 reset closed (abort.go)
		return pipeline.FailBroken
	}
	return pipeline.FailNoRetry
}

// idempotent reports whether the request's method is idempotent (RFC 9110
// §9.2.2), so sending it twice is harmless.
func idempotent(req *fasthttp.Request) bool { return pipeline.IdempotentMethod(req.Header.Method()) }

// dropListed removes the headers a request's Connection lines name (the
// rare path: only when pipeline.ScanHead found some) and the underscore spellings
// of sentry's headers (the app's request ID and load header included).
func dropListed(h *fasthttp.RequestHeader, raw []byte, reqID, load string) {
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		c := bytes.IndexByte(line, ':')
		if c <= 0 {
			continue
		}
		name := line[:c]
		switch pipeline.FieldKind(name) {
		case pipeline.KindFwdAlias:
			h.DelBytes(name)
		case pipeline.KindConnection:
			pipeline.ConnList(bytes.TrimRight(line[c+1:], "\r"), func(tok []byte) bool {
				if !pipeline.EqFold(tok, "close") && !pipeline.EqFold(tok, "keep-alive") && !pipeline.EqFold(tok, "upgrade") {
					h.DelBytes(tok)
				}
				return true
			})
		case pipeline.KindOther:
			_, alias := pipeline.NameMatch(name, reqID)
			_, aliasL := pipeline.NameMatch(name, load)
			if alias || aliasL {
				h.DelBytes(name)
			}
		}
	}
}

// stripHopByHop removes the hop-by-hop request headers (Connection, the
// pipeline.HopByHopNames, and Upgrade unless the request is an upgrade) and Expect
// (the 100-continue handshake is the front end's).
func stripHopByHop(h *fasthttp.RequestHeader, upgrade bool) {
	h.Del(fasthttp.HeaderConnection)
	for _, k := range pipeline.HopByHopNames {
		h.Del(k)
	}
	if !upgrade {
		h.Del(fasthttp.HeaderUpgrade)
	}
	h.Del(fasthttp.HeaderExpect)
}

// stripHopByHopResponse removes hop-by-hop response headers.
func stripHopByHopResponse(rh *fasthttp.ResponseHeader) {
	rh.ResetConnectionClose()
	for _, k := range pipeline.HopByHopNames {
		rh.Del(k)
	}
	rh.Del(fasthttp.HeaderConnection)
	rh.Del(fasthttp.HeaderUpgrade)
	rh.DelBytes(hdrAccel) // read (takeResponse), not passed on, as nginx does
}

// writeReply sets r as a fasthttp response (headers added to what resp
// holds; writeError resets it first).
func writeReply(resp *fasthttp.Response, r pipeline.Reply) {
	resp.SetStatusCode(r.Status)
	if r.GRPC != 0 {
		// gRPC's form (pipeline.Reply.GRPC): all in the head. On h2,
		// serveCtx copies it into the one HEADERS frame of a
		// Trailers-Only answer.
		resp.Header.SetContentTypeBytes(pipeline.StrGRPC)
		resp.Header.SetBytesKV(pipeline.HdrGRPCStatus, pipeline.GRPCStatusBytes(r.GRPC))
		resp.Header.SetBytesKV(pipeline.HdrGRPCMessage, r.GRPCMessage)
		var b [20]byte
		resp.Header.SetBytesKV(pipeline.HdrGRPCPushback, strconv.AppendInt(b[:0], r.Pushback, 10))
		if r.Verdict != nil {
			resp.Header.SetBytesKV(pipeline.HdrReject, r.Verdict)
		}
		resp.SetBodyRaw(nil)
		return
	}
	resp.Header.SetContentTypeBytes(pipeline.StrTextPlain)
	if r.Retry >= 0 {
		// On the stack: RetryAfterBytes allocates past its table (a
		// retry_after or a threshold period over two minutes).
		var b [20]byte
		resp.Header.SetBytesKV(pipeline.HdrRetryAfter, pipeline.AppendRetryAfter(b[:0], r.Retry))
	}
	if r.Verdict != nil {
		resp.Header.SetBytesKV(pipeline.HdrReject, r.Verdict)
	}
	resp.SetBodyRaw(r.Body)
}

// writeReject writes the prebuilt rejection: nothing reaches a backend.
func (p *Proxy) writeReject(a *pipeline.App, ctx *fasthttp.RequestCtx, d admission.Decision) {
	writeReply(&ctx.Response, pipeline.ReplyFor(a, pipeline.OutRejected, d, isGRPC(ctx)))
	p.setID(a, ctx)
}

// writeError writes a proxy-generated error. a may be nil.
func (p *Proxy) writeError(ctx *fasthttp.RequestCtx, a *pipeline.App, o pipeline.Outcome) {
	ctx.Response.Reset()
	writeReply(&ctx.Response, pipeline.ReplyFor(a, o, admission.Decision{}, isGRPC(ctx)))
	if a != nil {
		p.setID(a, ctx)
	}
}

// isGRPC tells whether ctx's request is gRPC (pipeline.IsGRPC).
func isGRPC(ctx *fasthttp.RequestCtx) bool {
	return pipeline.IsGRPC(ctx.Request.Header.ContentType())
}

// setID gives an answer sentry made itself a fresh request ID (every
// request gets one, a rejection's too; a relayed request's comes from its
// forwarding plan and overwrites it).
func (p *Proxy) setID(a *pipeline.App, ctx *fasthttp.RequestCtx) {
	var b [32]byte
	ctx.Response.Header.SetBytesV(a.ReqID, p.ids.AppendID(b[:0]))
}

// hostClient is the fasthttp front end's client for backend u
// (pipeline.Upstream.Client).
func hostClient(u *pipeline.Upstream) *fasthttp.HostClient { return u.Client.(*fasthttp.HostClient) }
