package proxy

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/valyala/fasthttp"
)

// TestFailureOf: fasthttp's errors map to the policy's kinds; a timeout is
// never retried (the backend may still be working on the request).
func TestFailureOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want pipeline.Failure
	}{
		{&dialError{err: syscall.ECONNREFUSED}, pipeline.FailConnect},
		{&dialError{err: fasthttp.ErrDialTimeout}, pipeline.FailConnect},
		{fasthttp.ErrConnectionClosed, pipeline.FailBroken},
		{io.EOF, pipeline.FailBroken},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), pipeline.FailBroken},
		{syscall.EPIPE, pipeline.FailBroken},
		{fasthttp.ErrTimeout, pipeline.FailNoRetry},
		{errors.New("something else"), pipeline.FailNoRetry},
	} {
		if got := failureOf(tc.err); got != tc.want {
			t.Errorf("failureOf(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
