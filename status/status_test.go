package status

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sentry-proxy/sentry/policy"
)

// testRegistry holds sentry's families as the proxy and the control
// manager export them, with known values.
type testRegistry struct {
	reg       *prometheus.Registry
	decisions *prometheus.CounterVec
	requests  *prometheus.CounterVec
	inflight  *prometheus.GaugeVec
}

func newTestRegistry(t *testing.T) *testRegistry {
	t.Helper()
	r := &testRegistry{reg: prometheus.NewRegistry()}
	r.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sentry_admission_decisions_total", Help: "h"}, []string{"app", "class", "verdict"})
	r.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sentry_requests_total", Help: "h"}, []string{"app", "backend", "code"})
	r.inflight = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sentry_backend_inflight", Help: "h"}, []string{"app", "backend"})
	healthy := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sentry_backend_healthy", Help: "h"}, []string{"app", "backend"})
	rate := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sentry_estimator_arrival_rate", Help: "h"}, []string{"app", "class"})
	pct := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sentry_class_admitted_percentile_seconds", Help: "h"}, []string{"app", "class"})
	target := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sentry_sla_target_seconds", Help: "h"}, []string{"app"})
	mode := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sentry_admission_mode", Help: "h"}, []string{"app", "mode"})
	cpu := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sentry_cpu_utilization_ratio", Help: "h"}, []string{"app"})
	other := prometheus.NewCounter(prometheus.CounterOpts{Name: "go_unrelated_total", Help: "h"})
	r.reg.MustRegister(r.decisions, r.requests, r.inflight, healthy, rate, pct, target, mode, cpu, other)

	for _, c := range []string{"gold", "silver", "bronze"} {
		for _, v := range []string{"admitted", "rejected_test", "queue_full"} {
			r.decisions.WithLabelValues("shop", c, v)
		}
	}
	r.decisions.WithLabelValues("shop", "gold", "admitted").Add(100)
	r.decisions.WithLabelValues("shop", "bronze", "admitted").Add(40)
	r.decisions.WithLabelValues("shop", "bronze", "rejected_test").Add(50)
	r.decisions.WithLabelValues("shop", "bronze", "queue_full").Add(10)
	r.requests.WithLabelValues("shop", "10.0.0.1:80", "2xx").Add(70)
	r.requests.WithLabelValues("shop", "10.0.0.2:80", "2xx").Add(70)
	r.requests.WithLabelValues("shop", "none", "5xx").Add(60)
	r.inflight.WithLabelValues("shop", "10.0.0.1:80").Set(3)
	r.inflight.WithLabelValues("shop", "10.0.0.2:80").Set(0)
	healthy.WithLabelValues("shop", "10.0.0.1:80").Set(1)
	healthy.WithLabelValues("shop", "10.0.0.2:80").Set(0)
	rate.WithLabelValues("shop", "gold").Set(12.5)
	rate.WithLabelValues("shop", "silver").Set(0)
	rate.WithLabelValues("shop", "bronze").Set(80)
	pct.WithLabelValues("shop", "gold").Set(0.12)
	pct.WithLabelValues("shop", "silver").Set(0)
	pct.WithLabelValues("shop", "bronze").Set(0.61)
	target.WithLabelValues("shop").Set(0.5)
	mode.WithLabelValues("shop", "batch").Set(1)
	mode.WithLabelValues("shop", "threshold").Set(0)
	mode.WithLabelValues("shop", "off").Set(0)
	cpu.WithLabelValues("shop").Set(0.25)
	// A second app with only backend series (no admission stack).
	r.inflight.WithLabelValues("api", "10.0.1.1:80").Set(1)
	healthy.WithLabelValues("api", "10.0.1.1:80").Set(1)
	return r
}

// testPolicy lists shop's classes most important first, and api before shop.
func testPolicy(t *testing.T) func() *policy.Snapshot {
	t.Helper()
	snap, err := policy.Parse("test.yaml", []byte(`
apps:
  - name: api
    listen: 127.0.0.1:8081
    backends: {static: [10.0.1.1:80]}
  - name: shop
    backends: {static: [10.0.0.1:80, 10.0.0.2:80]}
    classes:
      - name: gold
        rules: [{path_prefix: /checkout}]
      - name: silver
        rules: [{path_prefix: /search}]
      - name: bronze
        default: true
    sla:
      percentile: 99
`))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	return func() *policy.Snapshot { return snap }
}

