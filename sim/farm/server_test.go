package farm

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"
)

var timingRE = regexp.MustCompile(`^cpu;dur=([0-9.]+), io;dur=([0-9.]+), queue;dur=([0-9.]+)$`)

func parseTiming(t *testing.T, h string) (cpu, io, queue float64) {
	t.Helper()
	m := timingRE.FindStringSubmatch(h)
	if m == nil {
		t.Fatalf("Server-Timing %q does not match %s", h, timingRE)
	}
	f := func(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v }
	return f(m[1]), f(m[2]), f(m[3])
}

// testSrv is a server with a life that has no listener: requests go to
// its ServeHTTP directly.
type testSrv struct {
	*server
	lf *life
}

func (s testSrv) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.lf.ServeHTTP(w, r) }

func testServer(t *testing.T, cfg Config) testSrv {
	t.Helper()
	cfg, err := cfg.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(0, cfg, makeBody(cfg.Routes), time.Now, hclog.NewNullLogger())
	lf := s.newLife(nil)
	t.Cleanup(func() { lf.close() })
	return testSrv{s, lf}
}

// With one slot and 50 ms of I/O, three simultaneous requests wait 0, 50
// and 100 ms, and Server-Timing says so. Fake time: exact.
func TestServerQueueing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := testServer(t, Config{Slots: 1, Routes: []Route{{Path: "/", Prefix: true, IO: Dist{Kind: Fixed, Mean: 50 * time.Millisecond}, Bytes: 100}}})
		recs := make([]*httptest.ResponseRecorder, 3)
		var wg sync.WaitGroup
		for i := range recs {
			recs[i] = httptest.NewRecorder()
			wg.Go(func() { s.ServeHTTP(recs[i], httptest.NewRequest("GET", "/p", nil)) })
			synctest.Wait() // arrival order = i
		}
		if st := s.stats(); st.Busy != 1 || st.Waiting != 2 || st.InFlight != 3 {
			t.Fatalf("stats while queued: %+v", st)
		}
		// /healthz answers at once although every slot is busy.
		hr := httptest.NewRecorder()
		t0 := time.Now()
		s.ServeHTTP(hr, httptest.NewRequest("GET", HealthPath, nil))
		if hr.Code != 200 || time.Since(t0) != 0 || hr.Header().Get("Server-Timing") == "" {
			t.Fatalf("healthz: %d after %v", hr.Code, time.Since(t0))
		}
		wg.Wait()
		for i, rec := range recs {
			if rec.Code != 200 || rec.Body.Len() != 100 || rec.Header().Get("Content-Length") != "100" {
				t.Fatalf("req %d: %d, %d bytes", i, rec.Code, rec.Body.Len())
			}
			cpu, io, queue := parseTiming(t, rec.Header().Get("Server-Timing"))
			if cpu != 0 || io != 50 || queue != float64(50*i) {
				t.Errorf("req %d: cpu=%v io=%v queue=%v; want 0, 50, %d", i, cpu, io, queue, 50*i)
			}
		}
		st := s.stats()
		if st.Completed != 3 || st.InFlight != 0 || st.Busy != 0 || st.QueueTime != 150*time.Millisecond {
			t.Fatalf("stats: %+v", st)
		}
		if st.BusyTime != 150*time.Millisecond || st.Utilisation != 1 {
			t.Fatalf("busy %v utilisation %v, want 150ms and 1", st.BusyTime, st.Utilisation)
		}
	})
}

// Routes: 404 for no match, static bodies, status and content type.
func TestServerRoutes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := testServer(t, Config{Routes: []Route{
			{Path: "/static/", Prefix: true, Bytes: 256 << 10},
			{Path: "/small.css", Bytes: 1 << 10},
			{Path: "/err", Status: 500, IO: Dist{Kind: Fixed, Mean: time.Millisecond}},
		}})
		for _, tc := range []struct {
			path   string
			code   int
			bytes  int
			ctype  string
			method string
		}{
			{"/static/big.bin", 200, 256 << 10, "application/octet-stream", "GET"},
			{"/static/big.bin", 200, 0, "application/octet-stream", "HEAD"},
			{"/small.css", 200, 1 << 10, "application/octet-stream", "GET"},
			{"/err", 500, 0, "text/html; charset=utf-8", "GET"},
			{"/nothing", 404, -1, "", "GET"},
		} {
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
			if rec.Code != tc.code || (tc.bytes >= 0 && rec.Body.Len() != tc.bytes) || (tc.ctype != "" && rec.Header().Get("Content-Type") != tc.ctype) {
				t.Errorf("%s %s: %d, %d bytes, %q", tc.method, tc.path, rec.Code, rec.Body.Len(), rec.Header().Get("Content-Type"))
			}
			parseTiming(t, rec.Header().Get("Server-Timing"))
		}
	})
}

