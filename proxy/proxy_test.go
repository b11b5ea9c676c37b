package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"

	"github.com/sentry-proxy/sentry/policy"
)

func TestRelayKeepAlive(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.URL.Path)
	}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	h := startProxy(t, []string{strings.TrimPrefix(srv.URL, "http://")}, nil)

	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i := 0; i < 20; i++ {
		fmt.Fprintf(c, "GET /p%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf("hello /p%d", i); string(body) != want || resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %q, want 200 %q", i, resp.StatusCode, body, want)
		}
		if resp.Close {
			t.Fatalf("request %d: proxy closed a keep-alive connection", i)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("backend saw %d connections for 20 sequential requests, want 1 (upstream keep-alive)", n)
	}
}

func TestChunkedBodiesBothWays(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if len(r.TransferEncoding) == 0 && r.ContentLength != int64(len(b)) {
			t.Errorf("backend got inconsistent framing")
		}
		w.(http.Flusher).Flush() // forces a chunked response
		fmt.Fprintf(w, "got %d bytes: %s", len(b), b)
	})
	h := startProxy(t, []string{be}, nil)
	resp, body := rawRequest(t, h.addr, "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
	if resp.StatusCode != 200 || body != "got 11 bytes: hello world" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if len(resp.TransferEncoding) == 0 || resp.TransferEncoding[0] != "chunked" {
		t.Errorf("response was not chunked: %v", resp.TransferEncoding)
	}
}

func TestExpectContinue(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Expect") != "" {
			t.Errorf("Expect header was forwarded")
		}
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	})
	h := startProxy(t, []string{be}, nil)
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "PUT /x HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("want 100 Continue before the body, got %q %v", line, err)
	}
	br.ReadString('\n') // blank line
	io.WriteString(c, "data")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != "data" {
		t.Fatalf("got %d %q", resp.StatusCode, b)
	}
}

func TestForwardedHeaders(t *testing.T) {
	seen := make(chan http.Header, 4)
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Clone()
		h.Set("Host", r.Host)
		seen <- h
	})
	t.Run("untrusted peer cannot spoof", func(t *testing.T) {
		h := startProxy(t, []string{be}, nil)
		rawRequest(t, h.addr, "GET / HTTP/1.1\r\nHost: example.com\r\nX-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: evil\r\nX-Request-Id: forged\r\n\r\n")
		got := <-seen
		if v := got.Get("X-Forwarded-For"); v != "127.0.0.1" {
			t.Errorf("X-Forwarded-For = %q, want 127.0.0.1", v)
		}
		if v := got.Get("X-Forwarded-Proto"); v != "http" {
			t.Errorf("X-Forwarded-Proto = %q, want http", v)
		}
		if v := got.Get("X-Forwarded-Host"); v != "example.com" {
			t.Errorf("X-Forwarded-Host = %q, want example.com", v)
		}
		if v := got.Get("X-Request-Id"); v == "forged" || len(v) != 32 {
			t.Errorf("X-Request-Id = %q, want a fresh 32-hex id", v)
		}
		if got.Get("Host") != "example.com" {
			t.Errorf("Host = %q, want it passed through", got.Get("Host"))
		}
	})
	t.Run("trusted peer is appended to", func(t *testing.T) {
		h := startProxy(t, []string{be}, func(_ *policy.Snapshot, a *policy.App) {
			a.TrustedProxies = append(a.TrustedProxies, mustPrefix("127.0.0.0/8"))
		})
		resp, _ := rawRequest(t, h.addr, "GET / HTTP/1.1\r\nHost: example.com\r\nX-Forwarded-For: 203.0.113.9\r\nX-Forwarded-Proto: https\r\nX-Request-Id: abc123\r\n\r\n")
		got := <-seen
		if v := got.Get("X-Forwarded-For"); v != "203.0.113.9, 127.0.0.1" {
			t.Errorf("X-Forwarded-For = %q", v)
		}
		if v := got.Get("X-Forwarded-Proto"); v != "https" {
			t.Errorf("X-Forwarded-Proto = %q, want the trusted https kept", v)
		}
		if v := got.Get("X-Request-Id"); v != "abc123" {
			t.Errorf("X-Request-Id = %q, want the trusted id kept", v)
		}
		if v := resp.Header.Get("X-Request-Id"); v != "abc123" {
			t.Errorf("response X-Request-Id = %q", v)
		}
	})
}

