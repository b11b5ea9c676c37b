package farm

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// testFarm wraps a listener-less test server in a Farm, for the calls that
// change it (UpdateRoute, SetSpeed).
func testFarm(t *testing.T, cfg Config) (*Farm, testSrv) {
	t.Helper()
	s := testServer(t, cfg)
	return &Farm{cfg: s.cfg, servers: []*server{s.server}}, s
}

// ioOf serves one GET and returns the I/O time its Server-Timing reports.
func ioOf(t *testing.T, s http.Handler) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/search", nil))
	if rec.Code != 200 {
		t.Fatalf("status %d", rec.Code)
	}
	_, io, _ := parseTiming(t, rec.Header().Get("Server-Timing"))
	return io
}

// A route mixes two costs under one path: heavy with probability share.
// Fake time, so the reported times are exact.
func TestHeavyMix(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, s := testFarm(t, Config{Slots: 1, Seed: 7, Routes: []Route{{Path: "/search", IO: Dist{Kind: Fixed, Mean: 5 * time.Millisecond},
			Heavy: Heavy{Share: 0.3, IO: Dist{Kind: Fixed, Mean: 500 * time.Millisecond}}}}})
		const n = 400
		heavy := 0
		for range n {
			switch io := ioOf(t, s); io {
			case 500:
				heavy++
			case 5:
			default:
				t.Fatalf("io %v: neither cost", io)
			}
		}
		// Binomial(400, 0.3): mean 120, sd ≈ 9.2; ±5 sd.
		if heavy < 74 || heavy > 166 {
			t.Fatalf("%d of %d heavy, want about 30%%", heavy, n)
		}
	})
}

func TestHeavyMeanAndValidation(t *testing.T) {
	c, err := Config{Servers: 3, Slots: 4, Routes: []Route{{Path: "/", Prefix: true, IO: Dist{Kind: Fixed, Mean: 5 * time.Millisecond},
		Heavy: Heavy{Share: 0.1, IO: Dist{Kind: Fixed, Mean: 500 * time.Millisecond}}}}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	r, _ := c.Route("/x")
	if m := r.MeanService(); m != 54500*time.Microsecond { // 0.9·5 + 0.1·500 ms
		t.Fatalf("mean %v, want 54.5ms", m)
	}
	if capa, _ := c.Capacity("/x"); math.Abs(capa-12/0.0545) > 1e-6 {
		t.Fatalf("capacity %v", capa)
	}
	for _, h := range []Heavy{{Share: -0.1}, {Share: 1.5}, {Share: math.NaN()}, {Share: 0.5, IO: Dist{Kind: "weird", Mean: 1}}} {
		if _, err := (Config{Routes: []Route{{Path: "/", IO: Dist{Mean: time.Millisecond}, Heavy: h}}}).Normalize(); err == nil || !strings.Contains(err.Error(), "heavy") {
			t.Errorf("heavy %+v: error %v", h, err)
		}
	}
	c2, err := ParseConfig([]byte("routes: [{path: /s, io: 5ms, heavy: {share: 0.005, io: 500ms}}]"))
	if err != nil || c2.Routes[0].Heavy.Share != 0.005 || c2.Routes[0].Heavy.IO.Mean != 500*time.Millisecond {
		t.Fatalf("parse: %+v %v", c2.Routes, err)
	}
}

// UpdateRoute changes the share (or any cost) of a route on every server
// at once; a bad change changes nothing.
func TestUpdateRoute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, s := testFarm(t, Config{Slots: 1, Routes: []Route{{Path: "/search", IO: Dist{Kind: Fixed, Mean: 5 * time.Millisecond},
			Heavy: Heavy{IO: Dist{Kind: Fixed, Mean: 500 * time.Millisecond}}}}})
		if io := ioOf(t, s); io != 5 {
			t.Fatalf("before: io %v", io)
		}
		if err := f.UpdateRoute("/search", false, func(r *Route) { r.Heavy.Share = 1 }); err != nil {
			t.Fatal(err)
		}
		if io := ioOf(t, s); io != 500 {
			t.Fatalf("share 1: io %v", io)
		}
		if err := f.UpdateRoute("/search", false, func(r *Route) { r.Heavy.Share = 0; r.IO = Dist{Kind: Fixed, Mean: 20 * time.Millisecond} }); err != nil {
			t.Fatal(err)
		}
		if io := ioOf(t, s); io != 20 {
			t.Fatalf("new distribution: io %v", io)
		}
		if got := f.Config().Routes[0].IO.Mean; got != 20*time.Millisecond {
			t.Fatalf("Config shows %v", got)
		}
		for _, bad := range []func(*Route){
			func(r *Route) { r.Heavy.Share = 2 },
			func(r *Route) { r.Bytes = 1 << 20 }, // more than the farm started with
		} {
			if err := f.UpdateRoute("/search", false, bad); err == nil {
				t.Fatal("bad change accepted")
			}
		}
		if err := f.UpdateRoute("/nope", false, func(*Route) {}); err == nil {
			t.Fatal("unknown route accepted")
		}
		if io := ioOf(t, s); io != 20 {
			t.Fatalf("after refused changes: io %v", io)
		}
	})
}

