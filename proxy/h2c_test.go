package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/internal/grpcraw"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sentry-proxy/sentry/policy"
)

// h2c (HTTP/2 with prior knowledge) on plain listeners: apps[].h2c,
// h2c.go. Every test runs on both engines: the event loops (which hand a
// preface off) and the portable engine (fasthttp alone).

// h2cClient is an HTTP/2 client with prior knowledge over plain TCP;
// wrap, if set, wraps each connection it dials.
func h2cClient(wrap func(net.Conn) net.Conn) *http.Client {
	tr := &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil || wrap == nil {
			return c, err
		}
		return wrap(c), nil
	}}
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}
}

// TestH2CGRPCFrontEnd: a grpc-go client with insecure credentials, through
// sentry's plain listener with h2c, to an h2c gRPC backend: unary with its
// metadata and deadline, a bidirectional stream, and a rejection with its
// pushback, on both engines.
func TestH2CGRPCFrontEnd(t *testing.T) {
	be := startGRPCBackend(t, nil)
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			ctl := &fakeControl{retryAfter: 40 * time.Millisecond}
			h := startEngine(t, e, []string{be}, Options{Control: ctl}, func(_ *policy.Snapshot, a *policy.App) {
				a.Admission.Mode = "batch"
				a.H2C = true
				a.Backends.Protocol = policy.ProtoH2C
			})
			cc, err := grpc.NewClient("passthrough:///"+h.addr,
				grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithDefaultCallOptions(grpc.ForceCodec(grpcraw.Codec{})))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()

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
			if dl := header.Get("deadline-ms"); len(dl) != 1 || dl[0] == "none" {
				t.Errorf("server saw no deadline (header %v)", header)
			}

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

			// Not gold: rejected in gRPC's form, with the pushback.
			trailer = nil
			err = cc.Invoke(ctx, "/test.Echo/Unary", &in, &out, grpc.Trailer(&trailer))
			if s, _ := status.FromError(err); s.Code() != codes.Unavailable || s.Message() != "sentry: overloaded, retry later" {
				t.Errorf("bronze call: %v, want UNAVAILABLE with sentry's message", err)
			}
			if got := trailer.Get("grpc-retry-pushback-ms"); len(got) != 1 || got[0] != "40" {
				t.Errorf("pushback %v, want [40]", got)
			}
			if n := ctl.rejected.Load(); n != 1 {
				t.Errorf("%d rejections, want 1", n)
			}
		})
	}
}

// splitConn writes the first pre bytes of its output a few at a time, each
// piece its own write after a pause, so the HTTP/2 preface reaches sentry
// over several reads (TCP_NODELAY is on: each write is its own segment).
type splitConn struct {
	net.Conn
	pre int
}

func (c *splitConn) Write(b []byte) (int, error) {
	n := 0
	for c.pre > 0 && len(b) > 0 {
		k := min(5, c.pre, len(b))
		m, err := c.Conn.Write(b[:k])
		n += m
		if err != nil {
			return n, err
		}
		b, c.pre = b[k:], c.pre-k
		time.Sleep(5 * time.Millisecond)
	}
	m, err := c.Conn.Write(b)
	return n + m, err
}

