package lb

import (
	"fmt"
	"time"
)

// Health is one backend's health as plain values, to carry it to another
// process (a binary upgrade hands it over; a state file keeps it across a
// restart): what the active checks and the passive ejection have
// concluded, keyed by address. Times are unix nanoseconds of the pool's
// clock (wall time in sentry), durations nanoseconds.
type Health struct {
	Addr string `json:"addr"`
	// Down: the active checks mark it down; Rise and Fall are their
	// counts towards a change.
	Down bool  `json:"down,omitempty"`
	Rise int32 `json:"rise,omitempty"`
	Fall int32 `json:"fall,omitempty"`
	// EjectedUntil is the end of a passive ejection (0: none; in the
	// past: half-open), Consecutive the failed relays in a row, Wait the
	// ejection's trial wait and TrialAt when it ends (pool.go, failed).
	EjectedUntil int64 `json:"ejected_until,omitempty"`
	Consecutive  int64 `json:"consecutive_failures,omitempty"`
	Wait         int64 `json:"trial_wait,omitempty"`
	TrialAt      int64 `json:"trial_at,omitempty"`
}

// PendingFor is how long RestoreHealth keeps the health of an address a
// DNS pool has not resolved yet: a first resolution comes at once when
// the pool runs.
const PendingFor = time.Minute

// Health returns every member's health, in membership order.
func (p *Pool) Health() []Health {
	bs := p.members.Load().list
	out := make([]Health, 0, len(bs))
	for _, b := range bs {
		b.mu.Lock()
		h := Health{Addr: b.addr, Down: b.down.Load(), Rise: b.mu.rise, Fall: b.mu.fall,
			EjectedUntil: b.ejectedUntil.Load(), Consecutive: b.consec.Load(), Wait: b.mu.wait, TrialAt: b.mu.trialAt}
		b.mu.Unlock()
		out = append(out, h)
	}
	return out
}

// RestoreHealth takes in health another process exported (Health). A
// member gets its entry at once. An address that is not a member is left
// out and reported -- unless the pool follows DNS, where it is kept for
// PendingFor and applied if the address joins by then. What the pool's
// configuration cannot undo is left out and reported: a down mark without
// active checks (nothing would ever mark it up), an ejection without
// passive checks. It never fails; ignored says what was left out, one
// line each.
func (p *Pool) RestoreHealth(hs []Health) (applied int, ignored []string) {
	cfg := p.cfg.Load()
	now := cfg.now().UnixNano()
	bs := map[string]*Backend{}
	for _, b := range p.members.Load().list {
		bs[b.addr] = b
	}
	var here, later []Health
	for _, h := range hs {
		if bs[h.Addr] == nil && cfg.resolve == nil {
			ignored = append(ignored, fmt.Sprintf("backend %s: not in the pool", h.Addr))
			continue
		}
		if h.Down && cfg.active == nil {
			ignored = append(ignored, fmt.Sprintf("backend %s: marked down, but the policy has no active checks", h.Addr))
			h.Down, h.Rise, h.Fall = false, 0, 0
		}
		if h.EjectedUntil != 0 && cfg.failures == 0 {
			ignored = append(ignored, fmt.Sprintf("backend %s: ejected, but the policy has no passive checks", h.Addr))
			h.EjectedUntil, h.Consecutive, h.Wait, h.TrialAt = 0, 0, 0, 0
		}
		if h.Rise < 0 || h.Fall < 0 || h.Consecutive < 0 || h.Wait < 0 {
			ignored = append(ignored, fmt.Sprintf("backend %s: a count out of range", h.Addr))
			continue
		}
		if bs[h.Addr] != nil {
			here = append(here, h)
		} else {
			later = append(later, h)
		}
	}
	if len(later) > 0 {
		p.mu.Lock()
		p.mu.pending = make(map[string]Health, len(later))
		for _, h := range later {
			p.mu.pending[h.Addr] = h
		}
		p.mu.pendingUntil = now + int64(PendingFor)
		p.mu.Unlock()
	}
	return p.applyHealth(here), ignored
}

// takePendingLocked removes and returns the pending health of the
// addresses in added, and forgets all of it once PendingFor has passed.
// p.mu held.
func (p *Pool) takePendingLocked(added []string, now int64) []Health {
	if p.mu.pending == nil {
		return nil
	}
	if now > p.mu.pendingUntil {
		p.mu.pending = nil
		return nil
	}
	var out []Health
	for _, a := range added {
		if h, ok := p.mu.pending[a]; ok {
			out = append(out, h)
			delete(p.mu.pending, a)
		}
	}
	return out
}

// applyHealth sets the health of the members named in hs and rebuilds the
// available set; it returns how many it found.
func (p *Pool) applyHealth(hs []Health) int {
	if len(hs) == 0 {
		return 0
	}
	n := 0
	p.mu.Lock()
	byAddr := p.mu.byAddr
	bs := make([]*Backend, len(hs))
	for i, h := range hs {
		bs[i] = byAddr[h.Addr]
	}
	p.mu.Unlock()
	for i, h := range hs {
		b := bs[i]
		if b == nil {
			continue
		}
		b.mu.Lock()
		b.down.Store(h.Down)
		b.mu.rise, b.mu.fall = h.Rise, h.Fall
		b.ejectedUntil.Store(h.EjectedUntil)
		b.consec.Store(h.Consecutive)
		b.mu.wait, b.mu.trialAt = h.Wait, h.TrialAt
		b.mu.Unlock()
		n++
	}
	p.refresh()
	return n
}
