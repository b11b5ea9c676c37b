package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sentry-proxy/sentry/adminapi"
	"github.com/sentry-proxy/sentry/control"
	"github.com/sentry-proxy/sentry/internal/logwriter"
	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/proxy"
	"github.com/sentry-proxy/sentry/status"
)

// listenFunc opens a listener; the upgrader's in production.
type listenFunc func(network, addr string) (net.Listener, error)

// daemon wires the pieces built from a policy: proxy, listeners, admin.
//
// Lock order: d.mu only; it is never held on the request path. reload and
// shutdown run on the run loop's goroutine, and d.mu makes them exclusive
// with anything else that looks at the listener set.
type daemon struct {
	log    hclog.Logger
	reg    *prometheus.Registry
	proxy  *proxy.Proxy
	ctl    *control.Manager // the admission stacks (for /provisioning)
	api    *adminapi.API    // the runtime API (/runtime): overrides until a reload
	listen listenFunc

	mu        sync.Mutex              // serialises reload and shutdown; guards the fields below
	lns       map[string]net.Listener // listening sockets by policy address, as opened
	admin     *http.Server
	adminLn   net.Listener
	adminAddr string // "" when the admin listener is off

	life *lifecycle // the last reload's and upgrade's outcomes (/last-reload, /last-upgrade)

	ready    atomic.Bool
	draining atomic.Bool
	extra    map[string]http.Handler // extra admin routes (demo status page)
	drains   sync.WaitGroup          // listeners a reload removed, still draining

	reloads         *prometheus.CounterVec
	lastReload      prometheus.Gauge
	lastOK          prometheus.Gauge
	upgradeFailures prometheus.Counter
	restoredApps    *prometheus.GaugeVec   // sentry_learned_state_restored_apps{source}
	stateSaves      *prometheus.CounterVec // sentry_state_file_writes_total{result}
}

// newLogger builds the root logger from the policy's log section, writing
// to out.
func newLogger(l policy.Log, out io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       "sentry",
		Level:      hclog.LevelFromString(l.Level),
		JSONFormat: l.Format == "json",
		Output:     out,
	})
}

// Process log output. Decision (issue 29): sentry's own log goes to stderr
// through a bounded buffer written by its own goroutine
// (internal/logwriter), never by the goroutine that logs. Log calls happen
// on the serving path -- a backend ejected or unreachable (lb, proxy), an
// over-target admission (control), the http.Server and fasthttp error
// logs bridged to hclog -- and hclog writes under its own lock, so with a
// synchronous stderr one stuck reader (a full pipe, a runtime that stopped
// reading) stopped every loop that logged, and then every loop waiting
// for that lock. With the buffer full, lines are dropped and counted
// (sentry_log_lines_dropped_total{log="process"}). Crash safety: buffered
// lines are lost on a crash (the Go runtime's own panic report goes to fd
// 2 directly and is not); a graceful exit flushes for at most
// processLogFlush.
const (
	processLogSize  = 256 << 10
	processLogFlush = 2 * time.Second
)

// newProcessLogOutput starts the process log's writer on stderr (not
// closed by it: stderr is not the writer's).
func newProcessLogOutput() *logwriter.Writer {
	return logwriter.New(struct{ io.Writer }{os.Stderr}, logwriter.Options{Size: processLogSize})
}