// SetSpeed divides a server's drawn times: speed 0.5 doubles them.
func TestSetSpeed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, s := testFarm(t, Config{Slots: 1, Routes: []Route{{Path: "/", Prefix: true, IO: Dist{Kind: Fixed, Mean: 50 * time.Millisecond}}}})
		if err := f.SetSpeed(0, 0.5); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		if io := ioOf(t, s); io != 100 || time.Since(t0) != 100*time.Millisecond {
			t.Fatalf("speed 0.5: io %v after %v, want 100ms", io, time.Since(t0))
		}
		f.SetSpeed(0, 2)
		if io := ioOf(t, s); io != 25 {
			t.Fatalf("speed 2: io %v", io)
		}
		for _, bad := range []float64{0, -1, math.Inf(1), math.NaN()} {
			if f.SetSpeed(0, bad) == nil {
				t.Errorf("speed %v accepted", bad)
			}
		}
		if f.SetSpeed(1, 1) == nil {
			t.Error("server 1 of 1 accepted")
		}
	})
}

// With AbortOnDisconnect a request stops in its CPU part too when its
// connection closes, and its slot is freed.
func TestDisconnectStopsCPU(t *testing.T) {
	s := testServer(t, Config{Slots: 1, AbortOnDisconnect: true, Routes: []Route{{Path: "/", Prefix: true, CPU: Dist{Kind: Fixed, Mean: time.Minute}}}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		s.ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(ctx, "GET", "/", nil))
		close(done)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for s.stats().Busy != 1 {
		if time.Now().After(deadline) {
			t.Fatal("never in service")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the CPU part ran on after the client left")
	}
	if st := s.stats(); st.Busy != 0 || st.Abandoned != 1 || st.Completed != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// Kill ends a server's requests without a response and refuses new
// connections; Restart serves again on the same address, every slot free,
// counters kept.
func TestKillRestart(t *testing.T) {
	f, err := Start(Config{Servers: 2, Slots: 1, Routes: []Route{
		{Path: "/slow", IO: Dist{Kind: Fixed, Mean: time.Minute}},
		{Path: "/fast", IO: Dist{Kind: Fixed, Mean: time.Millisecond}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := testClient(4)
	defer c.Transport.(*http.Transport).CloseIdleConnections()
	url := f.URLs()[1]
	if _, err := get(c, url+"/fast"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var slowErr error
	wg.Go(func() { _, slowErr = get(c, url+"/slow") })
	deadline := time.Now().Add(10 * time.Second)
	for f.Stats()[1].Busy != 1 {
		if time.Now().After(deadline) {
			t.Fatal("slow request never in service")
		}
		time.Sleep(time.Millisecond)
	}
	if err := f.Kill(1); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if slowErr == nil {
		t.Fatal("the request in service on a killed server got a response")
	}
	if f.Alive(1) || !f.Alive(0) {
		t.Fatal("Alive")
	}
	if _, err := get(c, url+"/fast"); err == nil {
		t.Fatal("a killed server answered")
	}
	if _, err := get(c, f.URLs()[0]+"/fast"); err != nil {
		t.Fatalf("the other server: %v", err)
	}
	if err := f.Kill(1); err != nil {
		t.Fatalf("second kill: %v", err)
	}
	if err := f.Restart(1); err != nil {
		t.Fatal(err)
	}
	if err := f.Restart(1); err != nil {
		t.Fatalf("restart of a running server: %v", err)
	}
	if f.URLs()[1] != url || !f.Alive(1) {
		t.Fatal("restarted elsewhere")
	}
	resp, err := get(c, url+"/fast")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after restart: %v %v", resp, err)
	}
	st := f.Stats()[1]
	if st.Completed != 2 || st.Abandoned != 1 || st.Busy != 0 || st.InFlight != 0 {
		t.Fatalf("stats after restart %+v", st)
	}
	if f.Kill(2) == nil || f.Restart(-1) == nil {
		t.Fatal("bad index accepted")
	}
	f.Close()
	if f.Restart(1) == nil {
		t.Fatal("restart after Close")
	}
}
