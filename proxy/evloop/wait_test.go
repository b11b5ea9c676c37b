//go:build linux

package evloop

import (
	"testing"

	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// TestWaitCounts: an exchange that waits for a connection is counted in
// its backend's LoopWaiting and the loop's waitN exactly while it waits
// -- whether its wait ends with a connection, the deadline (503
// backend_busy) or its client leaving -- and the loop's queues keep no
// live entry for it: a leaked count would make every loop close its
// connections to that backend for ever (shedIdle, finish).
func TestWaitCounts(t *testing.T) {
	h := newLoopScript(t)
	u := h.l.ff.cfg.Routes.Load().Default.Pool.Backends()[0].Attachment.(*pipeline.Upstream)
	check := func(step string, waiting int) {
		t.Helper()
		if n := int(u.LoopWaiting.Load()); n != waiting || h.l.waitN[u] != waiting {
			t.Fatalf("%s: LoopWaiting %d, waitN %d; want %d", step, n, h.l.waitN[u], waiting)
		}
		if h.l.ff.illegal.Load() != 0 {
			t.Fatalf("%s: %d illegal transitions", step, h.l.ff.illegal.Load())
		}
	}
	for _, cmd := range []string{"set max-conns=1 dial=progress", "accept", "accept", "accept", "accept"} {
		h.exec(0, cmd)
	}
	h.exec(0, `recv c1 "GET /1 HTTP/1.1\r\nHost: x\r\n\r\n"`) // dials b1, the cap's one connection
	check("c1 connecting", 0)
	h.exec(0, `recv c2 "GET /2 HTTP/1.1\r\nHost: x\r\n\r\n"`)
	h.exec(0, `recv c3 "GET /3 HTTP/1.1\r\nHost: x\r\n\r\n"`)
	h.exec(0, `recv c4 "GET /4 HTTP/1.1\r\nHost: x\r\n\r\n"`)
	check("c2, c3, c4 wait", 3)
	h.exec(0, "hangup c4") // gone while waiting
	check("c4 gone", 2)
	h.exec(0, "connected b1")
	h.exec(0, `backend-recv b1 "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"`) // b1 goes to c2
	check("c2 bound", 1)
	h.exec(0, "advance 60ms") // c3's wait runs out: 503; c2's connection sends, its response times out later
	check("c3 answered", 0)
	if w := h.l.nextWaiter(u); w != nil || len(h.l.connWait) != 0 {
		t.Errorf("a stale entry was given out (%v), or queues are left: %v", w, h.l.connWait)
	}
}
