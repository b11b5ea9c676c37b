package e2e

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testBackend is a restartable backend on a fixed port that counts requests
// and in-flight work.
type testBackend struct {
	name     string
	addr     string
	delay    time.Duration
	hits     atomic.Int64
	inflight atomic.Int64
	srv      *http.Server
	done     chan struct{}
}

func newTestBackend(t *testing.T, name string, delay time.Duration) *testBackend {
	b := &testBackend{name: name, addr: freePort(t), delay: delay}
	b.start(t)
	t.Cleanup(b.stop)
	return b
}

func (b *testBackend) start(t *testing.T) {
	t.Helper()
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ { // the port may linger briefly after a kill
		if ln, err = net.Listen("tcp", b.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("restart %s: %v", b.name, err)
	}
	b.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		b.inflight.Add(1)
		defer b.inflight.Add(-1)
		b.hits.Add(1)
		time.Sleep(b.delay)
		io.WriteString(w, b.name)
	})}
	b.done = make(chan struct{})
	go func(s *http.Server, done chan struct{}) { s.Serve(ln); close(done) }(b.srv, b.done)
}

// stop kills the backend: listener and every open connection at once.
func (b *testBackend) stop() {
	if b.srv != nil {
		b.srv.Close()
		<-b.done
		b.srv = nil
	}
}

// load runs workers that loop GETs until stop is closed, bounded by max
// requests; it returns per-status counts and transport errors.
type loadResult struct {
	mu      sync.Mutex
	status  map[int]int
	errs    []error
	bodies  map[string]int
	rejects map[string]int // non-200 responses by X-Sentry-Reject
}

