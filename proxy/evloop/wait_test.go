//go:build linux

package evloop

import (
	"testing"

	"github.com/sentry-proxy/sentry/proxy/exchange"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// TestWaitCounts: an exchange that waits for a connection, waits again
// (a failed dial sent it to another backend at its cap) and then leaves
// is counted in each backend's LoopWaiting exactly while it waits for
// it, and the loop's queues keep no live entry for it: a leaked count
// would make every loop close its connections to that backend for ever
// (shedIdle, finish).
func TestWaitCounts(t *testing.T) {
	ff := &Front{}
	l := &eventLoop{ff: ff, connWait: map[*pipeline.Upstream][]waiter{}, waitN: map[*pipeline.Upstream]int{}, nconn: map[*pipeline.Upstream]int{}}
	ff.loops = []*eventLoop{l}
	u1, u2 := &pipeline.Upstream{}, &pipeline.Upstream{}
	c := &cconn{fd: -1}
	c.ex.state, c.ex.activeIdx = exchange.Admitting, -1

	l.waitConn(c, u1, 1e9)
	if u1.LoopWaiting.Load() != 1 || l.waitN[u1] != 1 {
		t.Fatalf("waiting for u1: LoopWaiting %d, waitN %d", u1.LoopWaiting.Load(), l.waitN[u1])
	}
	l.waitConn(c, u2, 1e9) // waits again, for another backend
	if u1.LoopWaiting.Load() != 0 || u2.LoopWaiting.Load() != 1 || l.waitN[u1] != 0 || l.waitN[u2] != 1 {
		t.Fatalf("after the second wait: u1 %d/%d, u2 %d/%d", u1.LoopWaiting.Load(), l.waitN[u1], u2.LoopWaiting.Load(), l.waitN[u2])
	}
	if w := l.nextWaiter(u1); w != nil {
		t.Error("u1's queue gave an exchange that waits for u2")
	}
	l.waitConn(c, u2, 1e9) // and again for the same one: the older entry is stale
	if u2.LoopWaiting.Load() != 1 || l.waitN[u2] != 1 || len(l.connWait[u2]) != 2 {
		t.Fatalf("waiting twice for u2: %d/%d, %d entries", u2.LoopWaiting.Load(), l.waitN[u2], len(l.connWait[u2]))
	}
	l.setState(c, exchange.Idle) // answered (busy at the deadline) or aborted
	if u2.LoopWaiting.Load() != 0 || len(l.waitN) != 0 {
		t.Fatalf("after the wait: u2 %d, waitN %v", u2.LoopWaiting.Load(), l.waitN)
	}
	if w := l.nextWaiter(u2); w != nil || len(l.connWait) != 0 {
		t.Errorf("a stale entry was given out (%v), or queues are left: %v", w, l.connWait)
	}
	if ff.illegal.Load() != 0 {
		t.Errorf("%d illegal transitions", ff.illegal.Load())
	}
}
