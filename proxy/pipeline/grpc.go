package pipeline

import (
	"strconv"
	"time"
)

// grpc.go: how sentry answers a gRPC request itself (doc.go, "gRPC").

// IsGRPC reports whether a Content-Type value marks a gRPC request:
// "application/grpc", alone or followed by '+' (a codec: +proto, +json)
// or ';' (parameters), as the gRPC HTTP/2 protocol spells it. The media
// type is compared without regard to ASCII case (RFC 9110 §8.3.1), and
// spaces or tabs around the value are ignored. "application/grpc-web" is
// not gRPC: grpc-web carries its trailers in the body, which a
// Trailers-Only answer cannot give it, so it gets sentry's plain answer.
func IsGRPC(ct []byte) bool {
	for len(ct) > 0 && (ct[0] == ' ' || ct[0] == '\t') {
		ct = ct[1:]
	}
	for len(ct) > 0 && (ct[len(ct)-1] == ' ' || ct[len(ct)-1] == '\t') {
		ct = ct[:len(ct)-1]
	}
	const base = "application/grpc"
	if len(ct) < len(base) || !EqFoldString(ct[:len(base)], base) {
		return false
	}
	if len(ct) == len(base) {
		return true
	}
	c := ct[len(base)]
	return c == '+' || c == ';'
}

// grpcCode is the grpc-status of a gRPC-form reply to outcome o, or 0
// when o is not answered in gRPC form. The outcomes that are 503-class --
// sentry's overload or its farm's, retryable by their nature -- are:
// OutRejected with the app's reject.grpc_status (14 when the verdict is
// no_backend: not the client's rate, as it is never 429); OutNoBackend,
// OutBackendBusy, OutBufferFull and OutTerminated with 14, UNAVAILABLE.
// Every other outcome keeps its HTTP status, which a gRPC client maps by
// gRPC's HTTP-to-status table (502 and 504 to UNAVAILABLE, 404 to
// UNIMPLEMENTED, 400 to INTERNAL, ...).
func grpcCode(a *App, o Outcome, noBackend bool) int {
	switch o {
	case OutRejected:
		if noBackend || a == nil || a.Reject.GRPCStatus == 0 {
			return grpcUnavailable
		}
		return a.Reject.GRPCStatus
	case OutNoBackend, OutBackendBusy, OutBufferFull, OutTerminated:
		return grpcUnavailable
	}
	return 0
}

const grpcUnavailable = 14

// PushbackMs returns the grpc-retry-pushback-ms of a wait: the same wait
// Retry-After says, in whole milliseconds rounded up (never 0: 0 would
// ask for an immediate retry, which no overload answer means).
func PushbackMs(wait time.Duration) int64 {
	ms := int64((wait + time.Millisecond - 1) / time.Millisecond)
	return max(ms, 1)
}

// AppendGRPCMessage appends s percent-encoded as the grpc-message header
// wants it: every byte outside printable ASCII (0x20-0x7E), and '%'
// itself, as %XX with upper-case hex digits.
func AppendGRPCMessage(dst []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '%' {
			dst = append(dst, '%', hex[c>>4], hex[c&15])
			continue
		}
		dst = append(dst, c)
	}
	return dst
}

// grpcMessages holds each outcome's grpc-message (its error body without
// the trailing newline, percent-encoded), built once. A rejection's is
// "sentry: overloaded, retry later": the app's reject.body is for HTTP
// clients and may be anything (HTML), so it is not copied into a header.
var grpcMessages = func() (t [NumOutcomes][]byte) {
	for o := range t {
		s := ErrorBody(Outcome(o))
		if Outcome(o) == OutRejected {
			s = "sentry: overloaded, retry later"
		}
		for len(s) > 0 && s[len(s)-1] == '\n' {
			s = s[:len(s)-1]
		}
		t[o] = AppendGRPCMessage(nil, s)
	}
	return t
}()

// GRPCStatusBytes returns the decimal bytes of a grpc-status code.
func GRPCStatusBytes(code int) []byte {
	if code >= 0 && code < len(smallInts) && code != 0 {
		return smallInts[code]
	}
	return strconv.AppendInt(nil, int64(code), 10)
}
