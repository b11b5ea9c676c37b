//go:build linux

package proxy

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2"

	"github.com/sentry-proxy/sentry/lb"
	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/sentry-proxy/sentry/sert"
)

// termControl is the fake admission stack with a termination controller,
// as package control's App offers it (Termination).
type termControl struct {
	*fakeControl
	term *sert.Controller
}

func (c *termControl) Build(*policy.App, *lb.Pool) (pipeline.Controller, error) { return c, nil }
func (c *termControl) Termination() *sert.Controller                            { return c.term }

// termBackend is a Go net/http backend (it stops work when its client
// connection closes: r.Context()) that counts requests per path,
// cancelled exchanges and closed connections.
type termBackend struct {
	addr      string
	mu        sync.Mutex
	hits      map[string]int
	cancelled atomic.Int64
	closed    atomic.Int64
	started   chan string
	proceed   chan struct{}
	slow      time.Duration // how long the slow paths take
}

func startTermBackend(t *testing.T, slow time.Duration) *termBackend {
	b := &termBackend{hits: map[string]int{}, started: make(chan string, 16), proceed: make(chan struct{}, 16), slow: slow}
	s := httptest.NewUnstartedServer(http.HandlerFunc(b.serve))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			b.closed.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	b.addr = strings.TrimPrefix(s.URL, "http://")
	return b
}

func (b *termBackend) serve(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.hits[r.Method+" "+r.URL.Path]++
	b.mu.Unlock()
	switch r.URL.Path {
	case "/heavy": // runs until its client goes (or 10 s)
		b.started <- r.URL.Path
		select {
		case <-r.Context().Done():
			b.cancelled.Add(1)
		case <-time.After(10 * time.Second):
			io.WriteString(w, "late")
		}
	case "/slowhead": // answers after slow
		time.Sleep(b.slow)
		io.WriteString(w, "late")
	case "/slowbody": // the head at once, the body's end after slow
		w.Header().Set("Content-Length", "10")
		io.WriteString(w, "first")
		w.(http.Flusher).Flush()
		time.Sleep(b.slow)
		io.WriteString(w, "-next")
	case "/moving": // waits for the test's go, then takes slow
		b.started <- r.URL.Path
		<-b.proceed
		time.Sleep(b.slow)
		io.WriteString(w, "late")
	default:
		io.WriteString(w, "ok")
	}
}

func (b *termBackend) hitsOf(k string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hits[k]
}

// termRange is the gold class's range in these tests: lower 50ms, upper
// thr (the threshold: no tick runs, so T = UB).
func termRange(upper time.Duration) sert.Config {
	return sert.Config{Params: sert.DefaultParams(), Classes: []*sert.ClassConfig{{Name: "gold", Lower: 50 * time.Millisecond, Upper: upper}}}
}

