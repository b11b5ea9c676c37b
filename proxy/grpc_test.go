package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/internal/grpcraw"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sentry-proxy/sentry/policy"
)

// gRPC through sentry, with google.golang.org/grpc on both sides and no
// generated code: a raw-bytes codec (internal/grpcraw) and a service description written by
// hand (test.Echo with a unary Unary and a bidirectional Bidi).

// echoServer is test.Echo's implementation: Unary answers "echo:" + the
// request, reports its deadline (the remaining time, in the header
// "deadline-ms"; "none" without one) and sets trailer metadata
// "x-trailer: done"; Bidi answers each message in upper case, then sets
// the same trailer.
type echoServer struct {
	// ended, if set, receives the error that ended a Bidi stream other
	// than the client's half-close (a cancellation).
	ended chan error
}

var echoDesc = grpc.ServiceDesc{
	ServiceName: "test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Unary",
		Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			var in []byte
			if err := dec(&in); err != nil {
				return nil, err
			}
			if ic == nil {
				return echoUnary(ctx, &in)
			}
			return ic(ctx, &in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/test.Echo/Unary"},
				func(ctx context.Context, req any) (any, error) { return echoUnary(ctx, req.(*[]byte)) })
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Bidi",
		ServerStreams: true,
		ClientStreams: true,
		Handler: func(srv any, st grpc.ServerStream) error {
			for {
				var in []byte
				if err := st.RecvMsg(&in); err != nil {
					if errors.Is(err, io.EOF) {
						st.SetTrailer(metadata.Pairs("x-trailer", "done"))
						return nil
					}
					if es, ok := srv.(*echoServer); ok && es.ended != nil {
						es.ended <- err
					}
					return err
				}
				out := []byte(string(upper(in)))
				if err := st.SendMsg(&out); err != nil {
					return err
				}
			}
		},
	}},
}

// echoUnary is test.Echo/Unary.
func echoUnary(ctx context.Context, in *[]byte) (any, error) {
	if string(*in) == "bare-fail" {
		// No metadata set: grpc-go answers Trailers-Only (one HEADERS
		// frame, grpc-status in it, that ends the stream).
		return nil, status.Error(codes.PermissionDenied, "no metadata, 100% refused")
	}
	if string(*in) == "slow" {
		time.Sleep(30 * time.Millisecond) // a service time to measure
	}
	dl := "none"
	if d, ok := ctx.Deadline(); ok {
		dl = fmt.Sprint(time.Until(d).Milliseconds())
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs("deadline-ms", dl))
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "done"))
	if string(*in) == "fail" {
		return nil, status.Error(codes.FailedPrecondition, "asked to fail")
	}
	out := append([]byte("echo:"), *in...)
	return &out, nil
}

func upper(b []byte) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		out[i] = c
	}
	return out
}

// grpcClient dials sentry at addr over TLS (h2 by ALPN; the test's
// self-signed certificate is not verified) with service config sc
// ("" for none).
func grpcClient(t *testing.T, addr, sc string) *grpc.ClientConn {
	t.Helper()
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(grpcraw.Codec{})),
	}
	if sc != "" {
		opts = append(opts, grpc.WithDefaultServiceConfig(sc))
	}
	cc, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// startGRPCBackend serves test.Echo on a loopback port: h2c when cfg is
// nil, TLS with cfg otherwise. It returns the address.
func startGRPCBackend(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	return startGRPCBackendWith(t, cfg, &echoServer{})
}