func TestHopByHopRemoved(t *testing.T) {
	seen := make(chan http.Header, 1)
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("Proxy-Authenticate", "Basic")
		w.Header().Set("X-App", "1")
	})
	h := startProxy(t, []string{be}, nil)
	resp, _ := rawRequest(t, h.addr, "GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, X-Secret\r\nX-Secret: s\r\nKeep-Alive: 300\r\nProxy-Authorization: Basic Zm9v\r\nTE: trailers\r\nX-Keep: yes\r\n\r\n")
	got := <-seen
	for _, k := range []string{"X-Secret", "Keep-Alive", "Proxy-Authorization", "Te", "Proxy-Connection"} {
		if v := got.Get(k); v != "" {
			t.Errorf("hop-by-hop %s forwarded: %q", k, v)
		}
	}
	if got.Get("X-Keep") != "yes" {
		t.Errorf("end-to-end header dropped")
	}
	for _, k := range []string{"Keep-Alive", "Proxy-Authenticate"} {
		if v := resp.Header.Get(k); v != "" {
			t.Errorf("hop-by-hop response %s passed: %q", k, v)
		}
	}
	if resp.Header.Get("X-App") != "1" {
		t.Errorf("end-to-end response header dropped")
	}
}

func TestMalformedAndSmuggling(t *testing.T) {
	var hits atomic.Int32
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
	h := startProxy(t, []string{be}, func(s *policy.Snapshot, _ *policy.App) { s.Server.MaxHeaderBytes = 4096 })
	cases := []struct {
		name, raw string
		status    int
	}{
		{"garbage", "NOT HTTP AT ALL\r\n\r\n", 400},
		{"CL and TE", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"TE and CL", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n", 400},
		{"conflicting CL", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde", 400},
		{"bad CL", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -4\r\n\r\n", 400},
		{"unknown TE", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 400},
		{"header too large", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 8000) + "\r\n\r\n", 431},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, _ := rawRequest(t, h.addr, c.raw)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.status)
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("%d malformed requests reached the backend", n)
	}
}

func TestReadHeaderTimeout(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {})
	h := startProxy(t, []string{be}, func(s *policy.Snapshot, _ *policy.App) { s.Server.ReadHeaderTimeout = 200 * time.Millisecond })
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n") // never finished: slowloris
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("connection not closed by the read-header timeout: %v", err)
	}
	if len(b) > 0 && !strings.HasPrefix(string(b), "HTTP/1.1 408") {
		t.Fatalf("unexpected answer to a stalled head: %q", b)
	}
}

func TestIdleTimeout(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {})
	h := startProxy(t, []string{be}, func(s *policy.Snapshot, _ *policy.App) { s.Server.IdleTimeout = 200 * time.Millisecond })
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("first request: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection not closed: %v", err)
	}
	if time.Since(start) > 4*time.Second {
		t.Fatalf("idle close took too long")
	}
}