// AbortOnDisconnect frees the slot when the client goes away mid-service;
// without it the work runs to the end. Either way a client that leaves
// while queued is dropped.
func TestServerDisconnect(t *testing.T) {
	for _, abort := range []bool{false, true} {
		t.Run(fmt.Sprint("abort=", abort), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := testServer(t, Config{Slots: 1, AbortOnDisconnect: abort, Routes: []Route{{Path: "/", Prefix: true, IO: Dist{Kind: Fixed, Mean: time.Second}}}})
				ctx1, cancel1 := context.WithCancel(context.Background())
				ctx2, cancel2 := context.WithCancel(context.Background())
				c1 := httptest.NewRequestWithContext(ctx1, "GET", "/", nil)
				c2 := httptest.NewRequestWithContext(ctx2, "GET", "/", nil)
				var wg sync.WaitGroup
				wg.Go(func() { s.ServeHTTP(httptest.NewRecorder(), c1) })
				synctest.Wait()
				wg.Go(func() { s.ServeHTTP(httptest.NewRecorder(), c2) })
				synctest.Wait()
				t0 := time.Now()
				cancel2() // queued: dropped at once
				cancel1() // in service
				wg.Wait()
				el := time.Since(t0)
				st := s.stats()
				if abort && (el != 0 || st.Abandoned != 2 || st.Completed != 0) {
					t.Fatalf("abort: took %v, %+v", el, st)
				}
				if !abort && (el != time.Second || st.Abandoned != 1 || st.Completed != 1) {
					t.Fatalf("no abort: took %v, %+v", el, st)
				}
			})
		})
	}
}

// A route with a degraded variant serves it only when the load header
// reads above Above (the value before any ';'); otherwise, and for a
// missing or unparsable header, the full cost. Fake time: exact.
func TestServerDegradedVariant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := testServer(t, Config{Slots: 4, Routes: []Route{{Path: "/", Prefix: true,
			IO:       Dist{Kind: Fixed, Mean: 80 * time.Millisecond},
			Degraded: &Degraded{Above: 0.9, IO: Dist{Kind: Fixed, Mean: 40 * time.Millisecond}}}}})
		for _, c := range []struct {
			hdr  string
			want float64 // io ms
		}{
			{"", 80}, {"0.90", 80}, {"0.91", 40}, {"1.50; class=crowd", 40}, {"high", 80}, {" 2 ", 40},
		} {
			w := httptest.NewRecorder()
			r := httptest.NewRequest("GET", "/p", nil)
			if c.hdr != "" {
				r.Header.Set(DefaultLoadHeader, c.hdr)
			}
			s.ServeHTTP(w, r)
			if _, io, _ := parseTiming(t, w.Header().Get("Server-Timing")); io != c.want {
				t.Errorf("Sentry-Load %q: io %v ms, want %v", c.hdr, io, c.want)
			}
		}
		if got := s.stats().Degraded; got != 3 {
			t.Errorf("Degraded = %d, want 3", got)
		}
	})
}

func TestDegradedConfig(t *testing.T) {
	c, err := Config{Routes: []Route{{Path: "/", IO: Dist{Kind: Fixed, Mean: time.Millisecond},
		Degraded: &Degraded{Above: 0.9, IO: Dist{Kind: Fixed, Mean: time.Millisecond}}}}}.Normalize()
	if err != nil || c.Routes[0].Degraded.Header != DefaultLoadHeader {
		t.Fatalf("normalized %+v, %v; want header %s", c.Routes[0].Degraded, err, DefaultLoadHeader)
	}
	for _, d := range []Degraded{{Above: 0.9}, {Above: -1, IO: Dist{Kind: Fixed, Mean: time.Millisecond}}} {
		if _, err := (Config{Routes: []Route{{Path: "/", Degraded: &d}}}).Normalize(); err == nil {
			t.Errorf("degraded %+v accepted", d)
		}
	}
}
