package lb

import (
	"sync"
	"sync/atomic"
	"time"
)

// cacheLine is the size the hot fields are padded to, so that two
// backends never share a cache line.
const cacheLine = 64

// backendHot is everything a pick or release touches, on one cache line:
// a least-loaded scan reads one line per backend.
type backendHot struct {
	inflight     atomic.Int64
	requests     atomic.Uint64
	ejectedUntil atomic.Int64 // passive ejection: unix nanos; 0 = not ejected
	consec       atomic.Int64 // consecutive failed relays
	failures     atomic.Uint64
	pool         *Pool
	down         atomic.Bool // active checks say down
	// admin is the operator's State (low bits) and notedBit (state.go).
	admin atomic.Uint32
}

// backendCold is identity and health bookkeeping, off the hot line.
type backendCold struct {
	addr string
	// mu serialises health transitions of this backend. It is never taken
	// on the Pick path; Release takes it only when a failure ejects the
	// backend or a success ends an ejection.
	mu struct {
		sync.Mutex
		rise int32 // consecutive successful probes while down
		fall int32 // consecutive failed probes while up
		// wait is the trial wait of the backend's current (or last)
		// passive ejection: TrialWait, doubled by each failed trial up
		// to the cooldown; 0 once it has rejoined (pool.go, failed).
		wait int64 // ns
		// trialAt is when that wait ends (unix ns; 0: none): from then a
		// successful Reach or active probe ends the ejection (endWait).
		trialAt int64
	}
}

// Backend is one member of a Pool. Its identity is its address; a backend
// keeps its state for as long as its address stays in the pool.
type Backend struct {
	backendHot
	_ [cacheLine - 56]byte // 56 = unsafe.Sizeof(backendHot{}); TestLayout checks

	// Attachment is what Options.Attach returned for this address (for
	// example the proxy's per-backend HTTP client). It is set before the
	// backend is published and never changed by the pool.
	Attachment any

	// backendCold fills the second line exactly (128 bytes in all): Go
	// places objects of such a size class at multiples of it, so each
	// Backend starts a line. TestLayout checks.
	backendCold
}

// Addr returns the backend's address.
func (b *Backend) Addr() string { return b.addr }

// Inflight returns the backend's in-flight requests (picked, not released).
func (b *Backend) Inflight() int64 { return b.inflight.Load() }

// Healthy reports whether the backend's health lets it be picked now:
// not marked down by active checks and not passively ejected. The
// operator's State is apart: a drained backend may be healthy.
func (b *Backend) Healthy() bool {
	if b.down.Load() {
		return false
	}
	u := b.ejectedUntil.Load()
	return u == 0 || u <= b.pool.cfg.Load().now().UnixNano()
}

// Requests returns the number of requests released on this backend.
func (b *Backend) Requests() uint64 { return b.requests.Load() }

// Failures returns the number of requests released with ok=false.
func (b *Backend) Failures() uint64 { return b.failures.Load() }

// Down reports whether active health checks mark the backend down.
func (b *Backend) Down() bool { return b.down.Load() }

// EjectedUntil returns the end of the backend's passive ejection, or the
// zero time when it is not ejected. A time in the past means half-open.
func (b *Backend) EjectedUntil() time.Time {
	if u := b.ejectedUntil.Load(); u != 0 {
		return time.Unix(0, u)
	}
	return time.Time{}
}

// lazyNow reads the clock at most once per pick, and only when a backend
// with an ejection on record is met, so the common pick never calls it.
type lazyNow struct {
	f  func() time.Time
	t  int64
	ok bool
}

func (l *lazyNow) nanos() int64 {
	if !l.ok {
		l.t, l.ok = l.f().UnixNano(), true
	}
	return l.t
}

// eligible reports whether b may be picked at now: in rotation (the
// operator's State is Enabled), not down and not within an ejection.
func (b *Backend) eligible(now *lazyNow) bool {
	if b.down.Load() || b.admin.Load() != 0 {
		return false
	}
	u := b.ejectedUntil.Load()
	return u == 0 || u <= now.nanos()
}