// startDaemon builds the proxy and the admission stacks from snap, calls
// before (if not nil) with the daemon before any listener serves (the
// learned state is restored there), then serves.
func startDaemon(snap *policy.Snapshot, log hclog.Logger, listen listenFunc, extra map[string]http.Handler, before func(*daemon)) (*daemon, error) {
	if listen == nil {
		listen = net.Listen
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d := &daemon{log: log, reg: reg, listen: listen, extra: extra, lns: map[string]net.Listener{}, life: newLifecycle(),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sentry_policy_reloads_total",
			Help: "Policy reloads by result (success, error)."}, []string{"result"}),
		lastReload: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sentry_policy_last_reload_timestamp_seconds",
			Help: "Unix time of the last reload attempt."}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sentry_policy_last_reload_success",
			Help: "1 if the last reload succeeded (or none was tried), 0 if it failed."}),
		upgradeFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "sentry_upgrade_failures_total",
			Help: "Binary upgrades (SIGUSR2) whose new process failed before it was ready; this process kept serving."}),
		restoredApps: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sentry_learned_state_restored_apps",
			Help: "Apps whose learned state this process restored at its start, by source (handover: from the process it upgraded; state_file; none)."}, []string{"source"}),
		stateSaves: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sentry_state_file_writes_total",
			Help: "Writes of the state file (-state-file) by result (success, error)."}, []string{"result"}),
	}
	d.lastOK.Set(1)
	// The engine is the one running (server.engine as the proxy took it
	// at start: a reload does not change it).
	info := newBuildInfo(func() string {
		if d.proxy == nil {
			return "none"
		}
		return d.proxy.Engine()
	})
	reg.MustRegister(info, d.reloads, d.lastReload, d.lastOK, d.upgradeFailures, d.restoredApps, d.stateSaves)
	d.reloads.WithLabelValues("success")
	d.reloads.WithLabelValues("error")
	d.stateSaves.WithLabelValues("success")
	d.stateSaves.WithLabelValues("error")

	ctl, err := newControl(log, reg)
	if err != nil {
		return nil, err
	}
	p, err := proxy.New(proxy.Options{Logger: log, Registerer: reg, Control: ctl}, snap)
	if err != nil {
		return nil, err
	}
	d.proxy = p
	d.ctl = ctl.Manager
	d.api = newAdminAPI(log, p, ctl.Manager)
	if before != nil {
		before(d)
	}
	for _, l := range snap.Listeners {
		ln, err := d.open(l.Addr)
		if err == nil {
			err = d.serve(l.Addr, ln)
		}
		if err != nil {
			d.abort()
			return nil, err
		}
	}
	if snap.Admin.Listen != "" {
		ln, err := d.listen("tcp", snap.Admin.Listen)
		if err != nil {
			d.abort()
			return nil, fmt.Errorf("admin listen %s: %w", snap.Admin.Listen, err)
		}
		d.serveAdmin(snap.Admin.Listen, ln)
	}
	d.ready.Store(true)
	return d, nil
}

// open opens the listening socket for a policy address.
func (d *daemon) open(addr string) (net.Listener, error) {
	ln, err := d.listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return ln, nil
}

// serve hands ln to the proxy; on failure ln is closed.
func (d *daemon) serve(addr string, ln net.Listener) error {
	if err := d.proxy.Serve(addr, ln); err != nil {
		ln.Close()
		return err
	}
	d.lns[addr] = ln
	return nil
}

// abort undoes a failed start. It closes our descriptors but never stops a
// socket: in an upgraded process they are shared with the process still
// serving, which must keep serving.
func (d *daemon) abort() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = d.proxy.ShutdownAll(ctx)
	d.proxy.Close()
	if d.admin != nil {
		_ = d.admin.Close()
	}
}

