package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestQuickModeSlowBackendAdmitted is issue 29's first outage with the real
// binary: quick mode (`sentry run -listen -backend`, SLA target 1s) in
// front of a backend that answers in 1.5s. Sixteen requests sent one at a
// time find the farm idle every time, so every one is admitted (the
// work-conserving rule, docs/algorithms.md) and answered by the backend;
// sentry_admitted_over_target_total counts them and sentry logs one WARN
// for them (at most one a minute per class).
func TestQuickModeSlowBackendAdmitted(t *testing.T) {
	if testing.Short() {
		t.Skip("24s of sequential 1.5s requests")
	}
	b := newTestBackend(t, "slow", 1500*time.Millisecond)
	listen, admin := freePort(t), freePort(t)
	p := startSentry(t, "http://"+admin+"/readyz", "run", "-listen", listen, "-backend", b.addr, "-admin", admin)
	client := &http.Client{Timeout: 10 * time.Second}
	const n = 16
	for i := range n {
		resp, err := client.Get("http://" + listen + "/report")
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "slow" {
			t.Fatalf("request %d: %d %q (X-Sentry-Reject: %q), want 200 from the backend",
				i, resp.StatusCode, body, resp.Header.Get("X-Sentry-Reject"))
		}
	}
	if h := b.hits.Load(); h != n {
		t.Fatalf("backend answered %d requests, want %d", h, n)
	}
	_, metrics := get(t, "http://"+admin+"/metrics")
	// The first request is admitted by the test (nothing is known of its
	// size yet); every later one, estimated at 1.5s, by the rule.
	m := regexp.MustCompile(`(?m)^sentry_admitted_over_target_total\{app="default",class="default"\} (\d+)$`).FindStringSubmatch(metrics)
	if m == nil || m[1] != "15" {
		t.Fatalf("sentry_admitted_over_target_total = %v, want 15:\n%s", m, grepLines(metrics, "over_target", "decisions_total"))
	}
	out := p.out.String()
	if c := strings.Count(out, "admitted requests over their target"); c != 1 {
		t.Fatalf("%d over-target WARN lines, want 1:\n%s", c, out)
	}
	for _, kv := range []string{"[WARN]", "app=default", "class=default", "target=1s"} {
		if !strings.Contains(out, kv) {
			t.Fatalf("the WARN lacks %q:\n%s", kv, out)
		}
	}
}

// grepLines returns the lines of s that contain any of subs.
func grepLines(s string, subs ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, sub := range subs {
			if strings.Contains(l, sub) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// TestQuickModeConcurrentSlowBackend is the bootstrap deadlock of quick
// mode's learned parallelism with the real binary: eight clients that send
// together, and again once all eight are answered, against a backend that
// answers in 1.5s (over the 1s quick target) on 8 workers and sends no
// Server-Timing. Each request misses its target even alone, so only the
// work-conserving rule admits it, one per free slot of the learned P; P
// started at 1 and rose only from a request that ran at full speed beside
// more than P others, which the rule never admitted: one burst in eight
// answered, seven refused, on a backend with seven workers idle. With the
// probe (batchac's doc.go, "The probe") the rule fills up to 2P while the
// backend does not queue and P follows what ran at full speed: 2, 4, 8.
//
// The warm-up: the first burst is admitted by the test (nothing is known
// of the requests' size; their completions teach the 1.5s), then one
// burst each for P = 1, 2, 4 -- the first burst, then log2(8) service
// times. Bursts 4 to 7 (counting from 0) must each be answered by the
// backend in full; one burst more than the sim's count is allowed for
// requests of a burst that reach sentry apart.
func TestQuickModeConcurrentSlowBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("eight bursts of 1.5s requests")
	}
	const clients, workers, bursts, warm = 8, 8, 8, 4
	const delay = 1500 * time.Millisecond
	var hits, busy, peak atomic.Int64
	slots := make(chan struct{}, workers)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		slots <- struct{}{} // a worker; FIFO beyond eight, as a thread pool
		defer func() { <-slots }()
		if n := busy.Add(1); n > peak.Load() {
			peak.Store(n)
		}
		defer busy.Add(-1)
		hits.Add(1)
		time.Sleep(delay)
		io.WriteString(w, "slow")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	listen, admin := freePort(t), freePort(t)
	startSentry(t, "http://"+admin+"/readyz", "run", "-listen", listen, "-backend", ln.Addr().String(), "-admin", admin)
	client := &http.Client{Timeout: 10 * time.Second}
	answered := make([]int, bursts)
	for b := range bursts {
		var wg sync.WaitGroup
		var ok atomic.Int64
		errs := make(chan error, clients)
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := client.Get("http://" + listen + "/report")
				if err != nil {
					errs <- err
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode == 200 && string(body) == "slow":
					ok.Add(1)
				case resp.StatusCode == 503 && resp.Header.Get("X-Sentry-Reject") != "":
				default:
					errs <- fmt.Errorf("%d %q (X-Sentry-Reject: %q)", resp.StatusCode, body, resp.Header.Get("X-Sentry-Reject"))
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("burst %d: %v", b, err)
		}
		answered[b] = int(ok.Load())
	}
	t.Logf("answered by the backend per burst of %d: %v; the backend's peak concurrency %d", clients, answered, peak.Load())
	for b := warm; b < bursts; b++ {
		if answered[b] != clients {
			t.Fatalf("burst %d: %d of %d answered by the backend after a warm-up of %d bursts (per burst: %v)", b, answered[b], clients, warm, answered)
		}
	}
	_, metrics := get(t, "http://"+admin+"/metrics")
	if m := regexp.MustCompile(`(?m)^sentry_batch_parallelism\{app="default"\} (\S+)$`).FindStringSubmatch(metrics); m == nil {
		t.Logf("sentry_batch_parallelism not found:\n%s", grepLines(metrics, "parallelism"))
	} else {
		t.Logf("learned P: %s", m[1])
	}
}
