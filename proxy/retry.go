package proxy

import (
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/valyala/fasthttp"
)

// failure is the kind of a failed attempt to relay a request to a backend:
// what the retry policy keys on. Both front ends map what they saw to one
// of these and ask tryAgain.
type failure uint8

const (
	// failConnect: the connect to the backend failed (refused, timed
	// out). Nothing was sent, so another backend may always be tried.
	failConnect failure = iota
	// failBroken: the connection broke (reset, closed, EOF) after the
	// request was sent, or while it was, before any response byte.
	failBroken
	// failNoRetry: a failure after which the request must not be sent
	// again whatever else holds: a response that cannot be relayed (an
	// unsure or oversized head, a 101 to a request without Upgrade, an
	// unknown transfer coding), a timeout (the backend may still be
	// working on the request), or any error not known to be one of the
	// above. It is the explicit "do not retry" of the policy.
	failNoRetry
)

// maxAttempts bounds the attempts to relay one request (the first
// included), whatever their failures were: one budget for both engines.
const maxAttempts = 3

// tryAgain is the one retry policy of both front ends (in the shape of
// Caddy's reverse proxy tryAgain): after a failed attempt of kind f, the
// attempts-th for this request, it tells whether to send the request to a
// backend again.
//
//   - A failed connect is retried: nothing was sent.
//   - A connection that broke before any response byte is retried when
//     the request may be sent twice (replayable: an idempotent method,
//     RFC 9110 §9.2.2, and a body sentry holds whole rather than streams),
//     as nginx's default proxy_next_upstream "error" does, and only when
//     nothing of a response came back (responded false).
//   - failNoRetry never is.
//
// Every retry counts against maxAttempts.
func tryAgain(f failure, replayable bool, attempts int, responded bool) bool {
	if attempts >= maxAttempts {
		return false
	}
	switch f {
	case failConnect:
		return true
	case failBroken:
		return replayable && !responded
	}
	return false
}

// failureOf maps an error of fasthttp's HostClient to its failure kind.
func failureOf(err error) failure {
	switch {
	case isDialError(err):
		return failConnect
	case errors.Is(err, fasthttp.ErrConnectionClosed), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, net.ErrClosed): // a pooled connection an h2 reset closed (abort.go)
		return failBroken
	}
	return failNoRetry
}

// replayable reports whether req may be sent twice (tryAgain): its
// method is idempotent and its body, if any, is held whole, not streamed.
func replayable(req *fasthttp.Request) bool { return !req.IsBodyStream() && idempotent(req) }

// idempotent reports whether the request's method is idempotent (RFC 9110
// §9.2.2), so sending it twice is harmless.
func idempotent(req *fasthttp.Request) bool { return idempotentMethod(req.Header.Method()) }

// idempotentMethod is idempotent for a method name (both front ends).
func idempotentMethod(m []byte) bool {
	switch string(m) {
	case fasthttp.MethodGet, fasthttp.MethodHead, fasthttp.MethodOptions, fasthttp.MethodTrace, fasthttp.MethodPut, fasthttp.MethodDelete:
		return true
	}
	return false
}