// serveAdmin serves metrics, health and readiness on ln.
func (d *daemon) serveAdmin(addr string, ln net.Listener) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{Registry: d.reg, EnableOpenMetrics: true}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !d.ready.Load() || d.draining.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready")
			return
		}
		if d.proxy.Snapshot().Admin.ReadyRequiresBackend {
			if apps := d.proxy.AppsWithoutBackend(); len(apps) > 0 {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintln(w, "not ready: no healthy backend for", strings.Join(apps, ", "))
				return
			}
		}
		fmt.Fprintln(w, "ready")
	})
	// The policy in force as a policy file, defaults filled in
	// (policy.Dump): the document `sentry check -dump` prints for a file.
	// With runtime overrides in force (the admin API), they follow the
	// policy under the extension key x-runtime-overrides: the document is
	// still a valid policy, whose policy part is the dump's.
	mux.HandleFunc("/config", func(w http.ResponseWriter, r *http.Request) {
		out, err := d.api.Config()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/yaml; charset=utf-8")
		_, _ = w.Write(out)
	})
	// Go's profiler, only while the policy says admin.pprof: true.
	pprofOn := func(h http.HandlerFunc) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !d.proxy.Snapshot().Admin.Pprof {
				http.Error(w, "pprof is off (admin.pprof: true turns it on)", http.StatusNotFound)
				return
			}
			h(w, r)
		})
	}
	mux.Handle("/debug/pprof/", pprofOn(pprof.Index))
	mux.Handle("/debug/pprof/cmdline", pprofOn(pprof.Cmdline))
	mux.Handle("/debug/pprof/profile", pprofOn(pprof.Profile))
	mux.Handle("/debug/pprof/symbol", pprofOn(pprof.Symbol))
	mux.Handle("/debug/pprof/trace", pprofOn(pprof.Trace))
	for p, h := range d.api.Routes() {
		mux.Handle(p, h) // the runtime API (package adminapi): drain, log level, mode
	}
	for p, h := range status.Routes(d.reg, status.Options{Policy: d.proxy.Snapshot, Overrides: d.api.Overrides, TopClients: d.topClients}) {
		if _, dup := d.extra[p]; !dup { // the demo passes its own
			mux.Handle(p, h)
		}
	}
	d.life.routes(mux)
	if _, dup := d.extra["/provisioning"]; !dup {
		mux.Handle("/provisioning", d.ctl.ProvisioningHandler()) // provisioning advice (docs/policy.md)
	}
	for path, h := range d.extra {
		mux.Handle(path, h)
	}
	hostname, _ := os.Hostname() // "" on error: then only localhost and IP literals by default
	allowed := func() []string { return d.proxy.Snapshot().Admin.AllowedHosts }
	srv := &http.Server{Handler: status.AllowHosts(allowed, hostname, mux), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 60 * time.Second,
		ErrorLog: d.log.Named("admin").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})}
	d.admin, d.adminLn, d.adminAddr = srv, ln, addr
	go func() {
		// On a final stop the listener is taken out of LISTEN first
		// (stopListening), which fails a pending Accept with EINVAL.
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, syscall.EINVAL) {
			d.log.Error("admin server stopped", "error", err)
		}
	}()
	d.log.Info("admin listening", "addr", addr)
}

