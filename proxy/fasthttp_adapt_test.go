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

// TestWriteReplyAllocs: writing a prebuilt reply into a fasthttp response
// that has served one before allocates nothing, whatever its form: the
// rejection with a Retry-After in or past RetryAfterBytes' table (a
// retry_after of five minutes), the gRPC form with its pushback, an error
// without Retry-After.
func TestWriteReplyAllocs(t *testing.T) {
	verdict := []byte("threshold")
	for _, tc := range []struct {
		name  string
		r     pipeline.Reply
		field string
		want  string
	}{
		{"reject", pipeline.Reply{Status: 503, Retry: 2, Verdict: verdict, Body: []byte("busy")}, "Retry-After", "2"},
		{"reject long wait", pipeline.Reply{Status: 429, Retry: 300, Verdict: verdict, Body: []byte("busy")}, "Retry-After", "300"},
		{"reject no wait", pipeline.Reply{Status: 503, Retry: 0, Verdict: verdict, Body: []byte("busy")}, "Retry-After", "1"},
		{"grpc", pipeline.Reply{Status: 200, Retry: -1, Verdict: verdict, GRPC: 14, GRPCMessage: []byte("busy"), Pushback: 300000}, "Grpc-Retry-Pushback-Ms", "300000"},
		{"error", pipeline.Reply{Status: 502, Retry: -1, Body: []byte("bad gateway")}, "Content-Type", "text/plain; charset=utf-8"},
	} {
		var resp fasthttp.Response
		write := func() {
			resp.Reset()
			writeReply(&resp, tc.r)
		}
		write()
		if got := string(resp.Header.Peek(tc.field)); resp.StatusCode() != tc.r.Status || got != tc.want {
			t.Errorf("%s: status %d, %s %q; want %d, %q", tc.name, resp.StatusCode(), tc.field, got, tc.r.Status, tc.want)
		}
		if n := testing.AllocsPerRun(100, write); n != 0 {
			t.Errorf("%s: %v allocations per reply, want 0", tc.name, n)
		}
	}
}
