//go:build linux

package proxy

import (
	"net"
	"os"
	"runtime"
	"syscall"

	"github.com/sentry-proxy/sentry/proxy/evloop"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// evloop_start_linux.go starts the event loops (package proxy/evloop) on a
// plain listener and gives them their Config: the one place package proxy
// meets the loops.

// fastDisabled turns the event loop off (SENTRY_EVLOOP=0) for EngineAuto:
// every connection is served by fasthttp. For comparison and as an escape
// hatch.
var fastDisabled = os.Getenv("SENTRY_EVLOOP") == "0"

// startFast starts the loops on ln and returns the listener fasthttp
// serves (connections handed off by the loops). ok is false when the event
// loop cannot be used; fasthttp then serves ln itself.
func (fe *frontend) startFast(ln net.Listener) (net.Listener, bool) {
	switch fe.p.opts.Engine {
	case EngineFastHTTP:
		return ln, false
	case EngineAuto:
		if fastDisabled {
			return ln, false
		}
	}
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return ln, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return ln, false
	}
	lfd := -1
	if rc.Control(func(fd uintptr) { lfd = int(fd) }) != nil || lfd < 0 {
		return ln, false
	}
	ff, err := evloop.Start(fe.loopSettings(ln, lfd))
	if err != nil {
		fe.p.log.Warn("event loop unavailable; serving with fasthttp only", "addr", fe.addr, "error", err)
		return ln, false
	}
	fe.loops.Store(ff)
	return ff.Handed, true
}

// loopOthers is the listener's client connections its loops do not hold
// (server.max_conns counts them with the loops'): fasthttp's, and those
// its TLS or h2c listener has in a handshake, being sniffed or on h2.
func (fe *frontend) loopOthers() int {
	n := fasthttpOpen(fe.srv)
	if l := fe.gate.Load(); l != nil {
		n += l.liveCount()
	}
	return n
}

// loopSettings is the loops' view of fe, with loopConfig's calls back into
// proxy.
func (fe *frontend) loopSettings(ln net.Listener, lfd int) evloop.Config {
	p := fe.p
	sv := p.cur.Load().snap.Server
	return evloop.Config{Addr: fe.addr, Listener: ln, LFD: lfd, Loops: runtime.GOMAXPROCS(0),
		Routes: &fe.route, IDs: p.ids, Log: p.log,
		MaxHeader: sv.MaxHeaderBytes, MaxConns: sv.MaxConns, Idle: sv.IdleTimeout, Write: sv.WriteTimeout, Header: sv.ReadHeaderTimeout,
		Linger: lingerTimeout, IdleGrace: idleGrace, Handoff: handoffQueue, Resp: p.resp,
		OtherConns:   fe.loopOthers,
		BackendConns: func(u *pipeline.Upstream) int { return hostClient(u).ConnsCount() },
		CloseIdle:    func(u *pipeline.Upstream) { hostClient(u).CloseIdleConnections() },
		TooManyConns: func() { p.metrics.clientErrors.WithLabelValues(fe.addr, "too_many_conns").Inc() },
		Access:       p.accessEntry,
	}
}

// handoffQueue is the queue's length: enough to absorb a burst without
// stalling a loop while fasthttp's accept loop catches up.
var handoffQueue = 256 // a variable for tests
