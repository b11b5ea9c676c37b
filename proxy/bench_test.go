package proxy

import (
	"bufio"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// fastBackend serves a fixed 128-byte body over loopback with fasthttp.
func fastBackend(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 128)
	for i := range body {
		body[i] = 'x'
	}
	s := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBody(body) }}
	go s.Serve(ln)
	b.Cleanup(func() { s.Shutdown() })
	return ln.Addr().String()
}

func benchClient(addr string) *fasthttp.HostClient {
	return &fasthttp.HostClient{Addr: addr, MaxConns: 256}
}

// BenchmarkRelay is the whole relay path over loopback: client → proxy →
// backend, keep-alive on both sides. Loopback syscalls dominate; compare
// allocs/op and use e2e/bench/peers.sh for throughput against nginx. The
// client goroutines share the process's Ps with the event loops, which
// block in epoll_wait and must get a P back on every wake-up: ns/op here
// (≈ 100 µs on 2 cores) is that hand-off, not the loop's cost, and is 2x
// what the portable engine shows (BenchmarkRelayPortable).
func BenchmarkRelay(b *testing.B) { benchRelay(b, policy.EngineLoops) }

// BenchmarkRelayPortable is BenchmarkRelay on the portable engine
// (fasthttp alone).
func BenchmarkRelayPortable(b *testing.B) { benchRelay(b, policy.EnginePortable) }

func benchRelay(b *testing.B, e string) {
	be := fastBackend(b)
	h := startEngine(&testing.T{}, e, []string{be}, Options{}, nil)
	defer func() { b.StopTimer(); h.close() }() // the drain's grace is not relay time
	c := benchClient(h.addr)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + h.addr + "/x")
		for pb.Next() {
			if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				b.Errorf("relay: %v %d", err, resp.StatusCode())
				return
			}
		}
	})
}

// BenchmarkReject is the prebuilt rejection (no healthy backend).
func BenchmarkReject(b *testing.B) {
	h := startProxy(&testing.T{}, []string{"127.0.0.1:1"}, nil)
	defer func() { b.StopTimer(); h.close() }()
	c := benchClient(h.addr)
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	req.SetRequestURI("http://" + h.addr + "/x")
	c.Do(req, resp) // ejects the dead backend
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + h.addr + "/x")
		for pb.Next() {
			if err := c.Do(req, resp); err != nil || resp.StatusCode() != 503 {
				b.Errorf("reject: %v %d", err, resp.StatusCode())
				return
			}
		}
	})
}

// BenchmarkServeInMemory runs the handler on an in-memory RequestCtx with a
// rejecting pool: the proxy's own per-request CPU, without sockets.
func BenchmarkServeInMemory(b *testing.B) {
	h := startProxy(&testing.T{}, []string{"127.0.0.1:1"}, nil)
	defer h.close()
	serveInMemory(b, h, "GET /search?q=1 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: bench\r\nAccept: */*\r\nX-Forwarded-For: 10.0.0.1\r\n\r\n")
}

// serveInMemory runs raw through h's fasthttp handler b.N times with the
// app's only backend ejected, so every request is answered 503 in memory.
func serveInMemory(b *testing.B, h *harness, raw string) {
	fe := &frontend{p: h.p, addr: h.addr}
	fe.route.Store(h.p.cur.Load().routes[h.addr])
	a := fe.route.Load().Default
	a.Pool.Eject(a.Pool.Backends()[0])
	var ctx fasthttp.RequestCtx
	ctx.Init(&fasthttp.Request{}, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5555}, nil)
	sr := strings.NewReader(raw)
	br := bufio.NewReader(sr)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ctx.Request.Reset()
		ctx.Response.Reset()
		sr.Reset(raw)
		br.Reset(sr)
		if err := ctx.Request.Header.Read(br); err != nil {
			b.Fatal(err)
		}
		fe.handle(&ctx)
		if ctx.Response.StatusCode() != 503 {
			b.Fatalf("status %d", ctx.Response.StatusCode())
		}
	}
}

func BenchmarkClientFromXFF(b *testing.B) {
	tp := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.0/8")}
	xff := []byte("203.0.113.7, 10.1.2.3, 10.9.9.9")
	peer := netip.MustParseAddr("127.0.0.1")
	want := netip.MustParseAddr("203.0.113.7")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if pipeline.ClientFromXFF(tp, peer, xff) != want {
			b.Fatal("wrong client")
		}
	}
}

