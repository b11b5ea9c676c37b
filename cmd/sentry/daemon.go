package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/proxy"
)

// listenFunc opens a listener; the upgrader's in production.
type listenFunc func(network, addr string) (net.Listener, error)

// daemon wires the pieces built from a policy: proxy, listeners, admin.
type daemon struct {
	log    hclog.Logger
	reg    *prometheus.Registry
	proxy  *proxy.Proxy
	listen listenFunc

	mu       sync.Mutex // serialises reloads
	admin    *http.Server
	adminLn  net.Listener
	ready    atomic.Bool
	draining atomic.Bool
	extra    map[string]http.Handler // extra admin routes (demo status page)

	reloads    *prometheus.CounterVec
	lastReload prometheus.Gauge
	lastOK     prometheus.Gauge
}

// newLogger builds the root logger from the policy's log section.
func newLogger(l policy.Log) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       "sentry",
		Level:      hclog.LevelFromString(l.Level),
		JSONFormat: l.Format == "json",
		Output:     os.Stderr,
	})
}

func startDaemon(snap *policy.Snapshot, log hclog.Logger, listen listenFunc, extra map[string]http.Handler) (*daemon, error) {
	if listen == nil {
		listen = net.Listen
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sentry_build_info", Help: "Build information.", ConstLabels: prometheus.Labels{"version": version()}})
	info.Set(1)
	d := &daemon{log: log, reg: reg, listen: listen, extra: extra,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sentry_policy_reloads_total",
			Help: "Policy reloads by result (success, error)."}, []string{"result"}),
		lastReload: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sentry_policy_last_reload_timestamp_seconds",
			Help: "Unix time of the last reload attempt."}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sentry_policy_last_reload_success",
			Help: "1 if the last reload succeeded (or none was tried), 0 if it failed."}),
	}
	d.lastOK.Set(1)
	reg.MustRegister(info, d.reloads, d.lastReload, d.lastOK)
	d.reloads.WithLabelValues("success")
	d.reloads.WithLabelValues("error")

	p, err := proxy.New(proxy.Options{Logger: log, Registerer: reg}, snap)
	if err != nil {
		return nil, err
	}
	d.proxy = p
	for _, l := range snap.Listeners {
		if err := d.serve(l.Addr); err != nil {
			d.abort()
			return nil, err
		}
	}
	if snap.Admin.Listen != "" {
		if err := d.startAdmin(snap.Admin.Listen); err != nil {
			d.abort()
			return nil, err
		}
	}
	d.ready.Store(true)
	return d, nil
}

func (d *daemon) serve(addr string) error {
	ln, err := d.listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	if err := d.proxy.Serve(addr, ln); err != nil {
		ln.Close()
		return err
	}
	return nil
}

func (d *daemon) abort() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = d.proxy.ShutdownAll(ctx)
	d.proxy.Close()
	if d.admin != nil {
		_ = d.admin.Close()
	}
}

func (d *daemon) startAdmin(addr string) error {
	ln, err := d.listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("admin listen %s: %w", addr, err)
	}
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
		fmt.Fprintln(w, "ready")
	})
	for path, h := range d.extra {
		mux.Handle(path, h)
	}
	d.admin = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 60 * time.Second,
		ErrorLog: d.log.Named("admin").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})}
	d.adminLn = ln
	go func() {
		if err := d.admin.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("admin server stopped", "error", err)
		}
	}()
	d.log.Info("admin listening", "addr", addr)
	return nil
}

// reload applies a new snapshot: the proxy first, then listener changes.
// If the proxy refuses it, nothing changes.
func (d *daemon) reload(snap *policy.Snapshot) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lastReload.SetToCurrentTime()
	if err := d.proxy.Apply(snap); err != nil {
		d.reloadFailed(err)
		return err
	}
	want := map[string]bool{}
	for _, l := range snap.Listeners {
		want[l.Addr] = true
	}
	have := map[string]bool{}
	for _, a := range d.proxy.Listening() {
		have[a] = true
	}
	var errs []error
	for a := range want {
		if !have[a] {
			if err := d.serve(a); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for a := range have {
		if !want[a] {
			ctx, cancel := context.WithTimeout(context.Background(), snap.Server.ShutdownTimeout)
			if err := d.proxy.Shutdown(ctx, a); err != nil {
				d.log.Warn("listener drain incomplete", "addr", a, "error", err)
			}
			cancel()
			d.log.Info("listener closed", "addr", a)
		}
	}
	if err := errors.Join(errs...); err != nil {
		d.reloadFailed(err)
		return err
	}
	d.reloads.WithLabelValues("success").Inc()
	d.lastOK.Set(1)
	return nil
}

func (d *daemon) reloadFailed(err error) {
	d.reloads.WithLabelValues("error").Inc()
	d.lastOK.Set(0)
	d.log.Error("policy reload failed; the old policy stays in force", "error", err)
}

// shutdown drains: readiness goes false, front ends stop accepting and
// finish in-flight requests and tunnels within timeout.
func (d *daemon) shutdown(timeout time.Duration) {
	d.draining.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := d.proxy.ShutdownAll(ctx); err != nil {
		d.log.Warn("drain incomplete", "error", err)
	}
	d.proxy.Close()
	if d.admin != nil {
		_ = d.admin.Shutdown(ctx)
	}
}