func runLoad(url string, workers int, stop <-chan struct{}, max int64) *loadResult {
	res := &loadResult{status: map[int]int{}, bodies: map[string]int{}, rejects: map[string]int{}}
	var sent atomic.Int64
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sent.Add(1) <= max {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := client.Get(url)
				res.mu.Lock()
				if err != nil {
					res.errs = append(res.errs, err)
				} else {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					res.status[resp.StatusCode]++
					res.bodies[string(b)]++
					if resp.StatusCode != 200 {
						res.rejects[resp.Header.Get("X-Sentry-Reject")]++
					}
				}
				res.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return res
}

func TestRunConfigAgainstThreeBackends(t *testing.T) {
	// slow holds a request 25 times as long as a fast one: on a loaded
	// machine every backend here (in this process) runs late by the same
	// scheduling delay, which narrows the ratio least-loaded sees but
	// keeps it far from 1.
	slow := newTestBackend(t, "slow", 100*time.Millisecond)
	fast1 := newTestBackend(t, "fast1", 4*time.Millisecond)
	fast2 := newTestBackend(t, "fast2", 4*time.Millisecond)
	listen, admin := freePort(t), freePort(t)
	// A killed backend is ejected by the passive check (its first refused
	// connection); the active checks bring it back. Their timeout is
	// generous: the backends run in this (-race) process, which a loaded
	// machine can starve for longer than a tight one, and a healthy
	// backend failing its checks would be ejected too.
	cfg := writeFile(t, "sentry.yaml", fmt.Sprintf(`
admin:
  listen: %s
apps:
  - name: web
    listen: %s
    backends:
      static: [%s, %s, %s]
    health:
      active: {path: /healthz, interval: 500ms, timeout: 450ms, rise: 1, fall: 3}
      passive: {failures: 1, cooldown: 500ms}
`, admin, listen, slow.addr, fast1.addr, fast2.addr))
	startSentry(t, "http://"+admin+"/readyz", "run", "-config", cfg)
	base := "http://" + listen

	t.Run("relays", func(t *testing.T) {
		code, body := get(t, base+"/")
		if code != 200 || (body != "slow" && body != "fast1" && body != "fast2") {
			t.Fatalf("got %d %q", code, body)
		}
	})

	t.Run("least-loaded spread", func(t *testing.T) {
		for _, b := range []*testBackend{slow, fast1, fast2} {
			b.hits.Store(0)
		}
		stop := make(chan struct{})
		time.AfterFunc(1500*time.Millisecond, func() { close(stop) })
		res := runLoad(base+"/", 6, stop, 20000)
		if len(res.errs) > 0 || res.status[200] == 0 || len(res.status) != 1 {
			t.Fatalf("load: statuses %v errors %v", res.status, res.errs)
		}
		s, f1, f2 := slow.hits.Load(), fast1.hits.Load(), fast2.hits.Load()
		t.Logf("spread: slow=%d fast1=%d fast2=%d", s, f1, f2)
		if s == 0 || f1 == 0 || f2 == 0 {
			t.Fatalf("a backend got no requests")
		}
		// The slow backend holds its requests 25x longer, so least-loaded
		// must send it clearly less; the two fast ones share evenly.
		if float64(s) > 0.5*float64(min(f1, f2)) {
			t.Errorf("slow backend got %d vs fast %d/%d: not least-loaded", s, f1, f2)
		}
		if r := float64(f1) / float64(f2); r < 0.6 || r > 1.67 {
			t.Errorf("fast backends unevenly loaded: %d vs %d", f1, f2)
		}
	})

	t.Run("killed backend is ejected and rejoins", func(t *testing.T) {
		stop := make(chan struct{})
		var inflightAtKill int64
		var res *loadResult
		done := make(chan struct{})
		go func() { res = runLoad(base+"/", 6, stop, 50000); close(done) }()
		time.Sleep(400 * time.Millisecond)
		inflightAtKill = fast2.inflight.Load()
		fast2.stop()
		// Handlers outlive the killed connections by their sleep, so this
		// counts every request that was in flight when the kill happened.
		inflightAtKill = max(inflightAtKill, fast2.inflight.Load())
		time.Sleep(800 * time.Millisecond)
		fast2.hits.Store(0)
		fast2.start(t)
		// Active checks every 500 ms, rise 1: back within a few checks,
		// however late this machine runs them.
		for deadline := time.Now().Add(10 * time.Second); fast2.hits.Load() == 0 && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
		close(stop)
		<-done
		failed := int64(len(res.errs))
		for code, n := range res.status {
			if code != 200 {
				failed += int64(n)
			}
		}
		t.Logf("statuses %v (rejections by reason %v), transport errors %d, in flight on the killed backend %d", res.status, res.rejects, len(res.errs), inflightAtKill)
		if failed > inflightAtKill {
			t.Errorf("%d requests failed, but only %d were in flight on the killed backend", failed, inflightAtKill)
		}
		if fast2.hits.Load() == 0 {
			t.Errorf("restarted backend never rejoined")
		}
	})

	t.Run("admin endpoints", func(t *testing.T) {
		for _, path := range []string{"/healthz", "/readyz"} {
			if code, _ := get(t, "http://"+admin+path); code != 200 {
				t.Errorf("%s: %d", path, code)
			}
		}
		_, metrics := get(t, "http://"+admin+"/metrics")
		for _, want := range []string{
			fmt.Sprintf(`sentry_requests_total{app="web",backend="%s",code="2xx"}`, fast1.addr),
			fmt.Sprintf(`sentry_backend_healthy{app="web",backend="%s"} 1`, fast2.addr),
			`sentry_request_duration_seconds_bucket{app="web"`,
			`sentry_backends_healthy{app="web"} 3`,
			`go_goroutines`,
		} {
			if !strings.Contains(metrics, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
}

func TestQuickPolicyFromFlags(t *testing.T) {
	b := newTestBackend(t, "only", 0)
	listen, admin := freePort(t), freePort(t)
	startSentry(t, "http://"+admin+"/readyz", "run", "-listen", listen, "-backend", b.addr, "-admin", admin)
	if code, body := get(t, "http://"+listen+"/x"); code != 200 || body != "only" {
		t.Fatalf("got %d %q", code, body)
	}
}

var _ = errors.New
