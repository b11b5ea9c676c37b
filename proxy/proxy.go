package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/sentry-proxy/sentry/internal/logwriter"
	"github.com/sentry-proxy/sentry/lb"
	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/sentry-proxy/sentry/proxy/respbuf"
	"github.com/sentry-proxy/sentry/sert"
)

// Options are the proxy's collaborators. Only Logger is optional.
type Options struct {
	Logger hclog.Logger
	// Registerer receives the proxy's metrics (the project's own registry).
	Registerer prometheus.Registerer
	// Control builds each app's admission stack (classifier, estimator,
	// admission controller). It is called on every Apply; returning the
	// previous stack for the same app keeps its learned state. Nil means no
	// classification and admission.AdmitAll for every app.
	Control ControlBuilder
	// Probe is the active health-check probe; nil uses an HTTP GET.
	Probe func(ctx context.Context, addr, path string) error
	// Resolver looks up DNS backends; nil uses net.DefaultResolver.
	Resolver *net.Resolver
}

// Controller is an app's admission controller as the request path calls it
// (package pipeline, where the pipeline that calls it lives).
type Controller = pipeline.Controller

// ControlBuilder makes Controllers from the policy and drops those of apps
// that are gone.
type ControlBuilder interface {
	Build(app *policy.App, pool *lb.Pool) (Controller, error)
	Retain(apps []string)
}

// Proxy is the request path. It is built once and reconfigured by Apply;
// front ends (one per listener address) are started with Serve.
type Proxy struct {
	opts    Options
	engine  string // server.engine as run: policy.EngineLoops or EnginePortable (engine.go)
	log     hclog.Logger
	pools   lb.Registry
	metrics *metrics
	ids     pipeline.IDPool // request IDs and trace ids of the goroutine paths

	cur atomic.Pointer[state]
	// access is the access log (policy log.access); nil when off.
	access atomic.Pointer[accessLog]
	// accessOut is the access log's writer (its own goroutine; see
	// accessLog): made when the log is first turned on, kept across
	// reloads, stopped by Close. Set under mu; read by the metrics.
	accessOut atomic.Pointer[logwriter.Writer]

	bufs bodyBuffers // buffered request bodies (server.request_buffer_total)
	// resp is the response buffers' account (server.response_buffer and
	// the rest), one for every engine: the event loops get it in their
	// Config, the goroutine front ends use it in serve (respbody.go).
	resp *respbuf.Budget

	tunnelCount atomic.Int64  // open Upgrade tunnels
	stopTunnels chan struct{} // closed when draining runs out of time
	stopOnce    sync.Once

	mu struct {
		sync.Mutex
		fronts  map[string]*frontend
		shared  map[string]*pipeline.AppShared
		poolCtx context.Context
		cancel  context.CancelFunc
		running map[*lb.Pool]context.CancelFunc
	}
	wg sync.WaitGroup
}

// state is everything built from one snapshot; immutable once stored.
type state struct {
	snap   *policy.Snapshot
	apps   []*pipeline.App
	routes map[string]*pipeline.Route // by listener address
}

// New builds a proxy for snap. Call Serve for each of snap.Listeners.
func New(opts Options, snap *policy.Snapshot) (*Proxy, error) {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	p := &Proxy{opts: opts, log: opts.Logger.Named("proxy"), stopTunnels: make(chan struct{}),
		resp: respbuf.NewBudget(respbuf.Limits{})}
	p.mu.fronts = map[string]*frontend{}
	p.mu.shared = map[string]*pipeline.AppShared{}
	p.mu.running = map[*lb.Pool]context.CancelFunc{}
	p.mu.poolCtx, p.mu.cancel = context.WithCancel(context.Background())
	m, err := newMetrics(opts.Registerer, p)
	if err != nil {
		return nil, err
	}
	p.metrics = m
	p.engine = p.pickEngine(snap.Server.Engine)
	if err := p.Apply(snap); err != nil {
		p.mu.cancel()
		return nil, err
	}
	return p, nil
}

// ReopenAccessLog opens the access log's file again (SIGUSR1, after
// logrotate moved it away). Nothing to do when the log is off or writes to
// stdout or stderr.
func (p *Proxy) ReopenAccessLog() error {
	if l := p.access.Load(); l != nil {
		return l.reopen()
	}
	return nil
}

