//go:build linux

package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
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
	h := startEngine(t, policy.EnginePortable, []string{cb.addr}, Options{}, func(s *policy.Snapshot, _ *policy.App) {
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
	h := startEngine(t, policy.EnginePortable, []string{cb.addr}, Options{}, func(s *policy.Snapshot, _ *policy.App) {
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
			t.Run(e+"/"+mode.String(), func(t *testing.T) {
				ctl := &fakeControl{}
				h := startEngine(t, e, []string{cb.addr}, Options{Control: ctl}, func(_ *policy.Snapshot, a *policy.App) {
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
