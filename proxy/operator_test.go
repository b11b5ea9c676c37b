//go:build linux

package proxy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"

	"github.com/sentry-proxy/sentry/lb"
	"github.com/sentry-proxy/sentry/policy"
)

// opBackend is a backend that counts the requests it got and its open
// connections, and holds /slow until release is closed.
type opBackend struct {
	name    string
	addr    string
	hits    atomic.Int32
	cl      *countingListener
	arrived chan string // one value per /slow request that arrived
	release chan struct{}
}

func newOpBackend(t *testing.T, name string, h2 bool, arrived chan string, release chan struct{}) *opBackend {
	b := &opBackend{name: name, arrived: arrived, release: release}
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		if r.URL.Path == "/slow" {
			b.arrived <- b.name
			<-b.release
		}
		fmt.Fprint(w, b.name)
	})
	if h2 {
		h = h2c.NewHandler(h, &http2.Server{})
	}
	s := httptest.NewUnstartedServer(h)
	b.cl = &countingListener{Listener: s.Listener}
	s.Listener = b.cl
	s.Start()
	t.Cleanup(s.Close)
	b.addr = b.cl.Addr().String()
	return b
}

// TestBackendDrainEveryEngine: a backend the operator drains (lb's
// SetState, what the admin API calls) gets no new request on any engine
// -- the event loops, fasthttp, an HTTP/2 backend -- from the drain on,
// while the request in flight to it finishes with its answer; the
// connections to it close once it is drained; sentry_backend_state
// says so; enabled again, it takes requests.
func TestBackendDrainEveryEngine(t *testing.T) {
	type variant struct {
		name   string
		engine Engine
		h2     bool
	}
	for _, v := range []variant{{"loops", EngineLoops, false}, {"fasthttp", EngineFastHTTP, false}, {"h2c-backend", EngineAuto, true}} {
		t.Run(v.name, func(t *testing.T) {
			arrived := make(chan string, 1)
			release := make(chan struct{})
			var releaseOnce atomic.Bool
			t.Cleanup(func() {
				if !releaseOnce.Swap(true) {
					close(release)
				}
			})
			bes := map[string]*opBackend{}
			var addrs []string
			for _, n := range []string{"a", "b"} {
				b := newOpBackend(t, n, v.h2, arrived, release)
				bes[n] = b
				addrs = append(addrs, b.addr)
			}
			h := startProxyOpts(t, addrs, Options{Engine: v.engine}, func(_ *policy.Snapshot, a *policy.App) {
				a.Balance = policy.RoundRobin
				if v.h2 {
					a.Backends.Protocol = policy.ProtoH2C
				}
			})
			get := func(path string) (int, string) {
				resp, body := rawRequest(t, h.addr, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
				return resp.StatusCode, body
			}
			// Both backends serve, and keep a connection from sentry.
			for range 4 {
				if code, _ := get("/"); code != 200 {
					t.Fatalf("warm-up: %d", code)
				}
			}
			for n, b := range bes {
				if b.hits.Load() == 0 || b.cl.open.Load() == 0 {
					t.Fatalf("backend %s: %d requests, %d connections before the drain", n, b.hits.Load(), b.cl.open.Load())
				}
			}
			// A request in flight to one of them, which is then drained.
			slow := make(chan string, 1)
			go func() {
				code, body := get("/slow")
				slow <- fmt.Sprint(code, " ", body)
			}()
			var name string
			select {
			case name = <-arrived:
			case <-time.After(5 * time.Second):
				t.Fatal("the slow request reached no backend")
			}
			drained, other := bes[name], bes["a"]
			if name == "a" {
				other = bes["b"]
			}
			pool := h.p.Pool("web")
			if pool == nil || h.p.Pool("nope") != nil {
				t.Fatal("Proxy.Pool")
			}
			if prev, ok := pool.SetState(drained.addr, lb.Draining); !ok || prev != lb.Enabled {
				t.Fatalf("SetState = %v, %v", prev, ok)
			}
			before := drained.hits.Load()
			for range 20 {
				code, body := get("/")
				if code != 200 || body != other.name {
					t.Fatalf("after the drain: %d %q, want 200 from %s", code, body, other.name)
				}
			}
			if n := drained.hits.Load(); n != before {
				t.Fatalf("the drained backend got %d requests after the drain", n-before)
			}
			if v := testutil.ToFloat64(h.p.metrics.requests.WithLabelValues("web", drained.addr, "2xx")); v == 0 {
				t.Fatal("no 2xx counted for the drained backend before the drain")
			}
			state := func(s string) float64 {
				return gatherValue(t, h, "sentry_backend_state", map[string]string{"backend": drained.addr, "state": s})
			}
			if state("draining") != 1 || state("enabled") != 0 {
				t.Fatalf("sentry_backend_state: draining %v, enabled %v", state("draining"), state("enabled"))
			}
			// The request in flight finishes with the drained backend's
			// answer; then no connection to it stays open.
			releaseOnce.Store(true)
			close(release)
			select {
			case got := <-slow:
				if got != "200 "+drained.name {
					t.Fatalf("the request in flight got %q", got)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the request in flight did not finish")
			}
			waitOpen(t, drained.cl, 0, "the drained backend")
			if !pool.Backend(drained.addr).Drained() {
				t.Fatal("not reported drained")
			}
			// Enabled, it serves again.
			pool.SetState(drained.addr, lb.Enabled)
			seen := false
			for range 10 {
				_, body := get("/")
				seen = seen || body == drained.name
			}
			if !seen {
				t.Fatal("the enabled backend got no request")
			}
		})
	}
}

// gatherValue returns the value of the series of family whose labels
// include want (0 when none).
func gatherValue(t *testing.T, h *harness, family string, want map[string]string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue next
				}
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}
