package proxy

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestTryAgain pins the one retry policy both engines use.
func TestTryAgain(t *testing.T) {
	for _, tc := range []struct {
		f          failure
		replayable bool
		attempts   int
		responded  bool
		want       bool
	}{
		{failConnect, false, 1, false, true}, // nothing was sent: even a POST
		{failConnect, true, 2, false, true},
		{failConnect, true, maxAttempts, false, false}, // the budget is spent
		{failBroken, true, 1, false, true},             // nginx's proxy_next_upstream error
		{failBroken, false, 1, false, false},           // not idempotent, or a streamed body
		{failBroken, true, 1, true, false},             // part of a response came back
		{failBroken, true, maxAttempts, false, false},
		{failNoRetry, true, 1, false, false}, // the explicit no-retry
	} {
		if got := tryAgain(tc.f, tc.replayable, tc.attempts, tc.responded); got != tc.want {
			t.Errorf("tryAgain(%d, replayable %v, attempts %d, responded %v) = %v, want %v", tc.f, tc.replayable, tc.attempts, tc.responded, got, tc.want)
		}
	}
}

// TestFailureOf: fasthttp's errors map to the policy's kinds; a timeout is
// never retried (the backend may still be working on the request).
func TestFailureOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want failure
	}{
		{&dialError{err: syscall.ECONNREFUSED}, failConnect},
		{&dialError{err: fasthttp.ErrDialTimeout}, failConnect},
		{fasthttp.ErrConnectionClosed, failBroken},
		{io.EOF, failBroken},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), failBroken},
		{syscall.EPIPE, failBroken},
		{fasthttp.ErrTimeout, failNoRetry},
		{errors.New("something else"), failNoRetry},
	} {
		if got := failureOf(tc.err); got != tc.want {
			t.Errorf("failureOf(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