func TestBackendErrors(t *testing.T) {
	t.Run("connect refused is 502", func(t *testing.T) {
		dead := freeAddr(t) // nothing listens there
		h := startProxy(t, []string{dead}, nil)
		resp, _ := rawRequest(t, h.addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.StatusCode != 502 {
			t.Fatalf("status %d, want 502", resp.StatusCode)
		}
		// The dead backend is now ejected: the next answer is the fast 503.
		resp, _ = rawRequest(t, h.addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || resp.Header.Get("X-Sentry-Reject") != "no_backend" {
			t.Fatalf("status %d headers %v, want fast 503 no_backend with Retry-After", resp.StatusCode, resp.Header)
		}
	})
	t.Run("slow backend is 504", func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		be := backend(t, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-time.After(5 * time.Second):
			}
		})
		h := startProxy(t, []string{be}, func(_ *policy.Snapshot, a *policy.App) { a.Timeouts.Response = 200 * time.Millisecond })
		start := time.Now()
		resp, _ := rawRequest(t, h.addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.StatusCode != 504 {
			t.Fatalf("status %d, want 504", resp.StatusCode)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("504 after %v: the timeout was retried or ignored", d)
		}
	})
	t.Run("connect failure retried on a live backend", func(t *testing.T) {
		live := backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "live") })
		h := startProxy(t, []string{freeAddr(t), live}, nil)
		for i := 0; i < 10; i++ {
			resp, body := rawRequest(t, h.addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			if resp.StatusCode != 200 || body != "live" {
				t.Fatalf("request %d: %d %q; a dead backend must cost no failure", i, resp.StatusCode, body)
			}
		}
	})
}

func TestHostRouting(t *testing.T) {
	a := backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "A") })
	b := backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "B") })
	h := startProxy(t, []string{a}, func(s *policy.Snapshot, app *policy.App) {
		app.Hosts = []string{"a.example"}
		second := *app
		second.Name, second.Hosts, second.Backends = "b", []string{"b.example"}, policy.Backends{Static: []string{b}}
		s.Apps = append(s.Apps, &second)
	})
	for host, want := range map[string]string{"a.example": "A", "B.Example:8080": "B"} {
		resp, body := rawRequest(t, h.addr, "GET / HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		if resp.StatusCode != 200 || body != want {
			t.Errorf("Host %s: %d %q, want %q", host, resp.StatusCode, body, want)
		}
	}
	resp, _ := rawRequest(t, h.addr, "GET / HTTP/1.1\r\nHost: other.example\r\n\r\n")
	if resp.StatusCode != 404 {
		t.Errorf("unknown host: %d, want 404", resp.StatusCode)
	}
}

func TestWebSocketUpgrade(t *testing.T) {
	// A raw backend: answers 101 and then echoes bytes upper-cased.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil || req.Header.Get("Upgrade") != "websocket" {
					io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
					return
				}
				io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
				buf := make([]byte, 1024)
				for {
					n, err := br.Read(buf)
					if err != nil {
						return
					}
					c.Write([]byte(strings.ToUpper(string(buf[:n]))))
				}
			}(c)
		}
	}()
	h := startProxy(t, []string{ln.Addr().String()}, nil)
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	for _, msg := range []string{"hello", "world"} {
		io.WriteString(c, msg)
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != strings.ToUpper(msg) {
			t.Fatalf("echo %q: got %q %v", msg, buf, err)
		}
	}
	// An open tunnel is not a request in service: it must not inflate the
	// in-flight count that balancing and admission (η) read.
	if n := h.p.cur.Load().apps[0].Pool.Inflight(); n != 0 {
		t.Errorf("in flight with one open tunnel = %d, want 0", n)
	}
	if n := h.p.tunnelCount.Load(); n != 1 {
		t.Errorf("tunnel count = %d, want 1", n)
	}
}

