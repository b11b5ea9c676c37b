//go:build linux

package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sentry-proxy/sentry/internal/tls13"
	"github.com/sentry-proxy/sentry/policy"
)

// Tests of HTTP/1.1 over TLS on the event loops (tlsloop_linux.go,
// package internal/tls13), each run on both engines where the portable
// path (crypto/tls and fasthttp) must behave the same; on the loops the
// counters say who served.

// tlsLoopProxy starts a TLS proxy of engine e in front of a backend that
// answers with body(r).
func tlsLoopProxy(t *testing.T, e string, body func(r *http.Request) string) *harness {
	t.Helper()
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body(r)) })
	cf, kf := writeTestCert(t)
	return startEngine(t, e, []string{be}, Options{}, func(_ *policy.Snapshot, a *policy.App) {
		a.TLS = &policy.TLS{CertFile: cf, KeyFile: kf}
	})
}

// loopCounts is the TLS front's loop counters (nil on the portable engine,
// which it checks has no loops).
func loopCounts(t *testing.T, h *harness, e string) *loopDelta {
	t.Helper()
	h.p.mu.Lock()
	fe := h.p.mu.fronts[h.addr]
	h.p.mu.Unlock()
	if e == policy.EnginePortable {
		if fe.loops.Load() != nil {
			t.Fatal("portable engine: the TLS listener has loops")
		}
		return nil
	}
	if fe.loops.Load() == nil {
		t.Fatal("the TLS listener has no loops")
	}
	return countFrom(fe.loops.Load())
}

func (d *loopDelta) checkIf(t *testing.T, served, handed uint64) {
	t.Helper()
	if d != nil {
		d.check(t, served, handed)
	}
}

// readResp reads one response from br.
func readResp(t *testing.T, br *bufio.Reader) (int, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestTLSLoopKeepAliveAndPipelining: many requests on one connection,
// then three pipelined in one write, all served by the loops (nothing
// handed off) with X-Forwarded-Proto https.
func TestTLSLoopKeepAliveAndPipelining(t *testing.T) {
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			h := tlsLoopProxy(t, e, func(r *http.Request) string { return r.URL.Path + " " + r.Header.Get("X-Forwarded-Proto") })
			d := loopCounts(t, h, e)
			c := dialH1(t, h.addr, nil)
			c.c.SetDeadline(time.Now().Add(10 * time.Second))
			for i := 0; i < 50; i++ {
				fmt.Fprintf(c.c, "GET /k%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
				if st, b := readResp(t, c.br); st != 200 || b != fmt.Sprintf("/k%d https", i) {
					t.Fatalf("request %d: %d %q", i, st, b)
				}
			}
			io.WriteString(c.c, "GET /p1 HTTP/1.1\r\nHost: x\r\n\r\nGET /p2 HTTP/1.1\r\nHost: x\r\n\r\nGET /p3 HTTP/1.1\r\nHost: x\r\n\r\n")
			for i := 1; i <= 3; i++ {
				if st, b := readResp(t, c.br); st != 200 || b != fmt.Sprintf("/p%d https", i) {
					t.Fatalf("pipelined %d: %d %q", i, st, b)
				}
			}
			d.checkIf(t, 53, 0)
		})
	}
}

// recordingConn keeps what the server sent, to look at the records.
type recordingConn struct {
	net.Conn
	got bytes.Buffer
}

func (r *recordingConn) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	r.got.Write(p[:n])
	return n, err
}

// TestTLSLoopLargeResponse: a 200 KB response arrives whole, in records
// of at most 2^14 bytes of plaintext.
func TestTLSLoopLargeResponse(t *testing.T) {
	big := strings.Repeat("0123456789", 20000)
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			h := tlsLoopProxy(t, e, func(*http.Request) string { return big })
			d := loopCounts(t, h, e)
			raw, err := net.Dial("tcp", h.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			rc := &recordingConn{Conn: raw}
			c := tls.Client(rc, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if err := c.Handshake(); err != nil {
				t.Fatal(err)
			}
			rc.got.Reset()
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			if st, b := readResp(t, bufio.NewReader(c)); st != 200 || b != big {
				t.Fatalf("%d, %d bytes", st, len(b))
			}
			// Every record within the limit: on the loops, the sealer's
			// (2^14 bytes of plaintext, its content type and the tag).
			limit := tls13.MaxPlaintext + 256
			if e != policy.EnginePortable {
				limit = tls13.MaxPlaintext + 1 + 16
			}
			records, w := 0, rc.got.Bytes()
			for len(w) >= 5 {
				n := int(w[3])<<8 | int(w[4])
				if n > limit {
					t.Fatalf("a record of %d bytes", n)
				}
				records++
				w = w[min(len(w), 5+n):]
			}
			if records < len(big)/tls13.MaxPlaintext {
				t.Errorf("%d records for %d bytes", records, len(big))
			}
			d.checkIf(t, 1, 0)
		})
	}
}