// AppsWithoutBackend returns the names of the apps that have no healthy
// backend now (nil when every app has one), for /readyz with
// admin.ready_requires_backend.
func (p *Proxy) AppsWithoutBackend() []string {
	var out []string
	for _, a := range p.cur.Load().apps {
		if a.Pool.Healthy() == 0 {
			out = append(out, a.Name)
		}
	}
	return out
}

// Pool returns the backend pool of the app named app in the policy in
// force, or nil: what the admin API's drain and disable act on (every
// engine picks from it).
func (p *Proxy) Pool(app string) *lb.Pool {
	for _, a := range p.cur.Load().apps {
		if a.Name == app {
			return a.Pool
		}
	}
	return nil
}

// Snapshot returns the policy in force.
func (p *Proxy) Snapshot() *policy.Snapshot { return p.cur.Load().snap }

// Apply swaps in a new snapshot. Backend pools, health and in-flight counts
// survive for apps and addresses that still exist. Listener changes are the
// caller's: Serve new addresses, Close removed ones.
//
// It runs in two parts: prepare, which may refuse the policy, and commit,
// which cannot fail.
func (p *Proxy) Apply(snap *policy.Snapshot) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.cur.Load()
	pr, err := p.prepare(snap, old)
	if err != nil {
		return err
	}
	p.commit(snap, old, &pr)
	return nil
}

// applyPrep is what Apply's prepare made for its commit.
type applyPrep struct {
	st     *state
	byName map[string]*pipeline.App
	names  []string                    // the apps' names
	certs  map[string]*tls.Certificate // by listener address
	newOut io.Writer                   // the access log's output, opened anew (nil: none)
	oldAcc *accessLog                  // the access log in force
	resp   respbuf.Limits              // the response buffers' limits (set by commit)
}

// prepare is the part of Apply that can refuse snap: the access log's
// output, the certificates, the temporary files' directory and the apps.
// It sets the request and response buffers' limits before the apps are
// built. When it fails, it closes the output it opened.
func (p *Proxy) prepare(snap *policy.Snapshot, old *state) (pr applyPrep, err error) {
	// The access log first: a file that cannot be opened refuses the
	// policy before anything changed.
	pr.oldAcc = p.access.Load()
	if snap.Log.Access && (pr.oldAcc == nil || pr.oldAcc.cfg != snap.Log.AccessLog) {
		w, err := openOutput(snap.Log.AccessLog.Output)
		if err != nil {
			return pr, fmt.Errorf("log.access: %w", err)
		}
		pr.newOut = w
	}
	defer func() {
		if err != nil && pr.newOut != nil {
			closeOutput(pr.newOut)
		}
	}()
	// Certificates next, for the same reason: a pair that no longer loads
	// refuses the policy; the new ones are stored only once it applies.
	if pr.certs, err = p.loadCerts(snap); err != nil {
		return pr, err
	}
	// The temporary files' directory must take one (a policy whose
	// directory cannot is refused before anything changed).
	sv := &snap.Server
	rl := respbuf.Limits{Mem: sv.ResponseBuffer, MemTotal: sv.ResponseBufferTotal,
		File: sv.ResponseTempFile, FileTotal: sv.ResponseTempFileTotal, Dir: sv.ResponseTempDir}
	if rl.Mem > 0 && rl.File > 0 && (old == nil || *p.resp.Limits() != rl) {
		if derr := respbuf.CheckDir(rl.Dir); derr != nil {
			return pr, fmt.Errorf("server.response_temp_dir: cannot make a temporary file there: %w", derr)
		}
	}
	pr.resp = rl
	err = p.buildState(snap, &pr)
	return pr, err
}

// buildState builds snap's apps, by name, and its listeners' routes into
// pr. An app that cannot be built refuses the policy.
func (p *Proxy) buildState(snap *policy.Snapshot, pr *applyPrep) error {
	st := &state{snap: snap, routes: map[string]*pipeline.Route{}}
	byName := map[string]*pipeline.App{}
	names := make([]string, 0, len(snap.Apps))
	for _, ac := range snap.Apps {
		a, err := p.buildApp(ac)
		if err != nil {
			return fmt.Errorf("app %s: %w", ac.Name, err)
		}
		st.apps = append(st.apps, a)
		byName[ac.Name] = a
		names = append(names, ac.Name)
	}
	for _, l := range snap.Listeners {
		rt := &pipeline.Route{Hosts: map[string]*pipeline.App{}, TLS: l.TLS, H2C: l.H2C, Access: snap.Log.Access}
		for _, ac := range l.Apps {
			for _, h := range ac.Hosts {
				rt.Hosts[h] = byName[ac.Name]
			}
		}
		if l.Default != nil {
			rt.Default = byName[l.Default.Name]
		}
		st.routes[l.Addr] = rt
	}
	pr.st, pr.byName, pr.names = st, byName, names
	return nil
}

