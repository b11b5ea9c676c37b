package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/proxy/evloop"
	"github.com/sentry-proxy/sentry/proxy/exchange"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/valyala/fasthttp"
)

// frontend is one listening address.
type frontend struct {
	p     *Proxy
	addr  string
	route atomic.Pointer[pipeline.Route]
	srv   *fasthttp.Server
	tls   *tlsListener // nil for plain HTTP
	// h2 is set when the listener serves HTTP/2: over TLS (ALPN), or
	// h2c with apps[].h2c. h2c splits a plain listener's connections
	// between the h2 server (HTTP/2 preface) and fasthttp (h2c.go); nil
	// without apps[].h2c.
	h2  bool
	h2c *tlsListener
	// cert is the listener's certificate (TLS only), reloaded from its
	// files by every Apply (a SIGHUP): new handshakes take the new one,
	// connections already up keep theirs (tlsconf.go).
	cert atomic.Pointer[tls.Certificate]
	// loops: the event loops (plain HTTP, and HTTP/1.1 over TLS 1.3, on
	// Linux); nil if fasthttp serves alone. gate: the tlsListener in
	// front of fasthttp (TLS, or h2c), whose connections the loops count
	// (loopOthers). Accept loops and the event loops read them from their
	// own goroutines, so they are published atomically.
	loops atomic.Pointer[evloop.Front]
	gate  atomic.Pointer[tlsListener]
	// h2 streams: server.body_timeout for reading a request body and
	// server.write_timeout (0 = none) for writing the response.
	bodyTimeout, writeTimeout time.Duration
	// body: request buffering and body_min_rate (body.go). writeIdle:
	// server.write_timeout on HTTP/1.1 connections (drainConn.Write).
	body      bodyLimits
	writeIdle time.Duration
	// draining is set when Shutdown starts; closes are then graceful
	// (drainConn).
	draining  atomic.Bool
	lingering atomic.Int64 // connections in a lingering close
	// expired is closed when a drain runs out of time with fasthttp's
	// handlers still running: a request parked for its batch run then
	// leaves its queue as client_gone (awaitPending), as on the loops.
	expired chan struct{}
	// own: the connections of sentry's own h2 server (h2own.go), for
	// the drain's GOAWAY; h2Workers runs their streams.
	own struct {
		mu       sync.Mutex
		conns    map[*ownConn]struct{}
		draining bool
		// illegal counts the h2 streams' illegal phase moves
		// (h2phase.go; sentry_h2_illegal_transitions_total).
		illegal atomic.Uint64
	}
	h2Workers h2Workers
	// genv is the exchange core's environment for the goroutine driver
	// (gdrive.go) on the h2 workers.
	genv exchange.Env
	done chan struct{}
	err  error
}

// Serve starts serving the listener for policy address addr (which must be
// one of the snapshot's Listeners) in the background. TLS is applied here
// when the policy asks for it; ln must be a plain TCP listener.
func (p *Proxy) Serve(addr string, ln net.Listener) error {
	st := p.cur.Load()
	rt, ok := st.routes[addr]
	if !ok {
		return fmt.Errorf("listener %s is not in the policy", addr)
	}
	sv := st.snap.Server
	fe := &frontend{p: p, addr: addr, done: make(chan struct{}), expired: make(chan struct{})}
	fe.h2Workers.serve = fe.serveOwnStream
	fe.genv = exchange.Env{Log: p.log, Access: p.accessEntry, Illegal: &fe.own.illegal, Strict: strictStates}
	fe.route.Store(rt)
	fe.body = bodyLimits{buffer: sv.RequestBuffer, minRate: sv.BodyMinRate, grace: sv.ReadHeaderTimeout, timeout: sv.BodyTimeout}
	fe.writeIdle = sv.WriteTimeout
	fe.srv = fe.newServer(&sv)
	if rt.TLS != nil {
		cert, stale, err := policy.LoadCertificate(rt.TLS, time.Now())
		if err != nil {
			return fmt.Errorf("listener %s: %w", addr, err)
		}
		if stale != nil {
			p.log.Warn("serving without an OCSP staple", "listener", addr, "error", stale)
		}
		fe.cert.Store(&cert)
		tcfg := fe.tlsConfig()
		fe.setupH2()
		// TLS and the h2/HTTP/1.1 split happen in front of fasthttp, which
		// cannot drain h2 (see tlsListener).
		fe.tls = newTLSListener(ln, fe, tcfg, sv.ReadHeaderTimeout, sv.MaxConns, fe.serveOwnConn)
		fe.gate.Store(fe.tls)
		ln = fe.tls
	}
	if rt.TLS == nil && rt.H2C {
		fe.setupH2()
	}
	p.mu.Lock()
	if _, dup := p.mu.fronts[addr]; dup {
		p.mu.Unlock()
		if fe.tls != nil {
			fe.tls.Close()
		}
		return fmt.Errorf("listener %s already served", addr)
	}
	if fe.tls != nil {
		// HTTP/1.1 over TLS 1.3 on loops of its own (tlsloop_linux.go).
		// Under p.mu, as startFast below.
		fe.startTLSLoops()
		fe.tls.start()
	}
	if fe.tls == nil {
		// The event loops take the listener; fasthttp serves what they
		// hand off (see package proxy/evloop). Under p.mu: fe.loops is read
		// under it (metrics) and by Shutdown once fe is published.
		ln, _ = fe.startFast(ln)
		if fe.h2 {
			// h2c: a preface is served by the h2 server, the rest by fasthttp
			// (h2c.go); the loops hand a preface off like any head they
			// do not serve.
			fe.h2c = newTLSListener(ln, fe, nil, sv.ReadHeaderTimeout, sv.MaxConns, nil)
			fe.gate.Store(fe.h2c)
			fe.h2c.start()
			ln = fe.h2c
		}
		ln = &drainListener{Listener: ln, fe: fe}
	}
	p.mu.fronts[addr] = fe
	p.mu.Unlock()
	go func() {
		defer close(fe.done)
		fe.err = fe.srv.Serve(ln)
	}()
	p.log.Info("listening", "addr", addr, "tls", rt.TLS != nil)
	return nil
}