// TestTLSLoopLargeRequestBody: a body larger than the loop reads at once
// is handed to fasthttp with the records the loop had opened, over the
// same record state (tls13.Conn); the connection goes on after it.
func TestTLSLoopLargeRequestBody(t *testing.T) {
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			h := tlsLoopProxy(t, e, func(r *http.Request) string {
				b, _ := io.ReadAll(r.Body)
				return strconv.Itoa(len(b)) + " " + r.Header.Get("X-Forwarded-Proto")
			})
			d := loopCounts(t, h, e)
			c := dialH1(t, h.addr, nil)
			c.c.SetDeadline(time.Now().Add(10 * time.Second))
			body := strings.Repeat("b", 300000)
			fmt.Fprintf(c.c, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			if st, b := readResp(t, c.br); st != 200 || b != "300000 https" {
				t.Fatalf("%d %q", st, b)
			}
			io.WriteString(c.c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			if st, b := readResp(t, c.br); st != 200 || b != "0 https" {
				t.Fatalf("after: %d %q", st, b)
			}
			d.checkIf(t, 0, 1)
		})
	}
}

// clientRecords is a test client speaking records with tls13 (Go's client
// cannot send a KeyUpdate): the handshake is Go's, the records ours.
type clientRecords struct {
	raw net.Conn
	st  *tls13.State
	br  *bufio.Reader
}

func dialRecords(t *testing.T, addr string) *clientRecords {
	t.Helper()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	raw.SetDeadline(time.Now().Add(10 * time.Second))
	// No session cache: the server sends no ticket the client would
	// have to read as a post-handshake message.
	st, _, err := tls13.Client(raw, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	cr := &clientRecords{raw: raw, st: st}
	cr.br = bufio.NewReader(readerFunc(cr.read))
	return cr
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

func (c *clientRecords) read(p []byte) (int, error) {
	for {
		n, err := c.st.Read(p)
		if n > 0 || err != nil {
			return n, err
		}
		m, err := c.raw.Read(c.st.RawSpace())
		c.st.Filled(m)
		if err == io.EOF && m == 0 {
			// The socket ended without close_notify: only the
			// record layer's io.EOF means the server sent one.
			return 0, io.ErrUnexpectedEOF
		}
		if err != nil && m == 0 {
			return 0, err
		}
	}
}

func (c *clientRecords) send(t *testing.T, s string) {
	t.Helper()
	if _, err := c.raw.Write(c.st.Seal(nil, []byte(s))); err != nil {
		t.Fatal(err)
	}
}

// TestTLSLoopClientKeyUpdate: the client updates its key and asks for the
// server's; requests before and after, under both new keys, are served.
func TestTLSLoopClientKeyUpdate(t *testing.T) {
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			h := tlsLoopProxy(t, e, func(r *http.Request) string { return r.URL.Path })
			d := loopCounts(t, h, e)
			c := dialRecords(t, h.addr)
			for i, path := range []string{"/before", "/after", "/again"} {
				if i == 1 {
					c.st.RequestKeyUpdate()
				}
				c.send(t, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
				if st, b := readResp(t, c.br); st != 200 || b != path {
					t.Fatalf("%s: %d %q", path, st, b)
				}
			}
			if c.st.WriteDue() {
				t.Error("the server's KeyUpdate was not seen")
			}
			d.checkIf(t, 3, 0)
		})
	}
}

// TestTLSLoopCloseNotify: a response with Connection: close ends with
// the server's close_notify; a client's close_notify closes the
// connection.
func TestTLSLoopCloseNotify(t *testing.T) {
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			h := tlsLoopProxy(t, e, func(*http.Request) string { return "ok" })
			c := dialRecords(t, h.addr)
			c.send(t, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			if st, b := readResp(t, c.br); st != 200 || b != "ok" {
				t.Fatalf("%d %q", st, b)
			}
			if _, err := c.br.ReadByte(); err != io.EOF {
				t.Errorf("after Connection: close: %v, want close_notify (io.EOF)", err)
			}

			c = dialRecords(t, h.addr)
			c.send(t, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			if st, _ := readResp(t, c.br); st != 200 {
				t.Fatal(st)
			}
			if _, err := c.raw.Write(c.st.CloseNotify(nil)); err != nil {
				t.Fatal(err)
			}
			// The server closes: the socket ends (with or without its
			// own close_notify first).
			buf := make([]byte, 1024)
			for {
				_, err := c.raw.Read(buf)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("after the client's close_notify: %v", err)
				}
			}
		})
	}
}

