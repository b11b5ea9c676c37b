package batchac

import (
	"sync"
	"sync/atomic"

	"github.com/sentry-proxy/sentry/admission"
)

// waiter is one parked request. Waiters are pooled: the Admit goroutine that
// took one from the pool owns it until it puts it back, and that happens only
// after it has received the decision (or removed the waiter from its queue
// itself), so ch is always empty when a waiter is reused.
type waiter struct {
	// ch carries the decision; capacity 1, so a policer's send never blocks.
	ch chan admission.Decision
	// s is the request's inherent service time in nanoseconds (≥ 0).
	s float64
	// tier is the request's fair-share tier (admission.Share.Tier): 0
	// within its share, 1 over it in its turn, 2 the marginal client.
	tier uint8
	// rank orders tier 2 in a batch (admission.Request.Rank).
	rank uint8

	// Guarded by the owning queue's mutex while the waiter is queued; owned
	// by the policer run that took the list afterwards.
	prev, next *waiter
	// epoch is the queue epoch the waiter was linked in; the waiter is still
	// in the queue iff it equals the queue's current epoch.
	epoch uint64
	// wk, when not nil, is told after the run that decided the waiter
	// (a parked request; see Controller.Park).
	wk admission.Waker
}

// fill sets what a waiter carries of r (service time sNs in ns): Admit
// and Park queue the same request alike.
func (w *waiter) fill(r *admission.Request, sNs float64) {
	w.s, w.tier, w.rank = sNs, uint8(r.Share.Tier()), r.Rank
}

// queue is one (class, bucket) wait queue: an intrusive FIFO list, so push,
// removal by a departing client and taking the whole list are O(1) under the
// lock. Nothing is allocated per request.
type queue struct {
	mu struct {
		sync.Mutex
		head, tail *waiter
		count      int
		cap        int
		// epoch advances every time the list is taken whole, so a waiter
		// can tell whether it is still linked here.
		epoch uint64
		// retired queues take no more waiters: Reconfigure dropped them or
		// Close ran. A pusher that sees it reloads the snapshot.
		retired bool
	}
	// length mirrors mu.count for lock-free reads (metrics, QueueLen).
	length atomic.Int64
}

func newQueue(capacity int) *queue {
	q := &queue{}
	q.mu.cap = capacity
	return q
}

type pushResult uint8

const (
	pushed pushResult = iota
	pushFull
	pushRetired
)

// push appends w at the tail unless the queue is full or retired.
func (q *queue) push(w *waiter) pushResult {
	q.mu.Lock()
	if q.mu.retired {
		q.mu.Unlock()
		return pushRetired
	}
	if q.mu.count >= q.mu.cap {
		q.mu.Unlock()
		return pushFull
	}
	w.prev, w.next = q.mu.tail, nil
	if q.mu.tail == nil {
		q.mu.head = w
	} else {
		q.mu.tail.next = w
	}
	q.mu.tail = w
	w.epoch = q.mu.epoch
	q.mu.count++
	q.length.Store(int64(q.mu.count))
	q.mu.Unlock()
	return pushed
}

// remove unlinks w if it is still queued here and reports whether it did.
// When it reports false, a policer run (or Close) has taken w and its
// decision is on w.ch or about to be.
func (q *queue) remove(w *waiter) bool {
	q.mu.Lock()
	if w.epoch != q.mu.epoch {
		q.mu.Unlock()
		return false
	}
	if w.prev == nil {
		q.mu.head = w.next
	} else {
		w.prev.next = w.next
	}
	if w.next == nil {
		q.mu.tail = w.prev
	} else {
		w.next.prev = w.prev
	}
	w.prev, w.next = nil, nil
	q.mu.count--
	q.length.Store(int64(q.mu.count))
	q.mu.Unlock()
	return true
}

// take detaches the whole list (FIFO order through next) in O(1). The caller
// owns the returned waiters and must decide every one of them. With retire
// set the queue also stops taking waiters.
func (q *queue) take(retire bool) *waiter {
	q.mu.Lock()
	head := q.mu.head
	q.mu.head, q.mu.tail = nil, nil
	q.mu.count = 0
	q.mu.epoch++
	if retire {
		q.mu.retired = true
	}
	q.length.Store(0)
	q.mu.Unlock()
	return head
}

func (q *queue) setCap(capacity int) {
	q.mu.Lock()
	q.mu.cap = capacity
	q.mu.Unlock()
}