// commit is the part of Apply that cannot fail: the pools and their
// loops, what dropped apps and classes leave behind, the access log, then
// the new state and the listeners' routes and certificates.
func (p *Proxy) commit(snap *policy.Snapshot, old *state, pr *applyPrep) {
	st, byName := pr.st, pr.byName
	// The buffers' limits only now: a refused policy changes nothing.
	p.bufs.cap.Store(snap.Server.RequestBufferTotal)
	p.resp.SetLimits(pr.resp)
	p.pools.Retain(pr.names)
	if p.opts.Control != nil {
		p.opts.Control.Retain(pr.names)
	}
	p.runPools(st)
	for name, sh := range p.mu.shared {
		if byName[name] == nil {
			// A dropped app's HTTP/2 connections: the idle ones close now,
			// the busy ones when their streams end (IdleConnTimeout).
			if c, _ := sh.H2.Load().(*h2Client); c != nil {
				c.tr.CloseIdleConnections()
			}
			delete(p.mu.shared, name)
			p.metrics.deleteApp(name)
		}
	}
	if old != nil {
		// A class an app no longer has leaves no series behind.
		for _, oa := range old.apps {
			if na := byName[oa.Name]; na != nil {
				p.metrics.deleteClasses(oa.Name, oa.ClassNames, na.ClassNames)
			}
		}
	}
	p.swapAccessLog(snap, pr.newOut, pr.oldAcc)
	p.cur.Store(st)
	for addr, fe := range p.mu.fronts {
		if rt, ok := st.routes[addr]; ok {
			fe.route.Store(rt)
		}
		if c := pr.certs[addr]; c != nil && fe.tls != nil {
			fe.cert.Store(c)
		}
	}
	if old != nil {
		p.log.Info("policy applied", "source", snap.Source, "apps", len(snap.Apps))
	}
}

// runPools starts the health and DNS loops of st's new pools and stops
// those of the pools it dropped. Under p.mu.
func (p *Proxy) runPools(st *state) {
	live := map[*lb.Pool]bool{}
	for _, a := range st.apps {
		live[a.Pool] = true
		if _, ok := p.mu.running[a.Pool]; !ok {
			ctx, cancel := context.WithCancel(p.mu.poolCtx)
			p.mu.running[a.Pool] = cancel
			p.wg.Add(1)
			go func(pl *lb.Pool) { defer p.wg.Done(); pl.Run(ctx) }(a.Pool)
		}
	}
	for pl, cancel := range p.mu.running {
		if !live[pl] {
			cancel()
			delete(p.mu.running, pl)
		}
	}
}

// swapAccessLog puts snap's access log in force: one writer for the
// Proxy's life; a new output (newOut) is handed to it, and it closes the
// old one after any write to it in progress. A request that loaded the
// old accessLog a moment ago still writes through the same writer.
// oldAcc is the access log in force before.
func (p *Proxy) swapAccessLog(snap *policy.Snapshot, newOut io.Writer, oldAcc *accessLog) {
	switch out := p.accessOut.Load(); {
	case newOut != nil && out == nil:
		out = logwriter.New(newOut, logwriter.Options{})
		p.accessOut.Store(out)
		p.access.Store(newAccessLog(snap.Log.AccessLog, p.metrics, time.Now, out))
	case newOut != nil:
		out.SetOutput(newOut)
		p.access.Store(newAccessLog(snap.Log.AccessLog, p.metrics, time.Now, out))
	case !snap.Log.Access:
		p.access.Store(nil)
		if out != nil && oldAcc != nil {
			out.SetOutput(io.Discard) // closes a file output
		}
	}
}

// terminator is what package control's App offers for termination
// (control.App.Termination).
type terminator interface{ Termination() *sert.Controller }