// TestTLSLoopOtherPaths: TLS 1.2 stays on the old path; h2 over TLS 1.3
// is adopted by the loops too (h2loop_linux.go), and its GET is served
// there; a resumed TLS 1.3 session is adopted like a full handshake.
func TestTLSLoopOtherPaths(t *testing.T) {
	h := tlsLoopProxy(t, policy.EngineLoops, func(r *http.Request) string { return r.Proto })
	d := loopCounts(t, h, policy.EngineLoops)
	c12 := dialH1(t, h.addr, &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12})
	if got := c12.get(t); got != "200 HTTP/1.1" {
		t.Fatalf("TLS 1.2: %q", got)
	}
	h2tr := &http2.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	defer h2tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: h2tr, Timeout: 5 * time.Second}).Get("https://" + h.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Errorf("h2: got HTTP/%d", resp.ProtoMajor)
	}
	d.check(t, 1, 0)

	cache := tls.NewLRUClientSessionCache(4)
	cfg := func() *tls.Config {
		return &tls.Config{InsecureSkipVerify: true, ClientSessionCache: cache, MinVersion: tls.VersionTLS13}
	}
	first := dialH1(t, h.addr, cfg())
	if got := first.get(t); got != "200 HTTP/1.1" {
		t.Fatal(got)
	}
	first.c.Close()
	again := dialH1(t, h.addr, cfg())
	if got := again.get(t); got != "200 HTTP/1.1" {
		t.Fatal(got)
	}
	if !again.c.ConnectionState().DidResume {
		t.Fatal("not resumed")
	}
	d.check(t, 3, 0)
}

// TestTLSLoopCertReload: after a reload (SIGHUP), a new connection gets
// the new certificate and is served by the loops; one made before keeps
// its own and goes on.
func TestTLSLoopCertReload(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	cf, kf := writeTestCert(t)
	writeCertAs(t, cf, kf, "first")
	h := startEngine(t, policy.EngineLoops, []string{be}, Options{}, func(_ *policy.Snapshot, a *policy.App) {
		a.TLS = &policy.TLS{CertFile: cf, KeyFile: kf}
	})
	d := loopCounts(t, h, policy.EngineLoops)
	old := dialH1(t, h.addr, nil)
	if got := old.get(t); got != "200 ok" || old.cn() != "first" {
		t.Fatalf("%q %q", got, old.cn())
	}
	writeCertAs(t, cf, kf, "second")
	if err := h.p.Apply(h.snap); err != nil {
		t.Fatal(err)
	}
	nc := dialH1(t, h.addr, nil)
	if got := nc.get(t); got != "200 ok" || nc.cn() != "second" {
		t.Errorf("new: %q %q", got, nc.cn())
	}
	if got := old.get(t); got != "200 ok" {
		t.Errorf("old: %q", got)
	}
	d.check(t, 3, 0)
}

// heldConn holds a client's writes after the ClientHello until the first
// write after release, and sends them together: the Finished and the
// first request arrive in one segment, and crypto/tls reads the request
// with the Finished (the leftover Adopt passes on).
type heldConn struct {
	net.Conn
	n        int
	held     []byte
	released bool
}

