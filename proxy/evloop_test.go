//go:build linux

package proxy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/proxy/evloop"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// Tests of the event-loop front end (package proxy/evloop): what it serves
// itself, what it hands off to fasthttp, and how it relays backend
// responses of every shape.

// ---------------------------------------------------------------- helpers

// fastOf returns the event-loop front end of h's listener.
func fastOf(t *testing.T, h *harness) *evloop.Front {
	t.Helper()
	h.p.mu.Lock()
	fe := h.p.mu.fronts[h.addr]
	h.p.mu.Unlock()
	if fe == nil || fe.loops.Load() == nil {
		t.Fatalf("the listener has no event loop (engine %s)", h.p.Engine())
	}
	return fe.loops.Load()
}

// loopDelta reports how the loop counters moved since it was made.
type loopDelta struct {
	ff             *evloop.Front
	served, handed uint64
}

func countFrom(ff *evloop.Front) *loopDelta {
	s, h := ff.Counts()
	return &loopDelta{ff: ff, served: s, handed: h}
}

func (d *loopDelta) check(t *testing.T, served, handed uint64) {
	t.Helper()
	s, h := d.ff.Counts()
	if s-d.served != served || h-d.handed != handed {
		t.Errorf("event loop served %d and handed off %d, want %d and %d", s-d.served, h-d.handed, served, handed)
	}
}

// waitHanded waits (bounded) until the loops have handed off n more
// connections than at d.
func (d *loopDelta) waitHanded(t *testing.T, n uint64) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		if _, h := d.ff.Counts(); h-d.handed >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the event loop did not hand the connection off")
		}
		time.Sleep(time.Millisecond)
	}
}

// gatherCounter returns the value of the counter name{listener=addr}.
func gatherCounter(t *testing.T, reg *prometheus.Registry, name, addr string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "listener" && lp.GetValue() == addr {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{listener=%q}", name, addr)
	return 0
}

// tconn is a test client connection.
type tconn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialProxy(t *testing.T, addr string) *tconn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return &tconn{t: t, c: c, br: bufio.NewReader(c)}
}

// dialProxyTLS is dialProxy over TLS 1.3 with ALPN http/1.1.
func dialProxyTLS(t *testing.T, addr string) *tconn {
	t.Helper()
	raw, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
	c := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS13})
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	return &tconn{t: t, c: c, br: bufio.NewReader(c)}
}

