package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"

	"github.com/sentry-proxy/sentry/policy"
)

// h2cBackend serves fn over h2c on a loopback port and returns its
// address.
func h2cBackend(t *testing.T, fn http.HandlerFunc) string {
	t.Helper()
	s := httptest.NewServer(h2c.NewHandler(fn, &http2.Server{}))
	t.Cleanup(s.Close)
	return s.Listener.Addr().String()
}

// TestH2BackendEarlyAnswerClosesHTTP1Conn: an HTTP/1.1 client's body
// that streams (past request_buffer) to an h2c backend which answers
// before reading it -- 200 or 413 -- gets that answer, and then its
// connection closes: the rest of the body, still in the connection, is
// never read as the next request (here it holds one, which the backend
// must never see). The backend is not blamed.
func TestH2BackendEarlyAnswerClosesHTTP1Conn(t *testing.T) {
	for _, status := range []int{200, 413} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			var smuggled atomic.Int32
			be := h2cBackend(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/smuggled" {
					smuggled.Add(1)
				}
				w.WriteHeader(status)
				fmt.Fprintf(w, "early %s", r.URL.Path)
			})
			h := startProxy(t, []string{be}, func(s *policy.Snapshot, a *policy.App) {
				a.Backends.Protocol = policy.ProtoH2C
				s.Server.RequestBuffer = 16
			})
			c, err := net.Dial("tcp", h.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			smug := "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
			const sent = 100000 // past fasthttp's pre-read: the body streams
			fmt.Fprintf(c, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", sent+len(smug), strings.Repeat("a", sent))
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer while the body is unfinished: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != status || string(b) != "early /a" || !resp.Close {
				t.Fatalf("%d %q close=%v, want %d %q and Connection: close", resp.StatusCode, b, resp.Close, status, "early /a")
			}
			_, _ = io.WriteString(c, smug)
			if resp, err := http.ReadResponse(br, nil); err == nil {
				t.Errorf("the rest of the body was read as a request: %d", resp.StatusCode)
			}
			if n := smuggled.Load(); n != 0 {
				t.Errorf("the backend saw %d smuggled requests", n)
			}
			if f := h.p.cur.Load().apps[0].Pool.Backends()[0].Failures(); f != 0 {
				t.Errorf("%d failures counted against the backend", f)
			}
			// A body sent whole keeps its connection.
			c2, err := net.Dial("tcp", h.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Close()
			_ = c2.SetDeadline(time.Now().Add(5 * time.Second))
			br2 := bufio.NewReader(c2)
			for i := 0; i < 2; i++ {
				_, _ = io.WriteString(c2, "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
				resp, err := http.ReadResponse(br2, nil)
				if err != nil {
					t.Fatalf("whole body %d: %v", i, err)
				}
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != status || string(body) != "early /b" || resp.Close {
					t.Fatalf("whole body %d: %d %q close=%v", i, resp.StatusCode, body, resp.Close)
				}
			}
		})
	}
}

// TestH2BackendClientBodyFailureNotBackends: an HTTP/1.1 client whose
// streamed chunked body turns out malformed halfway, relayed to an h2c
// backend that reads it, is answered 400 -- the client's fault -- and the
// backend is not blamed: after more such requests than
// health.passive.failures it still serves.
func TestH2BackendClientBodyFailureNotBackends(t *testing.T) {
	be := h2cBackend(t, func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		fmt.Fprintf(w, "got %d", len(b))
	})
	h := startProxy(t, []string{be}, func(s *policy.Snapshot, a *policy.App) {
		a.Backends.Protocol = policy.ProtoH2C
		a.Health.Passive.Failures = 2
		s.Server.RequestBuffer = 16
	})
	chunk := strings.Repeat("c", 20000) // past fasthttp's pre-read
	for i := 0; i < 3; i++ {
		resp, body := rawRequest(t, h.addr, "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"+
			fmt.Sprintf("%x\r\n%s\r\nzz\r\n", len(chunk), chunk))
		if resp.StatusCode != 400 {
			t.Errorf("malformed body %d: %d %q, want 400", i, resp.StatusCode, body)
		}
	}
	if f := h.p.cur.Load().apps[0].Pool.Backends()[0].Failures(); f != 0 {
		t.Errorf("%d failures counted against the backend for the client's bodies", f)
	}
	// Streamed bodies sent whole, read whole: the connection stays.
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	for i := 0; i < 2; i++ {
		fmt.Fprintf(c, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(chunk), chunk)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("after %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(body) != fmt.Sprintf("got %d", len(chunk)) || resp.Close {
			t.Errorf("after %d: %d %q close=%v", i, resp.StatusCode, body, resp.Close)
		}
	}
}

