package proxy

import (
	"errors"
	"net"
	"strconv"

	"github.com/valyala/fasthttp"
)

// outcome is how an exchange ended. It is the single place failures map to
// statuses: every error path in the proxy goes through
// classify() and writes the status this table gives.
type outcome uint8

const (
	outRelayed          outcome = iota // backend answered; status is the backend's
	outRejected                        // admission rejected: 503/429 + Retry-After
	outNoBackend                       // no healthy backend: 503
	outBackendFailed                   // connect failed, reset, bad response: 502
	outBackendTimeout                  // response (idle) timeout: 504
	outBackendBusy                     // backend connection limit reached: 503
	outBadRequest                      // malformed or smuggling-shaped request: 400
	outNoApp                           // no app for this Host: 404
	outClientGone                      // client left while waiting for admission: nothing sent (499 in logs)
	outBodyTooLarge                    // Content-Length over the app's max_body_bytes: 413
	outLengthRequired                  // chunked body to an app with max_body_bytes: 411
	outBodyTimeout                     // request body too slow (body_timeout, body_min_rate): 408
	outBufferFull                      // request_buffer_total reached: 503 + Retry-After
	outMethodNotAllowed                // CONNECT: sentry is not a forward proxy: 405
	numOutcomes
)

// statusOf maps an outcome to its HTTP status.
func statusOf(o outcome) int {
	switch o {
	case outNoBackend, outBackendBusy, outBufferFull:
		return fasthttp.StatusServiceUnavailable
	case outBodyTimeout:
		return fasthttp.StatusRequestTimeout
	case outBackendFailed:
		return fasthttp.StatusBadGateway
	case outBackendTimeout:
		return fasthttp.StatusGatewayTimeout
	case outBadRequest:
		return fasthttp.StatusBadRequest
	case outNoApp:
		return fasthttp.StatusNotFound
	case outClientGone:
		return 499
	case outBodyTooLarge:
		return fasthttp.StatusRequestEntityTooLarge
	case outLengthRequired:
		return fasthttp.StatusLengthRequired
	case outMethodNotAllowed:
		return fasthttp.StatusMethodNotAllowed
	}
	return fasthttp.StatusOK
}

// relayError classifies an error returned by the backend client.
func relayError(err error) outcome {
	switch {
	case errors.Is(err, fasthttp.ErrNoFreeConns), errors.Is(err, fasthttp.ErrConnPoolStrategyNotImpl):
		return outBackendBusy
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, fasthttp.ErrDialTimeout):
		if isDialError(err) {
			return outBackendFailed
		}
		return outBackendTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		if isDialError(err) {
			return outBackendFailed // connect timeout: 502, the backend never answered
		}
		return outBackendTimeout
	}
	return outBackendFailed
}

// countsAsFailure tells passive health whether an outcome is the backend's
// fault. A busy backend (our own connection cap) is not.
func countsAsFailure(o outcome) bool {
	return o == outBackendFailed || o == outBackendTimeout
}

// errorBody returns a short, fixed text for an error status.
func errorBody(o outcome) string {
	switch o {
	case outNoBackend:
		return "sentry: no healthy backend\n"
	case outBackendBusy:
		return "sentry: backend connection limit reached\n"
	case outBackendFailed:
		return "sentry: bad gateway\n"
	case outBackendTimeout:
		return "sentry: gateway timeout\n"
	case outBadRequest:
		return "sentry: bad request\n"
	case outNoApp:
		return "sentry: no app for this host\n"
	case outBodyTooLarge:
		return "sentry: request body larger than this app accepts\n"
	case outLengthRequired:
		return "sentry: this app limits body size; send Content-Length instead of a chunked body\n"
	case outMethodNotAllowed:
		return "sentry: method not allowed\n"
	case outBodyTimeout:
		return "sentry: request body too slow\n"
	case outBufferFull:
		return "sentry: too many request bodies in progress, retry later\n"
	}
	return ""
}

// codeClass returns "1xx".."5xx" for a status, as a metric label value.
func codeClass(status int) int {
	c := status / 100
	if c < 1 || c > 5 {
		return 0
	}
	return c
}

var codeClassNames = [6]string{"other", "1xx", "2xx", "3xx", "4xx", "5xx"}

func retryAfterValue(secs int) []byte {
	if secs < 1 {
		secs = 1
	}
	return strconv.AppendInt(nil, int64(secs), 10)
}
