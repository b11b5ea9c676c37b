package proxy

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/classify"
	"github.com/sentry-proxy/sentry/lb"
	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// fakeControl classifies by the X-Class header (gold=0, else bronze=1),
// rejects bronze, and records observations.
type fakeControl struct {
	mu       sync.Mutex
	observed []observation
	// measured and inService of each observation (0: no measured sample).
	measured  []time.Duration
	inService []int
	strip     bool
	retained  [][]string
	wait      chan struct{} // if set, Admit blocks until it is closed or r.Gone fires
	gone      int
	// With record set, calls is the pipeline's calls, in order (classify,
	// estimate, park, done), with the arrival Estimate was given and the
	// ticket's. (Off by default: the benchmarks must not allocate.)
	record   bool
	calls    []string
	arrivals []time.Time
	tickets  []time.Time
	// retryAfter is a rejection's predicted wait (0: 3 s); rejected
	// counts the rejections.
	retryAfter time.Duration
	rejected   atomic.Int32
	// off: the policy's admission.mode is off (Build); Park admits at
	// once, as control's does.
	off atomic.Bool
}

func (f *fakeControl) call(name string) {
	if !f.record {
		return
	}
	f.mu.Lock()
	f.calls = append(f.calls, name)
	f.mu.Unlock()
}

type observation struct {
	class  int
	key    string
	timing string
	s      time.Duration
}

func (f *fakeControl) Build(a *policy.App, _ *lb.Pool) (pipeline.Controller, error) {
	f.off.Store(a.Admission.Mode == "off")
	return f, nil
}
func (f *fakeControl) Retain(apps []string) {
	f.mu.Lock()
	f.retained = append(f.retained, apps)
	f.mu.Unlock()
}
func (f *fakeControl) Classes() []string { return []string{"gold", "bronze"} }
func (f *fakeControl) Classify(r classify.Request, _ netip.Addr) (int, []byte) {
	f.call("classify")
	if bytes.Equal(r.Peek("X-Class"), []byte("gold")) {
		return 0, r.Path()
	}
	return 1, r.Path()
}
func (f *fakeControl) Estimate(class int, key []byte, now time.Time) (time.Duration, int) {
	f.call("estimate")
	if f.record {
		f.mu.Lock()
		f.arrivals = append(f.arrivals, now)
		f.mu.Unlock()
	}
	return 7 * time.Millisecond, 2
}

// decide is the fake's decision: bronze is rejected.
func (f *fakeControl) decide(class int) admission.Decision {
	if class == 1 {
		f.rejected.Add(1)
		ra := f.retryAfter
		if ra == 0 {
			ra = 3 * time.Second
		}
		return admission.Decision{Verdict: admission.RejectTest, RetryAfter: ra}
	}
	return admission.Decision{Verdict: admission.Admit}
}

// Park decides at once, or, with wait set, parks the request until wait
// is closed.
func (f *fakeControl) Park(r *admission.Request, wk admission.Waker) (admission.Decision, admission.Pending, bool) {
	f.call("park")
	if f.off.Load() {
		return admission.Decision{Verdict: admission.Admit, Mode: admission.ModeOff}, nil, true
	}
	if f.wait == nil {
		return f.decide(r.Class), nil, true
	}
	p := &fakePending{f: f, class: r.Class, cancel: make(chan struct{})}
	go func() {
		select {
		case <-f.wait:
			wk.Wake()
		case <-p.cancel:
		}
	}()
	return admission.Decision{}, p, false
}

type fakePending struct {
	f      *fakeControl
	class  int
	cancel chan struct{}
}

func (p *fakePending) Result() (admission.Decision, bool) {
	select {
	case <-p.f.wait:
		return p.f.decide(p.class), true
	default:
		return admission.Decision{}, false
	}
}

func (p *fakePending) Cancel() {
	close(p.cancel)
	p.f.mu.Lock()
	p.f.gone++
	p.f.mu.Unlock()
}

func (f *fakeControl) Done(t *admission.Ticket, r admission.Result) {
	f.mu.Lock()
	if f.record {
		f.calls = append(f.calls, "done")
		f.tickets = append(f.tickets, t.Arrival)
	}
	f.observed = append(f.observed, observation{t.Class, string(t.Key), string(r.ServerTiming), t.S})
	f.measured = append(f.measured, r.Measured)
	f.inService = append(f.inService, r.InService)
	f.mu.Unlock()
}
func (f *fakeControl) StripServerTiming() bool { return f.strip }

// Load is the fake's farm load (pipeline.LoadSource), for the degradation
// signal: a fixed 0.937.
func (f *fakeControl) Load(time.Time) float64 { return 0.937 }

func startControlled(t *testing.T, ctl *fakeControl, be string) *harness {
	t.Helper()
	return startControlledOn(t, EngineAuto, ctl, be)
}

func startControlledOn(t *testing.T, e Engine, ctl *fakeControl, be string) *harness {
	t.Helper()
	return startProxyOpts(t, []string{be}, Options{Control: ctl, Engine: e}, func(_ *policy.Snapshot, a *policy.App) { a.Admission.Mode = "batch" })
}