// startGRPCBackendWith is startGRPCBackend with the service's state.
func startGRPCBackendWith(t *testing.T, cfg *tls.Config, es *echoServer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts := []grpc.ServerOption{grpc.ForceServerCodec(grpcraw.Codec{})}
	if cfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	s := grpc.NewServer(opts...)
	s.RegisterService(&echoDesc, es)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

// startTLSControlled starts a proxy with TLS (h2 front end) and the fake
// controller, in front of backend be.
func startTLSControlled(t *testing.T, ctl *fakeControl, be string, mod func(*policy.App)) *harness {
	t.Helper()
	cf, kf := writeTestCert(t)
	return startProxyOpts(t, []string{be}, Options{Control: ctl}, func(_ *policy.Snapshot, a *policy.App) {
		a.Admission.Mode = "batch"
		a.TLS = &policy.TLS{CertFile: cf, KeyFile: kf}
		if mod != nil {
			mod(a)
		}
	})
}

// TestGRPCRejection: a grpc-go client whose call sentry rejects (over the
// h2 front end) sees the configured code -- UNAVAILABLE by default,
// RESOURCE_EXHAUSTED with reject.grpc_status: resource_exhausted -- and
// sentry's message, and the pushback in the trailer metadata; nothing
// reaches the backend.
func TestGRPCRejection(t *testing.T) {
	be := startGRPCBackend(t, nil)
	for _, c := range []struct {
		name string
		code int
		want codes.Code
	}{{"default", 0, codes.Unavailable}, {"resource_exhausted", policy.GRPCResourceExhausted, codes.ResourceExhausted}} {
		t.Run(c.name, func(t *testing.T) {
			ctl := &fakeControl{retryAfter: 2500 * time.Microsecond}
			h := startTLSControlled(t, ctl, be, func(a *policy.App) {
				if c.code != 0 {
					a.Reject.GRPCStatus = c.code
				}
			})
			cc := grpcClient(t, h.addr, "")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			in, out := []byte("hi"), []byte(nil)
			var trailer metadata.MD
			err := cc.Invoke(ctx, "/test.Echo/Unary", &in, &out, grpc.Trailer(&trailer))
			st, _ := status.FromError(err)
			if st.Code() != c.want || st.Message() != "sentry: overloaded, retry later" {
				t.Fatalf("status %v %q (err %v), want %v and sentry's message", st.Code(), st.Message(), err, c.want)
			}
			if got := trailer.Get("grpc-retry-pushback-ms"); len(got) != 1 || got[0] != "3" {
				t.Errorf("pushback %q, want [3] (2.5 ms rounded up to whole ms)", got)
			}
			if got := trailer.Get("x-sentry-reject"); len(got) != 1 || got[0] != "rejected_test" {
				t.Errorf("x-sentry-reject %q", got)
			}
			if n := ctl.rejected.Load(); n != 1 {
				t.Errorf("%d rejections, want 1", n)
			}
		})
	}
}

// TestGRPCRetryHonoursPushback: grpc-go's retry policy (UNAVAILABLE
// retryable, backoff 1 ms) waits out sentry's pushback: with a predicted
// wait of 300 ms, each of the three attempts reaches admission at least
// 300 ms after the one before, by the arrivals the controller was given
// (a lower bound only: no upper bound, no speed figure).
func TestGRPCRetryHonoursPushback(t *testing.T) {
	be := startGRPCBackend(t, nil)
	const wait = 300 * time.Millisecond
	ctl := &fakeControl{retryAfter: wait, record: true}
	h := startTLSControlled(t, ctl, be, nil)
	sc := `{"methodConfig":[{"name":[{"service":"test.Echo"}],"retryPolicy":{` +
		`"maxAttempts":3,"initialBackoff":"0.001s","maxBackoff":"0.001s","backoffMultiplier":1,` +
		`"retryableStatusCodes":["UNAVAILABLE"]}}]}`
	cc := grpcClient(t, h.addr, sc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in, out := []byte("hi"), []byte(nil)
	start := time.Now()
	err := cc.Invoke(ctx, "/test.Echo/Unary", &in, &out)
	elapsed := time.Since(start)
	if st, _ := status.FromError(err); st.Code() != codes.Unavailable {
		t.Fatalf("final status %v (%v), want UNAVAILABLE after the retries", st.Code(), err)
	}
	if n := ctl.rejected.Load(); n != 3 {
		t.Fatalf("%d attempts reached admission, want 3 (maxAttempts)", n)
	}
	ctl.mu.Lock()
	arr := append([]time.Time(nil), ctl.arrivals...)
	ctl.mu.Unlock()
	if len(arr) != 3 {
		t.Fatalf("%d arrivals recorded, want 3", len(arr))
	}
	for i := 1; i < len(arr); i++ {
		if gap := arr[i].Sub(arr[i-1]); gap < wait {
			t.Errorf("attempt %d came %v after the one before, want ≥ %v (the pushback)", i+1, gap, wait)
		}
	}
	if elapsed < 2*wait {
		t.Errorf("call took %v, want ≥ %v (two pushbacks)", elapsed, 2*wait)
	}
}

// grpcThrough starts sentry (TLS front end, the fake controller: calls
// with metadata x-class: gold are admitted, the rest rejected) in front
// of the given gRPC backends, spoken to with protocol (h2c, or h2 with
// the CA file ca).
func grpcThrough(t *testing.T, protocol, ca string, ctl *fakeControl, backends []string, mod func(*policy.App)) *harness {
	t.Helper()
	cf, kf := writeTestCert(t)
	return startProxyOpts(t, backends, Options{Control: ctl}, func(_ *policy.Snapshot, a *policy.App) {
		a.Admission.Mode = "batch"
		a.TLS = &policy.TLS{CertFile: cf, KeyFile: kf}
		a.Backends.Protocol = protocol
		if ca != "" {
			a.Backends.TLS = &policy.BackendTLS{CAFile: ca}
		}
		if mod != nil {
			mod(a)
		}
	})
}

func gold(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-class", "gold")
}

// TestGRPCThroughSentry: a grpc-go client and server with sentry between
// them, the backend spoken to over h2c and over h2 (TLS, verified):
// unary calls with header and trailer metadata intact, an error status
// intact, the deadline propagated (the server sees it), a bidirectional
// stream whose every reply comes before the next message is sent (both
// directions stream; nothing waits for the end of the request), and
// admission per call.
func TestGRPCThroughSentry(t *testing.T) {
	ca := newTestCA(t, "grpc-ca")
	pair, _, _ := ca.issue(t, false)
	for _, c := range []struct {
		protocol string
		tls      *tls.Config
		ca       string
	}{
		{policy.ProtoH2C, nil, ""},
		{policy.ProtoH2, &tls.Config{Certificates: []tls.Certificate{pair}}, ca.file},
	} {
		t.Run(c.protocol, func(t *testing.T) {
			be := startGRPCBackend(t, c.tls)
			ctl := &fakeControl{retryAfter: 40 * time.Millisecond}
			h := grpcThrough(t, c.protocol, c.ca, ctl, []string{be}, nil)
			cc := grpcClient(t, h.addr, "")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()

			// Unary, with the deadline and the metadata.
			in, out := []byte("hello"), []byte(nil)
			var header, trailer metadata.MD
			if err := cc.Invoke(gold(ctx), "/test.Echo/Unary", &in, &out, grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
				t.Fatalf("unary: %v", err)
			}
			if string(out) != "echo:hello" {
				t.Errorf("unary reply %q", out)
			}
			if got := trailer.Get("x-trailer"); len(got) != 1 || got[0] != "done" {
				t.Errorf("trailer metadata %v, want x-trailer: done", trailer)
			}
			dl := header.Get("deadline-ms")
			var ms int
			if len(dl) != 1 || dl[0] == "none" {
				t.Errorf("server saw no deadline (header %v): grpc-timeout was not forwarded", header)
			} else if _, err := fmt.Sscan(dl[0], &ms); err != nil || ms <= 0 || ms > 5000 {
				t.Errorf("server's deadline %q ms, want in (0, 5000]", dl[0])
			}

			// An error status (a Trailers-Only answer from the backend).
			fail := []byte("fail")
			err := cc.Invoke(gold(ctx), "/test.Echo/Unary", &fail, &out)
			if st, _ := status.FromError(err); st.Code() != codes.FailedPrecondition || st.Message() != "asked to fail" {
				t.Errorf("error status %v %q, want FailedPrecondition and the server's message", st.Code(), st.Message())
			}

			// Bidirectional: each reply before the next message.
			st, err := cc.NewStream(gold(ctx), &grpc.StreamDesc{StreamName: "Bidi", ServerStreams: true, ClientStreams: true}, "/test.Echo/Bidi")
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range []string{"one", "two", "three"} {
				msg := []byte(m)
				if err := st.SendMsg(&msg); err != nil {
					t.Fatalf("send %s: %v", m, err)
				}
				var got []byte
				if err := st.RecvMsg(&got); err != nil || string(got) != string(upper(msg)) {
					t.Fatalf("reply to %s: %q %v", m, got, err)
				}
			}
			if err := st.CloseSend(); err != nil {
				t.Fatal(err)
			}
			var none []byte
			if err := st.RecvMsg(&none); !errors.Is(err, io.EOF) {
				t.Fatalf("end of stream: %v, want EOF", err)
			}
			if got := st.Trailer().Get("x-trailer"); len(got) != 1 || got[0] != "done" {
				t.Errorf("stream trailer %v", st.Trailer())
			}

			// Admission per call: without the gold mark, rejected in
			// gRPC's form, with the pushback.
			err = cc.Invoke(ctx, "/test.Echo/Unary", &in, &out, grpc.Trailer(&trailer))
			if st, _ := status.FromError(err); st.Code() != codes.Unavailable {
				t.Errorf("bronze call: %v, want UNAVAILABLE", err)
			}
			if got := trailer.Get("grpc-retry-pushback-ms"); len(got) != 1 || got[0] != "40" {
				t.Errorf("pushback %v, want 40", got)
			}
			if a := h.p.cur.Load().apps[0]; a.LoopOK || a.Pool.Inflight() != 0 {
				t.Errorf("LoopOK %v, in flight %d after the calls, want false and 0", a.LoopOK, a.Pool.Inflight())
			}
		})
	}
}

// TestGRPCBalancedPerCall: with two h2c backends and round_robin, calls
// made over one client connection (so one sentry stream each) are spread
// call by call, not connection by connection.
func TestGRPCBalancedPerCall(t *testing.T) {
	var hits [2]atomic.Int32
	backends := make([]string, 2)
	for i := range backends {
		i := i
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer(grpc.ForceServerCodec(grpcraw.Codec{}), grpc.UnaryInterceptor(
			func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				hits[i].Add(1)
				return h(ctx, req)
			}))
		s.RegisterService(&echoDesc, &echoServer{})
		go func() { _ = s.Serve(ln) }()
		t.Cleanup(s.Stop)
		backends[i] = ln.Addr().String()
	}
	h := grpcThrough(t, policy.ProtoH2C, "", &fakeControl{}, backends, func(a *policy.App) { a.Balance = policy.RoundRobin })
	cc := grpcClient(t, h.addr, "")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := 0; i < 10; i++ {
		in, out := []byte("x"), []byte(nil)
		if err := cc.Invoke(gold(ctx), "/test.Echo/Unary", &in, &out); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := hits[0].Load(), hits[1].Load(); a != 5 || b != 5 {
		t.Errorf("calls per backend %d and %d, want 5 and 5", a, b)
	}
}

// TestH2CBackendFromHTTP1: a plain HTTP/1.1 client of an app whose
// backends speak h2c is relayed over HTTP/2 too (by the fasthttp engine),
// its body included; the backend sees HTTP/2.
func TestH2CBackendFromHTTP1(t *testing.T) {
	s := httptest.NewServer(h2c.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "proto=%s body=%s xff=%s", r.Proto, b, r.Header.Get("X-Forwarded-For"))
	}), &http2.Server{}))
	t.Cleanup(s.Close)
	h := startProxy(t, []string{s.Listener.Addr().String()}, func(_ *policy.Snapshot, a *policy.App) {
		a.Backends.Protocol = policy.ProtoH2C
	})
	resp, body := rawRequest(t, h.addr, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
	if resp.StatusCode != 200 || body != "proto=HTTP/2.0 body=hello xff=127.0.0.1" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	resp, body = rawRequest(t, h.addr, "GET /y HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 200 || body != "proto=HTTP/2.0 body= xff=127.0.0.1" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
}

// TestGRPCCancelReachesBackend: a client that cancels its stream midway
// (an h2 RST_STREAM to sentry) ends the backend's stream too: the server
// sees the cancellation, not a hang.
func TestGRPCCancelReachesBackend(t *testing.T) {
	es := &echoServer{ended: make(chan error, 1)}
	be := startGRPCBackendWith(t, nil, es)
	h := grpcThrough(t, policy.ProtoH2C, "", &fakeControl{}, []string{be}, nil)
	cc := grpcClient(t, h.addr, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := cc.NewStream(gold(ctx), &grpc.StreamDesc{StreamName: "Bidi", ServerStreams: true, ClientStreams: true}, "/test.Echo/Bidi")
	if err != nil {
		t.Fatal(err)
	}
	msg, got := []byte("ping"), []byte(nil)
	if err := st.SendMsg(&msg); err != nil {
		t.Fatal(err)
	}
	if err := st.RecvMsg(&got); err != nil || string(got) != "PING" {
		t.Fatalf("reply %q %v", got, err)
	}
	cancel()
	select {
	case err := <-es.ended:
		if s, _ := status.FromError(err); s.Code() != codes.Canceled {
			t.Errorf("backend stream ended with %v, want Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the backend stream outlived the client's cancellation by 5 s")
	}
	deadline := time.Now().Add(2 * time.Second)
	for h.p.cur.Load().apps[0].Pool.Inflight() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := h.p.cur.Load().apps[0].Pool.Inflight(); n != 0 {
		t.Errorf("in flight %d after the cancellation, want 0", n)
	}
}

// TestGRPCTrailersOnlyFromBackend: a backend's Trailers-Only answer (the
// form every gRPC error takes when the server sent nothing before it: an
// unknown method, a handler that fails without metadata) reaches the
// client with its own status and message, over h2c and h2, not as
// INTERNAL "server closed the stream without sending trailers". The call
// after it on the same connection still works.
func TestGRPCTrailersOnlyFromBackend(t *testing.T) {
	ca := newTestCA(t, "grpc-ca")
	pair, _, _ := ca.issue(t, false)
	for _, c := range []struct {
		protocol string
		tls      *tls.Config
		ca       string
	}{
		{policy.ProtoH2C, nil, ""},
		{policy.ProtoH2, &tls.Config{Certificates: []tls.Certificate{pair}}, ca.file},
	} {
		t.Run(c.protocol, func(t *testing.T) {
			be := startGRPCBackend(t, c.tls)
			h := grpcThrough(t, c.protocol, c.ca, &fakeControl{}, []string{be}, nil)
			cc := grpcClient(t, h.addr, "")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			in, out := []byte("x"), []byte(nil)
			err := cc.Invoke(gold(ctx), "/test.Echo/Nope", &in, &out)
			if st, _ := status.FromError(err); st.Code() != codes.Unimplemented {
				t.Errorf("unknown method: %v, want UNIMPLEMENTED from the backend", err)
			}
			bare := []byte("bare-fail")
			err = cc.Invoke(gold(ctx), "/test.Echo/Unary", &bare, &out)
			if st, _ := status.FromError(err); st.Code() != codes.PermissionDenied || st.Message() != "no metadata, 100% refused" {
				t.Errorf("handler error: %v, want PERMISSION_DENIED and the server's message", err)
			}
			if err := cc.Invoke(gold(ctx), "/test.Echo/Unary", &in, &out); err != nil || string(out) != "echo:x" {
				t.Errorf("call after: %q %v", out, err)
			}
		})
	}
}

// TestGRPCMeasuredServiceTime: a unary call's request body is all sent
// before the response head, so its ticket is told a measured service time
// (from the body's end to the head: at least the backend's 30 ms, at most
// the call's own time) and the in-service count; a bidirectional call,
// whose body is still streaming when the head comes, gives no measured
// sample (0), only what Server-Timing would say.
func TestGRPCMeasuredServiceTime(t *testing.T) {
	be := startGRPCBackend(t, nil)
	ctl := &fakeControl{}
	h := grpcThrough(t, policy.ProtoH2C, "", ctl, []string{be}, nil)
	cc := grpcClient(t, h.addr, "")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	in, out := []byte("slow"), []byte(nil)
	start := time.Now()
	if err := cc.Invoke(gold(ctx), "/test.Echo/Unary", &in, &out); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	st, err := cc.NewStream(gold(ctx), &grpc.StreamDesc{StreamName: "Bidi", ServerStreams: true, ClientStreams: true}, "/test.Echo/Bidi")
	if err != nil {
		t.Fatal(err)
	}
	msg, got := []byte("a"), []byte(nil)
	if err := st.SendMsg(&msg); err != nil {
		t.Fatal(err)
	}
	if err := st.RecvMsg(&got); err != nil {
		t.Fatal(err)
	}
	_ = st.CloseSend()
	if err := st.RecvMsg(&got); !errors.Is(err, io.EOF) {
		t.Fatalf("end of stream: %v", err)
	}
	ctl.mu.Lock()
	measured, inService := append([]time.Duration(nil), ctl.measured...), append([]int(nil), ctl.inService...)
	ctl.mu.Unlock()
	if len(measured) != 2 {
		t.Fatalf("%d observations, want 2 (one per call)", len(measured))
	}
	if m := measured[0]; m < 30*time.Millisecond || m > took || inService[0] != 1 {
		t.Errorf("unary call: measured %v in service %d, want 30ms..%v and 1", m, inService[0], took)
	}
	if measured[1] != 0 || inService[1] != 0 {
		t.Errorf("bidi call: measured %v in service %d, want no sample", measured[1], inService[1])
	}
}