func TestTLSAndHTTP2(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "proto=%s xfp=%s", r.Proto, r.Header.Get("X-Forwarded-Proto"))
	})
	certFile, keyFile := writeTestCert(t)
	h := startProxy(t, []string{be}, func(_ *policy.Snapshot, a *policy.App) {
		a.TLS = &policy.TLS{CertFile: certFile, KeyFile: keyFile}
	})
	for _, proto := range []string{"h2", "http/1.1"} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{proto}}}
		if proto == "h2" {
			if err := http2.ConfigureTransport(tr); err != nil {
				t.Fatal(err)
			}
		} else {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		cl := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		resp, err := cl.Get("https://" + h.addr + "/")
		if err != nil {
			t.Fatalf("%s: %v", proto, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		wantProto := map[string]int{"h2": 2, "http/1.1": 1}[proto]
		if resp.ProtoMajor != wantProto {
			t.Errorf("%s: client spoke HTTP/%d", proto, resp.ProtoMajor)
		}
		if resp.StatusCode != 200 || string(b) != "proto=HTTP/1.1 xfp=https" {
			t.Errorf("%s: %d %q", proto, resp.StatusCode, b)
		}
		tr.CloseIdleConnections()
	}
}

func TestMetricsCountRequests(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {})
	h := startProxy(t, []string{be}, nil)
	for i := 0; i < 3; i++ {
		rawRequest(t, h.addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	if got := testutil.ToFloat64(h.p.metrics.requests.WithLabelValues("web", be, "2xx")); got != 3 {
		t.Errorf("sentry_requests_total{2xx} = %v, want 3", got)
	}
	n, err := testutil.GatherAndCount(h.reg, "sentry_backend_inflight", "sentry_backend_healthy", "sentry_request_duration_seconds")
	if err != nil || n != 5 {
		t.Errorf("gathered %d series (%v), want 5 (inflight, healthy, duration by 3 results)", n, err)
	}
}

func TestIdempotentRetriedOnBrokenConnection(t *testing.T) {
	// One backend hangs up on every request without answering; the other
	// answers. GETs are retried on the good one; a POST is not replayed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				bufio.NewReader(c).ReadString('\n')
				c.Close()
			}()
		}
	}()
	var posts atomic.Int32
	good := backend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" {
			posts.Add(1)
		}
		io.WriteString(w, "good")
	})
	h := startProxy(t, []string{ln.Addr().String(), good}, func(_ *policy.Snapshot, a *policy.App) {
		a.Balance = policy.RoundRobin
		a.Health.Passive.Failures = 0 // keep the bad backend in rotation
	})
	for i := 0; i < 6; i++ {
		resp, body := rawRequest(t, h.addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.StatusCode != 200 || body != "good" {
			t.Fatalf("GET %d: %d %q", i, resp.StatusCode, body)
		}
	}
	var bad int
	for i := 0; i < 6; i++ {
		resp, _ := rawRequest(t, h.addr, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx")
		if resp.StatusCode == 502 {
			bad++
		}
	}
	if bad == 0 || int(posts.Load())+bad != 6 {
		t.Errorf("POSTs: %d got 502, %d reached the good backend; want the bad backend's share to fail, not be replayed", bad, posts.Load())
	}
}

func TestMaxBodyBytesPerApp(t *testing.T) {
	var got atomic.Int64
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		got.Add(n)
	})
	// "small" caps bodies at 10 bytes; "open" has no cap. Both share the
	// listener, so the cap must follow the Host, not the listener.
	h := startProxy(t, []string{be}, func(s *policy.Snapshot, a *policy.App) {
		a.Name, a.Hosts, a.MaxBodyBytes = "small", []string{"small.example"}, 10
		open := *a
		open.Name, open.Hosts, open.MaxBodyBytes = "open", nil, 0
		s.Apps = append(s.Apps, &open)
	})
	resp, _ := rawRequest(t, h.addr, "POST / HTTP/1.1\r\nHost: small.example\r\nContent-Length: 11\r\n\r\nhello world")
	if resp.StatusCode != 413 {
		t.Errorf("11 bytes to a 10-byte app: %d, want 413", resp.StatusCode)
	}
	resp, _ = rawRequest(t, h.addr, "POST / HTTP/1.1\r\nHost: small.example\r\nContent-Length: 5\r\n\r\nhello")
	if resp.StatusCode != 200 {
		t.Errorf("5 bytes to a 10-byte app: %d", resp.StatusCode)
	}
	body := strings.Repeat("x", 100000)
	resp, _ = rawRequest(t, h.addr, "POST / HTTP/1.1\r\nHost: other.example\r\nContent-Length: 100000\r\n\r\n"+body)
	if resp.StatusCode != 200 {
		t.Errorf("100 kB to the uncapped app: %d", resp.StatusCode)
	}
	resp, _ = rawRequest(t, h.addr, "POST / HTTP/1.1\r\nHost: small.example\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
	if resp.StatusCode != 411 {
		t.Errorf("chunked body to a capped app: %d, want 411", resp.StatusCode)
	}
	if got.Load() != 100005 {
		t.Errorf("backend received %d body bytes, want 100005", got.Load())
	}
}