func getJSON(t *testing.T, h http.Handler) (*Snapshot, *http.Response) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/status.json", nil))
	resp := rec.Result()
	if resp.StatusCode != 200 {
		t.Fatalf("status.json: %d", resp.StatusCode)
	}
	var s Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatalf("decode: %v", err)
	}
	return &s, resp
}

func TestStatusJSON(t *testing.T) {
	r := newTestRegistry(t)
	h := Handler(r.reg, Options{Policy: testPolicy(t)})
	s, resp := getJSON(t, h)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("content type %q", ct)
	}
	if d := time.Since(time.UnixMilli(int64(s.Time * 1000))); d < 0 || d > time.Minute {
		t.Errorf("time %v is %v ago", s.Time, d)
	}
	if len(s.Apps) != 2 || s.Apps[0].Name != "api" || s.Apps[1].Name != "shop" {
		t.Fatalf("apps not in policy order: %+v", s.Apps)
	}
	api := s.Apps[0]
	if api.Mode != "" || len(api.Classes) != 0 || len(api.Backends) != 1 || !api.Backends[0].Healthy || api.Backends[0].Inflight != 1 {
		t.Errorf("api: %+v", api)
	}
	if api.Percentile != 95 {
		t.Errorf("api percentile %v, want the default 95", api.Percentile)
	}
	shop := s.Apps[1]
	if shop.Mode != "batch" || shop.TargetSeconds != 0.5 || shop.Percentile != 99 || shop.CPU == nil || *shop.CPU != 0.25 || shop.Requests != 200 {
		t.Errorf("shop: mode %q target %v pct %v cpu %v requests %v", shop.Mode, shop.TargetSeconds, shop.Percentile, shop.CPU, shop.Requests)
	}
	var names []string
	for _, c := range shop.Classes {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != "gold,silver,bronze" {
		t.Fatalf("classes %v, want policy order gold,silver,bronze", names)
	}
	gold, bronze := shop.Classes[0], shop.Classes[2]
	if gold.Decisions["admitted"] != 100 || gold.ArrivalRate != 12.5 || gold.PercentileSeconds != 0.12 {
		t.Errorf("gold: %+v", gold)
	}
	if bronze.Decisions["admitted"] != 40 || bronze.Decisions["rejected_test"] != 50 || bronze.Decisions["queue_full"] != 10 ||
		bronze.ArrivalRate != 80 || bronze.PercentileSeconds != 0.61 {
		t.Errorf("bronze: %+v", bronze)
	}
	if len(shop.Backends) != 2 {
		t.Fatalf("backends: %+v", shop.Backends)
	}
	b1, b2 := shop.Backends[0], shop.Backends[1]
	if b1.Addr != "10.0.0.1:80" || !b1.Healthy || b1.Inflight != 3 || b1.Requests != 70 ||
		b2.Addr != "10.0.0.2:80" || b2.Healthy || b2.Inflight != 0 || b2.Requests != 70 {
		t.Errorf("backends: %+v", shop.Backends)
	}

	// Without a policy: sorted by name, percentile 95.
	s, _ = getJSON(t, Handler(r.reg, Options{}))
	if s.Apps[1].Name != "shop" || s.Apps[1].Classes[0].Name != "bronze" || s.Apps[1].Percentile != 95 {
		t.Errorf("no policy: %+v", s.Apps[1])
	}
}