func (c *heldConn) Write(p []byte) (int, error) {
	c.n++
	switch {
	case c.n == 1:
		return c.Conn.Write(p)
	case !c.released:
		c.held = append(c.held, p...)
		return len(p), nil
	case c.held != nil:
		b := append(c.held, p...)
		c.held = nil
		if _, err := c.Conn.Write(b); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// TestTLSLoopLeftover: a request that came with the client's Finished is
// served by the loop at once, with no further bytes from the client.
func TestTLSLoopLeftover(t *testing.T) {
	h := tlsLoopProxy(t, policy.EngineLoops, func(r *http.Request) string { return r.URL.Path })
	d := loopCounts(t, h, policy.EngineLoops)
	raw, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(10 * time.Second))
	hc := &heldConn{Conn: raw}
	c := tls.Client(hc, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	hc.released = true
	io.WriteString(c, "GET /early HTTP/1.1\r\nHost: x\r\n\r\n")
	if st, b := readResp(t, bufio.NewReader(c)); st != 200 || b != "/early" {
		t.Fatalf("%d %q", st, b)
	}
	d.check(t, 1, 0)
}

// TestTLSLoopUpgrade: an Upgrade over TLS is handed off by the loop and
// tunnelled by fasthttp's side over the same records, both ways.
func TestTLSLoopUpgrade(t *testing.T) {
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
				if _, err := http.ReadRequest(br); err != nil {
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
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			cf, kf := writeTestCert(t)
			h := startEngine(t, e, []string{ln.Addr().String()}, Options{}, func(_ *policy.Snapshot, a *policy.App) {
				a.TLS = &policy.TLS{CertFile: cf, KeyFile: kf}
			})
			d := loopCounts(t, h, e)
			c := dialH1(t, h.addr, nil)
			c.c.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(c.c, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
			resp, err := http.ReadResponse(c.br, nil)
			if err != nil || resp.StatusCode != 101 {
				t.Fatalf("upgrade: %v %v", resp, err)
			}
			for _, msg := range []string{"hello", strings.Repeat("x", 40000)} {
				io.WriteString(c.c, msg)
				buf := make([]byte, len(msg))
				if _, err := io.ReadFull(c.br, buf); err != nil || string(buf) != strings.ToUpper(msg) {
					t.Fatalf("echo of %d bytes: %v", len(msg), err)
				}
			}
			d.checkIf(t, 0, 1)
		})
	}
}

// TestTLSLoopConnCap: with server.max_conns reached by a connection the
// loops hold, the next one is refused at accept, before any handshake
// work, and counted; the first goes on. (The loops' own check after a
// handshake, a sealed 503, is left for connections accepted while the
// count moved.)
func TestTLSLoopConnCap(t *testing.T) {
	h := tlsCapProxy(t, policy.EngineLoops, 1)
	first := dialH1(t, h.addr, nil)
	if got := first.get(t); got != "200 ok" {
		t.Fatal(got)
	}
	if c, err := tls.Dial("tcp", h.addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}); err == nil {
		c.Close()
		t.Error("a second TLS connection finished its handshake with max_conns 1 held by the loops")
	}
	waitCounter(t, h, "too_many_conns", 1)
	if got := first.get(t); got != "200 ok" {
		t.Errorf("first after: %q", got)
	}
}

// TestTLSLoopShutdownIdle: a drain on the TLS loops, as on plain ones
// (TestShutdownIdleKeepAlive): a request on an idle connection within
// idleGrace is answered with Connection: close, and both connections end
// with close_notify.
func TestTLSLoopShutdownIdle(t *testing.T) {
	h := tlsLoopProxy(t, policy.EngineLoops, func(*http.Request) string { return "ok" })
	busy, idle := dialRecords(t, h.addr), dialRecords(t, h.addr)
	for _, c := range []*clientRecords{busy, idle} {
		c.send(t, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if st, _ := readResp(t, c.br); st != 200 {
			t.Fatal(st)
		}
	}
	d := loopCounts(t, h, policy.EngineLoops)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := contextWithTimeout(5 * time.Second)
		defer cancel()
		done <- h.p.ShutdownAll(ctx)
	}()
	time.Sleep(200 * time.Millisecond) // within idleGrace
	busy.send(t, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(busy.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 || !resp.Close {
		t.Errorf("during the drain: %d, Connection: close %v", resp.StatusCode, resp.Close)
	}
	for name, c := range map[string]*clientRecords{"served": busy, "idle": idle} {
		if _, err := c.br.ReadByte(); err != io.EOF {
			t.Errorf("%s connection ended with %v, want close_notify", name, err)
		}
	}
	if err := <-done; err != nil {
		t.Errorf("shutdown: %v", err)
	}
	d.check(t, 1, 0)
}

// TestTLSLoopIdleTimeout: server.idle_timeout closes an idle TLS
// connection on the loops, with close_notify.
func TestTLSLoopIdleTimeout(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	cf, kf := writeTestCert(t)
	h := startEngine(t, policy.EngineLoops, []string{be}, Options{}, func(s *policy.Snapshot, a *policy.App) {
		a.TLS = &policy.TLS{CertFile: cf, KeyFile: kf}
		s.Server.IdleTimeout = 300 * time.Millisecond
	})
	d := loopCounts(t, h, policy.EngineLoops)
	c := dialRecords(t, h.addr)
	c.send(t, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if st, _ := readResp(t, c.br); st != 200 {
		t.Fatal(st)
	}
	// Nothing is sent: only the idle timeout ends the connection (the
	// client's own deadline is 10 s).
	if _, err := c.br.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection ended with %v, want close_notify", err)
	}
	d.check(t, 1, 0)
}

// TestTLSLoopTrickledRecord: a client that sends its records a byte at a
// time, or records with nothing in them, makes no progress towards a
// request, and must not hold its connection past the read-header timeout
// (first request) or the idle timeout (later ones), as crypto/tls and
// fasthttp do not let it. Only opened plaintext counts as activity.
func TestTLSLoopTrickledRecord(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	cf, kf := writeTestCert(t)
	h := startEngine(t, policy.EngineLoops, []string{be}, Options{}, func(s *policy.Snapshot, a *policy.App) {
		a.TLS = &policy.TLS{CertFile: cf, KeyFile: kf}
		s.Server.IdleTimeout = 300 * time.Millisecond
		s.Server.ReadHeaderTimeout = 300 * time.Millisecond
	})
	req := "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n" // a 54-byte record: 5.4 s a byte at a time
	for _, tc := range []struct {
		name  string
		first bool // trickle the first request (else after one answered)
		empty bool // empty records instead of a trickled one
	}{{"first", true, false}, {"idle", false, false}, {"empty", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRecords(t, h.addr)
			if !tc.first {
				c.send(t, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
				if st, _ := readResp(t, c.br); st != 200 {
					t.Fatal(st)
				}
			}
			var chunks [][]byte
			if tc.empty {
				// An application_data record with no content: the
				// request comes at the end, after 5 s of them.
				for i := 0; i < 50; i++ {
					chunks = append(chunks, c.st.SealEmpty(nil))
				}
				chunks = append(chunks, c.st.Seal(nil, []byte(req)))
			} else {
				for _, b := range c.st.Seal(nil, []byte(req)) {
					chunks = append(chunks, []byte{b})
				}
			}
			stop := make(chan struct{})
			sent := make(chan struct{})
			go func() {
				defer close(sent)
				for _, b := range chunks {
					if _, err := c.raw.Write(b); err != nil {
						return
					}
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Millisecond):
					}
				}
			}()
			defer func() { close(stop); <-sent }()
			// Served only if the connection lived through all of it
			// (5 s and more); the timeouts are 300 ms.
			start := time.Now()
			b, err := c.br.ReadByte()
			if err == nil {
				t.Fatalf("the trickled request was served (%q): the connection outlived its timeout", b)
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("the connection outlived the client's own deadline (%v)", time.Since(start))
			}
		})
	}
}

