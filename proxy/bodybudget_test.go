//go:build linux

package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/policy"
)

// waitFor polls cond every 5 ms for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// openSlowBody sends a head declaring cl bytes and the first n of them,
// and leaves the connection open (closed at the end of the test).
func openSlowBody(t *testing.T, addr string, cl, n int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", cl, strings.Repeat("s", n)); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestBufferChargedAsBytesArrive: request_buffer_total is charged with
// what a body has sent (in doubling steps from bodyStep), not with its
// declared length, so a few slow clients declaring large bodies do not
// make every other body 503.
func TestBufferChargedAsBytesArrive(t *testing.T) {
	cb := newCountingBackend(t)
	const buf = 4 * bodyStep
	// The fasthttp engine: a loop keeps a body that came with its head in
	// its own read buffer (not this account) until it hands it off.
	h := startProxyOpts(t, []string{cb.addr}, Options{Engine: EngineFastHTTP}, func(s *policy.Snapshot, _ *policy.App) {
		s.Server.RequestBuffer = buf
		s.Server.RequestBufferTotal = 3 * buf
		s.Server.BodyMinRate = 0
	})
	// Declared, the three fill the cap; sent, they hold one step each.
	// (fasthttp reads the first 8 KiB of a body before the handler runs.)
	for i := 0; i < 3; i++ {
		openSlowBody(t, h.addr, buf, 9<<10)
	}
	waitFor(t, "the slow bodies to be buffered", func() bool { return h.p.bufs.used.Load() >= 3*bodyStep })
	resp, body := splitRequest(t, h.addr, "POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n", "hello")
	if resp.StatusCode != 200 || body != "5" {
		t.Fatalf("a small POST beside 3 slow large bodies: %d %q", resp.StatusCode, body)
	}
	if got := h.p.bufs.used.Load(); got != 3*bodyStep {
		t.Errorf("account holds %d bytes after the small POST, want the slow bodies' %d", got, 3*bodyStep)
	}
	if p := cb.posts.Load(); p != 1 {
		t.Errorf("backend saw %d POSTs, want only the small one", p)
	}
}

// TestLargeLengthBodyBufferedFirst: a Content-Length body larger than
// request_buffer is not dispatched until its first request_buffer bytes
// are in sentry; then the rest streams behind them.
func TestLargeLengthBodyBufferedFirst(t *testing.T) {
	cb := newCountingBackend(t)
	const lim, total, first = 2 * bodyStep, 4 * bodyStep, 9 << 10
	h := startProxyOpts(t, []string{cb.addr}, Options{Engine: EngineFastHTTP}, func(s *policy.Snapshot, _ *policy.App) {
		s.Server.RequestBuffer = lim
		s.Server.BodyMinRate = 0
	})
	// fasthttp reads the first 8 KiB of a body before the handler runs;
	// then the body is read into sentry (before the fix it streamed at
	// once and nothing was ever charged).
	c := openSlowBody(t, h.addr, total, first)
	waitFor(t, "the body to be buffered", func() bool { return h.p.bufs.used.Load() > 0 })
	// One byte short of request_buffer: nothing may reach the backend.
	if _, err := io.WriteString(c, strings.Repeat("s", lim-first-1)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the buffer to grow", func() bool { return h.p.bufs.used.Load() == lim })
	if n, in := cb.reqs.Load(), h.p.cur.Load().apps[0].Pool.Inflight(); n != 0 || in != 0 {
		t.Fatalf("with %d of request_buffer's %d bytes sent: backend saw %d requests, %d in flight", lim-1, lim, n, in)
	}
	if _, err := io.WriteString(c, "s"); err != nil {
		t.Fatal(err)
	}
	// request_buffer bytes are in: dispatched while the rest is to come.
	waitFor(t, "the dispatch", func() bool { return cb.reqs.Load() == 1 })
	if _, err := io.WriteString(c, strings.Repeat("s", total-lim)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != fmt.Sprint(total) {
		t.Errorf("large body: %d %q", resp.StatusCode, b)
	}
	waitFor(t, "the account to empty", func() bool { return h.p.bufs.used.Load() == 0 })
}

// TestEmptyBodyGivesMeasuredSample: Content-Length: 0 is a request without
// a body on both engines (and both ways of arriving): the estimator gets
// the measured service time.
func TestEmptyBodyGivesMeasuredSample(t *testing.T) {
	cb := newCountingBackend(t)
	for _, e := range engines {
		for _, mode := range []sendMode{oneWrite, splitLine} {
			t.Run(e.String()+"/"+mode.String(), func(t *testing.T) {
				ctl := &fakeControl{}
				h := startProxyOpts(t, []string{cb.addr}, Options{Control: ctl, Engine: e}, func(_ *policy.Snapshot, a *policy.App) {
					a.Admission.Mode = "batch"
				})
				r := &rig{h: h, engine: e}
				c := r.send(t, mode, "POST /empty HTTP/1.1\r\nHost: x\r\nX-Class: gold\r\nContent-Length: 0\r\n\r\n")
				resp, body, err := c.read("POST")
				if err != nil || resp.StatusCode != 200 || body != "0" {
					t.Fatalf("empty POST: %v %v %q", err, resp, body)
				}
				ctl.mu.Lock()
				ms := append([]time.Duration(nil), ctl.measured...)
				ctl.mu.Unlock()
				if len(ms) != 1 || ms[0] <= 0 {
					t.Errorf("measured samples %v, want one > 0", ms)
				}
			})
		}
	}
}

// readCounter is a request body that counts what was read of it.
type readCounter struct {
	r io.Reader
	n int
}

func (rc *readCounter) Read(p []byte) (int, error) {
	n, err := rc.r.Read(p)
	rc.n += n
	return n, err
}
func (rc *readCounter) Close() error { return nil }

// TestH2BodyFramingBeforeRead: on h2, max_body_bytes is applied before the
// body is read, as on HTTP/1.1: a content-length over it is 413, a body
// without one 411 (as a chunked HTTP/1.1 body), and nothing is read or
// sent. An h2 request's trailers are never copied to the backend request.
func TestH2BodyFramingBeforeRead(t *testing.T) {
	r := startRig(t, EngineFastHTTP, "limits") // max_body_bytes: 100
	r.h.p.mu.Lock()
	fe := r.h.p.mu.fronts[r.h.addr]
	r.h.p.mu.Unlock()
	serve := func(path string, body string, cl int64, trailer http.Header) (*httptest.ResponseRecorder, *readCounter) {
		rc := &readCounter{r: strings.NewReader(body)}
		req := httptest.NewRequest("POST", "https://"+r.h.addr+path, nil)
		req.Body, req.ContentLength, req.Trailer = rc, cl, trailer
		req.Host = "a.test"
		req.RemoteAddr = "192.0.2.7:4444"
		w := httptest.NewRecorder()
		fe.serveH2(w, req)
		return w, rc
	}
	for _, c := range []struct {
		name   string
		cl     int64
		status int
	}{
		{"content-length over max_body_bytes", 200, 413},
		{"no content-length", -1, 411},
	} {
		tag := fmt.Sprintf("/h2b-%d", pathSeq.Add(1))
		w, rc := serve(tag, strings.Repeat("b", 50), c.cl, nil)
		if w.Code != c.status || rc.n != 0 {
			t.Errorf("%s: status %d, %d body bytes read; want %d, none read", c.name, w.Code, rc.n, c.status)
		}
		if n := len(r.received(tag)); n != 0 {
			t.Errorf("%s: backend received %d requests", c.name, n)
		}
	}
	tag := fmt.Sprintf("/h2b-%d", pathSeq.Add(1))
	w, _ := serve(tag, "hello", 5, http.Header{"X-Forwarded-Host": {"evil.example"}, "X-Trail": {"t"}, "Upgrade": {"h2c"}})
	if w.Code != 200 {
		t.Fatalf("POST with trailers: %d", w.Code)
	}
	got := r.received(tag)
	if len(got) != 1 {
		t.Fatalf("backend received %d requests", len(got))
	}
	wantForwarding(t, got[0], &http.Response{Header: w.Header()}, "192.0.2.7", "https", "a.test", "")
	wantAbsent(t, got[0], "X-Trail", "Upgrade")
	if len(got[0].trailer) != 0 || string(got[0].body) != "hello" {
		t.Errorf("backend body %q trailers %q", got[0].body, got[0].trailer)
	}
}