// TestH2CPlainHTTP: with h2c on, an h2c client is served (the preface
// split over several reads, forwarding headers saying http), and HTTP/1.1
// on the same listener still is; with it off, a preface gets 400 and the
// connection closes. Both engines.
func TestH2CPlainHTTP(t *testing.T) {
	var proto atomic.Value
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		proto.Store(r.Header.Get("X-Forwarded-Proto"))
		io.WriteString(w, "ok "+r.URL.Path)
	})
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			on := startEngine(t, e, []string{be}, Options{}, func(_ *policy.Snapshot, a *policy.App) { a.H2C = true })
			off := startEngine(t, e, []string{be}, Options{}, nil)

			for _, split := range []bool{false, true} {
				var wrap func(net.Conn) net.Conn
				if split {
					wrap = func(c net.Conn) net.Conn { return &splitConn{Conn: c, pre: len(h2Preface)} }
				}
				cl := h2cClient(wrap)
				for i := 0; i < 3; i++ {
					resp, err := cl.Get("http://" + on.addr + "/h2c")
					if err != nil {
						t.Fatalf("split %v: h2c request: %v", split, err)
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 || string(b) != "ok /h2c" || resp.ProtoMajor != 2 {
						t.Fatalf("split %v: %d %q HTTP/%d", split, resp.StatusCode, b, resp.ProtoMajor)
					}
				}
				if p, _ := proto.Load().(string); p != "http" {
					t.Errorf("X-Forwarded-Proto %q over h2c, want http", p)
				}
				cl.CloseIdleConnections()
			}

			// HTTP/1.1 beside it, whole and in pieces (a head split
			// in its first bytes, "P" then the rest, which is also how a
			// preface begins).
			resp, body := rawRequest(t, on.addr, "GET /one HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			if resp.StatusCode != 200 || body != "ok /one" {
				t.Errorf("HTTP/1.1 with h2c on: %d %q", resp.StatusCode, body)
			}
			c, err := net.DialTimeout("tcp", on.addr, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			sc := &splitConn{Conn: c, pre: 12}
			if _, err := sc.Write([]byte("PUT /two HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")); err != nil {
				t.Fatal(err)
			}
			r2, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("split HTTP/1.1 head: %v", err)
			}
			b2, _ := io.ReadAll(r2.Body)
			c.Close()
			if r2.StatusCode != 200 || string(b2) != "ok /two" {
				t.Errorf("split HTTP/1.1 head with h2c on: %d %q", r2.StatusCode, b2)
			}

			// Off: 400, as before, and the connection closes.
			resp, _ = rawRequest(t, off.addr, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
			if resp.StatusCode != 400 {
				t.Errorf("preface without h2c: %d, want 400", resp.StatusCode)
			}
			if _, err := h2cClient(nil).Get("http://" + off.addr + "/h2c"); err == nil {
				t.Errorf("h2c request to a listener without h2c succeeded")
			}
		})
	}
}

// TestH2CReloadOff: a reload that turns h2c off applies at once, on both
// engines: a preface then gets 400, HTTP/1.1 is still served.
func TestH2CReloadOff(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			h := startEngine(t, e, []string{be}, Options{}, func(_ *policy.Snapshot, a *policy.App) { a.H2C = true })
			cl := h2cClient(nil)
			resp, err := cl.Get("http://" + h.addr + "/")
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("h2c before the reload: %v %v", resp, err)
			}
			resp.Body.Close()
			cl.CloseIdleConnections()
			if err := h.p.Apply(testSnap(h.addr, []string{be}, nil)); err != nil {
				t.Fatal(err)
			}
			r, _ := rawRequest(t, h.addr, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
			if r.StatusCode != 400 {
				t.Errorf("preface after h2c was turned off: %d, want 400", r.StatusCode)
			}
			r, body := rawRequest(t, h.addr, "GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			if r.StatusCode != 200 || body != "ok" {
				t.Errorf("HTTP/1.1 after the reload: %d %q", r.StatusCode, body)
			}
		})
	}
}

// TestH2CRapidReset: the rapid-reset guard holds on h2c connections as on
// TLS ones: GOAWAY(ENHANCE_YOUR_CALM), counted, and few reset streams
// reach the backend.
func TestH2CRapidReset(t *testing.T) {
	var hits atomic.Int64
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/reset" {
			hits.Add(1)
			time.Sleep(20 * time.Millisecond)
		}
		io.WriteString(w, "ok")
	})
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			h := startEngine(t, e, []string{be}, Options{}, func(_ *policy.Snapshot, a *policy.App) { a.H2C = true })
			c, err := net.DialTimeout("tcp", h.addr, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			before := hits.Load()
			sent, code, ok := rapidResetOn(t, c, 1000, 1, 0)
			if !ok || code != http2.ErrCodeEnhanceYourCalm {
				t.Errorf("after %d resets: GOAWAY %v (received %v), want ENHANCE_YOUR_CALM", sent, code, ok)
			}
			if v := testutil.ToFloat64(h.p.metrics.clientErrors.WithLabelValues(h.addr, "h2_reset_flood")); v != 1 {
				t.Errorf("h2_reset_flood = %v, want 1", v)
			}
			time.Sleep(100 * time.Millisecond)
			if reached := hits.Load() - before; reached*100 > int64(sent) {
				t.Errorf("%d of %d reset streams reached the backend (> 1%%)", reached, sent)
			}
		})
	}
}