// TestTermination is selective early termination on the request path of
// every engine: both HTTP/1.1 engines and h2 (TLS). A GET of the gold
// class (terminate, threshold 300ms) whose backend has not answered by
// then is cut before any response byte: 503 with X-Sentry-Reject:
// terminated and Retry-After, the backend connection closed (the backend
// sees its client go; the next requests are served on other connections),
// the backend saw it once (no retry), the termination counted and the
// ticket told a measured time of at least the threshold. A response whose
// head came in time is not cut while its body is slow; a POST is not
// terminable; a class without terminate is never cut; and a threshold
// that moves while the request is in flight applies to it (raised: the
// request completes; lowered: it is cut).
func TestTermination(t *testing.T) {
	const thr = 300 * time.Millisecond
	type engineCase struct {
		name   string
		engine string
		h2     bool
	}
	for _, ec := range []engineCase{{"loops", policy.EngineLoops, false}, {"fasthttp", policy.EnginePortable, false}, {"h2", policy.EnginePortable, true}} {
		t.Run(ec.name, func(t *testing.T) {
			be := startTermBackend(t, 2*thr)
			term, err := sert.New(termRange(thr))
			if err != nil {
				t.Fatal(err)
			}
			fc := &fakeControl{}
			ctl := &termControl{fakeControl: fc, term: term}
			var certFile, keyFile string
			if ec.h2 {
				certFile, keyFile = writeTestCert(t)
			}
			h := startEngine(t, ec.engine, []string{be.addr}, Options{Control: ctl}, func(_ *policy.Snapshot, a *policy.App) {
				a.Admission.Mode = "batch"
				a.Timeouts.Response = 30 * time.Second
				a.Terminate = []*policy.Terminate{{Lower: 50 * time.Millisecond, Upper: thr}}
				if ec.h2 {
					a.TLS = &policy.TLS{CertFile: certFile, KeyFile: keyFile}
				}
			})
			tr := &http.Transport{}
			scheme := "http://"
			if ec.h2 {
				tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
				if err := http2.ConfigureTransport(tr); err != nil {
					t.Fatal(err)
				}
				scheme = "https://"
			}
			defer tr.CloseIdleConnections()
			cl := &http.Client{Transport: tr, Timeout: 15 * time.Second}
			do := func(method, path, body string) (*http.Response, string, time.Duration) {
				t.Helper()
				var rd io.Reader
				if body != "" {
					rd = strings.NewReader(body)
				}
				req, _ := http.NewRequest(method, scheme+h.addr+path, rd)
				req.Header.Set("X-Class", "gold")
				start := time.Now()
				resp, err := cl.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v", method, path, err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if ec.h2 && resp.ProtoMajor != 2 {
					t.Fatalf("%s %s went as %s, want h2", method, path, resp.Proto)
				}
				return resp, string(b), time.Since(start)
			}
			wantCut := func(what string, resp *http.Response, body string, cancelledBefore int64) {
				t.Helper()
				if resp.StatusCode != 503 || resp.Header.Get("X-Sentry-Reject") != "terminated" || resp.Header.Get("Retry-After") == "" {
					t.Fatalf("%s: got %d reject=%q retry-after=%q %q, want 503 terminated with Retry-After",
						what, resp.StatusCode, resp.Header.Get("X-Sentry-Reject"), resp.Header.Get("Retry-After"), body)
				}
				deadline := time.Now().Add(3 * time.Second)
				for be.cancelled.Load() == cancelledBefore && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				if be.cancelled.Load() == cancelledBefore {
					t.Fatalf("%s: the backend exchange was not cut within 3s", what)
				}
			}

			// Termination before the first byte.
			closedBefore, cancelled := be.closed.Load(), be.cancelled.Load()
			resp, body, _ := do("GET", "/heavy", "")
			wantCut("GET /heavy", resp, body, cancelled)
			<-be.started
			if n := be.hitsOf("GET /heavy"); n != 1 {
				t.Fatalf("the backend saw GET /heavy %d times, want once (no retry)", n)
			}
			deadline := time.Now().Add(3 * time.Second)
			for be.closed.Load() == closedBefore && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if be.closed.Load() == closedBefore {
				t.Fatal("the cut backend connection was not closed")
			}
			if c := term.Class(0).Counts(); c.Terminated != 1 {
				t.Fatalf("terminations counted: %d, want 1", c.Terminated)
			}
			fc.mu.Lock()
			m := fc.measured[len(fc.measured)-1]
			fc.mu.Unlock()
			if m < thr {
				t.Fatalf("the ticket was told measured=%v for the cut request, want at least the threshold %v", m, thr)
			}

			// Later requests are served: nothing in the pool is the cut
			// connection.
			for i := 0; i < 5; i++ {
				if resp, body, _ := do("GET", "/fine", ""); resp.StatusCode != 200 || body != "ok" {
					t.Fatalf("GET /fine after the cut: %d %q", resp.StatusCode, body)
				}
			}

			// No termination after the first byte: a slow body keeps
			// flowing past the threshold.
			if resp, body, took := do("GET", "/slowbody", ""); resp.StatusCode != 200 || body != "first-next" || took < thr {
				t.Fatalf("GET /slowbody: %d %q after %v, want 200 \"first-next\" after more than %v", resp.StatusCode, body, took, thr)
			}

			// A POST is not terminable.
			if resp, body, took := do("POST", "/slowhead", "data"); resp.StatusCode != 200 || body != "late" || took < thr {
				t.Fatalf("POST /slowhead: %d %q after %v, want 200 late after more than %v", resp.StatusCode, body, took, thr)
			}

			// The threshold rises while the request is in flight: it
			// completes.
			done := make(chan struct{})
			go func() {
				defer close(done)
				if resp, body, _ := do("GET", "/moving", ""); resp.StatusCode != 200 || body != "late" {
					t.Errorf("GET /moving with the threshold raised in flight: %d %q, want 200 late", resp.StatusCode, body)
				}
			}()
			<-be.started
			if err := term.Reconfigure(termRange(10 * time.Second)); err != nil {
				t.Fatal(err)
			}
			be.proceed <- struct{}{}
			<-done

			// The threshold falls while the request is in flight (armed
			// at 10s): it is cut.
			cancelled = be.cancelled.Load()
			got := make(chan struct{})
			var cutResp *http.Response
			var cutBody string
			go func() {
				defer close(got)
				cutResp, cutBody, _ = do("GET", "/heavy", "")
			}()
			<-be.started
			if err := term.Reconfigure(termRange(thr)); err != nil {
				t.Fatal(err)
			}
			<-got
			wantCut("GET /heavy with the threshold lowered in flight", cutResp, cutBody, cancelled)

			// A class without terminate is never cut.
			if err := term.Reconfigure(sert.Config{Params: sert.DefaultParams(), Classes: []*sert.ClassConfig{nil}}); err != nil {
				t.Fatal(err)
			}
			if resp, body, took := do("GET", "/slowhead", ""); resp.StatusCode != 200 || body != "late" || took < thr {
				t.Fatalf("GET /slowhead of a class without terminate: %d %q after %v, want 200 late", resp.StatusCode, body, took)
			}
		})
	}
}