// newServer is the listener's fasthttp server: the HTTP/1.1 front end
// (handle), its timeouts and limits from the policy's server section sv.
func (fe *frontend) newServer(sv *policy.Server) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:      fe.handle,
		ErrorHandler: fe.handleError,
		ConnState:    fe.connState,
		HeaderReceived: func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
			// The read-header timeout covers the head only; a body gets
			// its own budget so a long upload is not cut at 10 s.
			// body_min_rate applies on top, read by read, from the
			// request's start to the end of its body (drainConn.Read).
			if cl := h.ContentLength(); cl != 0 && cl != -2 {
				return fasthttp.RequestConfig{ReadTimeout: fe.body.timeout}
			}
			return fasthttp.RequestConfig{}
		},
		Name:                  "",
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
		ReadBufferSize:        sv.MaxHeaderBytes,
		WriteBufferSize:       16 << 10,
		// The write buffer and the bodies' buffers go back to their
		// pools when a response has been written, not held while the
		// connection waits (proxy's doc, Invariants: memory). The read
		// buffer stays: fasthttp keeps it with StreamRequestBody.
		ReduceMemoryUsage: true,
		ReadTimeout:       sv.ReadHeaderTimeout,
		IdleTimeout:       sv.IdleTimeout,
		// server.write_timeout is an idle timeout, applied by drainConn.
		WriteTimeout:                  0,
		Concurrency:                   sv.MaxConns,
		MaxRequestBodySize:            noBodyLimit,
		StreamRequestBody:             true,
		DisablePreParseMultipartForm:  true,
		CloseOnShutdown:               true,
		SecureErrorLogMessage:         true,
		Logger:                        fasthttpLogger{fe.p.log.Named("http")},
		DisableHeaderNamesNormalizing: false,
	}
}

// heldElsewhere is the listener's client connections that fasthttp and
// the event loops hold now. server.max_conns is one cap on all of a
// listener's connections: a tlsListener refuses at accept when these and
// its own (handshaking, sniffing or on h2) reach it.
func (fe *frontend) heldElsewhere() int {
	n := fasthttpOpen(fe.srv)
	if ff := fe.loops.Load(); ff != nil {
		n += int(ff.Conns())
	}
	return n
}

// fasthttpOpen is the client connections fasthttp serves: its count
// reads -1 until Serve has started, hence the clamp. An upgraded
// connection (a WebSocket tunnel) leaves it.
func fasthttpOpen(s *fasthttp.Server) int {
	return max(0, int(s.GetOpenConnectionsCount()))
}

// setupH2 readies a TLS listener or an h2c one for HTTP/2: its streams'
// body and write timeouts.
func (fe *frontend) setupH2() {
	sv := fe.p.cur.Load().snap.Server
	fe.h2 = true
	fe.bodyTimeout, fe.writeTimeout = sv.BodyTimeout, sv.WriteTimeout
}

// noBodyLimit: bodies stream, and fasthttp's MaxRequestBodySize only
// decides how much is prefetched, so the per-app max_body_bytes cap is
// enforced in serve(), not here.
const noBodyLimit = 1 << 62

// Listening returns the addresses being served.
func (p *Proxy) Listening() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.mu.fronts))
	for a := range p.mu.fronts {
		out = append(out, a)
	}
	return out
}