// countingListener counts the connections it accepted that are still
// open (closed by the server, which closes when the peer does).
type countingListener struct {
	net.Listener
	open atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.open.Add(1)
	return &countedConn{Conn: c, l: l}, nil
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once atomic.Bool
}

func (c *countedConn) Close() error {
	if !c.once.Swap(true) {
		c.l.open.Add(-1)
	}
	return c.Conn.Close()
}

// waitOpen polls (bounded) until l has want open connections.
func waitOpen(t *testing.T, l *countingListener, want int32, what string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for l.open.Load() != want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := l.open.Load(); n != want {
		t.Errorf("%s: %d backend connections open, want %d", what, n, want)
	}
}

// TestH2BackendConnsEndWithApp: an app's HTTP/2 connection to its backend
// is closed when a reload drops the app, and when the proxy closes; it
// does not stay open, pinged, for the life of the process.
func TestH2BackendConnsEndWithApp(t *testing.T) {
	s := httptest.NewUnstartedServer(h2c.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "ok")
	}), &http2.Server{}))
	cl := &countingListener{Listener: s.Listener}
	s.Listener = cl
	s.Start()
	t.Cleanup(s.Close)
	be := cl.Addr().String()
	h2app := func(_ *policy.Snapshot, a *policy.App) { a.Backends.Protocol = policy.ProtoH2C }
	h := startProxy(t, []string{be}, h2app)
	get := func() {
		t.Helper()
		if resp, body := rawRequest(t, h.addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
	}
	get()
	waitOpen(t, cl, 1, "after a request")
	// The same listener now serves another app: "web" is dropped.
	if err := h.p.Apply(testSnap(h.addr, []string{be}, func(s *policy.Snapshot, a *policy.App) {
		h2app(s, a)
		a.Name = "other"
	})); err != nil {
		t.Fatal(err)
	}
	waitOpen(t, cl, 0, "after the reload that dropped the app")
	get() // "other" dials its own
	waitOpen(t, cl, 1, "after a request to the new app")
	h.close()
	waitOpen(t, cl, 0, "after the proxy closed")
}

// TestH2BackendUpgradeIgnored: an HTTP/1.1 upgrade request to an app
// whose backends speak HTTP/2 is relayed as an ordinary request over
// HTTP/2, without its Upgrade, and the backend's answer comes back; it is
// never sent as HTTP/1.1 bytes to a backend that speaks HTTP/2 only.
func TestH2BackendUpgradeIgnored(t *testing.T) {
	be := h2cBackend(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "proto=%s upgrade=%q", r.Proto, r.Header.Get("Upgrade"))
	})
	h := startProxy(t, []string{be}, func(_ *policy.Snapshot, a *policy.App) { a.Backends.Protocol = policy.ProtoH2C })
	resp, body := rawRequest(t, h.addr, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	if resp.StatusCode != 200 || body != `proto=HTTP/2.0 upgrade=""` {
		t.Fatalf("%d %q, want the backend's ordinary answer over HTTP/2", resp.StatusCode, body)
	}
	if n := h.p.tunnelCount.Load(); n != 0 {
		t.Errorf("%d tunnels open", n)
	}
}

// TestH2BackendUserAgent: the backend gets the client's User-Agent, and
// none when the client sent none -- not http2.Transport's default -- as
// over HTTP/1.1.
func TestH2BackendUserAgent(t *testing.T) {
	be := h2cBackend(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%q", r.Header["User-Agent"])
	})
	h := startProxy(t, []string{be}, func(_ *policy.Snapshot, a *policy.App) { a.Backends.Protocol = policy.ProtoH2C })
	for _, c := range []struct{ line, want string }{{"", `[]`}, {"User-Agent: ua/1\r\n", `["ua/1"]`}} {
		resp, body := rawRequest(t, h.addr, "GET / HTTP/1.1\r\nHost: x\r\n"+c.line+"\r\n")
		if resp.StatusCode != 200 || body != c.want {
			t.Errorf("%q: %d %s, want %s", c.line, resp.StatusCode, body, c.want)
		}
	}
}

