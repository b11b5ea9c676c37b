package lb

import (
	"context"
	"sync"
)

// Registry keeps one Pool per app across policy reloads, so backend state
// (in-flight counts, health, counters, attachments) survives a reload. The
// zero value is ready to use. All methods are safe for concurrent use.
type Registry struct {
	// mu guards the fields below. Lock order: Registry.mu, then nothing:
	// pool methods (which call Attach/Detach) run after it is released.
	mu struct {
		sync.Mutex
		pools   map[string]*regEntry
		ctx     context.Context // set while Run runs
		running bool
	}
	wg sync.WaitGroup // Pool.Run goroutines started by Run
}

type regEntry struct {
	pool   *Pool
	cancel context.CancelFunc // stops the pool's Run; nil when not started
}

// Pool returns the app's pool: the existing one, reconfigured with opts
// and moved to addrs, or a new one. When opts.Resolve is set the existing
// pool keeps its resolved membership (addrs only seeds a new pool) and
// re-resolves at once. opts.App defaults to app. If Run is running, a new
// pool's Run is started under it.
func (r *Registry) Pool(app string, opts Options, addrs []string) *Pool {
	if opts.App == "" {
		opts.App = app
	}
	r.mu.Lock()
	e := r.mu.pools[app]
	r.mu.Unlock()
	if e == nil {
		// Build outside the lock: NewPool calls Attach.
		p := NewPool(opts, addrs)
		r.mu.Lock()
		if e = r.mu.pools[app]; e == nil {
			if r.mu.pools == nil {
				r.mu.pools = make(map[string]*regEntry)
			}
			e = &regEntry{pool: p}
			r.mu.pools[app] = e
			if r.mu.running {
				r.startLocked(e)
			}
			r.mu.Unlock()
			return p
		}
		r.mu.Unlock()
		p.Close() // lost a race with another Pool call for app
	}
	e.pool.Reconfigure(opts)
	if opts.Resolve == nil {
		e.pool.SetAddrs(addrs)
	}
	return e.pool
}

// Retain drops the pools of apps not in apps: their Run is stopped and
// their backends are detached (Close). Pools for apps in apps are kept.
func (r *Registry) Retain(apps []string) {
	keep := make(map[string]struct{}, len(apps))
	for _, a := range apps {
		keep[a] = struct{}{}
	}
	var dropped []*Pool
	r.mu.Lock()
	for app, e := range r.mu.pools {
		if _, ok := keep[app]; ok {
			continue
		}
		delete(r.mu.pools, app)
		if e.cancel != nil {
			e.cancel()
		}
		dropped = append(dropped, e.pool)
	}
	r.mu.Unlock()
	for _, p := range dropped {
		p.Close()
	}
}

// Run runs every pool's Run, including pools created later by Pool, until
// ctx is done, and returns once all of them have stopped. Do not call
// Pool.Run on a registry's pools while Registry.Run runs. A second
// concurrent call returns at once.
func (r *Registry) Run(ctx context.Context) {
	r.mu.Lock()
	if r.mu.running {
		r.mu.Unlock()
		return
	}
	r.mu.running = true
	r.mu.ctx = ctx
	for _, e := range r.mu.pools {
		r.startLocked(e)
	}
	r.mu.Unlock()

	<-ctx.Done()

	r.mu.Lock()
	r.mu.running = false
	r.mu.ctx = nil
	for _, e := range r.mu.pools {
		e.cancel = nil
	}
	r.mu.Unlock()
	r.wg.Wait() // no Add can happen now: running is false
}

// startLocked starts e.pool.Run under the registry's context. r.mu held.
func (r *Registry) startLocked(e *regEntry) {
	ctx, cancel := context.WithCancel(r.mu.ctx)
	e.cancel = cancel
	r.wg.Go(func() {
		defer cancel()
		e.pool.Run(ctx)
	})
}