// Shutdown stops the front end for addr: it stops accepting, lets in-flight
// requests finish until ctx is done, then closes what is left.
func (p *Proxy) Shutdown(ctx context.Context, addr string) error {
	p.mu.Lock()
	fe := p.mu.fronts[addr]
	delete(p.mu.fronts, addr)
	p.mu.Unlock()
	if fe == nil {
		return nil
	}
	fe.draining.Store(true)
	var err error
	if fe.tls == nil {
		// The loops and fasthttp drain together; while draining, the
		// loops hand nothing off (handoff closes instead).
		var loopsDone chan struct{}
		if ff := fe.loops.Load(); ff != nil {
			loopsDone = make(chan struct{})
			go func() { defer close(loopsDone); ff.Shutdown(ctx) }()
		}
		h2cDone := make(chan error, 1)
		if fe.h2c != nil {
			// h2c connections drain the h2 way (GOAWAY), beside
			// fasthttp's.
			go func() { h2cDone <- fe.h2c.drain(ctx, fe.ownGoAway) }()
		} else {
			h2cDone <- nil
		}
		err = fe.shutdownFast(ctx)
		if loopsDone != nil {
			<-loopsDone
		}
		if herr := <-h2cDone; herr != nil && err == nil {
			err = herr
		}
	} else {
		// TLS: stop accepting, then drain fasthttp's HTTP/1.1 connections
		// and the h2 ones (GOAWAY; each closes once its streams are done)
		// together.
		// The loops (HTTP/1.1 over TLS 1.3, tlsloop_linux.go) drain
		// beside them.
		var loopsDone chan struct{}
		if ff := fe.loops.Load(); ff != nil {
			loopsDone = make(chan struct{})
			go func() { defer close(loopsDone); ff.Shutdown(ctx) }()
		}
		fe.tls.Close()
		errc := make(chan error, 1)
		go func() { errc <- fe.shutdownFast(ctx) }()
		err = fe.tls.drain(ctx, fe.ownGoAway)
		if herr := <-errc; herr != nil {
			err = herr
		}
		if loopsDone != nil {
			<-loopsDone
		}
	}
	// The h2 workers parked now end; those still running end when their
	// stream does.
	fe.h2Workers.stop()
	// Lingering closes end within lingerTimeout.
	limit := time.NewTimer(lingerTimeout + 100*time.Millisecond)
	defer limit.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for fe.lingering.Load() > 0 {
		select {
		case <-tick.C:
		case <-limit.C:
			return err
		case <-ctx.Done():
			return err
		}
	}
	return err
}

// shutdownFast drains fasthttp's connections until ctx is done. When it
// runs out of time, the requests still parked for their batch run are
// cancelled (fe.expired): they end as client_gone and their connections
// close, as a loop's do when its drain runs out.
func (fe *frontend) shutdownFast(ctx context.Context) error {
	err := fe.srv.ShutdownWithContext(ctx)
	if ctx.Err() != nil {
		close(fe.expired)
	}
	return err
}

// ShutdownAll drains every front end and every tunnel (WebSockets) until
// ctx is done; tunnels still open then are closed.
func (p *Proxy) ShutdownAll(ctx context.Context) error {
	var errs []error
	for _, addr := range p.Listening() {
		if err := p.Shutdown(ctx, addr); err != nil {
			errs = append(errs, err)
		}
	}
	// Tunnels end on their own; at the deadline the rest are cut. Polling
	// keeps this bounded whatever happens to a tunnel's goroutines.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for p.tunnelCount.Load() > 0 {
		select {
		case <-tick.C:
			continue
		case <-ctx.Done():
		}
		p.stopOnce.Do(func() { close(p.stopTunnels) })
		cut := time.Now().Add(time.Second)
		for p.tunnelCount.Load() > 0 && time.Now().Before(cut) {
			<-tick.C
		}
		if n := p.tunnelCount.Load(); n > 0 {
			errs = append(errs, fmt.Errorf("%d tunnels still open after the drain deadline", n))
		}
		break
	}
	return errors.Join(errs...)
}

// handleError answers requests fasthttp could not parse.
func (fe *frontend) handleError(ctx *fasthttp.RequestCtx, err error) {
	status, reason := fasthttp.StatusBadRequest, "bad_request"
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.As(err, &small):
		status, reason = fasthttp.StatusRequestHeaderFieldsTooLarge, "header_too_large"
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		status, reason = fasthttp.StatusRequestEntityTooLarge, "body_too_large"
	case errors.As(err, &ne) && ne.Timeout():
		status, reason = fasthttp.StatusRequestTimeout, "timeout"
	}
	fe.p.metrics.clientErrors.WithLabelValues(fe.addr, reason).Inc()
	ctx.Response.Reset()
	writeReply(&ctx.Response, pipeline.Reply{Status: status, Retry: -1, Body: pipeline.ParseErrorBody(status)})
	ctx.SetConnectionClose()
}

type fasthttpLogger struct {
	l interface{ Debug(string, ...any) }
}

func (f fasthttpLogger) Printf(format string, args ...any) { f.l.Debug(fmt.Sprintf(format, args...)) }