// TestH2CDrain: a shutdown sends an h2c connection GOAWAY and lets its
// stream in flight finish.
func TestH2CDrain(t *testing.T) {
	release := make(chan struct{})
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		io.WriteString(w, "done")
	})
	h := startProxyOpts(t, []string{be}, Options{}, func(_ *policy.Snapshot, a *policy.App) { a.H2C = true })
	cl := h2cClient(nil)
	type result struct {
		body string
		err  error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := cl.Get("http://" + h.addr + "/slow")
		if err != nil {
			res <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{string(b), err}
	}()
	// Wait until the stream is in flight at the backend's pool.
	deadline := time.Now().Add(5 * time.Second)
	for h.p.cur.Load().apps[0].Pool.Inflight() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the request never reached the backend")
		}
		time.Sleep(5 * time.Millisecond)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- h.p.Shutdown(ctx, h.addr)
	}()
	time.Sleep(50 * time.Millisecond) // the drain has begun (GOAWAY sent)
	close(release)
	r := <-res
	if r.err != nil || r.body != "done" {
		t.Errorf("stream in flight during the drain: %q %v, want it finished", r.body, r.err)
	}
	if err := <-done; err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if _, err := net.DialTimeout("tcp", h.addr, time.Second); err == nil {
		t.Errorf("listener still accepting after the drain")
	} else if !strings.Contains(err.Error(), "refused") {
		t.Logf("dial after drain: %v", err)
	}
}

// exchangeRaw writes payload on a fresh connection to addr and returns
// everything read until the server closes it (or 5 s pass: closed false).
func exchangeRaw(t *testing.T, addr, payload string) (got string, closed bool) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, payload); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	var ne net.Error
	return string(b), !(errors.As(err, &ne) && ne.Timeout())
}

// TestH2CNeitherProtocol: on an h2c listener, a first line that is
// neither the HTTP/2 preface nor an HTTP/1.x request line (no HTTP
// version at its end) is an invalid preface (RFC 9113 §3.4): the
// connection is closed without an answer, on both engines (h2spec's
// "Sends invalid connection preface" expects exactly that). HTTP/1.1,
// a request line split anywhere, and a listener without h2c (which
// answers 400) are as before.
func TestH2CNeitherProtocol(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok "+r.URL.Path) })
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			on := startEngine(t, e, []string{be}, Options{}, func(_ *policy.Snapshot, a *policy.App) { a.H2C = true })
			off := startEngine(t, e, []string{be}, Options{}, nil)
			for _, p := range []string{"INVALID CONNECTION PREFACE\r\n\r\n", "GET /\r\n\r\n", "PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n"} {
				if got, closed := exchangeRaw(t, on.addr, p); got != "" || !closed {
					t.Errorf("h2c on, %q: answered %q (closed %v), want a close without an answer", p, got, closed)
				}
				if got, _ := exchangeRaw(t, off.addr, p); !strings.HasPrefix(got, "HTTP/1.1 400 ") {
					t.Errorf("h2c off, %q: answered %q, want 400", p, got)
				}
			}
			if got, _ := exchangeRaw(t, on.addr, "GET /one HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 200 ") || !strings.HasSuffix(got, "ok /one") {
				t.Errorf("HTTP/1.1 with h2c on: %q", got)
			}
			// A request line that comes in pieces is not judged before
			// it ends.
			c, err := net.DialTimeout("tcp", on.addr, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			sc := &splitConn{Conn: c, pre: 30}
			if _, err := sc.Write([]byte("GET /" + strings.Repeat("a", 40) + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")); err != nil {
				t.Fatal(err)
			}
			if b, _ := io.ReadAll(c); !strings.HasPrefix(string(b), "HTTP/1.1 200 ") {
				t.Errorf("split request line: %q", b)
			}
		})
	}
}