// TestH2BackendResponseTimeoutAfterUpload: timeouts.response runs from
// when the request body has been sent whole, not from dispatch: a body
// that streams for longer than it (three parts, 400 ms apart, against a
// 300 ms timeout) from an HTTP/1.1 client and from an h2 client reaches
// the backend, which answers at once, and the answer comes back (not a
// 504 blamed on the backend). A backend that then takes longer than the
// timeout to answer is still cut (504).
func TestH2BackendResponseTimeoutAfterUpload(t *testing.T) {
	be := h2cBackend(t, func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		if r.URL.Path == "/slow" {
			time.Sleep(time.Second)
		}
		fmt.Fprintf(w, "got %d", len(b))
	})
	cf, kf := writeTestCert(t)
	h := startProxy(t, []string{be}, func(s *policy.Snapshot, a *policy.App) {
		a.Backends.Protocol = policy.ProtoH2C
		a.Timeouts.Response = 300 * time.Millisecond
		a.TLS = &policy.TLS{CertFile: cf, KeyFile: kf}
		s.Server.RequestBuffer = 16
		s.Server.BodyMinRate = 0
	})
	part := strings.Repeat("p", 20000) // past fasthttp's pre-read: the body streams
	slowBody := func(w io.Writer) {
		for i := 0; i < 3; i++ {
			if i > 0 {
				time.Sleep(400 * time.Millisecond)
			}
			if _, err := io.WriteString(w, part); err != nil {
				return
			}
		}
	}
	// HTTP/1.1 over TLS.
	for _, c := range []struct{ path, status string }{{"/up", "200"}, {"/slow", "504"}} {
		conn, err := tls.Dial("tcp", h.addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", c.path, 3*len(part))
		slowBody(conn)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		conn.Close()
		if err != nil {
			t.Fatalf("HTTP/1.1 %s: %v", c.path, err)
		}
		if fmt.Sprint(resp.StatusCode) != c.status {
			t.Errorf("HTTP/1.1 %s: %d, want %s", c.path, resp.StatusCode, c.status)
		}
	}
	// h2: the body from a pipe.
	tr := &http2.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	defer tr.CloseIdleConnections()
	pr, pw := io.Pipe()
	go func() { slowBody(pw); pw.Close() }()
	req, _ := http.NewRequest("POST", "https://"+h.addr+"/up", pr)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != fmt.Sprintf("got %d", 3*len(part)) {
		t.Errorf("h2: %d %q", resp.StatusCode, b)
	}
}

// TestH2ClientSeesTruncatedBody: a response body an h2c backend cuts
// short (it resets its stream after part of the body) reaches an h2
// client as a reset stream -- a read error -- never as a complete body
// ending early.
func TestH2ClientSeesTruncatedBody(t *testing.T) {
	be := h2cBackend(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat("x", 1000))
		http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	})
	cf, kf := writeTestCert(t)
	h := startProxy(t, []string{be}, func(_ *policy.Snapshot, a *policy.App) {
		a.Backends.Protocol = policy.ProtoH2C
		a.TLS = &policy.TLS{CertFile: cf, KeyFile: kf}
	})
	tr := &http2.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	defer tr.CloseIdleConnections()
	for i := 0; i < 2; i++ { // the connection survives the reset
		req, _ := http.NewRequest("GET", "https://"+h.addr+"/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Fatalf("%d: a body cut at %d bytes read as complete", resp.StatusCode, len(b))
		}
	}
}

// TestH2BackendHugeHeadIs502: a response head from an HTTP/2 backend
// larger than backendHeaderBytes (x/net would take up to 10 MB) fails the
// exchange with 502, as an oversized HTTP/1.1 head does; a head under
// it passes.
func TestH2BackendHugeHeadIs502(t *testing.T) {
	be := h2cBackend(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("X-Big", strings.Repeat("a", n))
		fmt.Fprint(w, "ok")
	})
	h := startProxy(t, []string{be}, func(_ *policy.Snapshot, a *policy.App) { a.Backends.Protocol = policy.ProtoH2C })
	for _, c := range []struct{ n, want int }{{1 << 10, 200}, {backendHeaderBytes + 1, 502}} {
		resp, body := rawRequest(t, h.addr, fmt.Sprintf("GET /?n=%d HTTP/1.1\r\nHost: x\r\n\r\n", c.n))
		if resp.StatusCode != c.want {
			t.Errorf("%d-byte header: %d %q, want %d", c.n, resp.StatusCode, body, c.want)
		}
	}
}
