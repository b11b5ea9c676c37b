package lb

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// members is one immutable membership snapshot.
type members struct {
	list []*Backend
}

// noExpiry marks an available set that no running ejection will change.
const noExpiry = math.MaxInt64

// availSet is one immutable snapshot of the pickable members: neither down
// nor within an ejection when it was built. expires is the earliest end of
// an ejection it left out (noExpiry if none): from then on it is stale and
// the next Pick rebuilds it.
type availSet struct {
	list    []*Backend
	expires int64
}

// poolHot is what every pick reads; it changes only on membership, health
// or configuration changes.
type poolHot struct {
	members atomic.Pointer[members]
	avail   atomic.Pointer[availSet]
	cfg     atomic.Pointer[config]
}

// Pool is the set of backends of one app and the algorithm that picks among
// them. All methods are safe for concurrent use. Pick and Release take no
// lock and do not allocate.
type Pool struct {
	poolHot
	_ [cacheLine - 24]byte // 24 = unsafe.Sizeof(poolHot{}); TestLayout checks

	// Written on every pick.
	next     atomic.Uint64 // round-robin position / least-loaded start index
	inflight atomic.Int64  // total in flight, including backends since removed
	_        [cacheLine - 16]byte

	running atomic.Bool // Run is active
	// resolveFailing: the last resolution failed (or was empty); a failure
	// is warned once per streak, and the recovery logged (resolveOnce).
	resolveFailing atomic.Bool
	checkMu        sync.Mutex // serialises probe rounds; never taken on the request path
	availMu        sync.Mutex // serialises rebuilds of avail
	// probeNow asks the active checks for a round at once (a backend
	// leaving Disabled: state.go); buffered, never blocks.
	probeNow chan struct{}

	// mu guards membership changes and the reconfiguration signal.
	mu struct {
		sync.Mutex
		byAddr map[string]*Backend // current members
		want   []string            // last addresses asked for, before partitioning
		closed bool
		reconf chan struct{} // closed and replaced by Reconfigure
	}
}

// NewPool returns a pool with opts and the initial addresses addrs.
// Attach is called for each address before NewPool returns.
func NewPool(opts Options, addrs []string) *Pool {
	p := &Pool{probeNow: make(chan struct{}, 1)}
	p.cfg.Store(newConfig(opts))
	p.members.Store(&members{})
	p.avail.Store(&availSet{expires: noExpiry})
	p.mu.byAddr = make(map[string]*Backend)
	p.mu.reconf = make(chan struct{})
	p.SetAddrs(addrs)
	return p
}

// Pick returns the healthy backend chosen by the pool's algorithm with its
// in-flight count already incremented, or nil when no backend is healthy.
// Every non-nil result must be given back with Release.
//
// Pick chooses from the available set, a snapshot rebuilt on every health
// or membership change, so round robin and p2c are O(1) and share evenly
// among the healthy backends however many are out. The chosen backend is
// checked once more; if a transition raced the snapshot, Pick falls back to
// a least-loaded scan over the members that checks each one.
func (p *Pool) Pick() *Backend {
	cfg := p.cfg.Load()
	now := lazyNow{f: cfg.now}
	s := p.avail.Load()
	if s.expires != noExpiry && now.nanos() >= s.expires {
		s = p.refreshTry(now.nanos())
	}
	bs := s.list
	n := len(bs)
	if n == 0 {
		return nil
	}
	var b *Backend
	switch cfg.alg {
	case RoundRobin:
		b = bs[(p.next.Add(1)-1)%uint64(n)]
	case P2C:
		b = bs[0]
		if n > 1 {
			i, j := twoDistinct(cfg.rand(), n)
			b = lessLoaded(bs[i], bs[j])
		}
	default:
		b = leastLoaded(bs, int(p.next.Add(1)%uint64(n)))
	}
	if !b.eligible(&now) {
		b = p.pickChecked(&now)
		if b == nil {
			return nil
		}
	}
	b.inflight.Add(1)
	p.inflight.Add(1)
	return b
}

