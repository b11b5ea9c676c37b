package main

import (
	"net"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/internal/grpcraw"

	"google.golang.org/grpc"
)

// serveOn starts a gRPC server on loopback, with the echo service when
// echo is set (otherwise every call is Unimplemented).
func serveOn(t *testing.T, echo bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.ForceServerCodec(grpcraw.Codec{}))
	if echo {
		s.RegisterService(&echoDesc, struct{}{})
	}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

// TestLoad: against the echo backend calls succeed (runLoad reports
// success); against a server without the service every call fails and
// runLoad reports failure.
func TestLoad(t *testing.T) {
	if !runLoad(serveOn(t, true), 2, 2, 16, 50*time.Millisecond, 300*time.Millisecond) {
		t.Error("no call succeeded against the echo backend")
	}
	if runLoad(serveOn(t, false), 1, 1, 16, 0, 200*time.Millisecond) {
		t.Error("runLoad reported success against a server without the service")
	}
}

// TestReply: the backend's answer is 128 bytes, as e2e/bench/backend's.
func TestReply(t *testing.T) {
	if len(reply) != 128 || reply[127] != '\n' {
		t.Errorf("reply is %d bytes, want 128 ending in a newline", len(reply))
	}
}
