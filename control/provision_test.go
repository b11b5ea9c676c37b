package control

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/provision"
)

// driveProvisioning runs seconds ticks of a manual clock: each second rate
// evenly spaced arrivals of class 1, each with a 10 ms service-time sample,
// of which drop are counted as rejected.
func driveProvisioning(a *App, nowNs *atomic.Int64, seconds, rate, drop int) {
	for s := 0; s < seconds; s++ {
		start := time.Unix(0, nowNs.Load())
		for i := 0; i < rate; i++ {
			at := start.Add(time.Duration(i) * time.Second / time.Duration(rate))
			a.Estimate(1, []byte("/"), at)
			a.est.Observe(1, []byte("/"), 10*time.Millisecond, 0, at)
		}
		a.rejects.Add(int64(drop))
		now := start.Add(time.Second)
		nowNs.Store(now.UnixNano())
		a.tick(now, time.Second)
	}
}

func TestProvisioningModelAndTrigger(t *testing.T) {
	got := make(chan provision.Request, 4)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req provision.Request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Error(err)
		}
		got <- req
	}))
	defer hook.Close()

	var nowNs atomic.Int64
	nowNs.Store(time.Unix(1000, 0).UnixNano())
	clock := func() time.Time { return time.Unix(0, nowNs.Load()) }
	m, reg := newManager(t, clock)
	m.noMonitor = true // driveProvisioning ticks; the monitor's own ticks would race it
	pool := &fakePool{}
	pool.healthy.Store(1)
	ac := testApp("batch")
	ac.Admission.Batch.Parallelism = 1
	ac.Provisioning = policy.Provisioning{Target: 50 * time.Millisecond, Window: time.Minute, FDrop: 0.5,
		Spacing: 2 * time.Minute, MaxStep: 2, MinServers: 1, MaxServers: 10, Revenue: 0.01, TProv: time.Minute,
		Webhook: &policy.Webhook{URL: hook.URL, Timeout: 5 * time.Second, Retries: 1}}
	a, err := m.Build(ac, pool)
	if err != nil {
		t.Fatal(err)
	}
	// 30 s at 200/s of 10 ms requests, 75% dropped: evenly spaced, fixed
	// service: one server takes 100/s within 50 ms (D/D/1), so 2 are needed.
	driveProvisioning(a, &nowNs, 30, 200, 150)
	st := a.Provisioning()
	if st.Needed != 2 || st.Current != 1 {
		t.Fatalf("status %+v, want 2 needed, 1 current", st)
	}
	if st.LambdaIn < 95 || st.LambdaIn > 100.001 || st.CA2 > 0.05 {
		t.Fatalf("λ_in %v c_a² %v, want ≈100/s and ≈0", st.LambdaIn, st.CA2)
	}
	if st.WindowFull || st.Asks != 0 {
		t.Fatalf("asked before a whole window: %+v", st)
	}
	// At 60 s the window is full: one ask, for needed − current = 1.
	driveProvisioning(a, &nowNs, 31, 200, 150)
	st = a.Provisioning()
	if !st.WindowFull || st.DropRatio < 0.74 || st.DropRatio > 0.76 || st.Asks != 1 {
		t.Fatalf("status %+v, want one ask at drop ratio 0.75", st)
	}
	select {
	case r := <-got:
		if r.App != "shop" || r.Ask != 1 || r.Current != 1 || r.Needed != 2 {
			t.Fatalf("webhook got %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("webhook not called")
	}
	// Spacing: no second ask within 2 minutes.
	driveProvisioning(a, &nowNs, 100, 200, 150)
	if st = a.Provisioning(); st.Asks != 1 {
		t.Fatalf("asks %d within the spacing", st.Asks)
	}
	// Metrics.
	for name, want := range map[string]float64{
		"sentry_provision_servers_needed":  2,
		"sentry_provision_servers_current": 1,
		"sentry_provision_requests_total":  1,
	} {
		if v := gatherOne(t, reg, name, "app", "shop"); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	if v := gatherOne(t, reg, "sentry_drop_ratio", "app", "shop"); v < 0.74 || v > 0.76 {
		t.Errorf("sentry_drop_ratio = %v", v)
	}
	if n, err := testutil.GatherAndCount(reg, "sentry_provision_webhook_total"); err != nil || n != 3 {
		t.Errorf("webhook series %d, %v", n, err)
	}

	// A reload that drops the webhook stops its goroutine; the trigger
	// keeps its last ask (no new ask inside the spacing).
	ac2 := *ac
	ac2.Provisioning.Webhook = nil
	if _, err := m.Build(&ac2, pool); err != nil {
		t.Fatal(err)
	}
	driveProvisioning(a, &nowNs, 5, 200, 150)
	if st = a.Provisioning(); st.Asks != 1 {
		t.Fatalf("asks %d after reload", st.Asks)
	}
}

// gatherOne returns the value of the series name{label=value} (a gauge's
// or a counter's): the one lookup the control tests share.
func gatherOne(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					if g := m.GetGauge(); g != nil {
						return g.GetValue()
					}
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no series %s{%s=%q}", name, label, value)
	return 0
}

// TestProvisioningHandler: /provisioning lists every app's advice and
// hands ?spare=N servers to the apps by revenue gain.
func TestProvisioningHandler(t *testing.T) {
	var nowNs atomic.Int64
	nowNs.Store(time.Unix(1000, 0).UnixNano())
	clock := func() time.Time { return time.Unix(0, nowNs.Load()) }
	m, _ := newManager(t, clock)
	m.noMonitor = true // driveProvisioning ticks; the monitor's own ticks would race it
	build := func(name string, revenue float64) *App {
		pool := &fakePool{}
		pool.healthy.Store(1)
		ac := testApp("batch")
		ac.Name = name
		ac.Admission.Batch.Parallelism = 1
		ac.Provisioning = policy.Provisioning{Target: 50 * time.Millisecond, Window: time.Minute, FDrop: 0.5,
			Spacing: time.Minute, MaxStep: 1, MinServers: 1, Revenue: revenue, TProv: time.Minute}
		a, err := m.Build(ac, pool)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	rich, poor := build("rich", 1), build("poor", 0.1)
	// rich offers 300/s (3 servers of 100/s needed), poor 200/s (2).
	for s := 0; s < 20; s++ {
		driveProvisioning(rich, &nowNs, 1, 300, 0)
		nowNs.Add(-int64(time.Second))
		driveProvisioning(poor, &nowNs, 1, 200, 0)
	}
	h := m.ProvisioningHandler()
	get := func(q string) (int, ProvisioningAdvice) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/provisioning"+q, nil))
		var adv ProvisioningAdvice
		if rec.Code == http.StatusOK {
			if err := json.Unmarshal(rec.Body.Bytes(), &adv); err != nil {
				t.Fatal(err)
			}
		}
		return rec.Code, adv
	}
	code, adv := get("?spare=5")
	if code != 200 || len(adv.Apps) != 2 || adv.Apps[0].App != "poor" || adv.Apps[1].App != "rich" {
		t.Fatalf("%d %+v", code, adv)
	}
	if adv.Apps[0].Needed != 2 || adv.Apps[1].Needed != 3 {
		t.Fatalf("needed poor %d rich %d, want 2 and 3", adv.Apps[0].Needed, adv.Apps[1].Needed)
	}
	// rich's next server earns 100/s × 1 × 60 s; poor's 100/s × 0.1 × 60 s.
	if g := adv.Apps[1].NextServerGain; g < 5900 || g > 6000.01 {
		t.Fatalf("rich's next-server gain %v, want ≈6000", g)
	}
	// 5 spares: rich takes 2 (to its demand of 3), poor 1 (to 2), and the
	// other 2 earn nothing and stay spare.
	if adv.Allocation["rich"] != 2 || adv.Allocation["poor"] != 1 {
		t.Fatalf("allocation %v, want rich 2, poor 1", adv.Allocation)
	}
	if code, adv := get(""); code != 200 || adv.Allocation != nil {
		t.Fatalf("without spare: %d %+v", code, adv.Allocation)
	}
	for _, q := range []string{"?spare=-1", "?spare=x", "?spare=100001"} {
		if code, _ := get(q); code != http.StatusBadRequest {
			t.Errorf("%s: status %d", q, code)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/provisioning", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", rec.Code)
	}
}

// TestProvisioningHangingWebhook: a webhook that never answers holds up
// neither the requests nor the monitor: asks are counted and queued (then
// dropped when the queue is full), ticks and decisions go on, and stopping
// the app ends the delivery goroutine.
func TestProvisioningHangingWebhook(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hook.Close()
	defer close(release)

	var nowNs atomic.Int64
	nowNs.Store(time.Unix(1000, 0).UnixNano())
	clock := func() time.Time { return time.Unix(0, nowNs.Load()) }
	m, _ := newManager(t, clock)
	m.noMonitor = true // driveProvisioning ticks; the monitor's own ticks would race it
	pool := &fakePool{}
	pool.healthy.Store(1)
	ac := testApp("batch")
	ac.Admission.Batch.Parallelism = 1
	ac.Provisioning = policy.Provisioning{Target: 50 * time.Millisecond, Window: 10 * time.Second, FDrop: 0.5,
		Spacing: time.Second, MaxStep: 1, MinServers: 1, TProv: time.Minute,
		Webhook: &policy.Webhook{URL: hook.URL, Timeout: time.Hour, Retries: 0}}
	a, err := m.Build(ac, pool)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// 60 ticks past the window: an ask every tick (spacing 1 s).
		driveProvisioning(a, &nowNs, 70, 50, 40)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("ticks blocked behind a hanging webhook")
	}
	st := a.Provisioning()
	if st.Asks < 50 {
		t.Fatalf("%d asks, want one per tick after the window", st.Asks)
	}
	sent, failed, dropped, ok := a.webhookCounts()
	if !ok || sent != 0 || failed != 0 || dropped < st.Asks-17 {
		t.Fatalf("webhook sent %d failed %d dropped %d of %d asks", sent, failed, dropped, st.Asks)
	}
	// Decisions go on meanwhile.
	if d := a.Admit(&admission.Request{Class: 0, S: time.Millisecond}); d.Verdict != admission.Admit {
		t.Fatalf("decision %+v on an idle farm", d)
	}
	for deadline := time.Now().Add(10 * time.Second); calls.Load() < 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the webhook was never called")
		}
	}
	stopped := make(chan struct{})
	go func() { m.Retain(nil); close(stopped) }() // stops the app and its webhook goroutine
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("stopping the app waited for the hanging webhook")
	}
}
