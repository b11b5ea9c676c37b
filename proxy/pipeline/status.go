package pipeline

import (
	"strconv"

	"net/http"
)

// Outcome is how an exchange ended. It is the single place failures map to
// statuses: every error path in the proxy goes through
// classify() and writes the status this table gives.
type Outcome uint8

const (
	OutRelayed          Outcome = iota // backend answered; status is the backend's
	OutRejected                        // admission rejected: 503/429 + Retry-After
	OutNoBackend                       // no healthy backend: 503
	OutBackendFailed                   // connect failed, reset, bad response: 502
	OutBackendTimeout                  // response (idle) timeout: 504
	OutBackendBusy                     // backend connection limit reached: 503
	OutBadRequest                      // malformed or smuggling-shaped request: 400
	OutNoApp                           // no app for this Host: 404
	OutClientGone                      // client left while waiting for admission: nothing sent (499 in logs)
	OutBodyTooLarge                    // Content-Length over the app's max_body_bytes: 413
	OutLengthRequired                  // chunked body to an app with max_body_bytes: 411
	OutBodyTimeout                     // request body too slow (body_timeout, body_min_rate): 408
	OutBufferFull                      // request_buffer_total reached: 503 + Retry-After
	OutMethodNotAllowed                // CONNECT: sentry is not a forward proxy: 405
	OutTerminated                      // cut by selective early termination before any response byte: 503 + Retry-After (term.go)
	NumOutcomes
)

// StatusOf maps an outcome to its HTTP status.
func StatusOf(o Outcome) int {
	switch o {
	case OutNoBackend, OutBackendBusy, OutBufferFull, OutTerminated:
		return http.StatusServiceUnavailable
	case OutBodyTimeout:
		return http.StatusRequestTimeout
	case OutBackendFailed:
		return http.StatusBadGateway
	case OutBackendTimeout:
		return http.StatusGatewayTimeout
	case OutBadRequest:
		return http.StatusBadRequest
	case OutNoApp:
		return http.StatusNotFound
	case OutClientGone:
		return 499
	case OutBodyTooLarge:
		return http.StatusRequestEntityTooLarge
	case OutLengthRequired:
		return http.StatusLengthRequired
	case OutMethodNotAllowed:
		return http.StatusMethodNotAllowed
	}
	return http.StatusOK
}

// CountsAsFailure tells passive health whether an outcome is the backend's
// fault. A busy backend (our own connection cap) is not.
func CountsAsFailure(o Outcome) bool {
	return o == OutBackendFailed || o == OutBackendTimeout
}

// ErrorBody returns a short, fixed text for an error status.
func ErrorBody(o Outcome) string {
	switch o {
	case OutNoBackend:
		return "sentry: no healthy backend\n"
	case OutBackendBusy:
		return "sentry: backend connection limit reached\n"
	case OutBackendFailed:
		return "sentry: bad gateway\n"
	case OutBackendTimeout:
		return "sentry: gateway timeout\n"
	case OutBadRequest:
		return "sentry: bad request\n"
	case OutNoApp:
		return "sentry: no app for this host\n"
	case OutBodyTooLarge:
		return "sentry: request body larger than this app accepts\n"
	case OutLengthRequired:
		return "sentry: this app limits body size; send Content-Length instead of a chunked body\n"
	case OutMethodNotAllowed:
		return "sentry: method not allowed\n"
	case OutBodyTimeout:
		return "sentry: request body too slow\n"
	case OutBufferFull:
		return "sentry: too many request bodies in progress, retry later\n"
	case OutTerminated:
		return "sentry: request ran past this class's termination threshold, retry later\n"
	}
	return ""
}

// CodeClass returns "1xx".."5xx" for a status, as a metric label value.
func CodeClass(status int) int {
	c := status / 100
	if c < 1 || c > 5 {
		return 0
	}
	return c
}

var CodeClassNames = [6]string{"other", "1xx", "2xx", "3xx", "4xx", "5xx"}

// RetryAfterValue is Retry-After's value for secs seconds, in new bytes
// (at least 1).
func RetryAfterValue(secs int) []byte { return AppendRetryAfter(nil, secs) }

// AppendRetryAfter appends Retry-After's value for secs seconds (at least
// 1) to dst: what a writer with scratch space uses for a wait past
// RetryAfterBytes' table, so that no reply allocates.
func AppendRetryAfter(dst []byte, secs int) []byte {
	if secs < 1 {
		secs = 1
	}
	return strconv.AppendInt(dst, int64(secs), 10)
}

// OutcomeReason is each outcome's reason, as the metrics
// (sentry_proxy_errors_total) and the access log name it; empty for an
// answer that is not an error (relayed, or rejected by admission).
var OutcomeReason = [...]string{
	OutRelayed:          "",
	OutRejected:         "",
	OutNoBackend:        "no_backend",
	OutBackendFailed:    "backend_failed",
	OutBackendTimeout:   "backend_timeout",
	OutBackendBusy:      "backend_busy",
	OutBadRequest:       "bad_request",
	OutNoApp:            "no_app",
	OutClientGone:       "client_gone",
	OutBodyTooLarge:     "body_too_large",
	OutLengthRequired:   "length_required",
	OutBodyTimeout:      "body_timeout",
	OutBufferFull:       "buffer_full",
	OutMethodNotAllowed: "method_not_allowed",
	OutTerminated:       "terminated",
}
