package pipeline

import (
	"net/http"
	"strconv"
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
	// Wait is the wait Retry-After says, before its rounding to seconds
	// (0 when Retry is -1); grpc-retry-pushback-ms is made from it.
	Wait time.Duration
	// GRPC is the reply's grpc-status, 0 when the reply is plain HTTP. A
	// gRPC-form reply (ReplyFor with grpc set, for the outcomes grpcCode
	// names) has Status 200, no body, no Retry-After, and the engines
	// write content-type application/grpc, grpc-status, grpc-message
	// (GRPCMessage, percent-encoded) and grpc-retry-pushback-ms
	// (Pushback) instead: in the headers on HTTP/1.1, as a Trailers-Only
	// answer (one HEADERS frame that ends the stream) on h2.
	GRPC        int
	GRPCMessage []byte // shared and never written to
	Pushback    int64  // grpc-retry-pushback-ms
}

// Field is one field of a head, as spans of bytes it does not own.
type Field struct{ Name, Value []byte }

// The names and values of sentry's own answers' fields, shared with the
// fasthttp front end's writeReply (which sets them through fasthttp).
var (
	hdrDate          = []byte("Date")
	hdrContentType   = []byte("Content-Type")
	hdrContentLength = []byte("Content-Length")
	HdrRetryAfter    = []byte("Retry-After")
	HdrReject        = []byte("X-Sentry-Reject")
	HdrGRPCStatus    = []byte("Grpc-Status")
	HdrGRPCMessage   = []byte("Grpc-Message")
	HdrGRPCPushback  = []byte("Grpc-Retry-Pushback-Ms")
	StrGRPC          = []byte("application/grpc")
	StrTextPlain     = []byte("text/plain; charset=utf-8")
	strZero          = []byte("0")
)

// AppendReplyFields appends the fields of r in the order every driver
// writes them, as fasthttp's writeReply sets them: Date (date), then
// gRPC's form (content-type, an empty body, grpc-status, grpc-message,
// grpc-retry-pushback-ms) or the plain one's content-type and length,
// Retry-After, X-Sentry-Reject, and the request ID (rid: id) when id is
// not empty. num is scratch for the numbers; f and num are returned for
// the caller to keep, and the fields are valid until it reuses them.
func AppendReplyFields(f []Field, num []byte, r *Reply, date, rid, id []byte) ([]Field, []byte) {
	f = append(f, Field{Name: hdrDate, Value: date})
	if r.GRPC != 0 {
		num = strconv.AppendInt(num[:0], r.Pushback, 10)
		f = append(f, Field{Name: hdrContentType, Value: StrGRPC}, Field{Name: hdrContentLength, Value: strZero},
			Field{Name: HdrGRPCStatus, Value: GRPCStatusBytes(r.GRPC)}, Field{Name: HdrGRPCMessage, Value: r.GRPCMessage},
			Field{Name: HdrGRPCPushback, Value: num})
	} else {
		num = strconv.AppendInt(num[:0], int64(len(r.Body)), 10)
		f = append(f, Field{Name: hdrContentType, Value: StrTextPlain}, Field{Name: hdrContentLength, Value: num})
	}
	if r.Retry >= 0 {
		var v []byte
		if r.Retry < len(smallInts) {
			v = RetryAfterBytes(r.Retry)
		} else {
			// Past the table: in num, after the length (a num that
			// grows leaves the length's bytes where they were).
			k := len(num)
			num = AppendRetryAfter(num, r.Retry)
			v = num[k:]
		}
		f = append(f, Field{Name: HdrRetryAfter, Value: v})
	}
	if r.Verdict != nil {
		f = append(f, Field{Name: HdrReject, Value: r.Verdict})
	}
	if len(id) > 0 {
		f = append(f, Field{Name: rid, Value: id})
	}
	return f, num
}

// ReplyFor returns the response for outcome o (never OutRelayed). d is the
// admission decision of a rejection; a may be nil (no app for the Host).
// grpc says the request is gRPC (IsGRPC of its content-type): the
// 503-class outcomes are then answered in gRPC's form (Reply.GRPC,
// grpc.go), with the same wait as Retry-After.
func ReplyFor(a *App, o Outcome, d admission.Decision, grpc bool) Reply {
	r := replyFor(a, o, d)
	if !grpc {
		return r
	}
	code := grpcCode(a, o, o == OutNoBackend || d.Verdict == admission.RejectNoBackend)
	if code == 0 {
		return r
	}
	msg := grpcMessages[o]
	if o == OutRejected && d.Verdict == admission.RejectNoBackend {
		msg = grpcMessages[OutNoBackend]
	}
	r.Status, r.GRPC, r.GRPCMessage, r.Pushback = http.StatusOK, code, msg, PushbackMs(r.Wait)
	r.Retry, r.Body = -1, nil
	return r
}

// replyFor is ReplyFor's HTTP answer.
// No healthy backend (OutNoBackend, or admission's own no_backend verdict)
// is a 503 with Retry-After like a rejection, but with its own body
// ("sentry: no healthy backend") and X-Sentry-Reject: no_backend, never
// the app's overload body.
func replyFor(a *App, o Outcome, d admission.Decision) Reply {
	if a != nil && (o == OutRejected || o == OutNoBackend) {
		if o == OutNoBackend {
			d = admission.Decision{Verdict: admission.RejectNoBackend}
		}
		status, wait := a.rejectStatus(d)
		body := a.Reject.Body
		if d.Verdict == admission.RejectNoBackend {
			// Named apart from overload: the client (and whoever reads
			// the reply) learns the farm is down, not busy.
			body = errorBodies[OutNoBackend]
		}
		return Reply{Status: status, Retry: retrySecs(wait), Wait: wait, Verdict: verdictBytes[d.Verdict], Body: body}
	}
	if o == OutTerminated {
		return a.terminatedReply()
	}
	r := Reply{Status: StatusOf(o), Retry: -1, Body: errorBodies[o]}
	if o == OutBackendBusy || o == OutBufferFull {
		r.Retry, r.Wait = 1, time.Second
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

// rejectStatus returns the status and the wait of a rejection: the
// predicted drain (d.RetryAfter) when admission made one, else the app's
// reject.retry_after. Retry-After is it in seconds rounded up
// (retrySecs), grpc-retry-pushback-ms in milliseconds rounded up.
func (a *App) rejectStatus(d admission.Decision) (status int, wait time.Duration) {
	wait = time.Duration(a.Reject.RetryAfter) * time.Second
	if d.RetryAfter > 0 {
		wait = d.RetryAfter
	}
	if d.Verdict == admission.RejectNoBackend {
		return http.StatusServiceUnavailable, wait // not the client's rate: never 429
	}
	return a.Reject.Status, wait
}

// retrySecs is a wait in Retry-After's whole seconds, rounded up.
func retrySecs(wait time.Duration) int {
	return int((wait + time.Second - 1) / time.Second)
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