// A body sentry did not relay must not be parsed as the next request.
func TestUnreadBodyClosesConnection(t *testing.T) {
	var hits atomic.Int32
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
	h := startProxy(t, []string{be}, func(_ *policy.Snapshot, a *policy.App) { a.Hosts = []string{"known.example"} })
	smuggled := "GET /smuggled HTTP/1.1\r\nHost: known.example\r\n\r\n"
	body := strings.Repeat("j", 9000) + smuggled
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: unknown.example\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 404 {
		t.Fatalf("first response: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	if resp2, err := http.ReadResponse(br, nil); err == nil {
		t.Fatalf("a second response (%d) came from the unread body: smuggling", resp2.StatusCode)
	}
	if hits.Load() != 0 {
		t.Errorf("the smuggled request reached the backend")
	}
}

func TestNoBackendIs503Even429Configured(t *testing.T) {
	h := startProxy(t, []string{"127.0.0.1:1"}, func(_ *policy.Snapshot, a *policy.App) {
		a.Reject.Status = 429
	})
	rawRequest(t, h.addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n") // ejects the dead backend
	resp, _ := rawRequest(t, h.addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 503 || resp.Header.Get("X-Sentry-Reject") != "no_backend" {
		t.Fatalf("no backend: %d %q, want 503 (a farm with no backend is not a client rate limit)", resp.StatusCode, resp.Header.Get("X-Sentry-Reject"))
	}
}

// waitCounter waits (bounded) until the listener's client-error counter
// of reason reaches want: a refusal may reach the client before the
// counter is written.
func waitCounter(t *testing.T, h *harness, reason string, want float64) {
	t.Helper()
	v := 0.0
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if v = testutil.ToFloat64(h.p.metrics.clientErrors.WithLabelValues(h.addr, reason)); v >= want {
			return
		}
	}
	t.Errorf("%s counter = %v, want %v", reason, v, want)
}

// tlsCapProxy is a TLS proxy on engine e in front of a backend answering
// "ok", with server.max_conns at max.
func tlsCapProxy(t *testing.T, e string, max int) *harness {
	t.Helper()
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	cf, kf := writeTestCert(t)
	return startEngine(t, e, []string{be}, Options{}, func(s *policy.Snapshot, a *policy.App) {
		a.TLS = &policy.TLS{CertFile: cf, KeyFile: kf}
		s.Server.MaxConns = max
	})
}

// getAnswered sends GET / as stream 1 and waits for its response HEADERS:
// the connection is being served.
func getAnswered(t *testing.T, fr *http2.Framer) {
	t.Helper()
	writeGet(t, fr, 1, "/")
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("h2: %v", err)
		}
		switch f := f.(type) {
		case *http2.HeadersFrame:
			if f.StreamID == 1 {
				return
			}
		case *http2.RSTStreamFrame:
			t.Fatalf("h2: stream %d reset: %v", f.StreamID, f.ErrCode)
		case *http2.GoAwayFrame:
			t.Fatalf("h2: GOAWAY %v", f.ErrCode)
		}
	}
}