func (c *tconn) write(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.c, s); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// read reads one response to a request of method; the body error is
// returned (a truncated body is a case some tests want).
func (c *tconn) read(method string) (*http.Response, string, error) {
	c.t.Helper()
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		c.t.Fatalf("reading response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), err
}

// do writes raw and reads its whole response.
func (c *tconn) do(raw string) (*http.Response, string) {
	c.t.Helper()
	c.write(raw)
	resp, body, err := c.read(strings.Fields(raw)[0])
	if err != nil {
		c.t.Fatalf("reading body: %v", err)
	}
	return resp, body
}

// expectEOF checks that the proxy closed the connection cleanly.
func (c *tconn) expectEOF() {
	c.t.Helper()
	if b, err := c.br.ReadByte(); err != io.EOF {
		c.t.Errorf("want EOF, got byte %q err %v", b, err)
	}
}

// beReq is a request as a raw backend read it.
type beReq struct {
	method, target string
	header         textproto.MIMEHeader
	body           []byte
	trailer        []string // a chunked body's trailer lines
}

func readBeReq(br *bufio.Reader) (*beReq, error) {
	tp := textproto.NewReader(br)
	line, err := tp.ReadLine()
	if err != nil {
		return nil, err
	}
	parts := strings.SplitN(line, " ", 3)
	if len(parts) != 3 || parts[2] != "HTTP/1.1" {
		return nil, fmt.Errorf("bad request line %q", line)
	}
	hdr, err := tp.ReadMIMEHeader()
	if err != nil {
		return nil, err
	}
	r := &beReq{method: parts[0], target: parts[1], header: hdr}
	switch {
	case strings.EqualFold(hdr.Get("Transfer-Encoding"), "chunked"):
		if r.body, err = io.ReadAll(httputil.NewChunkedReader(br)); err != nil {
			return nil, err
		}
		for { // trailer section
			l, err := tp.ReadLine()
			if err != nil {
				return nil, err
			}
			if l == "" {
				break
			}
			r.trailer = append(r.trailer, l)
		}
	case hdr.Get("Content-Length") != "":
		n, err := strconv.Atoi(hdr.Get("Content-Length"))
		if err != nil {
			return nil, err
		}
		r.body = make([]byte, n)
		if _, err := io.ReadFull(br, r.body); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// rawBackend is a hand-written HTTP/1.1 backend: handle answers each
// request (n is its index on connection conn) by writing to c, and says
// whether to keep the connection.
type rawBackend struct {
	addr     string
	accepted atomic.Int32
	mu       sync.Mutex
	reqs     []*beReq
	conns    map[net.Conn]bool
}

type beHandler func(rb *rawBackend, conn, n int, r *beReq, c net.Conn, br *bufio.Reader) bool

func startRawBackend(t testing.TB, handle beHandler) *rawBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rb := &rawBackend{addr: ln.Addr().String(), conns: map[net.Conn]bool{}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			id := int(rb.accepted.Add(1))
			rb.mu.Lock()
			rb.conns[c] = true
			rb.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() {
					c.Close()
					rb.mu.Lock()
					delete(rb.conns, c)
					rb.mu.Unlock()
				}()
				br := bufio.NewReader(c)
				for n := 0; ; n++ {
					r, err := readBeReq(br)
					if err != nil {
						return
					}
					rb.mu.Lock()
					rb.reqs = append(rb.reqs, r)
					rb.mu.Unlock()
					if !handle(rb, id, n, r, c, br) {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		rb.mu.Lock()
		for c := range rb.conns {
			c.Close()
		}
		rb.mu.Unlock()
		wg.Wait()
	})
	return rb
}

// count returns how many requests for target the backend read.
func (rb *rawBackend) count(method, target string) int {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	n := 0
	for _, r := range rb.reqs {
		if r.method == method && r.target == target {
			n++
		}
	}
	return n
}

func (rb *rawBackend) all() []*beReq {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	return append([]*beReq(nil), rb.reqs...)
}

// echo answers "METHOD TARGET BODY" with a Content-Length.
func echo(_ *rawBackend, _, _ int, r *beReq, c net.Conn, _ *bufio.Reader) bool {
	body := r.method + " " + r.target + " " + string(r.body)
	_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	return err == nil
}

// ---------------------------------------------------------------- 1

// TestEvloopKeepAliveFastPath: plain GETs on one keep-alive connection are
// all served by the loop, forwarded with the proxy's headers and without
// hop-by-hop ones, and each answer carries the request ID.
func TestEvloopKeepAliveFastPath(t *testing.T) {
	rb := startRawBackend(t, func(_ *rawBackend, _, _ int, r *beReq, c net.Conn, _ *bufio.Reader) bool {
		// The backend's own hop-by-hop headers and request ID must not
		// reach the client.
		body := r.target
		_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nKeep-Alive: timeout=5\r\nConnection: keep-alive\r\nProxy-Authenticate: Basic\r\nX-Request-Id: backend-made\r\nX-App: 1\r\n\r\n%s", len(body), body)
		return err == nil
	})
	h := startProxy(t, []string{rb.addr}, nil)
	d := countFrom(fastOf(t, h))
	c := dialProxy(t, h.addr)
	const n = 12
	var ids []string
	for i := 0; i < n; i++ {
		raw := fmt.Sprintf("GET /k/%d?q=%d HTTP/1.1\r\nHost: example.com\r\nConnection: keep-alive\r\nKeep-Alive: 300\r\nTE: trailers\r\n"+
			"Proxy-Connection: keep-alive\r\nTrailer: X-Sum\r\nProxy-Authorization: Basic Zm9v\r\nX-Forwarded-For: 6.6.6.6\r\n"+
			"X-Forwarded-Proto: https\r\nX-Forwarded-Host: evil\r\nX-Request-Id: forged\r\nX-Keep: %d\r\n\r\n", i, i, i)
		resp, body := c.do(raw)
		if want := fmt.Sprintf("/k/%d?q=%d", i, i); resp.StatusCode != 200 || body != want {
			t.Fatalf("request %d: %d %q, want 200 %q", i, resp.StatusCode, body, want)
		}
		if resp.Close {
			t.Fatalf("request %d: keep-alive connection closed", i)
		}
		// Counted by the time the client has the response.
		if v := testutil.ToFloat64(h.p.metrics.requests.WithLabelValues("web", rb.addr, "2xx")); v != float64(i+1) {
			t.Errorf("after response %d: sentry_requests_total{2xx} = %v", i+1, v)
		}
		id := resp.Header.Get("X-Request-Id")
		if len(id) != 32 || id == "forged" {
			t.Errorf("request %d: response X-Request-Id %q, want a fresh 32-hex id", i, id)
		}
		ids = append(ids, id)
		for _, k := range []string{"Keep-Alive", "Proxy-Authenticate", "Connection"} {
			if v := resp.Header.Get(k); v != "" {
				t.Errorf("request %d: hop-by-hop response header %s: %q reached the client", i, k, v)
			}
		}
		if resp.Header.Get("X-App") != "1" {
			t.Errorf("request %d: end-to-end response header dropped", i)
		}
		if got := resp.Header.Values("X-Request-Id"); len(got) != 1 {
			t.Errorf("request %d: X-Request-Id %q, want exactly one", i, got)
		}
	}
	d.check(t, n, 0)
	if v := gatherCounter(t, h.reg, "sentry_evloop_requests_total", h.addr); v != n {
		t.Errorf("sentry_evloop_requests_total = %v, want %d", v, n)
	}
	if v := gatherCounter(t, h.reg, "sentry_evloop_handoffs_total", h.addr); v != 0 {
		t.Errorf("sentry_evloop_handoffs_total = %v, want 0", v)
	}

	reqs := rb.all()
	if len(reqs) != n {
		t.Fatalf("backend saw %d requests, want %d", len(reqs), n)
	}
	if a := rb.accepted.Load(); a != 1 {
		t.Errorf("backend saw %d connections for %d sequential requests, want 1 (upstream keep-alive)", a, n)
	}
	for i, r := range reqs {
		hd := r.header
		if r.method != "GET" || r.target != fmt.Sprintf("/k/%d?q=%d", i, i) {
			t.Errorf("request %d reached the backend as %s %s", i, r.method, r.target)
		}
		for k, want := range map[string]string{
			"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "http", "X-Forwarded-Host": "example.com",
			"Host": "example.com", "X-Keep": strconv.Itoa(i), "X-Request-Id": ids[i],
		} {
			if got := hd.Values(k); len(got) != 1 || got[0] != want {
				t.Errorf("request %d: backend got %s %q, want %q", i, k, got, want)
			}
		}
		for _, k := range []string{"Connection", "Keep-Alive", "Te", "Proxy-Connection", "Trailer", "Proxy-Authorization"} {
			if v, ok := hd[k]; ok {
				t.Errorf("request %d: hop-by-hop %s: %q forwarded", i, k, v)
			}
		}
	}

	// Connection: close is honoured: answered, then a clean end.
	resp, body := c.do("GET /last HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != 200 || body != "/last" || !resp.Close {
		t.Fatalf("Connection: close request: %d %q close=%v", resp.StatusCode, body, resp.Close)
	}
	c.expectEOF()
	d.check(t, n+1, 0)
}

// ---------------------------------------------------------------- 2

// TestEvloopHandoff: requests the loop does not serve itself are handed to
// fasthttp, with what was read so far, and answered correctly there.
func TestEvloopHandoff(t *testing.T) {
	rb := startRawBackend(t, func(rb *rawBackend, conn, n int, r *beReq, c net.Conn, br *bufio.Reader) bool {
		if r.header.Get("Upgrade") == "test" {
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: Upgrade\r\n\r\n")
			buf := make([]byte, 512)
			for {
				k, err := br.Read(buf)
				if err != nil {
					return false
				}
				c.Write(bytes.ToUpper(buf[:k]))
			}
		}
		if r.header.Get("Expect") != "" {
			body := "Expect forwarded"
			fmt.Fprintf(c, "HTTP/1.1 500 Oops\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			return true
		}
		return echo(rb, conn, n, r, c, br)
	})
	h := startProxy(t, []string{rb.addr}, nil)
	ff := fastOf(t, h)

	cases := []struct {
		name string
		run  func(t *testing.T, c *tconn, d *loopDelta) (*http.Response, string)
		want string
	}{
		{"chunked request body", func(t *testing.T, c *tconn, _ *loopDelta) (*http.Response, string) {
			return c.do("POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
		}, "POST /chunked hello world"},
		{"Expect: 100-continue", func(t *testing.T, c *tconn, _ *loopDelta) (*http.Response, string) {
			c.write("PUT /expect HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
			line, err := c.br.ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
				t.Fatalf("want 100 Continue before the body, got %q %v", line, err)
			}
			if l, _ := c.br.ReadString('\n'); l != "\r\n" {
				t.Fatalf("100 Continue followed by %q", l)
			}
			c.write("data")
			resp, body, err := c.read("PUT")
			if err != nil {
				t.Fatal(err)
			}
			return resp, body
		}, "PUT /expect data"},
		{"head split across two writes", func(t *testing.T, c *tconn, d *loopDelta) (*http.Response, string) {
			c.write("GET /slow HTTP/1.1\r\nHo")
			d.waitHanded(t, 1) // the loop read the partial head and gave up on it
			c.write("st: x\r\n\r\n")
			resp, body, err := c.read("GET")
			if err != nil {
				t.Fatal(err)
			}
			return resp, body
		}, "GET /slow "},
		{"Upgrade", func(t *testing.T, c *tconn, _ *loopDelta) (*http.Response, string) {
			c.write("GET /up HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
			resp, err := http.ReadResponse(c.br, &http.Request{Method: "GET"})
			if err != nil || resp.StatusCode != 101 {
				t.Fatalf("upgrade: %v %v", resp, err)
			}
			c.write("tunnel")
			buf := make([]byte, 6)
			if _, err := io.ReadFull(c.br, buf); err != nil {
				t.Fatalf("tunnel: %v", err)
			}
			return resp, string(buf)
		}, "TUNNEL"},
		{"escaped dots", func(t *testing.T, c *tconn, _ *loopDelta) (*http.Response, string) {
			return c.do("GET /a/%2e%2e/b HTTP/1.1\r\nHost: x\r\n\r\n")
		}, ""},
		{"dot-dot segment", func(t *testing.T, c *tconn, _ *loopDelta) (*http.Response, string) {
			return c.do("GET /a/../b HTTP/1.1\r\nHost: x\r\n\r\n")
		}, ""},
		{"Connection lists a header", func(t *testing.T, c *tconn, _ *loopDelta) (*http.Response, string) {
			return c.do("GET /conn HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, X-Secret\r\nX-Secret: s\r\n\r\n")
		}, "GET /conn "},
		{"body in a later read", func(t *testing.T, c *tconn, d *loopDelta) (*http.Response, string) {
			c.write("POST /later HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n")
			d.waitHanded(t, 1)
			c.write("abcde")
			resp, body, err := c.read("POST")
			if err != nil {
				t.Fatal(err)
			}
			return resp, body
		}, "POST /later abcde"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := countFrom(ff)
			before := len(rb.all())
			c := dialProxy(t, h.addr)
			resp, body := tc.run(t, c, d)
			if tc.name != "Upgrade" && resp.StatusCode != 200 {
				t.Fatalf("status %d (%q)", resp.StatusCode, body)
			}
			reqs := rb.all()
			if len(reqs) != before+1 {
				t.Fatalf("backend saw %d requests, want 1", len(reqs)-before)
			}
			want := tc.want
			if want == "" {
				// The target as fasthttp relayed it (it does not
				// rewrite the request-target; it classifies by the
				// normalised path).
				want = "GET " + reqs[len(reqs)-1].target + " "
			}
			if body != want {
				t.Errorf("body %q, want %q", body, want)
			}
			if tc.name == "Connection lists a header" {
				if reqs := rb.all(); reqs[len(reqs)-1].header.Get("X-Secret") != "" {
					t.Errorf("a header named in Connection was forwarded")
				}
			}
			d.check(t, 0, 1)
		})
	}
}

// TestEvloopRepeatedLengthHandedOff: a request with Content-Length twice
// (equal) is not the loop's; fasthttp refuses it, as it would have had the
// head come in two reads.
func TestEvloopRepeatedLengthHandedOff(t *testing.T) {
	rb := startRawBackend(t, echo)
	h := startProxy(t, []string{rb.addr}, nil)
	d := countFrom(fastOf(t, h))
	resp, _ := dialProxy(t, h.addr).do("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc")
	if resp.StatusCode != 400 {
		t.Errorf("status %d, want 400", resp.StatusCode)
	}
	if n := len(rb.all()); n != 0 {
		t.Errorf("backend saw %d requests", n)
	}
	d.check(t, 0, 1)
}

// ---------------------------------------------------------------- 3

// shapes answers by path with the response shapes the loop must relay.
func shapes(rb *rawBackend, conn, n int, r *beReq, c net.Conn, br *bufio.Reader) bool {
	w := func(s string) bool { _, err := io.WriteString(c, s); return err == nil }
	switch r.target {
	case "/cl":
		return w("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Shape: cl\r\nX-Request-Id: backend-made\r\n\r\nhello")
	case "/chunked":
		return w("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Sum: abc\r\n\r\n")
	case "/chunked-pieces":
		// Head, chunk sizes, data and the end arrive in separate reads.
		for _, p := range []string{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "3\r", "\nabc", "\r\n", "A\r\n0123456789\r\n0\r\n", "X-Sum: 1\r\n", "\r\n"} {
			if !w(p) {
				return false
			}
			time.Sleep(5 * time.Millisecond)
		}
		return true
	case "/te-and-cl":
		return w("HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
	case "/close":
		w("HTTP/1.1 200 OK\r\nX-Shape: close\r\n\r\n")
		w(strings.Repeat("until close ", 1000))
		return false
	case "/http10":
		w("HTTP/1.0 200 OK\r\nContent-Length: 4\r\n\r\nold!")
		return false
	case "/head":
		return w("HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nX-Shape: head\r\n\r\n")
	case "/204":
		return w("HTTP/1.1 204 No Content\r\nX-Shape: 204\r\n\r\n")
	case "/304":
		return w("HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n\r\n")
	case "/interim":
		w("HTTP/1.1 100 Continue\r\n\r\n")
		time.Sleep(10 * time.Millisecond) // most likely a read of its own
		return w("HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Shape: final\r\n\r\nok")
	case "/101":
		w("HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n")
		return false
	case "/badstatus":
		return w("HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n")
	case "/garbage":
		return w("hello there\r\n\r\n")
	case "/hugehead":
		return w("HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("b", 20000) + "\r\nContent-Length: 0\r\n\r\n")
	case "/silent":
		io.Copy(io.Discard, br) // until the proxy gives up and closes
		return false
	case "/hangup":
		return false
	case "/truncated":
		w("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part")
		return false
	}
	return w("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
}

// TestEvloopResponseShapes: every shape of backend response is relayed
// (or refused) by the loop itself, and the client connection is left in
// step for the next request.
func TestEvloopResponseShapes(t *testing.T) {
	rb := startRawBackend(t, shapes)
	h := startProxy(t, []string{rb.addr}, func(_ *policy.Snapshot, a *policy.App) {
		a.Timeouts.Response = 200 * time.Millisecond
		a.Health.Passive.Failures = 0 // broken answers must not eject the only backend
	})
	ff := fastOf(t, h)
	const (
		keep   = iota // the connection serves another request after
		closes        // Connection: close, the whole body, then EOF
		cut           // the connection is cut mid-body
	)
	cases := []struct {
		name, method, path string
		status             int
		body               string
		after              int
		check              func(t *testing.T, resp *http.Response)
		sent               int // times the backend must have read the request
	}{
		{"content-length", "GET", "/cl", 200, "hello", keep, func(t *testing.T, r *http.Response) {
			if r.ContentLength != 5 || r.Header.Get("X-Shape") != "cl" {
				t.Errorf("headers %v", r.Header)
			}
			if id := r.Header.Values("X-Request-Id"); len(id) != 1 || len(id[0]) != 32 {
				t.Errorf("X-Request-Id %q: the backend's must be replaced by the proxy's", id)
			}
		}, 1},
		{"chunked with trailers", "GET", "/chunked", 200, "hello world", keep, func(t *testing.T, r *http.Response) {
			if len(r.TransferEncoding) != 1 || r.TransferEncoding[0] != "chunked" {
				t.Errorf("transfer encoding %v", r.TransferEncoding)
			}
			if r.Trailer.Get("X-Sum") != "abc" {
				t.Errorf("trailer %v", r.Trailer)
			}
		}, 1},
		{"chunked in pieces", "GET", "/chunked-pieces", 200, "abc0123456789", keep, func(t *testing.T, r *http.Response) {
			if r.Trailer.Get("X-Sum") != "1" {
				t.Errorf("trailer %v", r.Trailer)
			}
		}, 1},
		{"body until close", "GET", "/close", 200, strings.Repeat("until close ", 1000), closes, func(t *testing.T, r *http.Response) {
			if r.Header.Get("X-Shape") != "close" || r.ContentLength != -1 {
				t.Errorf("headers %v length %d", r.Header, r.ContentLength)
			}
		}, 1},
		{"HTTP/1.0 backend", "GET", "/http10", 200, "old!", keep, nil, 1},
		{"HEAD with a length", "HEAD", "/head", 200, "", keep, func(t *testing.T, r *http.Response) {
			if r.ContentLength != 1234 || r.Header.Get("X-Shape") != "head" {
				t.Errorf("length %d headers %v", r.ContentLength, r.Header)
			}
		}, 1},
		{"204", "GET", "/204", 204, "", keep, func(t *testing.T, r *http.Response) {
			if r.Header.Get("X-Shape") != "204" {
				t.Errorf("headers %v", r.Header)
			}
		}, 1},
		{"304", "GET", "/304", 304, "", keep, nil, 1},
		{"interim responses dropped", "GET", "/interim", 200, "ok", keep, func(t *testing.T, r *http.Response) {
			if r.Header.Get("X-Shape") != "final" || r.Header.Get("Link") != "" {
				t.Errorf("headers %v", r.Header)
			}
		}, 1},
		{"101 to a plain request", "GET", "/101", 502, "sentry: bad gateway\n", keep, nil, 1},
		{"malformed status line", "GET", "/badstatus", 502, "sentry: bad gateway\n", keep, nil, 1},
		{"not HTTP", "GET", "/garbage", 502, "sentry: bad gateway\n", keep, nil, 1},
		{"head too large", "GET", "/hugehead", 502, "sentry: bad gateway\n", keep, nil, 1},
		{"no response head", "GET", "/silent", 504, "sentry: gateway timeout\n", keep, nil, 1},
		{"hangup before answering, POST", "POST", "/hangup", 502, "sentry: bad gateway\n", keep, nil, 1},
		{"hangup before answering, GET (retried)", "GET", "/hangup", 502, "sentry: bad gateway\n", keep, nil, pipeline.MaxAttempts},
		{"truncated body", "GET", "/truncated", 200, "only part", cut, nil, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := countFrom(ff)
			c := dialProxy(t, h.addr)
			raw := tc.method + " " + tc.path + " HTTP/1.1\r\nHost: x\r\n\r\n"
			if tc.method == "POST" {
				raw = tc.method + " " + tc.path + " HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
			}
			start := time.Now()
			c.write(raw)
			resp, body, err := c.read(tc.method)
			elapsed := time.Since(start)
			if resp.StatusCode != tc.status || body != tc.body {
				t.Fatalf("got %d %q, want %d %q", resp.StatusCode, trunc(body), tc.status, trunc(tc.body))
			}
			if tc.after == cut {
				if err != io.ErrUnexpectedEOF {
					t.Fatalf("truncated body read ended with %v, want unexpected EOF", err)
				}
			} else if err != nil {
				t.Fatalf("body: %v", err)
			}
			if tc.check != nil {
				tc.check(t, resp)
			}
			if tc.status == 504 && (elapsed < 190*time.Millisecond || elapsed > 2*time.Second) {
				t.Errorf("504 after %v, want about the 200ms response timeout", elapsed)
			}
			n := rb.count(tc.method, tc.path)
			if tc.method == "GET" && tc.path == "/hangup" {
				// A hang-up on a connection reused from the loop's pool
				// reads as a stale keep-alive connection and is retried
				// without counting (pipeline.MaxStaleRetries); the earlier
				// cases left the loops at most one pooled connection each.
				if n < tc.sent || n > tc.sent+1 {
					t.Errorf("backend read the request %d times, want %d fresh attempts and at most one on a pooled connection", n, tc.sent)
				}
			} else if n != tc.sent {
				t.Errorf("backend read the request %d times, want %d", n, tc.sent)
			}
			switch tc.after {
			case keep:
				if resp.Close {
					t.Fatalf("connection closed after the response")
				}
				resp, body := c.do("GET /cl HTTP/1.1\r\nHost: x\r\n\r\n")
				if resp.StatusCode != 200 || body != "hello" {
					t.Fatalf("next request on the connection: %d %q", resp.StatusCode, body)
				}
				d.check(t, 2, 0)
			case closes:
				if !resp.Close {
					t.Errorf("no Connection: close with a body delimited by the close")
				}
				c.expectEOF()
				d.check(t, 1, 0)
			case cut:
				c.expectEOF()
				d.check(t, 1, 0)
			}
		})
	}
	rb.mu.Lock()
	rb.reqs = nil
	rb.mu.Unlock()

	// Both Transfer-Encoding and Content-Length: the client must get one
	// framing only (RFC 9112 §6.3: the proxy removes Content-Length).
	t.Run("chunked and content-length", func(t *testing.T) {
		c := dialProxy(t, h.addr)
		c.write("GET /te-and-cl HTTP/1.1\r\nHost: x\r\n\r\n")
		tp := textproto.NewReader(c.br)
		line, err := tp.ReadLine()
		if err != nil || line != "HTTP/1.1 200 OK" {
			t.Fatalf("status line %q %v", line, err)
		}
		hdr, err := tp.ReadMIMEHeader()
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Get("Transfer-Encoding") != "chunked" || hdr.Get("Content-Length") != "" {
			t.Errorf("framing headers to the client: Transfer-Encoding %q, Content-Length %q", hdr.Get("Transfer-Encoding"), hdr.Get("Content-Length"))
		}
		body, err := io.ReadAll(httputil.NewChunkedReader(c.br))
		if err != nil || string(body) != "abc" {
			t.Fatalf("body %q %v", body, err)
		}
		if l, _ := tp.ReadLine(); l != "" {
			t.Fatalf("after the last chunk: %q", l)
		}
		resp, b := c.do("GET /cl HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.StatusCode != 200 || b != "hello" {
			t.Fatalf("next request: %d %q", resp.StatusCode, b)
		}
	})
}

func trunc(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// TestEvloopStaleKeepAliveRetried: a keep-alive backend connection the
// backend closes as the next request arrives is not an error: an
// idempotent request is sent again on a new connection.
func TestEvloopStaleKeepAliveRetried(t *testing.T) {
	rb := startRawBackend(t, func(rb *rawBackend, conn, n int, r *beReq, c net.Conn, br *bufio.Reader) bool {
		if n > 0 {
			return false // stale: hang up on the second request of a connection
		}
		body := fmt.Sprintf("conn %d", conn)
		_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		return err == nil
	})
	h := startProxy(t, []string{rb.addr}, nil)
	d := countFrom(fastOf(t, h))
	c := dialProxy(t, h.addr)
	for i := 1; i <= 3; i++ {
		resp, body := c.do("GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
		if want := fmt.Sprintf("conn %d", i); resp.StatusCode != 200 || body != want {
			t.Fatalf("request %d: %d %q, want 200 %q", i, resp.StatusCode, body, want)
		}
	}
	// Requests 2 and 3 each went first to the previous, stale connection.
	if n := rb.count("GET", "/x"); n != 5 {
		t.Errorf("backend read %d requests, want 5 (two stale attempts retried)", n)
	}
	if f := h.p.cur.Load().apps[0].Pool.Backends()[0].Failures(); f != 0 {
		t.Errorf("stale keep-alive connections counted %d failures against the backend", f)
	}
	d.check(t, 3, 0)
}

// TestEvloopManyStaleKeepAlivesRetried: a backend restarted under load
// leaves each loop several pooled connections that are closed under the
// next requests. Those are not attempts (pipeline.MaxStaleRetries): with
// eight of them spread over the loops, every request still gets its
// answer from a new connection, never a 502 after three stale ones.
func TestEvloopManyStaleKeepAlivesRetried(t *testing.T) {
	const k = 8
	var first atomic.Int32
	all := make(chan struct{})
	rb := startRawBackend(t, func(rb *rawBackend, conn, n int, r *beReq, c net.Conn, br *bufio.Reader) bool {
		if n > 0 || conn > k {
			if n > 0 {
				return false // the "restarted" backend: a pooled connection hangs up
			}
			_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh")
			return err == nil
		}
		// The first k requests are held until all k are in, so that the
		// loops open k connections and pool them.
		if first.Add(1) == k {
			close(all)
		}
		select {
		case <-all:
		case <-time.After(5 * time.Second):
		}
		_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
		return err == nil
	})
	h := startProxy(t, []string{rb.addr}, nil)
	cs := make([]*tconn, k)
	for i := range cs {
		cs[i] = dialProxy(t, h.addr)
	}
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.write("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
		}()
	}
	wg.Wait()
	for i, c := range cs {
		resp, body, err := c.read("GET")
		if err != nil || resp.StatusCode != 200 || body != "first" {
			t.Fatalf("first round, client %d: %v %v %q", i, err, resp, body)
		}
	}
	if n := rb.accepted.Load(); n != k {
		t.Fatalf("backend accepted %d connections in the first round, want %d", n, k)
	}
	for i, c := range cs {
		resp, body := c.do("GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.StatusCode != 200 || body != "fresh" {
			t.Fatalf("after the restart, client %d: %d %q, want 200 fresh", i, resp.StatusCode, body)
		}
	}
	if f := h.p.cur.Load().apps[0].Pool.Backends()[0].Failures(); f != 0 {
		t.Errorf("stale keep-alive connections counted %d failures against the backend", f)
	}
}

// TestEvloopLargeResponseSlowClient: a large response to a client that
// does not read at first stops the loop reading the backend (no buffering
// of the whole body, and the backend is not blamed for the client's pace),
// and arrives intact.
func TestEvloopLargeResponseSlowClient(t *testing.T) {
	const size = 8 << 20
	payload := make([]byte, size)
	_, _ = rand.NewChaCha8([32]byte{1, 2, 3}).Read(payload)
	want := sha256.Sum256(payload)
	var written atomic.Int64
	rb := startRawBackend(t, func(_ *rawBackend, _, _ int, r *beReq, c net.Conn, _ *bufio.Reader) bool {
		if r.target != "/big" {
			_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			return err == nil
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", size)
		for off := 0; off < size; off += 32 << 10 {
			n, err := c.Write(payload[off:min(off+32<<10, size)])
			written.Add(int64(n))
			if err != nil {
				return false
			}
		}
		return true
	})
	// A response timeout shorter than the client's pause: the pause is
	// the client's, not the backend's.
	h := startProxy(t, []string{rb.addr}, func(_ *policy.Snapshot, a *policy.App) { a.Timeouts.Response = 200 * time.Millisecond })
	d := countFrom(fastOf(t, h))
	c := dialProxy(t, h.addr)
	// The kernel's socket buffers hold a few MiB whatever the proxy does;
	// what the proxy holds shows in its heap.
	stop := heapWatch()
	c.write("GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(600 * time.Millisecond) // the slow client: not reading
	peak := stop()
	t.Logf("while the client did not read: backend wrote %d KiB, proxy heap grew by %d KiB", written.Load()>>10, peak>>10)
	if peak > size/2 {
		t.Errorf("heap grew by %d KiB while a client did not read an %d KiB body: the proxy buffers it", peak>>10, size>>10)
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.ContentLength != size {
		t.Fatalf("status %d length %d", resp.StatusCode, resp.ContentLength)
	}
	hs := sha256.New()
	// Slowly at first, then at full speed.
	buf := make([]byte, 4096)
	for i := 0; i < 20; i++ {
		n, err := resp.Body.Read(buf)
		hs.Write(buf[:n])
		if err != nil {
			t.Fatalf("slow read %d: %v", i, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	n, err := io.Copy(hs, resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("body cut after %d more bytes: %v", n, err)
	}
	if got := hs.Sum(nil); !bytes.Equal(got, want[:]) {
		t.Fatalf("body hash differs")
	}
	resp2, body := c.do("GET /small HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp2.StatusCode != 200 || body != "ok" {
		t.Fatalf("next request: %d %q", resp2.StatusCode, body)
	}
	d.check(t, 2, 0)
}

// TestEvloopStalledClientCut: a client that stops reading is cut after the
// write timeout (not the backend's response timeout, which is shorter: the
// stall is not the backend's), and its backend connection with it. The
// app's responses are not buffered (response_buffering: off), so the
// backend waits for the client; TestStalledClientBuffered is the same
// client with buffering on.
func TestEvloopStalledClientCut(t *testing.T) {
	const size = 64 << 20
	chunk := make([]byte, 64<<10)
	backendDone := make(chan error, 1)
	rb := startRawBackend(t, func(_ *rawBackend, _, _ int, _ *beReq, c net.Conn, _ *bufio.Reader) bool {
		_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", size)
		for off := 0; off < size && err == nil; off += len(chunk) {
			_, err = c.Write(chunk)
		}
		backendDone <- err
		return false
	})
	h := startProxy(t, []string{rb.addr}, func(s *policy.Snapshot, a *policy.App) {
		s.Server.WriteTimeout = 300 * time.Millisecond
		a.Timeouts.Response = 100 * time.Millisecond
		a.ResponseBufferingOff = true
	})
	d := countFrom(fastOf(t, h))
	c := dialProxy(t, h.addr)
	start := time.Now()
	c.write("GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case err := <-backendDone:
		if err == nil {
			t.Fatal("the backend wrote the whole body to a client that read nothing")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stalled client's exchange was never cut")
	}
	if e := time.Since(start); e < 300*time.Millisecond {
		t.Errorf("cut after %v, before the 300ms write timeout", e)
	}
	n, _ := io.Copy(io.Discard, c.br) // what the kernel had buffered, then the end
	if n >= size {
		t.Errorf("the client got the whole body")
	}
	for reason, want := range map[string]float64{"client_gone": 1, "backend_timeout": 0} {
		if v := testutil.ToFloat64(h.p.metrics.errors.WithLabelValues("web", reason)); v != want {
			t.Errorf("errors{%s} = %v, want %v", reason, v, want)
		}
	}
	d.check(t, 1, 0)
}

// ---------------------------------------------------------------- 4

// TestEvloopPipelining: requests written back to back in one write are
// answered in order, by the loop.
func TestEvloopPipelining(t *testing.T) {
	rb := startRawBackend(t, echo)
	h := startProxy(t, []string{rb.addr}, nil)
	d := countFrom(fastOf(t, h))
	c := dialProxy(t, h.addr)
	c.write("GET /p1 HTTP/1.1\r\nHost: x\r\n\r\n" +
		"POST /p2 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" +
		"GET /p3 HTTP/1.1\r\nHost: x\r\n\r\n")
	for _, want := range []struct{ method, body string }{{"GET", "GET /p1 "}, {"POST", "POST /p2 hello"}, {"GET", "GET /p3 "}} {
		resp, body, err := c.read(want.method)
		if err != nil || resp.StatusCode != 200 || body != want.body {
			t.Fatalf("got %d %q %v, want %q", resp.StatusCode, body, err, want.body)
		}
	}
	d.check(t, 3, 0)
	// And the connection goes on.
	resp, body := c.do("GET /p4 HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 200 || body != "GET /p4 " {
		t.Fatalf("after the pipeline: %d %q", resp.StatusCode, body)
	}
	d.check(t, 4, 0)

	// A pipelined request that is not whole yet when the first is done is
	// handed off with its bytes; fasthttp completes it.
	t.Run("partial second request", func(t *testing.T) {
		d := countFrom(d.ff)
		c := dialProxy(t, h.addr)
		c.write("GET /q1 HTTP/1.1\r\nHost: x\r\n\r\nGET /q2 HTTP/1.1\r\nHo")
		resp, body, err := c.read("GET")
		if err != nil || resp.StatusCode != 200 || body != "GET /q1 " {
			t.Fatalf("first: %d %q %v", resp.StatusCode, body, err)
		}
		d.waitHanded(t, 1)
		c.write("st: x\r\n\r\n")
		resp, body, err = c.read("GET")
		if err != nil || resp.StatusCode != 200 || body != "GET /q2 " {
			t.Fatalf("second: %d %q %v", resp.StatusCode, body, err)
		}
		d.check(t, 1, 1)
	})
}

// ---------------------------------------------------------------- 5

// TestEvloopAdmission: classification, Observe, Server-Timing stripping
// and rejections all happen on the loop, and a rejection leaves the
// connection usable.
func TestEvloopAdmission(t *testing.T) {
	rb := startRawBackend(t, func(_ *rawBackend, _, _ int, r *beReq, c net.Conn, _ *bufio.Reader) bool {
		st := "cpu;dur=2, db;dur=5, queue;dur=1, cache;desc=hit"
		if strings.HasPrefix(r.target, "/only-timing") {
			st = "cpu;dur=2"
		}
		_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nServer-Timing: %s\r\nContent-Length: 2\r\n\r\nok", st)
		return err == nil
	})
	ctl := &fakeControl{strip: true}
	h := startControlled(t, ctl, rb.addr)
	d := countFrom(fastOf(t, h))
	c := dialProxy(t, h.addr)

	resp, body := c.do("GET /item?id=3 HTTP/1.1\r\nHost: x\r\nX-Class: gold\r\n\r\n")
	if resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("gold: %d %q", resp.StatusCode, body)
	}
	if st := resp.Header.Values("Server-Timing"); len(st) != 1 || st[0] != "cache;desc=hit" {
		t.Errorf("Server-Timing to the client %q, want only the non-timing entry", st)
	}

	resp, body = c.do("GET /item HTTP/1.1\r\nHost: x\r\n\r\n") // bronze
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "3" || resp.Header.Get("X-Sentry-Reject") != "rejected_test" {
		t.Fatalf("bronze: %d %v", resp.StatusCode, resp.Header)
	}
	if body != "sentry: overloaded, retry later\n" || resp.Close {
		t.Errorf("reject body %q, close %v", body, resp.Close)
	}

	resp, body = c.do("GET /only-timing HTTP/1.1\r\nHost: x\r\nX-Class: gold\r\n\r\n")
	if resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("gold after a rejection: %d %q", resp.StatusCode, body)
	}
	if st, ok := resp.Header["Server-Timing"]; ok {
		t.Errorf("Server-Timing %q, want it removed when only timings remain", st)
	}
	d.check(t, 3, 0)

	if n := len(rb.all()); n != 2 {
		t.Errorf("backend saw %d requests; a rejected one reached it", n)
	}
	ctl.mu.Lock()
	obs := append([]observation(nil), ctl.observed...)
	ctl.mu.Unlock()
	wantObs := []observation{
		{0, "/item", "cpu;dur=2, db;dur=5, queue;dur=1, cache;desc=hit", 7 * time.Millisecond},
		{0, "/only-timing", "cpu;dur=2", 7 * time.Millisecond},
	}
	if fmt.Sprint(obs) != fmt.Sprint(wantObs) {
		t.Errorf("observations %+v, want %+v", obs, wantObs)
	}
	for _, x := range []struct {
		class, verdict string
		want           float64
	}{{"gold", "admitted", 2}, {"bronze", "rejected_test", 1}} {
		if v := testutil.ToFloat64(h.p.metrics.decisions.WithLabelValues("web", x.class, x.verdict)); v != x.want {
			t.Errorf("decisions{%s,%s} = %v, want %v", x.class, x.verdict, v, x.want)
		}
	}

	// A class that waits in a batch queue parks in the loop: nothing is
	// handed off, nothing reaches the backend before the decision, and the
	// loop relays the request once it is admitted.
	t.Run("waiting class parks in the loop", func(t *testing.T) {
		open := make(chan struct{})
		ctl := &fakeControl{wait: open}
		h := startControlled(t, ctl, rb.addr)
		d := countFrom(fastOf(t, h))
		before := len(rb.all())
		c := dialProxy(t, h.addr)
		c.write("GET /w HTTP/1.1\r\nHost: x\r\nX-Class: gold\r\n\r\n")
		waitUntil(t, "the loop takes the request", func() bool { s, _ := d.ff.Counts(); return s-d.served == 1 })
		if n := len(rb.all()); n != before {
			t.Fatalf("the backend saw %d requests before the decision", n-before)
		}
		close(open)
		resp, body, err := c.read("GET")
		if err != nil || resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("%v %q %v", resp, body, err)
		}
		d.check(t, 1, 0)
	})
}

// waitUntil polls cond (bounded: 3s) and fails the test if it never holds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// ---------------------------------------------------------------- 6

// TestEvloopDeadBackend: a refused connect is a 502 from the loop (then the
// fast 503 once the backend is ejected), and with a live backend next to a
// dead one every request succeeds.
func TestEvloopDeadBackend(t *testing.T) {
	t.Run("only backend dead", func(t *testing.T) {
		h := startProxy(t, []string{freeAddr(t)}, nil)
		d := countFrom(fastOf(t, h))
		c := dialProxy(t, h.addr)
		resp, body := c.do("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.StatusCode != 502 || body != "sentry: bad gateway\n" {
			t.Fatalf("%d %q, want 502", resp.StatusCode, body)
		}
		if len(resp.Header.Get("X-Request-Id")) != 32 {
			t.Errorf("502 without the request ID")
		}
		resp, _ = c.do("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.StatusCode != 503 || resp.Header.Get("X-Sentry-Reject") != "no_backend" || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("%d %v, want the fast 503 no_backend", resp.StatusCode, resp.Header)
		}
		d.check(t, 2, 0)
	})
	t.Run("one of two dead", func(t *testing.T) {
		live := startRawBackend(t, echo)
		h := startProxy(t, []string{freeAddr(t), live.addr}, nil)
		d := countFrom(fastOf(t, h))
		keepAlive := dialProxy(t, h.addr)
		for i := 0; i < 10; i++ {
			want := fmt.Sprintf("GET /%d ", i)
			resp, body := keepAlive.do(fmt.Sprintf("GET /%d HTTP/1.1\r\nHost: x\r\n\r\n", i))
			if resp.StatusCode != 200 || body != want {
				t.Fatalf("keep-alive request %d: %d %q", i, resp.StatusCode, body)
			}
			resp, body = dialProxy(t, h.addr).do(fmt.Sprintf("GET /%d HTTP/1.1\r\nHost: x\r\n\r\n", i))
			if resp.StatusCode != 200 || body != want {
				t.Fatalf("new-connection request %d: %d %q", i, resp.StatusCode, body)
			}
		}
		d.check(t, 20, 0)
	})
}

// A rejected HEAD gets the rejection's length and no body: a body would be
// read as the start of the next response on the connection.
func TestEvloopHeadRejectionHasNoBody(t *testing.T) {
	rb := startRawBackend(t, echo)
	ctl := &fakeControl{}
	h := startControlled(t, ctl, rb.addr)
	d := countFrom(fastOf(t, h))
	c := dialProxy(t, h.addr)
	resp, body := c.do("HEAD /x HTTP/1.1\r\nHost: x\r\n\r\n") // bronze: rejected
	if resp.StatusCode != 503 || body != "" {
		t.Fatalf("HEAD rejection: %d %q", resp.StatusCode, body)
	}
	if resp.ContentLength != int64(len("sentry: overloaded, retry later\n")) {
		t.Errorf("HEAD rejection Content-Length %d", resp.ContentLength)
	}
	// The next response on the connection must parse as its own.
	resp, _ = c.do("GET /y HTTP/1.1\r\nHost: x\r\nX-Class: gold\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("request after the HEAD rejection: %d", resp.StatusCode)
	}
	d.check(t, 2, 0)
}

// A connection that sends nothing is closed after the read-header timeout,
// not held for the (longer) keep-alive idle timeout.
func TestEvloopSilentConnectionReadHeaderTimeout(t *testing.T) {
	rb := startRawBackend(t, echo)
	h := startProxy(t, []string{rb.addr}, func(s *policy.Snapshot, _ *policy.App) {
		s.Server.ReadHeaderTimeout = 300 * time.Millisecond
		s.Server.IdleTimeout = time.Minute
	})
	fastOf(t, h)
	c := dialProxy(t, h.addr)
	start := time.Now()
	c.expectEOF()
	if took := time.Since(start); took < 250*time.Millisecond || took > 5*time.Second {
		t.Errorf("silent connection closed after %v, want about the 300ms read-header timeout", took)
	}
}

// A backend given by host name is never dialled from a loop (that would
// resolve on the loop goroutine): its app's requests go to fasthttp.
func TestEvloopHostNameBackendHandedOff(t *testing.T) {
	rb := startRawBackend(t, echo)
	_, port, _ := net.SplitHostPort(rb.addr)
	h := startProxy(t, []string{net.JoinHostPort("localhost", port)}, nil)
	d := countFrom(fastOf(t, h))
	c := dialProxy(t, h.addr)
	resp, _ := c.do("GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	d.check(t, 0, 1)
}

// syncBuf is a goroutine-safe log sink.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestHandoffBurstNeverDropped: a burst of connections whose heads come in
// two parts (so each is handed off to fasthttp) larger than the hand-off
// queue: every one is served; none is closed for want of room.
func TestHandoffBurstNeverDropped(t *testing.T) {
	old := handoffQueue
	handoffQueue = 2
	defer func() { handoffQueue = old }()
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	h := startProxy(t, []string{be}, nil)
	if h.p.mu.fronts[h.addr].loops.Load() == nil {
		t.Fatal("the listener has no event loop")
	}
	const n = 300
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", h.addr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET /burst HTTP/1.1\r\nHo"); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	// The loops hand a connection off as soon as they read its partial
	// head: let them read every first part before the rest is sent, or a
	// loop slow to read (a loaded machine) finds whole heads and serves
	// them itself, and the test shows nothing.
	fr := h.p.mu.fronts[h.addr].loops.Load()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, handed := fr.Counts(); handed >= n {
			break
		}
	}
	var wg sync.WaitGroup
	var ok atomic.Int64
	for _, c := range conns {
		wg.Add(1)
		go func(c net.Conn) {
			defer wg.Done()
			if _, err := io.WriteString(c, "st: x\r\nConnection: close\r\n\r\n"); err != nil {
				return
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && string(b) == "ok" {
				ok.Add(1)
			}
		}(c)
	}
	wg.Wait()
	if got := ok.Load(); got != n {
		t.Errorf("%d of %d handed-off connections were served", got, n)
	}
	if _, handed := fr.Counts(); handed < n/2 {
		t.Errorf("%d hand-offs of %d connections (the test did not exercise the queue)", handed, n)
	}
}