// leastLoaded returns the backend of bs with the fewest in flight, scanning
// from start so that ties rotate. bs is not empty.
func leastLoaded(bs []*Backend, start int) *Backend {
	best := bs[start]
	bestLoad := best.inflight.Load()
	if bestLoad <= 0 {
		return best
	}
	for _, b := range bs[start+1:] {
		if l := b.inflight.Load(); l < bestLoad {
			if best, bestLoad = b, l; l <= 0 {
				return best // nothing beats idle
			}
		}
	}
	for _, b := range bs[:start] {
		if l := b.inflight.Load(); l < bestLoad {
			if best, bestLoad = b, l; l <= 0 {
				return best
			}
		}
	}
	return best
}

// pickChecked is the fallback when the snapshot was stale: the least
// loaded of the members that are eligible now, or nil.
func (p *Pool) pickChecked(now *lazyNow) *Backend {
	var best *Backend
	bestLoad := int64(math.MaxInt64)
	for _, b := range p.members.Load().list {
		if !b.eligible(now) {
			continue
		}
		if l := b.inflight.Load(); l < bestLoad {
			best, bestLoad = b, l
		}
	}
	return best
}

// twoDistinct maps r to two distinct indexes in [0, n), n ≥ 2, using the
// two 32-bit halves (multiply-shift reduction, no division).
func twoDistinct(r uint64, n int) (int, int) {
	i := int((r & math.MaxUint32) * uint64(n) >> 32)
	j := int((r >> 32) * uint64(n-1) >> 32)
	if j >= i {
		j++
	}
	return i, j
}

func lessLoaded(a, b *Backend) *Backend {
	if b.inflight.Load() < a.inflight.Load() {
		return b
	}
	return a
}

// refresh rebuilds the available set from the current members and health.
// It is called after every transition; rebuilds are serialised, so the
// last one to run saw every transition stored before it.
func (p *Pool) refresh() {
	now := p.cfg.Load().now().UnixNano() // the clock is a callback: read it unlocked
	p.availMu.Lock()
	p.refreshLocked(now)
	p.availMu.Unlock()
}

// refreshTry rebuilds an expired available set unless another goroutine
// is already doing so, and returns the current set.
func (p *Pool) refreshTry(now int64) *availSet {
	if p.availMu.TryLock() {
		if p.avail.Load().expires <= now {
			p.refreshLocked(now)
		}
		p.availMu.Unlock()
	}
	return p.avail.Load()
}

func (p *Pool) refreshLocked(now int64) {
	bs := p.members.Load().list
	expires := int64(noExpiry)
	list, copied := bs, false // share members' slice while everyone is available
	for i, b := range bs {
		out := b.down.Load() || b.admin.Load() != 0
		if u := b.ejectedUntil.Load(); u > now {
			out = true
			expires = min(expires, u)
		}
		switch {
		case out && !copied:
			list, copied = append(make([]*Backend, 0, len(bs)-1), bs[:i]...), true
		case !out && copied:
			list = append(list, b)
		}
	}
	p.avail.Store(&availSet{list: list, expires: expires})
}

// Release gives back a backend returned by Pick. ok reports whether the
// relay succeeded: false counts a consecutive failure for passive health,
// true resets the count. Release of a backend removed from the pool since
// Pick is fine. Release(nil, _) does nothing.
func (p *Pool) Release(b *Backend, ok bool) { p.release(b, ok, false) }

func (p *Pool) release(b *Backend, ok, force bool) {
	if b == nil {
		return
	}
	bp := b.pool // the owner, even if the caller mixed pools up
	n := b.inflight.Add(-1)
	bp.inflight.Add(-1)
	b.requests.Add(1)
	if n == 0 && b.admin.Load() != 0 {
		bp.quiesced(b) // the last request in flight to a backend out of rotation
	}
	if ok {
		if b.consec.Load() != 0 || b.ejectedUntil.Load() != 0 {
			bp.succeeded(b)
		}
		return
	}
	b.failures.Add(1)
	if cfg := bp.cfg.Load(); cfg.failures > 0 {
		bp.failed(cfg, b, force)
	}
}

