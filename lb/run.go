package lb

import (
	"context"
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
	wg.Go(func() {
		p.every(ctx, func(c *config) time.Duration {
			if c.active == nil {
				return 0
			}
			return c.active.Interval
		}, p.checkOnce)
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

// checkOnce runs one round of active probes over the current members
// concurrently (at most maxProbers at a time), waits for all of them and
// then applies rise/fall. A round cut short by ctx changes nothing.
func (p *Pool) checkOnce(ctx context.Context) {
	p.checkMu.Lock()
	defer p.checkMu.Unlock()
	cfg := p.cfg.Load()
	a := cfg.active
	bs := p.members.Load().list
	if a == nil || len(bs) == 0 {
		return
	}
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
				pctx, cancel := context.WithTimeout(ctx, a.Timeout)
				errs[i] = a.Probe(pctx, bs[i].addr)
				cancel()
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	for i, b := range bs {
		p.observeProbe(cfg, b, errs[i])
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
		b.mu.fall = 0
		if b.down.Load() {
			if b.mu.rise++; b.mu.rise >= a.Rise {
				b.mu.rise = 0
				b.down.Store(false)
				changed = true
			}
		}
	} else {
		b.mu.rise = 0
		if !b.down.Load() {
			if b.mu.fall++; b.mu.fall >= a.Fall {
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
