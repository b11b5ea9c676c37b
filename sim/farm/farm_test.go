package farm

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/internal/stall"
)

func testClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: conns,
		DisableCompression:  true,
	}, Timeout: 10 * time.Second}
}

// get does one request and drains the body.
func get(c *http.Client, url string) (*http.Response, error) {
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, nil
}

// The farm's measured capacity under closed-loop saturation is within 10%
// of Servers × Slots / mean service time: 2 × 8 / 40 ms = 400 req/s with a
// fixed time, and the same with exponential times (which exercises the
// timer compensation on draws shorter than the overshoot). The rate is
// kept modest so the test's own CPU use (client and server, under -race,
// on 2 shared cores) does not starve the timers it measures. The
// capacity and the saturation are timings: on a machine that starved
// this process (package internal/stall), or made the farm's timers so
// late that its compensation reached its cap (the farm's own word that
// it cannot hold its model there, Stats.Compensation), they are reported
// as a skip.
func TestFarmCapacity(t *testing.T) {
	for _, tc := range []struct {
		io     string
		window time.Duration
	}{
		{"40ms", 2 * time.Second},
		{"exp:40ms", 2 * time.Second},
	} {
		t.Run(tc.io, func(t *testing.T) {
			d, err := ParseDist(tc.io)
			if err != nil {
				t.Fatal(err)
			}
			measureCapacity(t, Config{Servers: 2, Slots: 8, Seed: 1, Routes: []Route{{Path: "/", Prefix: true, IO: d}}}, 400, tc.window)
		})
	}
}

func measureCapacity(t *testing.T, cfg Config, want float64, window time.Duration) {
	f, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if c, _ := f.Config().Capacity("/page"); c != want {
		t.Fatalf("Capacity = %v, want %v", c, want)
	}

	perServer := 3 * cfg.Slots // always a queue
	c := testClient(perServer * cfg.Servers)
	defer c.Transport.(*http.Transport).CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), window+3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	urls := f.URLs()
	for i := 0; i < perServer*len(urls); i++ {
		url := urls[i%len(urls)] + "/page"
		wg.Go(func() {
			for n := 0; n < 10000 && ctx.Err() == nil; n++ {
				if _, err := get(c, url); err != nil && ctx.Err() == nil {
					t.Errorf("get: %v", err)
					return
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond) // warm up: connections, full queues
	s0 := f.Stats()
	w := stall.Start()
	time.Sleep(window)
	s1 := f.Stats()
	st := w.Stop()
	cancel()
	wg.Wait()

	var checks stall.Checks
	var done uint64
	var el, comp time.Duration
	for i := range s0 {
		done += s1[i].Completed - s0[i].Completed
		el = max(el, s1[i].Elapsed-s0[i].Elapsed)
		comp = max(comp, s1[i].Compensation)
		util := float64(s1[i].BusyTime-s0[i].BusyTime) / (float64(s1[i].Slots) * float64(s1[i].Elapsed-s0[i].Elapsed))
		if util < 0.95 {
			checks.Add("server %d utilisation %.3f under saturation, want ≥ 0.95", i, util)
		}
	}
	got := float64(done) / el.Seconds()
	t.Logf("measured %.0f req/s, capacity %.0f req/s (%+.1f%%); compensation %v; %v", got, want, 100*(got-want)/want, comp, st)
	if math.Abs(got-want) > 0.10*want {
		checks.Add("measured capacity %.0f req/s, want %.0f ± 10%%", got, want)
	}
	checks.Report(t, st.Share() >= 0.1 || comp >= maxOvershoot, fmt.Sprintf("%v; compensation %v, cap %v", st, comp, maxOvershoot))
}

// Real sockets: Server-Timing, /healthz, /_farm/stats, fixed ports, and
// Close ending requests that wait.
func TestFarmHTTP(t *testing.T) {
	f, err := Start(Config{Servers: 2, Slots: 1, Routes: []Route{
		{Path: "/slow", IO: Dist{Kind: Fixed, Mean: time.Hour}},
		{Path: "/", Prefix: true, IO: Dist{Kind: Fixed, Mean: time.Millisecond}, Bytes: 2048},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := testClient(4)
	defer c.Transport.(*http.Transport).CloseIdleConnections()
	for _, u := range f.URLs() {
		resp, err := get(c, u+"/x")
		if err != nil {
			t.Fatal(err)
		}
		cpu, io, _ := parseTiming(t, resp.Header.Get("Server-Timing"))
		if resp.StatusCode != 200 || resp.ContentLength != 2048 || cpu != 0 || io < 1 {
			t.Fatalf("%s: %d len %d cpu %v io %v", u, resp.StatusCode, resp.ContentLength, cpu, io)
		}
	}

	// Two hour-long requests on server 0: one in service, one queued.
	errs := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() { _, err := get(c, f.URLs()[0]+"/slow"); errs <- err }()
	}
	deadline := time.Now().Add(3 * time.Second)
	for f.Stats()[0].InFlight < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	resp, err := c.Get(f.URLs()[0] + StatsPath)
	if err != nil {
		t.Fatal(err)
	}
	var st statsJSON
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.Busy != 1 || st.Waiting != 1 || st.Completed != 1 {
		t.Fatalf("stats: %+v, %v", st, err)
	}
	if _, err := get(c, f.URLs()[0]+HealthPath); err != nil {
		t.Fatalf("healthz under load: %v", err)
	}

	t0 := time.Now()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := <-errs; err == nil {
			t.Error("request survived Close")
		}
	}
	if el := time.Since(t0); el > time.Second {
		t.Fatalf("Close took %v", el)
	}
	if st := f.Stats()[0]; st.InFlight != 0 || st.Abandoned != 2 {
		t.Fatalf("after close: %+v", st)
	}
}

// waitGoroutines polls until at most n goroutines run (bounded: 2 s).
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, want ≤ %d:\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Close leaves nothing running: servers, handlers in a queue or a sleep.
func TestFarmCloseNoLeak(t *testing.T) {
	base := runtime.NumGoroutine()
	f, err := Start(Config{Servers: 2, Slots: 1, Routes: []Route{{Path: "/", Prefix: true, IO: Dist{Kind: Fixed, Mean: time.Minute}}}})
	if err != nil {
		t.Fatal(err)
	}
	c := testClient(8)
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Go(func() { get(c, f.URLs()[i%2]+"/") })
	}
	deadline := time.Now().Add(3 * time.Second)
	for st := f.Stats(); st[0].InFlight+st[1].InFlight < 6 && time.Now().Before(deadline); st = f.Stats() {
		time.Sleep(5 * time.Millisecond)
	}
	f.Close()
	wg.Wait()
	c.Transport.(*http.Transport).CloseIdleConnections()
	waitGoroutines(t, base)
}