// failed records one failed relay and ejects b when it has failed
// cfg.failures times in a row. The count is not reset by ejection, so once
// the cooldown is over the next failure ejects again (half-open).
// failed counts a failed relay; force ejects at once whatever the count
// (an unambiguous failure: see Eject).
func (p *Pool) failed(cfg *config, b *Backend, force bool) {
	n := b.consec.Add(1)
	if n < cfg.failures && !force {
		return
	}
	if force && n < cfg.failures {
		// Half-open after it like any ejected backend: its next failure
		// ejects it again at once.
		b.consec.CompareAndSwap(n, cfg.failures)
	}
	now := cfg.now().UnixNano()
	b.mu.Lock()
	prev := b.ejectedUntil.Load()
	// Re-check under b.mu: a Reconfigure turning passive checks off clears
	// ejections under this lock after publishing the new config.
	if prev > now || p.cfg.Load().failures == 0 {
		b.mu.Unlock() // already ejected: late failures do not extend it
		return
	}
	// The trial wait (doc.go, "Health"): TrialWait after a first
	// ejection; a backend that fails its trial (prev != 0: ejected
	// before and not rejoined) waits twice its last wait, up to the
	// cooldown. With a way to test it (Reach or active checks) it stays
	// out until a test after the wait succeeds, or the cooldown ends;
	// without, it is half-open when the wait ends.
	wait := min(int64(TrialWait), cfg.cooldown)
	if prev != 0 {
		wait = min(max(2*b.mu.wait, wait), cfg.cooldown)
	}
	until := now + wait
	if cfg.reach != nil || cfg.active != nil {
		until = now + cfg.cooldown
	}
	b.mu.wait, b.mu.trialAt = wait, now+wait
	b.ejectedUntil.Store(until)
	b.mu.Unlock()
	p.refresh()
	cfg.log.Warn("backend ejected", "backend", b.addr, "consecutive_failures", n,
		"trial_after", time.Duration(wait), "cooldown", time.Duration(cfg.cooldown), "half_open", prev != 0)
}

// endWait ends b's passive ejection at now, making it half-open, when its
// trial wait is over: a Reach or an active probe (what) found it
// answering. Its next relay decides: a failure ejects it again with a
// doubled wait, a success ends the ejection.
func (p *Pool) endWait(b *Backend, now int64, what string) {
	b.mu.Lock()
	ok := b.ejectedUntil.Load() > now && b.mu.trialAt != 0 && b.mu.trialAt <= now
	if ok {
		b.ejectedUntil.Store(now)
	}
	b.mu.Unlock()
	if ok {
		p.refresh()
		p.cfg.Load().log.Info("backend half-open", "backend", b.addr, "after", what)
	}
}

// succeeded resets the failure count; after the cooldown it also ends the
// ejection. A success that lands during the cooldown (a request picked
// before the ejection) changes nothing: the ejection stands.
func (p *Pool) succeeded(b *Backend) {
	u := b.ejectedUntil.Load()
	if u == 0 {
		b.consec.Store(0)
		return
	}
	cfg := p.cfg.Load()
	if cfg.now().UnixNano() < u {
		return
	}
	b.mu.Lock()
	rejoined := b.ejectedUntil.CompareAndSwap(u, 0)
	if rejoined {
		b.consec.Store(0)
		b.mu.wait, b.mu.trialAt = 0, 0
	}
	b.mu.Unlock()
	if rejoined {
		p.refresh()
		cfg.log.Info("backend rejoined", "backend", b.addr)
	}
}

// Healthy returns the number of backends that can be picked now: the n of
// the admission test. O(1): it reads the available set.
func (p *Pool) Healthy() int {
	s := p.avail.Load()
	if s.expires != noExpiry {
		if now := p.cfg.Load().now().UnixNano(); now >= s.expires {
			s = p.refreshTry(now)
		}
	}
	return len(s.list)
}

// Inflight returns the exact number of requests picked and not yet
// released, over all backends, including backends removed since.
func (p *Pool) Inflight() int64 { return p.inflight.Load() }

// Backends returns the current membership. The slice is shared: callers
// must not modify it.
func (p *Pool) Backends() []*Backend { return p.members.Load().list }

// Algorithm returns the algorithm in use.
func (p *Pool) Algorithm() Algorithm { return p.cfg.Load().alg }