// TestTLSHandOverKeepsConnCounted: a TLS connection the loops adopt, h2
// or HTTP/1.1, is counted by its listener (live) or by the loops at every
// instant of the hand-over, however long the loop takes to register it:
// server.max_conns reads both at accept, and a connection counted by
// neither for a moment let an accept past the cap (and made
// TestH2WriteTimeoutCutsStuckClient see its connection gone at once). A
// sampler reads both counts, as the accept loop does, from each
// handshake until the loops have taken it.
//
// The connections send nothing, so the timeouts that would close them
// (read_header_timeout, idle_timeout) are far longer than the test: on a
// loaded machine its 40 hand-overs may take seconds, and a connection the
// proxy closed meanwhile would read as one it failed to count.
func TestTLSHandOverKeepsConnCounted(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	cf, kf := writeTestCert(t)
	h := startEngine(t, policy.EngineLoops, []string{be}, Options{}, func(s *policy.Snapshot, a *policy.App) {
		a.TLS = &policy.TLS{CertFile: cf, KeyFile: kf}
		s.Server.ReadHeaderTimeout = 5 * time.Minute
		s.Server.IdleTimeout = 5 * time.Minute
	})
	h.p.mu.Lock()
	fe := h.p.mu.fronts[h.addr]
	h.p.mu.Unlock()
	if fe.loops.Load() == nil {
		t.Fatal("the TLS listener has no loops")
	}
	count := func() int { return fe.tls.liveCount() + fe.heldElsewhere() }
	const conns = 40
	for i := 0; i < conns; i++ {
		proto := []string{"h2", "http/1.1"}[i%2]
		c, err := tls.Dial("tcp", h.addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{proto}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// From here the proxy holds i+1 connections; the hand-over is
		// done once the listener no longer counts this one.
		low, samples := count(), 0
		for deadline := time.Now().Add(2 * time.Second); ; samples++ {
			low = min(low, count())
			if fe.tls.liveCount() == 0 && samples > 0 || time.Now().After(deadline) {
				break
			}
		}
		if low < i+1 {
			t.Fatalf("connection %d (%s): the listener and the loops counted %d of %d open connections during the hand-over (%d samples)",
				i+1, proto, low, i+1, samples)
		}
	}
	if n := count(); n != conns {
		t.Errorf("%d connections counted after the hand-overs, want %d", n, conns)
	}
}