func (p *Proxy) buildApp(ac *policy.App) (*pipeline.App, error) {
	alpn := "http/1.1"
	if ac.Backends.Protocol == policy.ProtoH2 {
		alpn = "h2"
	}
	tcfg, err := backendTLSConfig(ac.Backends.TLS, alpn)
	if err != nil {
		return nil, err
	}
	a := &pipeline.App{Policy: ac, Name: ac.Name, ReqID: ac.RequestIDHeader, Trace: pipeline.TraceModeOf(ac.TraceContext), LoadHeader: ac.Degradation.Header, Trusted: len(ac.TrustedProxies) > 0, LoopOK: true}
	if fs := ac.Admission.FairShare; fs.Enabled {
		id := fs.Identity()
		a.Client = &id // fair share's client key (pipeline.Decide)
	}
	h2 := ac.Backends.Protocol == policy.ProtoH2C || ac.Backends.Protocol == policy.ProtoH2 // "" is http1 too
	if tcfg != nil || h2 {
		// The event loops relay plain HTTP/1.1 over TCP only; fasthttp's
		// HostClient reads and writes the TLS connection dialer makes,
		// and relayH2 speaks HTTP/2 (docs/request-path.md, "Backends over TLS",
		// "Backends over HTTP/2").
		a.LoopOK = false
	}
	for _, addr := range ac.Backends.Static {
		if _, err := netip.ParseAddrPort(addr); err != nil {
			a.LoopOK = false // a host name: fasthttp's dialer resolves it on each dial
		}
	}
	sh := p.mu.shared[ac.Name]
	if sh == nil {
		sh = &pipeline.AppShared{Metrics: p.metrics.forApp(ac.Name)}
		p.mu.shared[ac.Name] = sh
	}
	sh.Idle.Store(ac.Timeouts.Response.Nanoseconds())
	sh.Connect.Store(ac.Timeouts.Connect.Nanoseconds())
	// A changed way of reaching the backends (TLS settings) must not
	// reuse the connections made the old way: idle ones are closed once
	// the new configuration is in place (busy ones finish their exchange
	// and are reused; a reload is not a reason to cut requests).
	link := backendLink(ac.Backends)
	relink := sh.Link != "" && sh.Link != link
	sh.Link = link
	sh.TLS.Store(tcfg)
	old2, _ := sh.H2.Load().(*h2Client)
	h2c := old2
	if !h2 {
		h2c = nil
	} else if h2c == nil || relink {
		h2c = newH2Client(ac.Backends.Protocol, &sh.Connect, &sh.TLS)
	}
	if old2 != nil && old2 != h2c {
		old2.tr.CloseIdleConnections() // busy ones end with their streams
	}
	sh.H2.Store(h2c)
	if h2c != nil {
		a.H2 = h2c
	}
	a.Shared, a.Metrics = sh, sh.Metrics
	a.Reject = pipeline.RejectResponse{Status: ac.Reject.Status, Body: []byte(ac.Reject.Body), RetryAfter: int((ac.Reject.RetryAfter + time.Second - 1) / time.Second), GRPCStatus: ac.Reject.GRPCStatus}
	opts := p.poolOptions(sh, ac)
	var addrs []string
	if ac.Backends.DNS == nil {
		addrs = ac.Backends.Static
	}
	a.Pool = p.pools.Pool(ac.Name, opts, addrs)
	if relink {
		for _, b := range a.Pool.Backends() {
			if u, ok := b.Attachment.(*pipeline.Upstream); ok {
				hostClient(u).CloseIdleConnections()
			}
		}
	}
	classes := []string{"default"}
	if p.opts.Control != nil {
		ctl, err := p.opts.Control.Build(ac, a.Pool)
		if err != nil {
			return nil, err
		}
		a.Controller = ctl
		classes = ctl.Classes()
		// Selective early termination: only for an app one of whose
		// classes declares terminate (policy.App.Terminate is nil
		// otherwise), so any other app's requests pay one nil check.
		if tc, ok := ctl.(terminator); ok && len(ac.Terminate) > 0 {
			a.Term = tc.Termination()
		}
		// The degradation signal needs the admission stack's model of the
		// farm; without a controller there is none to send.
		if ls, ok := ctl.(pipeline.LoadSource); ok && ac.Degradation.Enabled {
			a.Load = ls
		}
	}
	a.Decisions = p.metrics.classDecisions(ac.Name, classes)
	a.ClassLatency = p.metrics.classLatency(ac.Name, classes)
	a.ClassNames = slices.Clone(classes)
	return a, nil
}

