// Command limiter is the scenario runner's "limiter" peer: a small reverse
// proxy whose only overload control is failsafe-go's adaptive concurrency
// limiter (github.com/failsafe-go/failsafe-go/adaptivelimiter), the
// baseline a Go user would reach for before an SLA-aware admission
// controller. The limiter sizes the number of requests in flight from the
// measured round-trip times (p90 of a recent window against a baseline,
// Gradient/Vegas style); a request that finds the limit reached waits in
// its queue for at most -max-wait and is then refused with 503.
//
// Configuration, as its expert user would write it for a farm of known
// shape (the runner passes these): the initial limit is the farm's worker
// slots (servers × slots), the queue holds up to 2–3× the limit
// (WithQueueing(2, 3), the library's prioritized defaults), and the wait
// for a permit is bounded by half the SLA target, so that a queued request
// still has time to be served. Backends are picked least-connections.
// It has no request classes: every request is one priority.
//
// Usage:
//
//	limiter -listen 127.0.0.1:8080 -backends 127.0.0.1:9001,127.0.0.1:9002 -initial 12 -max-wait 200ms
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "`ADDR` to serve on")
	backends := flag.String("backends", "", "comma-separated backend `HOST:PORT`s")
	initial := flag.Uint("initial", 20, "initial concurrency `LIMIT` (the farm's worker slots)")
	maxLimit := flag.Uint("max", 1000, "largest concurrency `LIMIT`")
	maxWait := flag.Duration("max-wait", 0, "longest wait for a permit (0: refuse at once when the limit is reached)")
	flag.Parse()
	if err := run(*listen, *backends, *initial, *maxLimit, *maxWait); err != nil {
		fmt.Fprintln(os.Stderr, "limiter:", err)
		os.Exit(1)
	}
}

func run(listen, backends string, initial, maxLimit uint, maxWait time.Duration) error {
	var pool []*backend
	for _, a := range strings.Split(backends, ",") {
		if a = strings.TrimSpace(a); a != "" {
			pool = append(pool, &backend{url: &url.URL{Scheme: "http", Host: a}})
		}
	}
	if len(pool) == 0 {
		return errors.New("no -backends")
	}
	h := newHandler(pool, initial, maxLimit, maxWait)
	srv := &http.Server{Addr: listen, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	}
}

func newHandler(pool []*backend, initial, maxLimit uint, maxWait time.Duration) *handler {
	maxLimit = max(maxLimit, 1)
	initial = min(max(initial, 1), maxLimit)
	b := adaptivelimiter.NewBuilder[any]().WithLimits(1, maxLimit, initial)
	if maxWait > 0 {
		b = b.WithQueueing(2, 3).WithMaxWaitTime(maxWait)
	}
	h := &handler{lim: b.Build(), pool: pool, maxWait: maxWait}
	tr := &http.Transport{
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     30 * time.Second,
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
	}
	h.proxy = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(r.In.Context().Value(backendKey{}).(*backend).url)
			r.Out.Host = r.In.Host
		},
		Transport: tr,
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	return h
}

type backend struct {
	url      *url.URL
	inflight atomic.Int64
}

type backendKey struct{}

type handler struct {
	lim     adaptivelimiter.AdaptiveLimiter[any]
	pool    []*backend
	maxWait time.Duration
	proxy   *httputil.ReverseProxy
	next    atomic.Uint64
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		io.WriteString(w, "ok\n")
		return
	}
	var permit adaptivelimiter.Permit
	if h.maxWait > 0 {
		p, err := h.lim.AcquirePermitWithMaxWait(r.Context(), h.maxWait)
		if err != nil {
			reject(w)
			return
		}
		permit = p
	} else {
		p, ok := h.lim.TryAcquirePermit()
		if !ok {
			reject(w)
			return
		}
		permit = p
	}
	b := h.pick()
	b.inflight.Add(1)
	defer b.inflight.Add(-1)
	rw := &statusWriter{ResponseWriter: w}
	h.proxy.ServeHTTP(rw, r.WithContext(context.WithValue(r.Context(), backendKey{}, b)))
	if rw.status >= 500 || r.Context().Err() != nil {
		permit.Drop() // a failure's time says nothing about the farm's latency
		return
	}
	permit.Record()
}

// pick is least-connections, ties broken round-robin.
func (h *handler) pick() *backend {
	start := int(h.next.Add(1))
	best := h.pool[start%len(h.pool)]
	for i := 1; i < len(h.pool); i++ {
		b := h.pool[(start+i)%len(h.pool)]
		if b.inflight.Load() < best.inflight.Load() {
			best = b
		}
	}
	return best
}

func reject(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "1")
	http.Error(w, "limiter: overloaded", http.StatusServiceUnavailable)
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}