// TestAdmissionPath runs the pipeline (package pipeline) on each engine: the
// same calls in the same order (classify, estimate, park, and done for a
// relayed request only), the ticket told the arrival the estimate
// counted, the same verdict counts and the same rejection.
func TestAdmissionPath(t *testing.T) {
	for _, e := range engines {
		t.Run(e.String(), func(t *testing.T) { testAdmissionPath(t, e) })
	}
}

func testAdmissionPath(t *testing.T, e Engine) {
	var hits int
	var mu sync.Mutex
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
		w.Header().Set("Server-Timing", "cpu;dur=2, db;dur=5, queue;dur=1, cache;desc=hit")
		io.WriteString(w, "ok")
	})
	ctl := &fakeControl{strip: true, record: true}
	h := startControlledOn(t, e, ctl, be)

	resp, body := rawRequest(t, h.addr, "GET /item?id=3 HTTP/1.1\r\nHost: x\r\nX-Class: gold\r\n\r\n")
	if resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("gold: %d %q", resp.StatusCode, body)
	}
	if st := resp.Header.Get("Server-Timing"); st != "cache;desc=hit" {
		t.Errorf("Server-Timing to client = %q, want only the non-timing entry", st)
	}
	ctl.mu.Lock()
	obs := append([]observation(nil), ctl.observed...)
	ctl.mu.Unlock()
	if len(obs) != 1 || obs[0].class != 0 || obs[0].key != "/item" || obs[0].s != 7*time.Millisecond ||
		obs[0].timing != "cpu;dur=2, db;dur=5, queue;dur=1, cache;desc=hit" {
		t.Errorf("observations %+v", obs)
	}

	resp, body = rawRequest(t, h.addr, "GET /item HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "3" || resp.Header.Get("X-Sentry-Reject") != "rejected_test" {
		t.Fatalf("bronze: %d %v", resp.StatusCode, resp.Header)
	}
	if body != "sentry: overloaded, retry later\n" {
		t.Errorf("reject body %q", body)
	}
	mu.Lock()
	if hits != 1 {
		t.Errorf("backend saw %d requests; a rejected one reached it", hits)
	}
	mu.Unlock()
	if v := testutil.ToFloat64(h.p.metrics.decisions.WithLabelValues("web", "bronze", "rejected_test")); v != 1 {
		t.Errorf("decisions{bronze,rejected_test} = %v", v)
	}
	if v := testutil.ToFloat64(h.p.metrics.decisions.WithLabelValues("web", "gold", "admitted")); v != 1 {
		t.Errorf("decisions{gold,admitted} = %v", v)
	}
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	if got, want := strings.Join(ctl.calls, " "), "classify estimate park done classify estimate park"; got != want {
		t.Errorf("pipeline calls %q, want %q", got, want)
	}
	if len(ctl.tickets) != 1 || len(ctl.arrivals) != 2 || !ctl.tickets[0].Equal(ctl.arrivals[0]) {
		t.Errorf("ticket arrivals %v, want the first estimate's of %v", ctl.tickets, ctl.arrivals)
	}
}

func TestReject429AndKeepTiming(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server-Timing", "cpu;dur=2")
	})
	ctl := &fakeControl{strip: false}
	h := startProxyOpts(t, []string{be}, Options{Control: ctl}, func(_ *policy.Snapshot, a *policy.App) {
		a.Admission.Mode = "batch"
		a.Reject = policy.Reject{Status: 429, Body: "slow down\n", RetryAfter: 2 * time.Second}
	})
	resp, _ := rawRequest(t, h.addr, "GET / HTTP/1.1\r\nHost: x\r\nX-Class: gold\r\n\r\n")
	if resp.Header.Get("Server-Timing") != "cpu;dur=2" {
		t.Errorf("strip off: Server-Timing %q", resp.Header.Get("Server-Timing"))
	}
	resp, body := rawRequest(t, h.addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 429 || body != "slow down\n" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
}

func TestModeOffClassifiesButAdmits(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {})
	ctl := &fakeControl{}
	h := startProxyOpts(t, []string{be}, Options{Control: ctl}, func(_ *policy.Snapshot, a *policy.App) { a.Admission.Mode = "off" })
	resp, _ := rawRequest(t, h.addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n") // bronze
	if resp.StatusCode != 200 {
		t.Fatalf("mode off rejected: %d", resp.StatusCode)
	}
	if v := testutil.ToFloat64(h.p.metrics.decisions.WithLabelValues("web", "bronze", "admitted")); v != 1 {
		t.Errorf("decisions{bronze,admitted} = %v", v)
	}
}

// A client that hangs up while its request waits in a batch queue leaves
// the queue: its ticket is cancelled, nothing reaches the backend, and no
// answer is written.
func TestClientGoneLeavesQueue(t *testing.T) {
	var hits atomic.Int32
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
	ctl := &fakeControl{wait: make(chan struct{})}
	defer close(ctl.wait)
	h := startControlled(t, ctl, be)
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Class: gold\r\n\r\n")
	time.Sleep(100 * time.Millisecond) // let it reach the queue
	c.Close()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		ctl.mu.Lock()
		g := ctl.gone
		ctl.mu.Unlock()
		if g == 1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	if ctl.gone != 1 {
		t.Fatalf("the waiting request did not see its client leave")
	}
	if hits.Load() != 0 {
		t.Errorf("a request whose client left reached the backend")
	}
}