func (p *Proxy) poolOptions(sh *pipeline.AppShared, ac *policy.App) lb.Options {
	idle, connect := &sh.Idle, &sh.Connect
	maxConns := ac.MaxConnsPerBackend
	appName := ac.Name
	o := lb.Options{
		App:       ac.Name,
		Algorithm: lb.Algorithm(ac.Balance),
		Failures:  ac.Health.Passive.Failures,
		Cooldown:  ac.Health.Passive.Cooldown,
		Partition: lb.Partition{Index: ac.Partition.Index, Count: ac.Partition.Count},
		Logger:    p.opts.Logger.Named("lb").With("app", ac.Name),
		Attach: func(addr string) any {
			u := &pipeline.Upstream{Addr: addr}
			u.Client = newHostClient(addr, maxConns, connect, idle, &sh.TLS, &u.Alert)
			u.Conns = &gpool{u: u}
			for c := range u.Reqs {
				u.Reqs[c] = p.metrics.requests.WithLabelValues(appName, addr, pipeline.CodeClassNames[c])
			}
			return u
		},
		Detach: func(addr string, v any) {
			if u, ok := v.(*pipeline.Upstream); ok {
				u.Closed.Store(true)
				hostClient(u).CloseIdleConnections()
				connsOf(u).closeIdle()
			}
			p.metrics.deleteBackend(appName, addr)
		},
		// The operator drained or disabled the backend (lb's doc.go,
		// "Operator state"): its idle connections close now -- fasthttp's
		// here, the event loops' at their next sweep (10 ms) -- and none
		// is kept from then on. HTTP/2 backends share one transport per
		// app, which can only close every idle connection of the app:
		// the other backends' idle ones are redialled on their next
		// request (a rare cost, on an operator's action).
		Quiesce: func(addr string, v any, out bool) {
			u, ok := v.(*pipeline.Upstream)
			if !ok {
				return
			}
			u.Quiesced.Store(out)
			if !out {
				return
			}
			hostClient(u).CloseIdleConnections()
			connsOf(u).closeIdle()
			if c, _ := sh.H2.Load().(*h2Client); c != nil {
				c.tr.CloseIdleConnections()
			}
		},
	}
	if o.Failures > 0 {
		// An ejected backend is tried again at the first connection that
		// succeeds after its trial wait (lb's doc.go, "Health"): a
		// connection as relaying makes one, closed at once.
		tlsCfg := &sh.TLS
		o.Reach = func(ctx context.Context, addr string) error { return reach(ctx, addr, connect, tlsCfg) }
	}
	if h := ac.Health.Active; h != nil {
		path := h.Path
		probe := p.opts.Probe
		if probe == nil {
			tlsCfg := &sh.TLS
			probe = func(ctx context.Context, addr, path string) error {
				if c, _ := sh.H2.Load().(*h2Client); c != nil {
					return h2Probe(ctx, c, addr, path)
				}
				return httpProbe(ctx, addr, path, connect, tlsCfg)
			}
		}
		o.Active = &lb.Active{Interval: h.Interval, Timeout: h.Timeout, Rise: h.Rise, Fall: h.Fall,
			Probe: func(ctx context.Context, addr string) error { return probe(ctx, addr, path) }}
	}
	if d := ac.Backends.DNS; d != nil {
		res := p.opts.Resolver
		if d.Server != "" {
			res = serverResolver(d.Server)
		} else if res == nil {
			res = net.DefaultResolver
		}
		name, port := d.Name, strconv.Itoa(int(d.Port))
		o.ResolveInterval = d.Interval
		o.Resolve = func(ctx context.Context) ([]string, error) {
			ips, err := res.LookupHost(ctx, name)
			if err != nil {
				return nil, err
			}
			out := make([]string, len(ips))
			for i, ip := range ips {
				out[i] = net.JoinHostPort(ip, port)
			}
			return out, nil
		}
	}
	return o
}

// newHostClient builds the keep-alive client for one backend.
func newHostClient(addr string, maxConns int, connect, idle *atomic.Int64, tlsCfg *atomic.Pointer[tls.Config], alert *atomic.Pointer[error]) *fasthttp.HostClient {
	return &fasthttp.HostClient{
		Addr:                          addr,
		Dial:                          dialer(connect, idle, tlsCfg, alert),
		MaxConns:                      maxConns,
		MaxConnWaitTimeout:            time.Duration(connect.Load()),
		MaxIdleConnDuration:           30 * time.Second,
		MaxResponseBodySize:           streamThreshold,
		StreamResponseBody:            true,
		DisablePathNormalizing:        true,
		DisableHeaderNamesNormalizing: false,
		NoDefaultUserAgentHeader:      true,
		ReadBufferSize:                backendHeaderBytes,
		WriteBufferSize:               16 << 10,
		// Retry on the same backend once, for a stale keep-alive
		// connection, and only idempotent requests: fasthttp cannot tell
		// whether the backend saw the request before the close.
		RetryIfErr: func(req *fasthttp.Request, attempts int, err error) (bool, bool) {
			if attempts > 1 || req.IsBodyStream() || !idempotent(req) {
				return false, false
			}
			return false, errors.Is(err, fasthttp.ErrConnectionClosed) || errors.Is(err, errConnAborted)
		},
	}
}