// TestConnCapShared: server.max_conns is one cap on a TLS listener's
// connections, HTTP/1.1 (on the loops or fasthttp) and h2 together: with
// one of each open and the cap at 2, a third is refused at accept, and
// once the h2 one closes a new one is taken again.
func TestConnCapShared(t *testing.T) {
	for _, e := range []string{policy.EnginePortable, policy.EngineLoops} {
		t.Run(e, func(t *testing.T) {
			h := tlsCapProxy(t, e, 2)
			h1 := dialH1(t, h.addr, nil)
			if got := h1.get(t); got != "200 ok" {
				t.Fatal(got)
			}
			h2conn, err := tls.Dial("tcp", h.addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
			if err != nil {
				t.Fatal(err)
			}
			defer h2conn.Close()
			h2conn.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(h2conn, http2.ClientPreface)
			fr := http2.NewFramer(h2conn, h2conn)
			fr.WriteSettings()
			getAnswered(t, fr)
			if c, err := tls.Dial("tcp", h.addr, &tls.Config{InsecureSkipVerify: true}); err == nil {
				c.Close()
				t.Error("a third connection finished its handshake with max_conns 2 held by one HTTP/1.1 and one h2 connection")
			}
			waitCounter(t, h, "too_many_conns", 1)
			if got := h1.get(t); got != "200 ok" {
				t.Errorf("the HTTP/1.1 connection after the refusal: %q", got)
			}
			h2conn.Close()
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				c, err := tls.Dial("tcp", h.addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
				if err == nil {
					c.Close()
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no connection taken 5 s after the h2 one closed: %v", err)
				}
			}
		})
	}
}

// TestH2CConnCapShared: on a plain listener with h2c, an h2c connection
// and an HTTP/1.1 one count against the same server.max_conns: with the
// cap at 2, a third connection is refused and counted -- by the loops
// with a 503, or, where fasthttp serves alone and the h2c sniffer
// accepts first, closed unanswered.
func TestH2CConnCapShared(t *testing.T) {
	for _, e := range []string{policy.EnginePortable, policy.EngineLoops} {
		t.Run(e, func(t *testing.T) {
			be := backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
			h := startEngine(t, e, []string{be}, Options{}, func(s *policy.Snapshot, a *policy.App) {
				a.H2C = true
				s.Server.MaxConns = 2
			})
			c1, err := net.Dial("tcp", h.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c1.Close()
			c1.SetDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(c1)
			io.WriteString(c1, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
				t.Fatalf("HTTP/1.1: %v %v", resp, err)
			} else {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			_, fr := h2cRaw(t, h.addr)
			getAnswered(t, fr)
			c3, err := net.Dial("tcp", h.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c3.Close()
			c3.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(c3, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c3), nil)
			switch {
			case e == policy.EngineLoops && err != nil:
				t.Errorf("third connection: %v, want the loops' 503", err)
			case e == policy.EngineLoops:
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 503 || !strings.Contains(string(b), "too many connections") {
					t.Errorf("third connection: %d %q, want 503 too many connections", resp.StatusCode, b)
				}
			case err == nil:
				resp.Body.Close()
				t.Errorf("third connection: %d, want it closed unanswered", resp.StatusCode)
			}
			waitCounter(t, h, "too_many_conns", 1)
		})
	}
}

// server.max_conns bounds TLS connections still in their handshake (and
// h2 ones), not only the HTTP/1.1 connections fasthttp counts.
func TestTLSConnCap(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {})
	certFile, keyFile := writeTestCert(t)
	h := startProxy(t, []string{be}, func(s *policy.Snapshot, a *policy.App) {
		a.TLS = &policy.TLS{CertFile: certFile, KeyFile: keyFile}
		s.Server.MaxConns = 2
	})
	// Two connections that never finish their handshake fill the cap.
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	// Wait until the accept loop holds both (bounded), rather than sleep.
	h.p.mu.Lock()
	tl := h.p.mu.fronts[h.addr].tls
	h.p.mu.Unlock()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		tl.mu.Lock()
		n := len(tl.mu.live)
		tl.mu.Unlock()
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the TLS listener holds %d connections after 5s, want 2", n)
		}
	}
	c, err := tls.Dial("tcp", h.addr, &tls.Config{InsecureSkipVerify: true})
	if err == nil {
		c.Close()
		t.Fatal("a third TLS connection was accepted with max_conns 2")
	}
	// The refusal may reach the client before the counter is written:
	// wait for it (bounded).
	v := 0.0
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if v = testutil.ToFloat64(h.p.metrics.clientErrors.WithLabelValues(h.addr, "too_many_conns")); v >= 1 {
			break
		}
	}
	if v < 1 {
		t.Errorf("too_many_conns counter = %v", v)
	}
}