var _ = io.Discard

// BenchmarkParseRequestHead is the event loop's strict head parser on a
// browser-like request (rawhead.go).
func BenchmarkParseRequestHead(b *testing.B) {
	raw := []byte("GET /search?q=1 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64)\r\n" +
		"Accept: text/html,application/xhtml+xml\r\nAccept-Language: en-US,en;q=0.5\r\nAccept-Encoding: gzip, deflate\r\n" +
		"Cookie: session=abc123; theme=dark\r\nConnection: keep-alive\r\n\r\n")
	var h pipeline.RawHead
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for i := 0; i < b.N; i++ {
		if pipeline.ParseRequestHead(raw, &h) != pipeline.HeadOK {
			b.Fatal("not ok")
		}
	}
}

// BenchmarkParseResponseHead is the event loop's response head parser.
func BenchmarkParseResponseHead(b *testing.B) {
	raw := []byte("HTTP/1.1 200 OK\r\nServer: backend\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: 128\r\n" +
		"Server-Timing: app;dur=12.5\r\nCache-Control: no-store\r\n\r\n")
	var h pipeline.RawHead
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if pipeline.ParseResponseHead(raw, &h) != pipeline.HeadOK {
			b.Fatal("not ok")
		}
	}
}

// BenchmarkServeInMemoryAdmitted is BenchmarkServeInMemory with an
// admission stack that decides at once (Controller.Park, decided): the
// fasthttp path starts no watcher and allocates nothing for admission.
func BenchmarkServeInMemoryAdmitted(b *testing.B) {
	ctl := &fakeControl{}
	h := startProxyOpts(&testing.T{}, []string{"127.0.0.1:1"}, Options{Control: ctl}, func(_ *policy.Snapshot, a *policy.App) { a.Admission.Mode = "batch" })
	defer h.close()
	serveInMemory(b, h, "GET /search?q=1 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: bench\r\nX-Class: gold\r\n\r\n")
}

// BenchmarkRelayForwarded is BenchmarkRelay from a trusted proxy that
// sends two X-Forwarded-For lines, X-Forwarded-Proto and a request ID:
// the header policy's trusted path must stay allocation-free too.
func BenchmarkRelayForwarded(b *testing.B) {
	be := fastBackend(b)
	h := startProxy(&testing.T{}, []string{be}, func(_ *policy.Snapshot, a *policy.App) {
		a.TrustedProxies = append(a.TrustedProxies, mustPrefix("127.0.0.0/8"))
	})
	defer func() { b.StopTimer(); h.close() }()
	c := benchClient(h.addr)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + h.addr + "/x")
		req.Header.Add("X-Forwarded-For", "203.0.113.9")
		req.Header.Add("X-Forwarded-For", "10.0.0.1")
		req.Header.Set("X-Forwarded-Proto", "https")
		req.Header.Set("X-Request-Id", "abc123")
		for pb.Next() {
			if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				b.Errorf("relay: %v %d", err, resp.StatusCode())
				return
			}
		}
	})
}

// BenchmarkRelayTraced is BenchmarkRelay with trace_context generate, on
// both HTTP/1.1 engines: a request without a traceparent gets one sentry
// starts (random ids, the header written), one with a valid traceparent
// has it read and passed on. Starting and reading a trace must stay
// allocation-free.
func BenchmarkRelayTraced(b *testing.B) {
	for _, e := range engines {
		for _, incoming := range []string{"", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"} {
			name := e + "/start"
			if incoming != "" {
				name = e + "/pass"
			}
			b.Run(name, func(b *testing.B) {
				be := fastBackend(b)
				h := startEngine(&testing.T{}, e, []string{be}, Options{}, func(_ *policy.Snapshot, a *policy.App) {
					a.TraceContext = policy.TraceGenerate
				})
				defer func() { b.StopTimer(); h.close() }()
				c := benchClient(h.addr)
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
					req.SetRequestURI("http://" + h.addr + "/x")
					if incoming != "" {
						req.Header.Set("Traceparent", incoming)
					}
					for pb.Next() {
						if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
							b.Errorf("relay: %v %d", err, resp.StatusCode())
							return
						}
					}
				})
			})
		}
	}
}
