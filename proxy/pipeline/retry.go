package pipeline

import (
	"net/http"
)

// Failure is the kind of a failed attempt to relay a request to a backend:
// what the retry policy keys on. Both front ends map what they saw to one
// of these and ask TryAgain.
type Failure uint8

const (
	// FailConnect: the connect to the backend failed (refused, timed
	// out). Nothing was sent, so another backend may always be tried.
	FailConnect Failure = iota
	// FailBroken: the connection broke (reset, closed, EOF) after the
	// request was sent, or while it was, before any response byte.
	FailBroken
	// FailNoRetry: a failure after which the request must not be sent
	// again whatever else holds: a response that cannot be relayed (an
	// unsure or oversized head, a 101 to a request without Upgrade, an
	// unknown transfer coding), a timeout (the backend may still be
	// working on the request), or any error not known to be one of the
	// above. It is the explicit "do not retry" of the policy.
	FailNoRetry
)

// MaxAttempts bounds the attempts to relay one request (the first
// included), whatever their failures were: one budget for both engines.
// A reused connection found closed before any response does not count
// (MaxStaleRetries).
const MaxAttempts = 3

// MaxStaleRetries bounds, per request, the retries that do not count as
// attempts: a reused keep-alive connection found closed before any of
// the response came (the backend closed it idle, or restarted, or an h2
// stream reset closed it: not a failure of the backend's), replayable
// requests only. Without it, a backend restarted under load fails
// requests that were never in flight there: least-loaded picks it again
// (its failed exchanges leave it the least loaded) and each stale
// connection of its pool spends an attempt.
const MaxStaleRetries = 16

// TryAgain is the one retry policy of both front ends (in the shape of
// Caddy's reverse proxy TryAgain): after a failed attempt of kind f, the
// attempts-th for this request, it tells whether to send the request to a
// backend again.
//
//   - A failed connect is retried: nothing was sent.
//   - A connection that broke before any response byte is retried when
//     the request may be sent twice (replayable: an idempotent method,
//     RFC 9110 §9.2.2, and a body sentry holds whole rather than streams),
//     as nginx's default proxy_next_upstream "error" does, and only when
//     nothing of a response came back (responded false).
//   - FailNoRetry never is.
//
// Every retry counts against MaxAttempts.
func TryAgain(f Failure, replayable bool, attempts int, responded bool) bool {
	if attempts >= MaxAttempts {
		return false
	}
	switch f {
	case FailConnect:
		return true
	case FailBroken:
		return replayable && !responded
	}
	return false
}

// IdempotentMethod is idempotent for a method name (both front ends).
func IdempotentMethod(m []byte) bool {
	switch string(m) {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}
