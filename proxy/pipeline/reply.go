package pipeline

import (
	"net/http"
	"time"

	"github.com/sentry-proxy/sentry/admission"
)

// Reply is a response sentry makes itself: the prebuilt rejection (503 or
// 429 with Retry-After and X-Sentry-Reject) or an error from the failure
// table. ReplyFor decides it once for both engines; writeReply (fasthttp,
// h2) and AppendReply (the event loops' raw bytes) only serialise it.
type Reply struct {
	Status  int
	Retry   int    // Retry-After seconds; -1: none
	Verdict []byte // X-Sentry-Reject; nil: none
	Body    []byte // shared and never written to
}

// ReplyFor returns the response for outcome o (never OutRelayed). d is the
// admission decision of a rejection; a may be nil (no app for the Host).
// No healthy backend (OutNoBackend, or admission's own no_backend verdict)
// is a 503 with Retry-After like a rejection, but with its own body
// ("sentry: no healthy backend") and X-Sentry-Reject: no_backend, never
// the app's overload body.
func ReplyFor(a *App, o Outcome, d admission.Decision) Reply {
	if a != nil && (o == OutRejected || o == OutNoBackend) {
		if o == OutNoBackend {
			d = admission.Decision{Verdict: admission.RejectNoBackend}
		}
		status, secs := a.rejectStatus(d)
		body := a.Reject.Body
		if d.Verdict == admission.RejectNoBackend {
			// Named apart from overload: the client (and whoever reads
			// the reply) learns the farm is down, not busy.
			body = errorBodies[OutNoBackend]
		}
		return Reply{Status: status, Retry: secs, Verdict: verdictBytes[d.Verdict], Body: body}
	}
	if o == OutTerminated {
		return a.terminatedReply()
	}
	r := Reply{Status: StatusOf(o), Retry: -1, Body: errorBodies[o]}
	if o == OutBackendBusy || o == OutBufferFull {
		r.Retry = 1
	}
	return r
}

// errorBodies holds ErrorBody's texts as bytes, so no reply converts one.
var errorBodies = func() (t [NumOutcomes][]byte) {
	for o := range t {
		t[o] = []byte(ErrorBody(Outcome(o)))
	}
	return t
}()

// ParseErrorBody is the body of an answer to a head fasthttp could not
// read (handleError): 400, 408, 413 or 431.
func ParseErrorBody(status int) []byte {
	switch status {
	case http.StatusRequestHeaderFieldsTooLarge:
		return bodyHeadTooLarge
	case http.StatusRequestEntityTooLarge:
		return errorBodies[OutBodyTooLarge]
	case http.StatusRequestTimeout:
		return bodyRequestTimeout
	}
	return errorBodies[OutBadRequest]
}

var (
	bodyHeadTooLarge   = []byte("sentry: request header fields too large\n")
	bodyRequestTimeout = []byte("sentry: request timeout\n")
)

// rejectStatus returns the status and Retry-After seconds of a rejection.
func (a *App) rejectStatus(d admission.Decision) (status, secs int) {
	secs = a.Reject.RetryAfter
	if d.RetryAfter > 0 {
		secs = int((d.RetryAfter + time.Second - 1) / time.Second)
	}
	if d.Verdict == admission.RejectNoBackend {
		return http.StatusServiceUnavailable, secs // not the client's rate: never 429
	}
	return a.Reject.Status, secs
}

// RetryAfterBytes returns the decimal bytes for small second counts without
// allocating.
func RetryAfterBytes(secs int) []byte {
	if secs >= 0 && secs < len(smallInts) {
		return smallInts[secs]
	}
	return RetryAfterValue(secs)
}

var smallInts = func() [121][]byte {
	var t [121][]byte
	for i := range t {
		t[i] = RetryAfterValue(i)
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