// streamThreshold: responses with bodies above this size (or chunked) are
// streamed to the client instead of buffered.
const streamThreshold = 64 << 10

// reach tells whether addr answers a connection (lb.Options.Reach): a TCP
// connection and, for a TLS backend, its handshake, within the connect
// timeout and ctx; closed at once.
func reach(ctx context.Context, addr string, connect *atomic.Int64, tlsCfg *atomic.Pointer[tls.Config]) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(connect.Load()))
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if cfg := tlsCfg.Load(); cfg != nil {
		tc, err := tlsClient(ctx, c, addr, cfg)
		if err != nil {
			return err
		}
		return tc.Close()
	}
	return nil
}

// httpProbe is the default active health check: GET path, 2xx/3xx is up.
// It dials as relaying does (dialer: TLS to a TLS backend, within the
// connect timeout), on a connection of its own that it closes.
func httpProbe(ctx context.Context, addr, path string, connect *atomic.Int64, tlsCfg *atomic.Pointer[tls.Config]) error {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + addr + path)
	req.Header.Set("User-Agent", "sentry-health/1")
	req.SetConnectionClose()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Second)
	}
	// dialer's connections keep idle deadlines of their own and ignore
	// fasthttp's: the probe's is what is left of its timeout.
	var idle atomic.Int64
	idle.Store(int64(max(time.Until(deadline), time.Millisecond)))
	hc := &fasthttp.HostClient{Addr: addr, Dial: dialer(connect, &idle, tlsCfg, nil), MaxConns: 1}
	defer hc.CloseIdleConnections()
	if err := hc.DoDeadline(req, resp, deadline); err != nil {
		return err
	}
	if s := resp.StatusCode(); s < 200 || s >= 400 {
		return fmt.Errorf("health check status %d", s)
	}
	return nil
}

// Close stops the pools' background loops and the admission stacks'
// goroutines. Front ends are closed with Shutdown first.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.mu.cancel()
	for _, sh := range p.mu.shared {
		if c, _ := sh.H2.Load().(*h2Client); c != nil {
			c.tr.CloseIdleConnections() // HTTP/2 backend connections
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
	// The access log last: every exchange has ended (ShutdownAll), so its
	// lines are in the buffer; flushed for at most accessFlushTimeout.
	p.access.Store(nil)
	if out := p.accessOut.Load(); out != nil {
		if !out.Close(accessFlushTimeout) {
			p.log.Warn("access log: the output did not take the last lines in time; they are lost",
				"timeout", accessFlushTimeout, "buffered_bytes", out.Stats().Buffered)
		}
	}
	if p.opts.Control != nil {
		p.opts.Control.Retain(nil)
	}
}

// serverResolver is a resolver that sends every DNS query to server
// (backends.dns.server) instead of the servers in /etc/resolv.conf. It is
// Go's own resolver, so /etc/hosts is still read first.
func serverResolver(server string) *net.Resolver {
	var d net.Dialer
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, server)
	}}
}

// BackendHealth returns each app's backend health (lb.Pool.Health), by
// app name: what a binary upgrade hands to the next process.
func (p *Proxy) BackendHealth() map[string][]lb.Health {
	out := map[string][]lb.Health{}
	for _, a := range p.cur.Load().apps {
		out[a.Name] = a.Pool.Health()
	}
	return out
}

// RestoreBackendHealth gives app's pool the health another process
// exported (lb.Pool.RestoreHealth); ok is false for an app the policy
// lacks.
func (p *Proxy) RestoreBackendHealth(app string, hs []lb.Health) (applied int, ignored []string, ok bool) {
	for _, a := range p.cur.Load().apps {
		if a.Name == app {
			applied, ignored = a.Pool.RestoreHealth(hs)
			return applied, ignored, true
		}
	}
	return 0, nil, false
}
