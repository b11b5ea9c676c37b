package proxy

import (
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// reply is a response sentry makes itself: the prebuilt rejection (503 or
// 429 with Retry-After and X-Sentry-Reject) or an error from the failure
// table. replyFor decides it once for both engines; writeReply (fasthttp,
// h2) and appendReply (the event loops' raw bytes) only serialise it.
type reply struct {
	status  int
	retry   int    // Retry-After seconds; -1: none
	verdict []byte // X-Sentry-Reject; nil: none
	body    []byte // shared and never written to
}

// replyFor returns the response for outcome o (never pipeline.OutRelayed). d is the
// admission decision of a rejection; a may be nil (no app for the Host).
func replyFor(a *app, o pipeline.Outcome, d admission.Decision) reply {
	if a != nil && (o == pipeline.OutRejected || o == pipeline.OutNoBackend) {
		if o == pipeline.OutNoBackend {
			d = admission.Decision{Verdict: admission.RejectNoBackend}
		}
		status, secs := a.rejectStatus(d)
		return reply{status: status, retry: secs, verdict: verdictBytes[d.Verdict], body: a.reject.body}
	}
	r := reply{status: pipeline.StatusOf(o), retry: -1, body: errorBodies[o]}
	if o == pipeline.OutBackendBusy || o == pipeline.OutBufferFull {
		r.retry = 1
	}
	return r
}

// errorBodies holds pipeline.ErrorBody's texts as bytes, so no reply converts one.
var errorBodies = func() (t [pipeline.OutMethodNotAllowed + 1][]byte) {
	for o := range t {
		t[o] = []byte(pipeline.ErrorBody(pipeline.Outcome(o)))
	}
	return t
}()

// parseErrorBody is the body of an answer to a head fasthttp could not
// read (handleError): 400, 408, 413 or 431.
func parseErrorBody(status int) []byte {
	switch status {
	case fasthttp.StatusRequestHeaderFieldsTooLarge:
		return bodyHeadTooLarge
	case fasthttp.StatusRequestEntityTooLarge:
		return errorBodies[pipeline.OutBodyTooLarge]
	case fasthttp.StatusRequestTimeout:
		return bodyRequestTimeout
	}
	return errorBodies[pipeline.OutBadRequest]
}

var (
	bodyHeadTooLarge   = []byte("sentry: request header fields too large\n")
	bodyRequestTimeout = []byte("sentry: request timeout\n")
)

// writeReply sets r as a fasthttp response (headers added to what resp
// holds; writeError resets it first).
func writeReply(resp *fasthttp.Response, r reply) {
	resp.SetStatusCode(r.status)
	resp.Header.SetContentTypeBytes(strTextPlain)
	if r.retry >= 0 {
		resp.Header.SetBytesKV(hdrRetryAfter, retryAfterBytes(r.retry))
	}
	if r.verdict != nil {
		resp.Header.SetBytesKV(hdrReject, r.verdict)
	}
	resp.SetBodyRaw(r.body)
}

// appendReply appends r as a raw HTTP/1.1 response: the same status line,
// headers and body fasthttp writes for writeReply, plus the request ID
// (when id is not empty), Connection: close when closing, and no body for
// a HEAD request (its Content-Length still says the length).
func appendReply(out []byte, r reply, date []byte, reqID string, id []byte, closing, head bool) []byte {
	out = append(out, "HTTP/1.1 "...)
	out = strconv.AppendInt(out, int64(r.status), 10)
	out = append(out, ' ')
	out = append(out, fasthttp.StatusMessage(r.status)...)
	out = append(out, "\r\nDate: "...)
	out = append(out, date...)
	out = append(out, "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: "...)
	out = strconv.AppendInt(out, int64(len(r.body)), 10)
	if r.retry >= 0 {
		out = append(append(out, "\r\nRetry-After: "...), retryAfterBytes(r.retry)...)
	}
	if r.verdict != nil {
		out = append(append(out, "\r\nX-Sentry-Reject: "...), r.verdict...)
	}
	if len(id) > 0 {
		out = append(append(append(append(out, "\r\n"...), reqID...), ": "...), id...)
	}
	if closing {
		out = append(out, "\r\nConnection: close"...)
	}
	out = append(out, "\r\n\r\n"...)
	if !head {
		out = append(out, r.body...)
	}
	return out
}

// writeReject writes the prebuilt rejection: nothing reaches a backend.
func (a *app) writeReject(ctx *fasthttp.RequestCtx, d admission.Decision) {
	writeReply(&ctx.Response, replyFor(a, pipeline.OutRejected, d))
}

// rejectStatus returns the status and Retry-After seconds of a rejection.
func (a *app) rejectStatus(d admission.Decision) (status, secs int) {
	secs = a.reject.retryAfter
	if d.RetryAfter > 0 {
		secs = int((d.RetryAfter + time.Second - 1) / time.Second)
	}
	if d.Verdict == admission.RejectNoBackend {
		return fasthttp.StatusServiceUnavailable, secs // not the client's rate: never 429
	}
	return a.reject.status, secs
}

// writeError writes a proxy-generated error. a may be nil.
func (p *Proxy) writeError(ctx *fasthttp.RequestCtx, a *app, o pipeline.Outcome) {
	ctx.Response.Reset()
	writeReply(&ctx.Response, replyFor(a, o, admission.Decision{}))
}

// retryAfterBytes returns the decimal bytes for small second counts without
// allocating.
func retryAfterBytes(secs int) []byte {
	if secs >= 0 && secs < len(smallInts) {
		return smallInts[secs]
	}
	return pipeline.RetryAfterValue(secs)
}

var smallInts = func() [121][]byte {
	var t [121][]byte
	for i := range t {
		t[i] = pipeline.RetryAfterValue(i)
	}
	t[0] = t[1]
	return t
}()

// verdictBytes holds each verdict's name for the X-Sentry-Reject header.
var verdictBytes = func() (t [16][]byte) {
	for _, v := range admission.Verdicts() {
		t[v] = []byte(v.String())
	}
	return t
}()
