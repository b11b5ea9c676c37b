package load

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RejectHeader marks sentry's own reject responses; its value is the
// reason. A 503 or 429 carrying it counts as rejected, not failed.
const RejectHeader = "X-Sentry-Reject"

// ErrKind says why a request got no (complete) response.
type ErrKind string

// The error kinds. The empty kind means a response was received.
const (
	// ErrOverflow: the arrival found MaxInFlight requests in flight and
	// was not sent (generator overflow: the generator, not the target,
	// was the limit).
	ErrOverflow ErrKind = "overflow"
	// ErrTimeout: no response within Config.Timeout.
	ErrTimeout ErrKind = "timeout"
	// ErrRefused: connection refused.
	ErrRefused ErrKind = "refused"
	// ErrReset: connection reset or broken pipe.
	ErrReset ErrKind = "reset"
	// ErrEOF: the server closed the connection without a (full) response.
	ErrEOF ErrKind = "eof"
	// ErrCanceled: the run ended (MaxDuration or the caller's context)
	// while the request was in flight.
	ErrCanceled ErrKind = "canceled"
	// ErrOther: anything else (DNS, TLS, malformed response, …).
	ErrOther ErrKind = "other"
)

// Result is one request (or one overflowed arrival).
type Result struct {
	// Class is the index in Config.Classes.
	Class int
	// Path is the index in the class's Request.Paths.
	Path int
	// Start is the arrival time since the run started: the scheduled time
	// for open loop, the send time for closed loop.
	Start time.Duration
	// Lag is how late the request was sent after Start (generator
	// scheduling delay; 0 for closed loop).
	Lag time.Duration
	// Latency is from send to the last body byte, or to the error.
	Latency time.Duration
	// Status is the HTTP status; 0 when Err is set.
	Status int
	// Bytes is the response body length read.
	Bytes int64
	// Rejected: a 503 or 429 with RejectHeader, i.e. refused by sentry.
	Rejected bool
	// Reason is RejectHeader's value when Rejected.
	Reason string
	// RetryAfter is the parsed Retry-After of a 503 or 429; -1 when the
	// header is absent or unparseable (and for other statuses).
	RetryAfter time.Duration
	// Err is why there is no response; empty when there is one.
	Err ErrKind
}

// Sent is when the request was actually sent, since the run started.
func (r *Result) Sent() time.Duration { return r.Start + r.Lag }

// End is when the request finished, since the run started.
func (r *Result) End() time.Duration { return r.Start + r.Lag + r.Latency }

// Completed: a response below 400 that is not a rejection.
func (r *Result) Completed() bool {
	return r.Err == "" && !r.Rejected && r.Status > 0 && r.Status < 400
}

// Failed: sent but neither completed nor rejected (connection errors,
// timeouts, 4xx/5xx that sentry did not mark). Overflow is not a failure
// of the target and is counted apart.
func (r *Result) Failed() bool {
	if r.Err == ErrOverflow {
		return false
	}
	return r.Err != "" || (!r.Rejected && r.Status >= 400)
}

// Good: completed with a 2xx within sla.
func (r *Result) Good(sla time.Duration) bool {
	return r.Completed() && r.Status < 300 && r.Status >= 200 && r.Latency <= sla
}

// admitted: counts in the admitted latency percentiles. These are the
// non-rejected requests that got a response, plus timeouts at their
// timeout (so a tail of timeouts shows, as a lower bound).
func (r *Result) admitted() bool {
	return !r.Rejected && (r.Status > 0 || r.Err == ErrTimeout)
}

// classify maps a request error to a kind. runErr is the run context's
// error: set when the run itself was cut short.
func classify(err error, runErr error) ErrKind {
	var ne net.Error
	switch {
	case err == nil:
		return ""
	case runErr != nil:
		return ErrCanceled
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return ErrTimeout
	case errors.Is(err, context.Canceled):
		return ErrCanceled
	case errors.Is(err, syscall.ECONNREFUSED):
		return ErrRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		return ErrReset
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return ErrEOF
	}
	return ErrOther
}

// parseRetryAfter reads delta-seconds or an HTTP date; -1 when absent or
// unparseable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return -1
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 || n > 1<<31 {
			return -1
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return -1
}