// BenchmarkRelayTerminable is BenchmarkRelay for a class that terminates
// (threshold 15s: nothing is cut), on each HTTP/1.1 engine: the loops arm
// termination on their sweep, fasthttp re-arms the pooled exchange's
// timer; neither may allocate per request for it. Compare allocs/op with
// BenchmarkRelay (BenchmarkRelayPortable for fasthttp: its 3 allocs/op are
// HostClient's streamed response body, there with or without
// termination); at a small -benchtime the set-up and the fake
// controller's Done (it records every observation) show as a fraction.
func BenchmarkRelayTerminable(b *testing.B) {
	for _, e := range []struct {
		name   string
		engine string
	}{{"loops", policy.EngineLoops}, {"fasthttp", policy.EnginePortable}} {
		b.Run(e.name, func(b *testing.B) {
			be := fastBackend(b)
			term, err := sert.New(termRange(15 * time.Second))
			if err != nil {
				b.Fatal(err)
			}
			ctl := &termControl{fakeControl: &fakeControl{}, term: term}
			h := startEngine(&testing.T{}, e.engine, []string{be}, Options{Control: ctl}, func(_ *policy.Snapshot, a *policy.App) {
				a.Admission.Mode = "batch"
				a.Terminate = []*policy.Terminate{{Lower: 50 * time.Millisecond, Upper: 15 * time.Second}}
			})
			defer func() { b.StopTimer(); h.close() }()
			c := benchClient(h.addr)
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			req.SetRequestURI("http://" + h.addr + "/x")
			req.Header.Set("X-Class", "gold")
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
					b.Fatalf("relay: %v %d", err, resp.StatusCode())
				}
			}
		})
	}
}
