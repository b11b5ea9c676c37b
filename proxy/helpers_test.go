package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sentry-proxy/sentry/internal/freeport"
	"github.com/sentry-proxy/sentry/policy"
)

// engines are the values of server.engine, for tests that run on each.
// (Where the system has no event loops, loops runs the portable engine.)
var engines = []string{policy.EngineLoops, policy.EnginePortable}

// testSnap builds a defaulted one-app snapshot listening on addr.
func testSnap(addr string, backends []string, mod func(*policy.Snapshot, *policy.App)) *policy.Snapshot {
	a := &policy.App{
		Name:               "web",
		Listen:             []string{addr},
		Backends:           policy.Backends{Static: backends},
		Balance:            policy.LeastLoaded,
		Health:             policy.Health{Passive: policy.PassiveHealth{Failures: 3, Cooldown: 10 * time.Second}},
		Timeouts:           policy.Timeouts{Connect: 2 * time.Second, Response: 5 * time.Second},
		MaxConnsPerBackend: 1024,
		RequestIDHeader:    "X-Request-Id",
		Reject:             policy.Reject{Status: 503, Body: "sentry: overloaded, retry later\n", RetryAfter: time.Second},
		Admission:          policy.Admission{Mode: "off"},
		Degradation:        policy.Degradation{Header: policy.DefaultLoadHeader}, // the policy's default: off
	}
	s := &policy.Snapshot{
		Source: "<test>",
		Admin:  policy.Admin{},
		Log:    policy.Log{Level: "info", Format: "text"},
		Server: policy.Server{ReadHeaderTimeout: 2 * time.Second, BodyTimeout: time.Minute, IdleTimeout: 5 * time.Second,
			MaxHeaderBytes: 16384, MaxConns: 10000, ShutdownTimeout: 5 * time.Second,
			// The policy's defaults: bodies are buffered, requests' and
			// responses'.
			RequestBuffer: 1 << 20, RequestBufferTotal: 256 << 20, BodyMinRate: 1 << 10,
			ResponseBuffer: 1 << 20, ResponseBufferTotal: 256 << 20, ResponseTempFile: 1 << 30, ResponseTempFileTotal: 1 << 30},
		Apps: []*policy.App{a},
	}
	if mod != nil {
		mod(s, a)
	}
	s.Listeners = nil
	byAddr := map[string]*policy.Listener{}
	for _, ap := range s.Apps {
		for _, l := range ap.Listen {
			pl := byAddr[l]
			if pl == nil {
				pl = &policy.Listener{Addr: l, TLS: ap.TLS, H2C: ap.H2C}
				byAddr[l] = pl
				s.Listeners = append(s.Listeners, pl)
			}
			pl.Apps = append(pl.Apps, ap)
			if len(ap.Hosts) == 0 {
				pl.Default = ap
			}
		}
	}
	for i, ap := range s.Apps {
		ap.Index = i
	}
	return s
}

// harness is a proxy serving one listener in front of test backends.
type harness struct {
	t     testing.TB
	p     *Proxy
	reg   *prometheus.Registry
	addr  string
	snap  *policy.Snapshot
	close func()
}

func freeAddr(t testing.TB) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

func startProxy(t *testing.T, backends []string, mod func(*policy.Snapshot, *policy.App)) *harness {
	t.Helper()
	return startProxyOpts(t, backends, Options{}, mod)
}

func startProxyOpts(t testing.TB, backends []string, opts Options, mod func(*policy.Snapshot, *policy.App)) *harness {
	t.Helper()
	addr := freeAddr(t)
	return startProxySnap(t, addr, testSnap(addr, backends, mod), opts)
}

// startEngine is startProxyOpts on engine e (server.engine, policy.EngineLoops
// or policy.EnginePortable).
func startEngine(t testing.TB, e string, backends []string, opts Options, mod func(*policy.Snapshot, *policy.App)) *harness {
	t.Helper()
	return startProxyOpts(t, backends, opts, withEngine(e, mod))
}

// withEngine is mod with server.engine set to e first.
func withEngine(e string, mod func(*policy.Snapshot, *policy.App)) func(*policy.Snapshot, *policy.App) {
	return func(s *policy.Snapshot, a *policy.App) {
		s.Server.Engine = e
		if mod != nil {
			mod(s, a)
		}
	}
}

// startProxySnap starts a proxy for snap serving every listener, with
// opts; a nil Registerer gets a fresh registry, a nil Logger a silent one.
func startProxySnap(t testing.TB, addr string, snap *policy.Snapshot, opts Options) *harness {
	t.Helper()
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	reg, _ := opts.Registerer.(*prometheus.Registry)
	if opts.Logger == nil {
		opts.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: io.Discard})
	}
	p, err := New(opts, snap)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range snap.Listeners {
		ln, err := net.Listen("tcp", l.Addr)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Serve(l.Addr, ln); err != nil {
			t.Fatal(err)
		}
	}
	h := &harness{t: t, p: p, reg: reg, addr: addr, snap: snap}
	h.close = func() {
		// Every exchange and stream the loops ran moved only as their
		// state machines allow (package exchange, evloop's streams): an
		// illegal move is counted, not a crash, in production.
		p.mu.Lock()
		for a, fe := range p.mu.fronts {
			if ff := fe.loops.Load(); ff != nil && ff.IllegalTransitions() != 0 {
				t.Errorf("listener %s: %d illegal state transitions on the loops", a, ff.IllegalTransitions())
			}
			if n := fe.own.illegal.Load(); n != 0 {
				t.Errorf("listener %s: %d illegal h2 stream transitions", a, n)
			}
		}
		p.mu.Unlock()
		ctx, cancel := contextWithTimeout(3 * time.Second)
		defer cancel()
		_ = p.ShutdownAll(ctx)
		p.Close()
	}
	t.Cleanup(h.close)
	return h
}

func (h *harness) url(path string) string { return "http://" + h.addr + path }

// backend starts an httptest server and returns its host:port.
func backend(t *testing.T, fn http.HandlerFunc) string {
	t.Helper()
	s := httptest.NewServer(fn)
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

// rawRequest writes raw bytes to the proxy and reads one response.
func rawRequest(t *testing.T, addr, raw string) (*http.Response, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
