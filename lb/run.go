package lb

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// maxProbers bounds the probes of one round that run at the same time.
const maxProbers = 32

// Run runs active health checks and DNS re-resolution, as configured, until
// ctx is done, and returns once every goroutine it started has stopped. A
// Reconfigure takes effect at once. Run must not be called again while it
// runs (a second call logs an error and returns).
func (p *Pool) Run(ctx context.Context) {
	if !p.running.CompareAndSwap(false, true) {
		p.cfg.Load().log.Error("Pool.Run called while already running")
		return
	}
	defer p.running.Store(false)
	var wg sync.WaitGroup
	wg.Go(func() { p.activeLoop(ctx) })
	wg.Go(func() {
		p.every(ctx, func(c *config) time.Duration {
			if c.reach == nil || c.failures == 0 {
				return 0
			}
			return ReachInterval
		}, p.reachOnce)
	})
	p.every(ctx, func(c *config) time.Duration {
		if c.resolve == nil {
			return 0
		}
		return c.resolveInterval
	}, p.resolveOnce)
	wg.Wait()
}

// every calls fn at once and then every interval(cfg) until ctx is done.
// interval returns 0 while the task is disabled. A Reconfigure runs fn
// again at once with the new configuration.
func (p *Pool) every(ctx context.Context, interval func(*config) time.Duration, fn func(context.Context)) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for ctx.Err() == nil {
		reconf := p.reconfigured() // before loading cfg, so no change is missed
		var tick <-chan time.Time
		if d := interval(p.cfg.Load()); d > 0 {
			fn(ctx)
			timer.Reset(d)
			tick = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-reconf:
		case <-tick:
		}
	}
}

// activeLoop runs the active checks until ctx is done: a round over every
// member each Interval (at once when it starts and after a Reconfigure),
// and between them, while some backend is in transition (its rise or
// fall count started), a round over those alone every
// Interval/FastDivisor (HAProxy's fastinter): a backend that answers
// again is up within a fraction of an interval of its first good probe,
// not rise intervals later.
func (p *Pool) activeLoop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var full time.Time // when the last round over every member started
	wake := true
	for ctx.Err() == nil {
		reconf := p.reconfigured() // before loading cfg, so no change is missed
		var tick <-chan time.Time
		if a := p.cfg.Load().active; a != nil {
			if now := time.Now(); wake || now.Sub(full) >= a.Interval {
				full = now
				p.check(ctx, false)
			} else {
				p.check(ctx, true)
			}
			wake = false
			d := a.Interval - time.Since(full)
			if p.inTransition() {
				d = min(d, a.Interval/FastDivisor)
			}
			timer.Reset(max(d, 0))
			tick = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-reconf:
			wake = true
		case <-p.probeNow:
			wake = true
		case <-tick:
		}
	}
}

// inTransition tells whether some member's active checks are counting
// towards a change.
func (p *Pool) inTransition() bool {
	for _, b := range p.members.Load().list {
		if b.State() != Disabled && b.transitional() {
			return true
		}
	}
	return false
}

// transitional: b's rise count started while it is down, or its fall
// count while it is up.
func (b *Backend) transitional() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.down.Load() {
		return b.mu.rise > 0
	}
	return b.mu.fall > 0
}

// checkOnce runs one round of active probes over the current members.
func (p *Pool) checkOnce(ctx context.Context) { p.check(ctx, false) }

// check runs one round of active probes over the current members (only
// those in transition, with transitional) concurrently (at most
// maxProbers at a time), waits for all of them and then applies
// rise/fall. A round cut short by ctx changes nothing. A Disabled
// backend is not probed (state.go).
func (p *Pool) check(ctx context.Context, transitional bool) {
	p.checkMu.Lock()
	defer p.checkMu.Unlock()
	cfg := p.cfg.Load()
	a := cfg.active
	bs := p.members.Load().list
	bs = slices.DeleteFunc(slices.Clone(bs), func(b *Backend) bool {
		return b.State() == Disabled || transitional && !b.transitional()
	})
	if a == nil || len(bs) == 0 {
		return
	}
	errs := probeAll(ctx, bs, a.Timeout, a.Probe)
	if ctx.Err() != nil {
		return
	}
	for i, b := range bs {
		p.observeProbe(cfg, b, errs[i])
	}
}

