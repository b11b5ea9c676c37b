package proxy

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// gpool.go: the connections the goroutine driver (gdrive.go) keeps to one
// backend between exchanges. A connection is counted in the backend's
// LoopConns from its dial to its close, so that max_conns_per_backend
// counts it with the event loops' and fasthttp's (capped). Kept
// connections are a stack (the most recent is taken first, so the
// oldest go idle and age out): one kept longer than gpoolIdle is closed
// when the pool is next used (fasthttp's MaxIdleConnDuration), and none
// is kept for a backend that was removed or quiesced (Detach, Quiesce).

const gpoolIdle = 30 * time.Second

type gpool struct {
	u    *pipeline.Upstream
	mu   sync.Mutex
	idle []gidle
}

type gidle struct {
	c  net.Conn
	at int64 // when it was kept (Unix ns)
}

// connsOf is u's pool (nil for an Upstream made without one: then
// nothing is kept).
func connsOf(u *pipeline.Upstream) *gpool {
	p, _ := u.Conns.(*gpool)
	return p
}

// take is a kept connection to u (nil: none), dropping those kept too
// long.
func (p *gpool) take(now time.Time) net.Conn {
	if p == nil {
		return nil
	}
	limit := now.UnixNano() - int64(gpoolIdle)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expireLocked(limit)
	n := len(p.idle)
	if n == 0 {
		return nil
	}
	c := p.idle[n-1].c
	p.idle[n-1] = gidle{}
	p.idle = p.idle[:n-1]
	return c
}

// peek tells whether a kept connection waits (without taking it).
func (p *gpool) peek() bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle) > 0
}

// expireLocked closes the connections kept since before limit (the
// oldest are at the bottom).
func (p *gpool) expireLocked(limit int64) {
	k := 0
	for k < len(p.idle) && p.idle[k].at < limit {
		closeConn(p.u, p.idle[k].c)
		k++
	}
	if k > 0 {
		n := copy(p.idle, p.idle[k:])
		clear(p.idle[n:])
		p.idle = p.idle[:n]
	}
}

// put keeps c for u's next exchange, or closes it when u is no longer
// one to keep connections to.
func (p *gpool) put(u *pipeline.Upstream, c net.Conn, now time.Time) {
	if p == nil || u.Closed.Load() || u.Quiesced.Load() || u.LoopWaiting.Load() > 0 {
		// (While the loops' exchanges wait for a connection to u, the
		// cap's room goes to them, as the loops do with theirs.)
		closeConn(u, c)
		return
	}
	p.mu.Lock()
	p.idle = append(p.idle, gidle{c: c, at: now.UnixNano()})
	p.mu.Unlock()
}

// closeIdle closes every kept connection (Detach, Quiesce).
func (p *gpool) closeIdle() {
	if p == nil {
		return
	}
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, k := range idle {
		closeConn(p.u, k.c)
	}
}

// capped tells whether u's connections are at a's max_conns_per_backend.
func capped(a *pipeline.App, u *pipeline.Upstream) bool {
	max := a.Policy.MaxConnsPerBackend
	return max > 0 && int(u.LoopConns.Load())+hostClient(u).ConnsCount() >= max
}

// gdial connects to u within timeout (0: none) or until ctx ends,
// counting the connection in u.LoopConns.
func gdial(ctx context.Context, u *pipeline.Upstream, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	u.LoopConns.Add(1)
	c, err := d.DialContext(ctx, "tcp", u.Addr)
	if err != nil {
		u.LoopConns.Add(-1)
		return nil, err
	}
	return c, nil
}

// closeConn closes a connection gdial made, uncounting it.
func closeConn(u *pipeline.Upstream, c net.Conn) {
	_ = c.Close()
	u.LoopConns.Add(-1)
}