func TestRatesAndText(t *testing.T) {
	r := newTestRegistry(t)
	opts := Options{Policy: testPolicy(t)}
	prev, err := Collect(r.reg, opts)
	if err != nil {
		t.Fatal(err)
	}
	r.decisions.WithLabelValues("shop", "gold", "admitted").Add(20)
	r.decisions.WithLabelValues("shop", "bronze", "admitted").Add(10)
	r.decisions.WithLabelValues("shop", "bronze", "rejected_test").Add(30)
	r.requests.WithLabelValues("shop", "10.0.0.1:80", "2xx").Add(30)
	cur, err := Collect(r.reg, opts)
	if err != nil {
		t.Fatal(err)
	}
	prev.Time = cur.Time - 2 // two seconds apart
	rates := Rates(prev, cur)
	shop := rates[1]
	gold, bronze := shop.Classes[0], shop.Classes[2]
	if gold.Arrival != 10 || gold.Admitted != 10 || gold.Rejected != 0 {
		t.Errorf("gold rates %+v", gold)
	}
	if bronze.Arrival != 20 || bronze.Admitted != 5 || bronze.Rejected != 15 || bronze.Reasons["rejected_test"] != 15 || len(bronze.Reasons) != 1 {
		t.Errorf("bronze rates %+v", bronze)
	}
	if shop.Requests != 15 || shop.Backends[0].Requests != 15 || shop.Backends[1].Requests != 0 {
		t.Errorf("request rates %+v", shop)
	}
	// A counter reset counts from zero, never negative.
	prev.Apps[1].Classes[0].Decisions["admitted"] = 1e9
	if g := Rates(prev, cur)[1].Classes[0]; g.Admitted != 60 {
		t.Errorf("after reset: %+v", g)
	}

	var sb strings.Builder
	if err := WriteText(&sb, prev, cur); err != nil {
		t.Fatal(err)
	}
	out := sb.String()
	for _, want := range []string{"app shop  mode batch  target 500ms (p99)", "gold", "silver", "bronze", "610ms", "OVER", "test 15",
		"10.0.0.1:80", "yes", "no", "cpu 25%"} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^\s+bronze\s+20\.0\s+5\.0\s+15\.0\s+610ms\s+OVER`).MatchString(out) {
		t.Errorf("bronze row wrong:\n%s", out)
	}
	// No previous snapshot: gauges only, no panic.
	sb.Reset()
	if err := WriteText(&sb, nil, cur); err != nil || !strings.Contains(sb.String(), "gold") {
		t.Errorf("first frame: %v\n%s", err, sb.String())
	}
}

func TestPage(t *testing.T) {
	h := Handler(prometheus.NewRegistry(), Options{Title: "demo <&>", Interval: 2 * time.Second})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/status", nil))
	resp := rec.Result()
	body, _ := io.ReadAll(resp.Body)
	page := string(body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("CSP %q", csp)
	}
	if len(body) > 15<<10 {
		t.Errorf("page is %d bytes, want < 15 KiB", len(body))
	}
	if !strings.Contains(page, "<title>demo &lt;&amp;&gt; status</title>") || !strings.Contains(page, "IV=2000,") {
		t.Errorf("title or interval not filled in")
	}
	if strings.Contains(page, "{{") {
		t.Errorf("unreplaced placeholder")
	}
	// Nothing is loaded from elsewhere: no absolute or protocol-relative
	// URL anywhere, no src attribute at all, no @import or url().
	for _, bad := range []string{"http:", "https:", "//cdn", "src=", "@import", "url(", "<link"} {
		if strings.Contains(strings.ToLower(page), bad) {
			t.Errorf("page contains %q", bad)
		}
	}
	for _, m := range regexp.MustCompile(`href="([^"]*)"`).FindAllStringSubmatch(page, -1) {
		if !strings.HasPrefix(m[1], "/") || strings.HasPrefix(m[1], "//") {
			t.Errorf("href %q is not a local path", m[1])
		}
	}
	for _, want := range []string{`<html lang="en">`, "<noscript>", `href="/status.json"`, `href="/metrics"`, `id="updated"`, `fetch("/status.json"`, "<canvas"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("HEAD", "/status", nil))
	if rec.Code != 200 || rec.Body.Len() != 0 {
		t.Errorf("HEAD: %d, %d bytes", rec.Code, rec.Body.Len())
	}
}

