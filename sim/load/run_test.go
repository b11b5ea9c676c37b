package load

import (
	"context"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/internal/stall"
)

func fastServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	if h == nil {
		h = func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }
	}
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

func run(t *testing.T, cfg Config) (*Report, Summary) {
	t.Helper()
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rep, rep.Summary()
}

// The open-loop generator holds its schedule against a fast target: 500
// req/s for 2 s sends 1000 requests (± 5%), about 500 in each second by
// actual send time, with little lag.
func TestOpenLoopHoldsSchedule(t *testing.T) {
	srv := fastServer(t, nil)
	w := stall.Start()
	rep, s := run(t, Config{
		Targets: []string{srv.URL},
		Classes: []Class{{Name: "u", Open: &Open{Arrivals: Uniform, Rate: Constant(500, 2*time.Second)}}},
	})
	st := w.Stop()
	u, _ := s.Class("u")
	t.Logf("sent %d completed %d errors %d p99 lag %v max lag %v elapsed %v; %v",
		u.Sent, u.Completed, u.Errors, u.P99Lag, u.MaxLag, s.Elapsed, st)
	if rep.Stop != StopSchedule || u.Offered != 1000 || u.Overflow != 0 || u.Errors != 0 {
		t.Fatalf("stop %s: %+v", rep.Stop, u)
	}
	var c stall.Checks
	if math.Abs(float64(u.Completed)-1000) > 50 {
		c.Add("completed %d, want 1000 ± 5%%", u.Completed)
	}
	for _, p := range rep.Series(time.Second) {
		if p.Class == "u" && p.T < 2*time.Second && math.Abs(float64(p.Sent)-500) > 25 {
			c.Add("second %v: sent %d, want 500 ± 5%%", p.T, p.Sent)
		}
	}
	if s.Elapsed > 3*time.Second {
		c.Add("elapsed %v for a 2 s schedule", s.Elapsed)
	}
	// A 50 ms stall shifts 25 sends (5% of a second) across a boundary.
	c.Report(t, st.Max >= 50*time.Millisecond, st.String())
}

// Poisson arrivals at a ramp, weighted paths, headers, cookies, method,
// body, Host, and two targets round-robin.
func TestOpenLoopTemplate(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		paths = map[string]int{}
		bad   []string
		hits  [2]atomic.Int64
	)
	handler := func(i int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			hits[i].Add(1)
			c, err := r.Cookie("session")
			buf := make([]byte, 16)
			n, _ := r.Body.Read(buf)
			mu.Lock()
			paths[r.URL.Path]++
			if r.Method != "POST" || r.Header.Get("X-Class") != "gold" || err != nil || c.Value != "s1" ||
				r.Host != "shop.example" || string(buf[:n]) != "q=1" || r.URL.RawQuery != "a=b" && r.URL.Path == "/a" {
				bad = append(bad, r.Method+" "+r.URL.String()+" "+r.Host)
			}
			mu.Unlock()
		}
	}
	s0, s1 := fastServer(t, handler(0)), fastServer(t, handler(1))
	rep, s := run(t, Config{
		Targets: []string{s0.URL, s1.URL + "/"},
		Seed:    3,
		Classes: []Class{{Name: "gold", Request: Request{
			Method: "POST", Body: "q=1", Host: "shop.example",
			Paths:   []Path{{Path: "/a?a=b", Weight: 1}, {Path: "/b", Weight: 3}},
			Headers: map[string]string{"X-Class": "gold"},
			Cookies: map[string]string{"session": "s1"},
		}, Open: &Open{Rate: Ramp(100, 300, time.Second)}}},
	})
	g, _ := s.Class("gold")
	if len(bad) > 0 {
		t.Fatalf("%d bad requests, first %q", len(bad), bad[0])
	}
	// 200 expected arrivals, Poisson: ± 4σ ≈ ± 57.
	if math.Abs(float64(g.Completed)-200) > 57 || g.Completed != g.Offered || rep.Stop != StopSchedule {
		t.Fatalf("%+v", g)
	}
	if frac := float64(paths["/b"]) / float64(g.Completed); frac < 0.6 || frac > 0.9 {
		t.Errorf("/b got %.2f of requests, want 0.75", frac)
	}
	if d := hits[0].Load() - hits[1].Load(); d < -1 || d > 1 {
		t.Errorf("round robin: %d vs %d", hits[0].Load(), hits[1].Load())
	}
}

