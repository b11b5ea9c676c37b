package scenario

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/sim/dns"
)

// TestAutoscalerRules drives the stand-in HPA on a manual clock: scale-up
// is immediate but at most UpPods per UpPeriod, a server enters DNS Delay
// after it was asked for, scale-down waits for the stabilization window
// and removes one server per DownPeriod, never below Base, and the DNS
// name always lists exactly the ready servers.
func TestAutoscalerRules(t *testing.T) {
	var needed atomic.Value
	needed.Store(6.0)
	metrics := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "# TYPE sentry_provision_servers_needed gauge\nsentry_provision_servers_needed{app=\"other\"} 99\nsentry_provision_servers_needed{app=%q} %g\n", autoscaleApp, needed.Load().(float64))
	}))
	defer metrics.Close()
	srv, err := dns.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c := AutoscaleConfig{Sentry: "x", Dir: "x", Base: 1, Max: 6}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	ips := make([]netip.Addr, c.Max)
	for i := range ips {
		ips[i] = netip.AddrFrom4([4]byte{127, 0, 0, byte(10 + i)})
	}
	t0 := time.Unix(1000, 0)
	a := &autoscaler{c: c, dns: srv, ips: ips, served: func(int) uint64 { return 0 }, start: t0,
		pending: map[int]time.Time{}, removed: map[int]time.Time{}, baseline: map[int]uint64{},
		metric: metrics.URL, advice: metrics.URL + "/none", client: metrics.Client(), ready: []int{0}}
	a.publish()
	ctx := context.Background()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	step := func(s float64) {
		a.tick(at(s))
		a.poll(ctx, at(s))
		got, _ := srv.Lookup(autoscaleName)
		if len(got) != len(a.ready) {
			t.Fatalf("t=%vs: DNS lists %d servers, %d are ready", s, len(got), len(a.ready))
		}
	}
	step(0)
	if a.replicas() != 1+c.UpPods || len(a.ready) != 1 {
		t.Fatalf("after asking for 6: replicas %d ready %d, want %d and 1 (at most %d added per %v)", a.replicas(), len(a.ready), 1+c.UpPods, c.UpPods, c.UpPeriod)
	}
	step(9.9)
	if len(a.ready) != 1 {
		t.Fatalf("servers ready before the %v delay: %d", c.Delay, len(a.ready))
	}
	step(10)
	if len(a.ready) != 5 {
		t.Fatalf("at the delay: %d ready, want 5", len(a.ready))
	}
	step(20)
	if a.replicas() != 5 {
		t.Fatalf("a sixth server was asked for within %v of four: replicas %d", c.UpPeriod, a.replicas())
	}
	step(30)
	step(40)
	if a.replicas() != 6 || len(a.ready) != 6 {
		t.Fatalf("t=40s: replicas %d ready %d, want 6 and 6", a.replicas(), len(a.ready))
	}
	needed.Store(1.2) // ⌈1.2⌉ = 2
	var downs []float64
	for s := 42.0; s <= 400; s += 2 {
		before := len(a.ready)
		step(s)
		if len(a.ready) < before {
			downs = append(downs, s)
		}
	}
	if len(a.ready) != 2 {
		t.Fatalf("ready %d at the end, want 2 (⌈1.2⌉)", len(a.ready))
	}
	if len(downs) != 4 {
		t.Fatalf("scale-downs at %v, want four", downs)
	}
	if downs[0] < 40+c.Stabilization.Seconds() {
		t.Errorf("first scale-down at %vs, within the %v stabilization window of the last 6", downs[0], c.Stabilization)
	}
	for i := 1; i < len(downs); i++ {
		if downs[i]-downs[i-1] < c.DownPeriod.Seconds() {
			t.Errorf("scale-downs at %vs and %vs: closer than %v", downs[i-1], downs[i], c.DownPeriod)
		}
	}
	needed.Store(0.0)
	for s := 402.0; s <= 700; s += 2 {
		step(s)
	}
	if len(a.ready) != c.Base {
		t.Errorf("needed 0: %d ready, want the floor %d", len(a.ready), c.Base)
	}
	for _, e := range a.events {
		if math.IsNaN(e.Needed) && e.Action == "poll" {
			t.Fatalf("a scrape failed at %v", e.At)
		}
	}
}
