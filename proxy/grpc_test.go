package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sentry-proxy/sentry/policy"
)

// gRPC through sentry, with google.golang.org/grpc on both sides and no
// generated code: a raw-bytes codec and a service description written by
// hand (test.Echo with a unary Unary and a bidirectional Bidi).

// rawCodec passes messages as they are: a *[]byte on both sides.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.(*[]byte); ok {
		return *b, nil
	}
	return nil, fmt.Errorf("rawCodec: %T is not *[]byte", v)
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: %T is not *[]byte", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "raw" }

// echoServer is test.Echo's implementation: Unary answers "echo:" + the
// request, reports its deadline (the remaining time, in the header
// "deadline-ms"; "none" without one) and sets trailer metadata
// "x-trailer: done"; Bidi answers each message in upper case, then sets
// the same trailer.
type echoServer struct{}

var echoDesc = grpc.ServiceDesc{
	ServiceName: "test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Unary",
		Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var in []byte
			if err := dec(&in); err != nil {
				return nil, err
			}
			dl := "none"
			if d, ok := ctx.Deadline(); ok {
				dl = fmt.Sprint(time.Until(d).Milliseconds())
			}
			_ = grpc.SetHeader(ctx, metadata.Pairs("deadline-ms", dl))
			_ = grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "done"))
			if string(in) == "fail" {
				return nil, status.Error(codes.FailedPrecondition, "asked to fail")
			}
			out := append([]byte("echo:"), in...)
			return &out, nil
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Bidi",
		ServerStreams: true,
		ClientStreams: true,
		Handler: func(_ any, st grpc.ServerStream) error {
			for {
				var in []byte
				if err := st.RecvMsg(&in); err != nil {
					if errors.Is(err, io.EOF) {
						st.SetTrailer(metadata.Pairs("x-trailer", "done"))
						return nil
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
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})),
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts := []grpc.ServerOption{grpc.ForceServerCodec(rawCodec{})}
	if cfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	s := grpc.NewServer(opts...)
	s.RegisterService(&echoDesc, echoServer{})
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
