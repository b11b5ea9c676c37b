package farm

import (
	"context"
	"sync"
	"time"
)

// slotPool is a server's worker slots with a FIFO, unbounded wait queue.
// A released slot is handed straight to the oldest waiter, so a newcomer
// never overtakes the queue. It also integrates busy slots over time for
// utilisation.
type slotPool struct {
	size int
	now  func() time.Time

	mu struct {
		sync.Mutex
		busy     int
		queue    []*waiter // FIFO from head; entries may be gone
		head     int
		waiting  int           // live waiters in queue
		busyTime time.Duration // ∫ busy dt up to last
		last     time.Time
	}
}

type waiter struct {
	ready   chan struct{} // closed when granted
	at      time.Time     // when granted; guarded by slotPool.mu until ready closes
	granted bool          // guarded by slotPool.mu
	gone    bool          // guarded by slotPool.mu
}

func newSlotPool(size int, now func() time.Time) *slotPool {
	p := &slotPool{size: size, now: now}
	p.mu.last = now()
	return p
}

// advance integrates busy slots up to now. Callers hold p.mu. A now taken
// just before the lock may be older than last; it then adds nothing.
func (p *slotPool) advance(now time.Time) {
	if d := now.Sub(p.mu.last); d > 0 {
		p.mu.busyTime += time.Duration(p.mu.busy) * d
		p.mu.last = now
	}
}

// acquire takes a slot, waiting in FIFO order, and returns when the slot
// became this request's (for a waiter: when the previous holder released
// it, which may be a little before the waiter runs). It returns false
// without a slot when ctx or done ends first.
func (p *slotPool) acquire(ctx context.Context, done <-chan struct{}) (time.Time, bool) {
	now := p.now()
	p.mu.Lock()
	p.advance(now)
	if p.mu.busy < p.size && p.mu.waiting == 0 {
		p.mu.busy++
		p.mu.Unlock()
		return now, true
	}
	w := &waiter{ready: make(chan struct{})}
	p.mu.queue = append(p.mu.queue, w)
	p.mu.waiting++
	p.mu.Unlock()

	select {
	case <-w.ready:
		return w.at, true
	case <-ctx.Done():
	case <-done:
	}
	p.mu.Lock()
	if w.granted { // lost the race with release: pass the slot on
		p.mu.Unlock()
		p.release()
		return time.Time{}, false
	}
	w.gone = true
	p.mu.waiting--
	p.mu.Unlock()
	return time.Time{}, false
}

// release frees a slot, handing it to the oldest live waiter if any.
func (p *slotPool) release() {
	now := p.now()
	var next *waiter
	p.mu.Lock()
	p.advance(now)
	for p.mu.head < len(p.mu.queue) {
		w := p.mu.queue[p.mu.head]
		p.mu.queue[p.mu.head] = nil
		p.mu.head++
		if !w.gone {
			next = w
			break
		}
	}
	if p.mu.head == len(p.mu.queue) {
		p.mu.queue, p.mu.head = p.mu.queue[:0], 0
	} else if p.mu.head >= 1024 && 2*p.mu.head >= len(p.mu.queue) {
		n := copy(p.mu.queue, p.mu.queue[p.mu.head:])
		clear(p.mu.queue[n:])
		p.mu.queue, p.mu.head = p.mu.queue[:n], 0
	}
	if next != nil {
		next.granted = true
		next.at = now
		p.mu.waiting--
	} else {
		p.mu.busy--
	}
	p.mu.Unlock()
	if next != nil {
		close(next.ready)
	}
}

// snapshot returns busy slots, live waiters and the busy-time integral.
func (p *slotPool) snapshot() (busy, waiting int, busyTime time.Duration) {
	now := p.now()
	p.mu.Lock()
	p.advance(now)
	busy, waiting, busyTime = p.mu.busy, p.mu.waiting, p.mu.busyTime
	p.mu.Unlock()
	return
}