// reload applies a new, fully validated snapshot. Everything that can fail
// is done before the proxy switches: listening sockets for new addresses
// (and a moved admin listener) are opened first, so a port that cannot be
// had refuses the whole policy and the old one stays in force, untouched.
// Then the proxy swaps the snapshot (pools, health and in-flight state
// survive by app name and backend address), new listeners start serving,
// and removed ones stop accepting at once and drain in the background
// within server.shutdown_timeout. Listeners present in both policies are
// not touched.
//
// The server section configures fasthttp servers, whose settings cannot
// change on a live listener: a change applies to listeners opened from now
// on, and to every listener after an upgrade (SIGUSR2). reload warns.
func (d *daemon) reload(snap *policy.Snapshot) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lastReload.SetToCurrentTime()
	if d.draining.Load() {
		err := errors.New("stopping; reload refused")
		d.reloadFailed(err)
		return err
	}
	cur := d.proxy.Snapshot()

	want := map[string]bool{}
	opened := map[string]net.Listener{}
	var adminLn net.Listener
	undo := func() {
		// Sockets opened here are ours alone (never inherited: the
		// upgrader closes unused inherited sockets at Ready).
		for _, ln := range opened {
			stopListening(ln)
			ln.Close()
		}
		if adminLn != nil {
			stopListening(adminLn)
			adminLn.Close()
		}
	}
	for _, l := range snap.Listeners {
		want[l.Addr] = true
		if d.lns[l.Addr] != nil {
			continue
		}
		ln, err := d.open(l.Addr)
		if err != nil {
			undo()
			d.reloadFailed(err)
			return err
		}
		opened[l.Addr] = ln
	}
	adminMoved := snap.Admin.Listen != d.adminAddr
	if adminMoved && snap.Admin.Listen != "" {
		ln, err := d.listen("tcp", snap.Admin.Listen)
		if err != nil {
			undo()
			err = fmt.Errorf("admin listen %s: %w", snap.Admin.Listen, err)
			d.reloadFailed(err)
			return err
		}
		adminLn = ln
	}
	if err := d.proxy.Apply(snap); err != nil {
		undo()
		d.reloadFailed(err)
		return err
	}

	// The new policy is in force from here, and so only the new policy:
	// the runtime API's overrides end (each is logged).
	d.api.Revert("reload")
	var errs []error
	for _, l := range snap.Listeners {
		if ln := opened[l.Addr]; ln != nil {
			if err := d.serve(l.Addr, ln); err != nil {
				stopListening(ln)
				errs = append(errs, err)
			}
		}
	}
	for addr, ln := range d.lns {
		if !want[addr] {
			delete(d.lns, addr)
			d.retire(addr, ln, snap.Server.ShutdownTimeout)
		}
	}
	if adminMoved {
		old, oldLn := d.admin, d.adminLn
		d.admin, d.adminLn, d.adminAddr = nil, nil, ""
		if adminLn != nil {
			d.serveAdmin(snap.Admin.Listen, adminLn)
		}
		if old != nil {
			stopListening(oldLn)
			d.drains.Add(1)
			go func() {
				defer d.drains.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = old.Shutdown(ctx)
			}()
			d.log.Info("admin listener closed", "addr", cur.Admin.Listen)
		}
	}
	if on := h2cTurnedOn(cur, snap, opened); len(on) > 0 {
		d.log.Warn("h2c turned on for listeners already open: it applies after a restart or an upgrade (SIGUSR2); until then an HTTP/2 preface there gets 400",
			"listeners", strings.Join(on, ", "))
	}
	if ch := tlsToggled(cur, snap, opened); len(ch) > 0 {
		d.log.Warn("TLS turned on or off for listeners already open: it applies after a restart or an upgrade (SIGUSR2); until then they keep serving as they did (certificate changes on a TLS listener apply now)",
			"listeners", strings.Join(ch, ", "))
	}
	if diff := serverDiff(cur.Server, snap.Server); diff != "" {
		d.log.Warn("server settings changed: they apply to listeners opened from now on and to every listener after an upgrade (SIGUSR2); listeners already open keep the old ones",
			"changed", diff)
	}
	if snap.Log.Level != cur.Log.Level {
		d.log.SetLevel(hclog.LevelFromString(snap.Log.Level))
	}
	if snap.Log.Format != cur.Log.Format {
		d.log.Warn("log.format changed: it applies after a restart or an upgrade (SIGUSR2)", "old", cur.Log.Format, "new", snap.Log.Format)
	}
	if snap.Server.Engine != cur.Server.Engine {
		d.log.Warn("server.engine changed: it applies after a restart or an upgrade (SIGUSR2); until then every listener keeps the engine running",
			"running", d.proxy.Engine(), "new", snap.Server.Engine)
	}
	if err := errors.Join(errs...); err != nil {
		d.reloadFailed(err)
		return err
	}
	d.reloads.WithLabelValues("success").Inc()
	d.lastOK.Set(1)
	d.life.reloaded(nil)
	return nil
}

// retire stops a listener the policy no longer has: the socket stops
// accepting now, and requests and tunnels on it drain in the background.
// d.mu held.
func (d *daemon) retire(addr string, ln net.Listener, timeout time.Duration) {
	stopListening(ln)
	d.drains.Add(1)
	go func() {
		defer d.drains.Done()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := d.proxy.Shutdown(ctx, addr); err != nil {
			d.log.Warn("listener drain incomplete", "addr", addr, "error", err)
		}
		d.log.Info("listener closed", "addr", addr)
	}()
}

// reloadFailed counts a refused reload and logs why, one FILE:LINE error
// per line.
func (d *daemon) reloadFailed(err error) {
	d.reloads.WithLabelValues("error").Inc()
	d.lastOK.Set(0)
	d.life.reloaded(err)
	var list policy.Errors
	if errors.As(err, &list) {
		for _, e := range list {
			d.log.Error("policy error", "error", e.Error())
		}
		d.log.Error("policy reload refused; the old policy stays in force", "errors", len(list))
		return
	}
	d.log.Error("policy reload refused; the old policy stays in force", "error", err)
}