// probeAll calls probe for every backend of bs concurrently (at most
// maxProbers at a time), each bounded by timeout, and returns their
// errors in order.
func probeAll(ctx context.Context, bs []*Backend, timeout time.Duration, probe func(context.Context, string) error) []error {
	errs := make([]error, len(bs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(len(bs), maxProbers) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(bs) {
					return
				}
				pctx, cancel := context.WithTimeout(ctx, timeout)
				errs[i] = probe(pctx, bs[i].addr)
				cancel()
			}
		})
	}
	wg.Wait()
	return errs
}

// reachOnce calls Reach for every member within a passive ejection whose
// trial wait is over, concurrently, and ends the ejection of each that
// answers (endWait). A round cut short by ctx changes nothing.
func (p *Pool) reachOnce(ctx context.Context) {
	cfg := p.cfg.Load()
	if cfg.reach == nil {
		return
	}
	now := cfg.now().UnixNano()
	var due []*Backend
	for _, b := range p.members.Load().list {
		if b.ejectedUntil.Load() <= now || b.State() == Disabled {
			continue
		}
		b.mu.Lock()
		t := b.mu.trialAt
		b.mu.Unlock()
		if t != 0 && t <= now {
			due = append(due, b)
		}
	}
	if len(due) == 0 {
		return
	}
	errs := probeAll(ctx, due, ReachInterval, cfg.reach)
	if ctx.Err() != nil {
		return
	}
	now = cfg.now().UnixNano()
	for i, b := range due {
		if errs[i] == nil {
			p.endWait(b, now, "reach")
		}
	}
}

// observeProbe applies one probe result: Rise successes in a row mark a
// down backend up, Fall failures in a row mark an up backend down.
func (p *Pool) observeProbe(cfg *config, b *Backend, err error) {
	var changed bool
	b.mu.Lock()
	// Re-read under b.mu: a Reconfigure that turned active checks off has
	// already marked b up, or will once we unlock.
	a := p.cfg.Load().active
	if a == nil {
		b.mu.Unlock()
		return
	}
	if err == nil {
		// A good probe also ends a passive ejection whose trial wait is
		// over (Envoy's successful_active_health_check_uneject_host);
		// applied after b.mu is released.
		defer p.endWait(b, cfg.now().UnixNano(), "probe")
		b.mu.fall = 0
		if b.down.Load() {
			if b.mu.rise++; int(b.mu.rise) >= a.Rise {
				b.mu.rise = 0
				b.down.Store(false)
				changed = true
			}
		}
	} else {
		b.mu.rise = 0
		if !b.down.Load() {
			if b.mu.fall++; int(b.mu.fall) >= a.Fall {
				b.mu.fall = 0
				b.down.Store(true)
				changed = true
			}
		}
	}
	b.mu.Unlock()
	if changed {
		p.refresh()
	}
	switch {
	case !changed:
	case err == nil:
		cfg.log.Info("backend marked up", "backend", b.addr, "rise", a.Rise)
	default:
		cfg.log.Warn("backend marked down", "backend", b.addr, "fall", a.Fall, "error", err)
	}
}

// resolveOnce calls Resolve once, bounded by the resolve interval, and
// adopts the result. An error or an empty answer keeps the current set.
func (p *Pool) resolveOnce(ctx context.Context) {
	cfg := p.cfg.Load()
	if cfg.resolve == nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, cfg.resolveInterval)
	addrs, err := cfg.resolve(rctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	// A failure is warned once per streak (every interval would flood the
	// log while a name stays unresolvable), then at debug level; the first
	// success after it is logged at info.
	warn := cfg.log.Warn
	if p.resolveFailing.Load() {
		warn = cfg.log.Debug
	}
	switch {
	case err != nil:
		p.resolveFailing.Store(true)
		warn("backend resolution failed; keeping current backends",
			"error", err, "backends", len(p.members.Load().list))
	case len(addrs) == 0:
		p.resolveFailing.Store(true)
		warn("backend resolution returned no addresses; keeping current backends",
			"backends", len(p.members.Load().list))
	default:
		if p.resolveFailing.Swap(false) {
			cfg.log.Info("backend resolution recovered", "backends", len(addrs))
		}
		p.SetAddrs(addrs)
	}
}