func TestRoutes(t *testing.T) {
	mux := http.NewServeMux()
	for p, h := range Routes(prometheus.NewRegistry(), Options{}) {
		mux.Handle(p, h)
	}
	mux.Handle("/metrics", http.NotFoundHandler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		method, path string
		code         int
		ctype, loc   string
	}{
		{"GET", "/", 302, "", "/status"},
		{"GET", "/status", 200, "text/html; charset=utf-8", ""},
		{"GET", "/status.json", 200, "application/json", ""},
		{"GET", "/status/x", 404, "", ""},
		{"GET", "/other", 404, "", ""},
		{"POST", "/status.json", 405, "", ""},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code || (tc.ctype != "" && resp.Header.Get("Content-Type") != tc.ctype) || resp.Header.Get("Location") != tc.loc {
			t.Errorf("%s %s: %d %q location %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Location"))
		}
	}
	// An empty registry gives an empty list, not null.
	resp, err := c.Get(srv.URL + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"apps":[]`) {
		t.Errorf("empty: %s", b)
	}
}

// TestCollectLogs: the log writers' state (sentry_log_*) reaches
// /status.json, so a stuck log reader shows there (docs/operations.md).
func TestCollectLogs(t *testing.T) {
	reg := prometheus.NewRegistry()
	stalled := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sentry_log_output_stalled_seconds"}, []string{"log"})
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sentry_log_lines_dropped_total"}, []string{"log", "reason"})
	reg.MustRegister(stalled, dropped)
	stalled.WithLabelValues("process").Set(0)
	stalled.WithLabelValues("access").Set(12.5)
	dropped.WithLabelValues("access", "buffer_full").Add(40)
	dropped.WithLabelValues("access", "write_error").Add(2)
	s, err := Collect(reg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Logs) != 2 || s.Logs[0].Name != "access" || s.Logs[0].StalledSeconds != 12.5 || s.Logs[0].Dropped != 42 || s.Logs[1].Name != "process" {
		t.Fatalf("logs %+v", s.Logs)
	}
}

// TestCollectOverrides: the backend's operator state comes from
// sentry_backend_state, and the runtime overrides from Options.Overrides;
// without them the list is empty, not null.
func TestCollectOverrides(t *testing.T) {
	reg := prometheus.NewRegistry()
	state := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sentry_backend_state", Help: "h"}, []string{"app", "backend", "state"})
	reg.MustRegister(state)
	for s, v := range map[string]float64{"enabled": 0, "draining": 1, "disabled": 0} {
		state.WithLabelValues("shop", "10.0.0.1:80", s).Set(v)
	}
	s, err := Collect(reg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Apps) != 1 || len(s.Apps[0].Backends) != 1 || s.Apps[0].Backends[0].State != "draining" {
		t.Fatalf("apps %+v", s.Apps)
	}
	if body, _ := json.Marshal(s); !strings.Contains(string(body), `"overrides":[]`) {
		t.Fatalf("no empty overrides: %s", body)
	}
	ov := []Override{{Kind: "backend", App: "shop", Backend: "10.0.0.1:80", Value: "draining", Policy: "enabled", By: "127.0.0.1:5000", At: "2025-01-01T00:00:00Z"}}
	s, _ = Collect(reg, Options{Overrides: func() []Override { return ov }})
	body, _ := json.Marshal(s)
	if !strings.Contains(string(body), `"overrides":[{"kind":"backend","app":"shop","backend":"10.0.0.1:80","value":"draining","policy":"enabled","by":"127.0.0.1:5000"`) {
		t.Fatalf("overrides: %s", body)
	}
}

// TestCollectTopClients: an app's top talkers come from Options.TopClients
// into /status.json (an empty list without them), and the page has their
// table.
func TestCollectTopClients(t *testing.T) {
	reg := prometheus.NewRegistry()
	state := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sentry_backend_state", Help: "h"}, []string{"app", "backend", "state"})
	reg.MustRegister(state)
	state.WithLabelValues("shop", "10.0.0.1:80", "enabled").Set(1)
	s, err := Collect(reg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if body, _ := json.Marshal(s); !strings.Contains(string(body), `"top_clients":[]`) {
		t.Fatalf("no empty top_clients: %s", body)
	}
	top := map[string][]TopClient{"shop": {{Class: "web", Client: "127.0.0.2 #0a1b2c3d", Rate: 6000, Admitted: 590, Standing: "turn"}}, "gone": {{Class: "x"}}}
	s, _ = Collect(reg, Options{TopClients: func() map[string][]TopClient { return top }})
	body, _ := json.Marshal(s)
	if !strings.Contains(string(body), `"top_clients":[{"class":"web","client":"127.0.0.2 #0a1b2c3d","rate":6000,"admitted":590,"standing":"turn"}]`) || len(s.Apps) != 1 {
		t.Fatalf("top clients: %s", body)
	}
	if !strings.Contains(pageHTML, `class="top"`) || !strings.Contains(pageHTML, "a.top_clients") {
		t.Fatal("the page has no top talkers' table")
	}
}