// Closed-loop users back off after a 503/429 for Retry-After, or for
// Config.RetryAfter when the header is missing.
func TestClosedLoopBackoff(t *testing.T) {
	t.Parallel()
	var sentry, plain atomic.Int64
	srv := fastServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/sentry" {
			sentry.Add(1)
			w.Header().Set(RejectHeader, "overload")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		plain.Add(1)
		w.WriteHeader(http.StatusTooManyRequests)
	})
	users := Constant(4, 1500*time.Millisecond)
	w := stall.Start()
	rep, s := run(t, Config{
		Targets:    []string{srv.URL},
		RetryAfter: 600 * time.Millisecond,
		Classes: []Class{
			{Name: "sentry", Request: Request{Paths: []Path{{Path: "/sentry"}}}, Closed: &Closed{Users: users, Think: 5 * time.Millisecond}},
			{Name: "plain", Request: Request{Paths: []Path{{Path: "/plain"}}}, Closed: &Closed{Users: users, Think: 5 * time.Millisecond}},
		},
	})
	st := w.Stop()
	a, _ := s.Class("sentry")
	b, _ := s.Class("plain")
	// Each sentry user sends at 0 and 1 s; each plain user at 0, 0.6, 1.2 s.
	// A user that did not back off would send hundreds; one that runs
	// late (a starved process) sends fewer: the upper bounds hold on any
	// machine, the exact counts on one that ran the users on time.
	if a.Sent < 4 || a.Sent > 8 || a.Rejected != a.Sent || a.Reasons["overload"] != a.Sent || a.Errors != 0 {
		t.Errorf("sentry: %+v", a)
	}
	if b.Sent < 4 || b.Sent > 12 || b.Rejected != 0 || b.Errors != b.Sent || b.Statuses[429] != b.Sent {
		t.Errorf("plain: %+v", b)
	}
	for _, r := range rep.Results {
		if r.Class == 0 && r.RetryAfter != time.Second || r.Class == 1 && r.RetryAfter != -1 {
			t.Fatalf("retry-after: %+v", r)
		}
	}
	var c stall.Checks
	if a.Sent != 8 || b.Sent != 12 {
		c.Add("sent %d and %d, want 8 (twice per sentry user) and 12 (three times per plain user)", a.Sent, b.Sent)
	}
	// The third plain send is due 300 ms before the schedule ends.
	c.Report(t, st.Max >= 100*time.Millisecond || st.Share() >= 0.1, st.String())
}

// The user count follows its schedule: 2 users, then a flash crowd of 20.
// With no think time each user always has one request in flight, so the
// client-side concurrency is the user count.
func TestClosedLoopUsers(t *testing.T) {
	t.Parallel()
	var cur, peak atomic.Int64
	srv := fastServer(t, func(w http.ResponseWriter, r *http.Request) {
		n := cur.Add(1)
		defer cur.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(50 * time.Millisecond)
	})
	users := append(Constant(2, 500*time.Millisecond), Constant(20, 500*time.Millisecond)...)
	w := stall.Start()
	rep, _ := run(t, Config{Targets: []string{srv.URL}, Classes: []Class{{Name: "c", Closed: &Closed{Users: users}}}})
	st := w.Stop()
	// Concurrency at t: requests with Sent ≤ t < End, sampled every 5 ms.
	conc := func(from, to time.Duration) (hi int) {
		for at := from; at < to; at += 5 * time.Millisecond {
			n := 0
			for i := range rep.Results {
				if r := &rep.Results[i]; r.Sent() <= at && at < r.End() {
					n++
				}
			}
			hi = max(hi, n)
		}
		return hi
	}
	early, late := conc(0, 450*time.Millisecond), conc(550*time.Millisecond, time.Second)
	t.Logf("concurrency: early %d late %d; server peak %d; %d requests; %v", early, late, peak.Load(), len(rep.Results), st)
	// Never more than the users: on any machine.
	if early > 2 || late > 20 || peak.Load() > 20 {
		t.Fatalf("concurrency: early %d (want 2), late %d (want 20), server peak %d (≤ 20)", early, late, peak.Load())
	}
	// As many as the users, once they are up: on a machine that ran
	// them on time.
	var c stall.Checks
	if early != 2 || late < 18 {
		c.Add("concurrency: early %d (want 2), late %d (want 20)", early, late)
	}
	c.Report(t, st.Max >= 100*time.Millisecond || st.Share() >= 0.1, st.String())
}