// shutdown drains and stops: readiness goes false, front ends stop
// accepting and finish in-flight requests and tunnels within timeout.
//
// handover is true when an upgraded process has taken the listening
// sockets over: our descriptors are closed but the sockets must keep
// listening, and the admin listener is closed first, so that probes and
// scrapes reach the new process while this one drains. Otherwise (a stop)
// every socket stops listening at once, and the admin listener answers
// /readyz with 503 until the drain is over.
func (d *daemon) shutdown(timeout time.Duration, handover bool) {
	d.draining.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	d.mu.Lock()
	admin, adminLn := d.admin, d.adminLn
	lns := d.lns
	d.lns = map[string]net.Listener{}
	d.mu.Unlock()

	var adminDone chan struct{}
	if handover && admin != nil {
		adminDone = make(chan struct{})
		go func() { defer close(adminDone); _ = admin.Shutdown(ctx) }()
	}
	if !handover {
		for _, ln := range lns {
			stopListening(ln)
		}
	}
	if err := d.proxy.ShutdownAll(ctx); err != nil {
		d.log.Warn("drain incomplete", "error", err)
	}
	drained := make(chan struct{})
	go func() { d.drains.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-ctx.Done():
	}
	d.proxy.Close()
	if adminDone != nil {
		<-adminDone
	} else if admin != nil {
		stopListening(adminLn)
		_ = admin.Shutdown(ctx)
	}
}

// h2cTurnedOn lists the listeners kept open by a reload (not in opened)
// whose h2c the new policy turns on: the h2c split is put in front of a
// listener when it is first served (docs/request-path.md, "h2c on plain
// listeners"). Turning it off applies at once, so is not listed.
func h2cTurnedOn(cur, next *policy.Snapshot, opened map[string]net.Listener) []string {
	was := map[string]bool{}
	if cur != nil {
		for _, l := range cur.Listeners {
			was[l.Addr] = l.H2C
		}
	}
	var on []string
	for _, l := range next.Listeners {
		if l.H2C && !was[l.Addr] && opened[l.Addr] == nil {
			on = append(on, l.Addr)
		}
	}
	return on
}

// tlsToggled lists the listeners kept open by a reload whose TLS was
// turned on or off: a listener's engine (the event loops or fasthttp for
// plain HTTP, the TLS listener for TLS) is chosen when it opens, so the
// change waits for a restart or an upgrade, as h2c's does.
func tlsToggled(cur, next *policy.Snapshot, opened map[string]net.Listener) []string {
	if cur == nil {
		return nil
	}
	was := map[string]bool{}
	for _, l := range cur.Listeners {
		was[l.Addr] = l.TLS != nil
	}
	var ch []string
	for _, l := range next.Listeners {
		if old, kept := was[l.Addr]; kept && old != (l.TLS != nil) && opened[l.Addr] == nil {
			ch = append(ch, l.Addr)
		}
	}
	return ch
}

// serverDiff lists the server settings that differ, as "key: old -> new".
func serverDiff(a, b policy.Server) string {
	var out []string
	add := func(key string, x, y any) {
		if x != y {
			out = append(out, fmt.Sprintf("%s: %v -> %v", key, x, y))
		}
	}
	add("read_header_timeout", a.ReadHeaderTimeout, b.ReadHeaderTimeout)
	add("body_timeout", a.BodyTimeout, b.BodyTimeout)
	add("idle_timeout", a.IdleTimeout, b.IdleTimeout)
	add("write_timeout", a.WriteTimeout, b.WriteTimeout)
	add("request_buffer", a.RequestBuffer, b.RequestBuffer)
	add("request_buffer_total", a.RequestBufferTotal, b.RequestBufferTotal)
	add("body_min_rate", a.BodyMinRate, b.BodyMinRate)
	add("max_header_bytes", a.MaxHeaderBytes, b.MaxHeaderBytes)
	add("max_conns", a.MaxConns, b.MaxConns)
	// shutdown_timeout is read when a drain starts, so it applies at once.
	if len(out) == 0 {
		return ""
	}
	return strings.Join(out, ", ")
}

// topClients is every app's top talkers (package fairshare) for the
// status page.
func (d *daemon) topClients() map[string][]status.TopClient {
	out := map[string][]status.TopClient{}
	for app, cs := range d.ctl.TopClients() {
		for _, c := range cs {
			name := "#" + c.Key // the key tells apart clients named by a header, cookie or claim behind one address
			if c.Addr.IsValid() {
				name = c.Addr.String() + " " + name
			}
			out[app] = append(out[app], status.TopClient{Class: c.Class, Client: name, Rate: c.Rate, Admitted: c.Admitted, Standing: c.Standing})
		}
	}
	return out
}
