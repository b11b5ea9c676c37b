package main

import (
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/status"
)

func TestDemoPolicy(t *testing.T) {
	addrs := []string{"127.0.0.1:40001", "127.0.0.1:40002", "127.0.0.1:40003"}
	snap, err := policy.Parse("demo-policy.yaml", demoPolicyYAML("127.0.0.1:8080", "127.0.0.1:9901", addrs, 3))
	if err != nil {
		t.Fatalf("demo policy does not parse:\n%v", err)
	}
	if len(snap.Apps) != 1 {
		t.Fatalf("apps: %d", len(snap.Apps))
	}
	a := snap.Apps[0]
	var names []string
	for _, c := range a.Classes {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != "gold,silver,bronze" {
		t.Errorf("classes %v", names)
	}
	if got := a.SLA.Target(1e6); got != demoTarget || a.SLA.Percentile != 95 {
		t.Errorf("SLA target %v p%v", got, a.SLA.Percentile)
	}
	if a.Admission.Mode != "auto" || a.Admission.Batch.Parallelism != 3 {
		t.Errorf("admission %+v", a.Admission)
	}
	if strings.Join(a.Backends.Static, ",") != strings.Join(addrs, ",") || snap.Admin.Listen != "127.0.0.1:9901" {
		t.Errorf("backends %v admin %q", a.Backends.Static, snap.Admin.Listen)
	}
	// IPv6 and all-interfaces addresses are quoted correctly.
	if _, err := policy.Parse("demo-policy.yaml", demoPolicyYAML(":18080", "[::1]:19901", addrs, 3)); err != nil {
		t.Errorf("quoting: %v", err)
	}
}

func TestDemoLoadSchedule(t *testing.T) {
	dl, err := newDemoLoad("http://127.0.0.1:8080", demoFarm())
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range dl.cfg.Classes {
		if d := c.Open.Rate.Duration(); d != demoCycle {
			t.Errorf("class %s: schedule lasts %v, want %v", c.Name, d, demoCycle)
		}
		if c.SLA != demoTarget || dl.mults[i].Peak() != 2.5 {
			t.Errorf("class %s: sla %v peak %v", c.Name, c.SLA, dl.mults[i].Peak())
		}
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for _, tc := range []struct {
		at   time.Duration
		mult float64
	}{{0, 0.5}, {35 * time.Second, 2.5}, {55 * time.Second, 0.5}} {
		if m, _ := dl.offered(tc.at); !near(m, tc.mult) {
			t.Errorf("offered at %v: %v× capacity, want %v×", tc.at, m, tc.mult)
		}
	}
	// Crossing capacity: over 1× for a while in every cycle.
	if m, _ := dl.offered(20 * time.Second); m < 1.5 {
		t.Errorf("offered at 20s: %v×", m)
	}
	// Bronze rises first, gold last.
	at := 10 * time.Second
	if b, s, g := dl.mults[2].At(at), dl.mults[1].At(at), dl.mults[0].At(at); !(b == 2.5 && s == 0.5 && g == 0.5) {
		t.Errorf("at 10s bronze %v silver %v gold %v", b, s, g)
	}
	// The 1× rate matches the farm: 9 slot-seconds per second.
	slots := 0.0
	for _, c := range dl.cfg.Classes {
		r0 := c.Open.Rate.At(0) * 2 // 1× = twice the 0.5× start
		switch c.Name {
		case "gold":
			slots += r0 * 0.050
		case "silver":
			slots += r0 * 0.100
		case "bronze":
			slots += r0 * (4 * 0.020 / 5)
		}
	}
	if math.Abs(slots-9) > 0.05 {
		t.Errorf("1× load uses %.2f slot-seconds/s, want 9", slots)
	}
}

func TestDialable(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:8080": "127.0.0.1:8080",
		":8080":          "127.0.0.1:8080",
		"0.0.0.0:8080":   "127.0.0.1:8080",
		"[::]:8080":      "[::1]:8080",
		"example:80":     "example:80",
	} {
		if got := dialable(in); got != want {
			t.Errorf("dialable(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDemoViewFrame(t *testing.T) {
	reg := prometheus.NewRegistry()
	dec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sentry_admission_decisions_total", Help: "h"}, []string{"app", "class", "verdict"})
	reg.MustRegister(dec)
	dec.WithLabelValues("demo", "gold", "admitted").Add(5)
	prev, _ := status.Collect(reg, status.Options{})
	dec.WithLabelValues("demo", "gold", "admitted").Add(5)
	cur, _ := status.Collect(reg, status.Options{})
	prev.Time = cur.Time - 1

	dl, err := newDemoLoad("http://127.0.0.1:8080", demoFarm())
	if err != nil {
		t.Fatal(err)
	}
	var cycle, started atomic.Int64
	cycle.Store(2)
	started.Store(time.Now().Add(-35 * time.Second).UnixNano())
	v := &demoView{gather: reg, adminURL: "http://A", proxyURL: "http://P", start: time.Now(), load: dl, cycle: &cycle, cycleStart: &started}

	plain := string(v.frame(prev, cur))
	if strings.Contains(plain, "\x1b") || !strings.Contains(plain, "load: cycle 2, 35 s of 60 s, offered 2.5× capacity") ||
		!strings.Contains(plain, "gold              5.0        5.0        0.0") {
		t.Errorf("plain frame:\n%s", plain)
	}
	v.tty = true
	tty := string(v.frame(prev, cur))
	if !strings.HasPrefix(tty, "\x1b[H\x1b[2J") || !strings.Contains(tty, "status page http://A/status") {
		t.Errorf("tty frame:\n%q", tty)
	}
	v.load = nil
	if s := string(v.frame(prev, cur)); !strings.Contains(s, "load: off") {
		t.Errorf("no-load frame:\n%s", s)
	}
}