// Generator overflow is counted, not hidden; MaxRequests and MaxDuration
// bound the run.
func TestBounds(t *testing.T) {
	t.Parallel()
	// slow answers after 10 s: every run below ends before it does, by
	// MaxDuration or the request timeout. MaxDuration is 2 s beyond the
	// schedule (the generator may run late on a loaded machine and must
	// still offer the whole schedule) and far before slow answers.
	slow := fastServer(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(10 * time.Second):
		case <-r.Context().Done():
		}
	})
	t.Run("overflow", func(t *testing.T) {
		_, s := run(t, Config{
			Targets: []string{slow.URL}, MaxInFlight: 5, MaxDuration: 2500 * time.Millisecond,
			Classes: []Class{{Name: "a", Open: &Open{Arrivals: Uniform, Rate: Constant(200, 500*time.Millisecond)}}},
		})
		a, _ := s.Class("a")
		if a.Offered != 100 || a.Sent != 5 || a.Overflow != 95 || a.ErrKinds[ErrOverflow] != 95 || a.ErrKinds[ErrCanceled] != 5 || s.Stop != StopMaxDuration {
			t.Fatalf("%+v stop %s", a, s.Stop)
		}
	})
	t.Run("max requests", func(t *testing.T) {
		fast := fastServer(t, nil)
		_, s := run(t, Config{
			Targets: []string{fast.URL}, MaxRequests: 30,
			Classes: []Class{
				{Name: "a", Open: &Open{Rate: Constant(1000, 5*time.Second)}},
				{Name: "b", Closed: &Closed{Users: Constant(3, 5*time.Second)}},
			},
		})
		all, _ := s.Class(TotalClass)
		// Stopped by the budget, long before the 5 s schedule's end.
		if all.Offered != 30 || s.Stop != StopMaxRequests || s.Elapsed > 4*time.Second {
			t.Fatalf("%+v stop %s elapsed %v", all, s.Stop, s.Elapsed)
		}
	})
	t.Run("timeout and refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := "http://" + ln.Addr().String()
		ln.Close()
		rep, s := run(t, Config{
			Targets: []string{slow.URL, closed}, Timeout: 100 * time.Millisecond, MaxDuration: 5 * time.Second,
			Classes: []Class{{Name: "a", Open: &Open{Arrivals: Uniform, Rate: Constant(20, 200*time.Millisecond)}}},
		})
		a, _ := s.Class("a")
		if a.Sent != 4 || a.ErrKinds[ErrTimeout] != 2 || a.ErrKinds[ErrRefused] != 2 || a.Errors != 4 || a.Admitted != 2 || s.Stop != StopSchedule {
			t.Fatalf("%+v", a)
		}
		// A timeout is recorded at its timeout, not before. (A refusal
		// is quick, but how quick is the machine's.)
		for _, r := range rep.Results {
			if r.Status != 0 || r.Err == ErrTimeout && r.Latency < 100*time.Millisecond {
				t.Fatalf("%+v", r)
			}
		}
	})
}

// Run leaves nothing running once it returns: class loops, users,
// requests, and (with its own client) connections.
func TestRunNoLeak(t *testing.T) {
	srv := fastServer(t, func(w http.ResponseWriter, r *http.Request) { time.Sleep(5 * time.Millisecond) })
	base := runtime.NumGoroutine()
	_, s := run(t, Config{
		Targets: []string{srv.URL}, MaxDuration: 400 * time.Millisecond,
		Classes: []Class{
			{Name: "o", Open: &Open{Rate: Constant(200, time.Second)}},
			{Name: "c", Closed: &Closed{Users: Constant(5, time.Second), Think: 10 * time.Millisecond}},
		},
	})
	if s.Stop != StopMaxDuration {
		t.Fatalf("stop %s", s.Stop)
	}
	srv.CloseClientConnections()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, want ≤ %d:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRecorderChunks: results added past several chunks come back whole
// and in order.
func TestRecorderChunks(t *testing.T) {
	var r recorder
	n := 2*recordChunk + 3
	for i := 0; i < n; i++ {
		r.add(Result{Class: i})
	}
	all := r.all()
	if len(all) != n || cap(r.chunks[0]) != 1024 {
		t.Fatalf("%d results, first chunk %d; want %d, 1024", len(all), cap(r.chunks[0]), n)
	}
	for _, c := range r.chunks {
		if cap(c) > recordChunk {
			t.Fatalf("a chunk of %d", cap(c))
		}
	}
	for i, res := range all {
		if res.Class != i {
			t.Fatalf("result %d is %d", i, res.Class)
		}
	}
}

// TestClassRetry: only the idempotent methods are sent again after a
// reused connection was lost, and only HEAD reads no body.
func TestClassRetry(t *testing.T) {
	for _, c := range []struct {
		method      string
		retry, head bool
	}{
		{"", true, false}, {"GET", true, false}, {"HEAD", true, true}, {"OPTIONS", true, false}, {"TRACE", true, false},
		{"POST", false, false}, {"PUT", false, false}, {"DELETE", false, false}, {"PATCH", false, false},
	} {
		cs, err := newClassState(&Request{Method: c.method, Paths: []Path{{Path: "/", Weight: 1}}}, []string{"http://127.0.0.1:1"})
		if err != nil {
			t.Fatal(err)
		}
		if cs.retry != c.retry || cs.head != c.head {
			t.Errorf("%q: retry %v head %v, want %v %v", c.method, cs.retry, cs.head, c.retry, c.head)
		}
	}
}
