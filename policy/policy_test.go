package policy

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/classify"
	"github.com/sentry-proxy/sentry/estimator"
)

// TestDefaults spells out every default by hand (from the field docs in
// snapshot.go), rather than calling defaultApp, so a changed default fails
// here.
func TestDefaults(t *testing.T) {
	src := []byte("apps:\n  - name: web\n    backends:\n      static: [127.0.0.1:9001]\n")
	s, err := Parse("d.yaml", src)
	if err != nil {
		t.Fatal(err)
	}
	if s.Source != "d.yaml" || s.Hash != sha256.Sum256(src) {
		t.Errorf("Source %q Hash %x", s.Source, s.Hash)
	}
	if want := (Admin{Listen: "127.0.0.1:9901"}); !reflect.DeepEqual(s.Admin, want) {
		t.Errorf("Admin = %+v, want %+v", s.Admin, want)
	}
	if want := (Log{Level: "info", Format: "text", Access: false, AccessLog: AccessLog{Output: "stdout", Format: "text", Rate: 1000, RejectRate: 100}}); s.Log != want {
		t.Errorf("Log = %+v, want %+v", s.Log, want)
	}
	wantServer := Server{
		Engine:                EngineLoops,
		ReadHeaderTimeout:     10 * time.Second,
		BodyTimeout:           5 * time.Minute,
		IdleTimeout:           60 * time.Second,
		WriteTimeout:          60 * time.Second,
		RequestBuffer:         1 << 20,
		RequestBufferTotal:    256 << 20,
		ResponseBuffer:        1 << 20,
		ResponseBufferTotal:   256 << 20,
		ResponseTempFile:      1 << 30,
		ResponseTempFileTotal: 1 << 30,
		BodyMinRate:           1024,
		MaxHeaderBytes:        16384,
		MaxConns:              100000,
		ShutdownTimeout:       30 * time.Second,
	}
	if s.Server != wantServer {
		t.Errorf("Server = %+v, want %+v", s.Server, wantServer)
	}
	if len(s.Apps) != 1 {
		t.Fatalf("%d apps", len(s.Apps))
	}
	want := &App{
		Index:    0,
		Name:     "web",
		Listen:   []string{"127.0.0.1:8080"},
		Backends: Backends{Static: []string{"127.0.0.1:9001"}, Protocol: ProtoHTTP1},
		Balance:  LeastLoaded,
		Health: Health{
			Active:  nil,
			Passive: PassiveHealth{Failures: 3, Cooldown: 10 * time.Second},
		},
		Timeouts:           Timeouts{Connect: 2 * time.Second, Response: 30 * time.Second},
		MaxBodyBytes:       0,
		MaxConnsPerBackend: 1024,
		RequestIDHeader:    "X-Request-Id",
		TraceContext:       TracePass,
		Reject:             Reject{Status: 503, Body: "sentry: overloaded, retry later\n", RetryAfter: time.Second, GRPCStatus: GRPCUnavailable},
		Classes:            []classify.ClassConfig{{Name: "default", Period: 0, Default: true}},
		ServerTiming:       ServerTiming{Strip: true},
		Provisioning: Provisioning{Window: 5 * time.Minute, FDrop: 0.5, Spacing: 5 * time.Minute, MaxStep: 1,
			MinServers: 1, TProv: 30 * time.Minute},
		SLA: SLA{
			Percentile: 95,
			Targets: []SLABand{
				{Below: 1000, Target: time.Second},
				{Below: 10000, Target: 2 * time.Second},
				{Below: 0, Target: 3 * time.Second},
			},
			Revenue: 0,
		},
		Estimator: estimator.Config{
			HalfLife:      30 * time.Second,
			QueueHalfLife: 5 * time.Second,
			MaxKeys:       10000,
			Alpha:         1,
			FitAlpha:      false,
			Edges: []time.Duration{
				time.Millisecond, 4 * time.Millisecond, 16 * time.Millisecond, 64 * time.Millisecond,
				256 * time.Millisecond, time.Second, 4 * time.Second,
			},
			RateWindow:    time.Second,
			RateSmoothing: 5 * time.Second,
			Refresh:       100 * time.Millisecond,
			ProbeInterval: time.Second,
		},
		Admission: Admission{
			Mode:         "auto",
			Reserve:      true,
			ReserveFloor: 0.25,
			Batch:        BatchAdmission{QueueCap: 1024, AllOrNothing: false, ImpliedQueue: true, Parallelism: 0},
			Threshold:    ThresholdAdmission{Recompute: time.Second, Capacity: 0},
			Switch:       ModeSwitch{CPUHigh: 0.85, CPULow: 0.6, Hold: 2 * time.Second, RevertAfter: 30 * time.Second},
			Adaptive: AdaptiveAdmission{NReq: 100, Timeout: time.Second, Alpha: 0.7, ErrD: 0, ErrI: -0.5, AdjD: 1.2, AdjI: 2,
				CI: -0.1, RateMin: 0.05, RateMax: 5000, AdjLo: 10, LCThresh: 20, Burst: 100 * time.Millisecond, Rule: AdaptiveRuleScaled, InFlightLimit: true},
			Fallback:  Fallback{Enabled: true, MissWindows: 3, NoTimingShare: 0.5, ReturnWindows: 3, ReturnRatio: 0.8},
			FairShare: FairShare{Enabled: true, Client: FairClientAddress, IPv6Prefix: 64, MaxClients: 16384, Rotate: 10 * time.Minute},
		},
		Termination: Termination{Alpha: 4, LowWater: 0.05, HighWater: 0.15, Interval: 10 * time.Second, MinArrivals: 100, MaxRise: 2},
		Degradation: Degradation{Header: "Sentry-Load"},
	}
	if !reflect.DeepEqual(s.Apps[0], want) {
		t.Errorf("app =\n%+v\nwant\n%+v", *s.Apps[0], *want)
	}
	// The library's defaults are what the snapshot shows.
	if e, err := estimator.New(estimator.Config{}, []string{"default"}); err != nil || !reflect.DeepEqual(e.Config(), s.Apps[0].Estimator) {
		t.Errorf("estimator defaults: %v\n%+v\nwant the library's\n%+v", err, s.Apps[0].Estimator, e.Config())
	}
	if len(s.Listeners) != 1 {
		t.Fatalf("%d listeners", len(s.Listeners))
	}
	l := s.Listeners[0]
	if l.Addr != "127.0.0.1:8080" || l.TLS != nil || l.Default != s.Apps[0] || len(l.Apps) != 1 || l.Apps[0] != s.Apps[0] {
		t.Errorf("listener = %+v", *l)
	}
}

// TestEverySetting sets every key to a value other than its default and
// checks that each arrives in the snapshot.
func TestEverySetting(t *testing.T) {
	dir := t.TempDir()
	writePair(t, dir, "site")
	src := `
admin:
  listen: off
log:
  level: debug
  format: json
  access: true
server:
  engine: portable
  read_header_timeout: 3s
  body_timeout: 1m
  idle_timeout: 90s
  write_timeout: 2m
  request_buffer: 64KiB
  request_buffer_total: 0
  response_buffer: 64KiB
  response_buffer_total: 0
  response_temp_file: 10MiB
  response_temp_file_total: 0
  response_temp_dir: /var/lib/sentry/tmp
  body_min_rate: 100
  max_header_bytes: 32KiB
  max_conns: 500
  shutdown_timeout: 5s
apps:
  - name: shop-1
    listen: ["[::1]:8443", 127.0.0.1:8443]
    hosts: [Shop.Example.com, "[::1]:8443", 10.0.0.1]
    tls: {cert: site.pem, key: site.key}
    trusted_proxies: [10.0.0.0/8, 192.168.1.10, "2001:db8::/32"]
    backends:
      dns: {name: shop.svc.cluster.local, port: 8080, interval: 2s, server: "[::1]:5353"}
    balance: p2c
    health:
      active: {path: /healthz, interval: 2s, timeout: 500ms, rise: 1, fall: 5}
      passive: {failures: 0, cooldown: 1m}
    timeouts: {connect: 100ms, response: 5s}
    max_body_bytes: 10MiB
    response_buffering: "off"
    max_conns_per_backend: 64
    request_id_header: x-trace-id
    trace_context: generate
    reject:
      status: 429
      body: ""
      retry_after: 3s
      grpc_status: resource_exhausted
    classes:
      - name: gold
        period: 50ms
        rules:
          - path: /exact
            methods: [get, HEAD]
            hosts: [Shop.Example.com, "*.example.org", "[2001:DB8::1]", 10.0.0.1]
            headers: [{name: x-tier, value: gold}, {name: X-Beta}, {name: user-agent, regexp: bot}]
            cookies: [{name: session}, {name: plan, value: premium}]
            networks: [10.0.0.0/8, 192.0.2.7]
            key: /exact-key
          - path_prefix: /api/
          - path_glob: /static/**/*.css
          - path_regexp: ^/item/[0-9]+$
          - {grpc_service: shop.Cart, grpc_method: "Add*"}
      - name: rest
        period: 50ms
        default: true
      - name: last
        rules: [{path: /last}]
        terminate: {lower: 250ms, upper: 4s, methods: [get, post]}
    server_timing: {strip: false}
    provisioning:
      target: 150ms
      window: 2m
      f_drop: 0.4
      spacing: 3m
      max_step: 2
      min_servers: 2
      max_servers: 12
      webhook: {url: "https://scaler.example.com/ask", timeout: 3s, retries: 4}
      revenue: 0.5
      t_prov: 15m
    partition: {index: 2, count: 4}
    sla:
      percentile: 99.9
      targets:
        - {below: 10, target: 100ms}
        - {below: 20.5, target: 200ms}
        - {below: 1e3, target: 1s}
        - {target: 5s}
      revenue: 0.25
    estimator:
      half_life: 1m
      queue_half_life: 2s
      max_keys: 500
      alpha: 0.5
      fit_alpha: true
      buckets: [2ms, 20ms, 200ms]
      rate_window: 500ms
      rate_smoothing: 10s
      probe_interval: 2s
    admission:
      mode: threshold
      reserve: false
      reserve_floor: 0.1
      batch: {queue_cap: 64, all_or_nothing: true, implied_queue: false, parallelism: 8}
      threshold: {recompute: 250ms, capacity: 3.5}
      switch: {cpu_high: 1, cpu_low: 0.25, hold: 5s, revert_after: 1m}
      adaptive:
        nreq: 50
        timeout: 500ms
        alpha: 0.5
        err_d: 0.1
        err_i: -0.4
        adj_d: 1.5
        adj_i: 3
        c_i: -0.2
        rate_min: 1
        rate_max: 900
        adj_lo: 4
        lc_thresh: 7
        cut_all_lower: true
        shared: true
        rule: paper
        in_flight_limit: false
        burst: 250ms
        initial_rate: 40
      fallback: {enabled: false, miss_windows: 5, no_timing_share: 0.75, return_windows: 20, return_ratio: 0.6}
      fair_share: {enabled: true, client: header, name: X-Api-Key, ipv6_prefix: 56, max_clients: 4096, rotate: 2m}
    termination: {alpha: 2, low_water: 0, high_water: 0.5, interval: 3s, min_arrivals: 7, max_rise: 0}
    degradation: {enabled: true, header: x-farm-load}
`
	s, err := Parse(filepath.Join(dir, "p.yaml"), []byte(strings.TrimPrefix(src, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	if s.Admin.Listen != "" {
		t.Errorf("admin listen %q, want disabled", s.Admin.Listen)
	}
	if want := (Log{Level: "debug", Format: "json", Access: true, AccessLog: AccessLog{Output: "stdout", Format: "text", Rate: 1000, RejectRate: 100}}); s.Log != want {
		t.Errorf("Log = %+v", s.Log)
	}
	wantServer := Server{Engine: EnginePortable, ReadHeaderTimeout: 3 * time.Second, BodyTimeout: time.Minute, IdleTimeout: 90 * time.Second,
		WriteTimeout: 2 * time.Minute, RequestBuffer: 64 << 10, RequestBufferTotal: 0, BodyMinRate: 100,
		ResponseBuffer: 64 << 10, ResponseTempFile: 10 << 20, ResponseTempDir: "/var/lib/sentry/tmp",
		MaxHeaderBytes: 32 << 10, MaxConns: 500, ShutdownTimeout: 5 * time.Second}
	if s.Server != wantServer {
		t.Errorf("Server = %+v, want %+v", s.Server, wantServer)
	}
	tlsPair := &TLS{CertFile: filepath.Join(dir, "site.pem"), KeyFile: filepath.Join(dir, "site.key")}
	want := &App{
		Name:   "shop-1",
		Listen: []string{"[::1]:8443", "127.0.0.1:8443"},
		Hosts:  []string{"shop.example.com", "[::1]", "10.0.0.1"},
		TLS:    tlsPair,
		TrustedProxies: []netip.Prefix{
			netip.MustParsePrefix("10.0.0.0/8"),
			netip.MustParsePrefix("192.168.1.10/32"),
			netip.MustParsePrefix("2001:db8::/32"),
		},
		Backends: Backends{DNS: &DNS{Name: "shop.svc.cluster.local", Port: 8080, Interval: 2 * time.Second, Server: "[::1]:5353"}, Protocol: ProtoHTTP1},
		Balance:  P2C,
		Health: Health{
			Active:  &ActiveHealth{Path: "/healthz", Interval: 2 * time.Second, Timeout: 500 * time.Millisecond, Rise: 1, Fall: 5},
			Passive: PassiveHealth{Failures: 0, Cooldown: time.Minute},
		},
		Timeouts:             Timeouts{Connect: 100 * time.Millisecond, Response: 5 * time.Second},
		MaxBodyBytes:         10 << 20,
		ResponseBufferingOff: true,
		MaxConnsPerBackend:   64,
		RequestIDHeader:      "X-Trace-Id",
		TraceContext:         TraceGenerate,
		Reject:               Reject{Status: 429, Body: "", RetryAfter: 3 * time.Second, GRPCStatus: GRPCResourceExhausted},
		Classes: []classify.ClassConfig{
			{Name: "gold", Period: 50 * time.Millisecond, Rules: []classify.Rule{
				{
					Path:    "/exact",
					Methods: []string{"GET", "HEAD"},
					Hosts:   []string{"shop.example.com", "*.example.org", "[2001:db8::1]", "10.0.0.1"},
					Headers: []classify.HeaderMatch{{Name: "X-Tier", Value: "gold"}, {Name: "X-Beta"}, {Name: "User-Agent", Regexp: "bot"}},
					Cookies: []classify.CookieMatch{{Name: "session"}, {Name: "plan", Value: "premium"}},
					Networks: []netip.Prefix{
						netip.MustParsePrefix("10.0.0.0/8"),
						netip.MustParsePrefix("192.0.2.7/32"),
					},
					Key: "/exact-key",
				},
				{PathPrefix: "/api/"},
				{PathGlob: "/static/**/*.css"},
				{PathRegexp: "^/item/[0-9]+$"},
				{GRPCService: "shop.Cart", GRPCMethod: "Add*"},
			}},
			{Name: "rest", Period: 50 * time.Millisecond, Default: true},
			{Name: "last", Rules: []classify.Rule{{Path: "/last"}}},
		},
		ServerTiming: ServerTiming{Strip: false},
		Provisioning: Provisioning{Target: 150 * time.Millisecond, Window: 2 * time.Minute, FDrop: 0.4, Spacing: 3 * time.Minute,
			MaxStep: 2, MinServers: 2, MaxServers: 12, Revenue: 0.5, TProv: 15 * time.Minute,
			Webhook: &Webhook{URL: "https://scaler.example.com/ask", Timeout: 3 * time.Second, Retries: 4}},
		Partition: Partition{Index: 2, Count: 4},
		SLA: SLA{
			Percentile: 99.9,
			Targets: []SLABand{
				{Below: 10, Target: 100 * time.Millisecond},
				{Below: 20.5, Target: 200 * time.Millisecond},
				{Below: 1000, Target: time.Second},
				{Target: 5 * time.Second},
			},
			Revenue: 0.25,
		},
		Estimator: estimator.Config{
			HalfLife:      time.Minute,
			QueueHalfLife: 2 * time.Second,
			MaxKeys:       500,
			Alpha:         0.5,
			FitAlpha:      true,
			Edges:         []time.Duration{2 * time.Millisecond, 20 * time.Millisecond, 200 * time.Millisecond},
			RateWindow:    500 * time.Millisecond,
			RateSmoothing: 10 * time.Second,
			ProbeInterval: 2 * time.Second,
			Refresh:       100 * time.Millisecond, // no key; the default
		},
		Admission: Admission{
			Mode:         "threshold",
			Reserve:      false,
			ReserveFloor: 0.1,
			Batch:        BatchAdmission{QueueCap: 64, AllOrNothing: true, ImpliedQueue: false, Parallelism: 8},
			Threshold:    ThresholdAdmission{Recompute: 250 * time.Millisecond, Capacity: 3.5},
			Switch:       ModeSwitch{CPUHigh: 1, CPULow: 0.25, Hold: 5 * time.Second, RevertAfter: time.Minute},
			Adaptive: AdaptiveAdmission{NReq: 50, Timeout: 500 * time.Millisecond, Alpha: 0.5, ErrD: 0.1, ErrI: -0.4, AdjD: 1.5, AdjI: 3,
				CI: -0.2, RateMin: 1, RateMax: 900, AdjLo: 4, LCThresh: 7, CutAllLower: true, Shared: true, Burst: 250 * time.Millisecond, InitialRate: 40, Rule: AdaptiveRulePaper},
			Fallback:  Fallback{MissWindows: 5, NoTimingShare: 0.75, ReturnWindows: 20, ReturnRatio: 0.6},
			FairShare: FairShare{Enabled: true, Client: FairClientHeader, Name: "X-Api-Key", IPv6Prefix: 56, MaxClients: 4096, Rotate: 2 * time.Minute},
		},
		Terminate:   []*Terminate{nil, nil, {Lower: 250 * time.Millisecond, Upper: 4 * time.Second, Methods: []string{"GET", "POST"}}},
		Termination: Termination{Alpha: 2, LowWater: 0, HighWater: 0.5, Interval: 3 * time.Second, MinArrivals: 7, MaxRise: 0},
		Degradation: Degradation{Enabled: true, Header: "X-Farm-Load"},
	}
	if !reflect.DeepEqual(s.Apps[0], want) {
		t.Errorf("app =\n%+v\nwant\n%+v", *s.Apps[0], *want)
	}
	if len(s.Listeners) != 2 || s.Listeners[0].TLS == nil || *s.Listeners[0].TLS != *tlsPair {
		t.Errorf("listeners: %+v", s.Listeners)
	}
}

// TestActiveHealthDefaults: an empty active section turns checks on with
// every default.
func TestActiveHealthDefaults(t *testing.T) {
	s := mustParse(t, `
apps:
  - name: a
    backends: {static: ["h:1"]}
    health: {active: {}}
`)
	want := ActiveHealth{Path: "/", Interval: 5 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3}
	if a := s.Apps[0].Health.Active; a == nil || *a != want {
		t.Errorf("active = %+v, want %+v", a, want)
	}
	s = mustParse(t, `
apps:
  - name: a
    backends: {dns: {name: svc, port: 80}}
    health:
`)
	if s.Apps[0].Health.Active != nil {
		t.Errorf("active checks on without an active section")
	}
	if d := s.Apps[0].Backends.DNS; d == nil || d.Interval != 5*time.Second || s.Apps[0].Backends.Static != nil {
		t.Errorf("dns = %+v", d)
	}
}

// TestListeners checks the derivation: grouping by address in first-seen
// order, apps in policy order, the default app, TLS per listener.
func TestListeners(t *testing.T) {
	dir := t.TempDir()
	cert, key := writePair(t, dir, "x")
	src := strings.NewReplacer("$CERT", cert, "$KEY", key).Replace(`
apps:
  - name: a
    listen: [":8080", 127.0.0.1:9000]
    hosts: [A.com:8080]
  - name: b
    listen: ":8080"
  - name: c
    listen: 127.0.0.1:9000
    hosts: [c.com]
  - name: d
    listen: "[::1]:9443"
    tls: {cert: $CERT, key: $KEY}
  - name: e
    listen: "[::1]:9443"
    hosts: [e.com]
    tls: {cert: $CERT, key: $KEY}
`)
	src = strings.ReplaceAll(src, "\n  - name:", "\n  - backends: {static: [\"h:1\"]}\n    name:")
	s := mustParse(t, src)
	app := map[string]*App{}
	for i, a := range s.Apps {
		if a.Index != i {
			t.Errorf("app %s has Index %d, want %d", a.Name, a.Index, i)
		}
		app[a.Name] = a
	}
	if got := app["a"].Hosts; !reflect.DeepEqual(got, []string{"a.com"}) {
		t.Errorf("hosts = %q, want [a.com]", got)
	}
	type want struct {
		addr string
		tls  bool
		apps []string
		def  string
	}
	wants := []want{
		{":8080", false, []string{"a", "b"}, "b"},
		{"127.0.0.1:9000", false, []string{"a", "c"}, ""},
		{"[::1]:9443", true, []string{"d", "e"}, "d"},
	}
	if len(s.Listeners) != len(wants) {
		t.Fatalf("%d listeners, want %d", len(s.Listeners), len(wants))
	}
	for i, w := range wants {
		l := s.Listeners[i]
		if l.Addr != w.addr {
			t.Errorf("listener %d: addr %q, want %q", i, l.Addr, w.addr)
		}
		if (l.TLS != nil) != w.tls {
			t.Errorf("listener %s: TLS %+v", l.Addr, l.TLS)
		}
		var names []string
		for _, a := range l.Apps {
			names = append(names, a.Name)
		}
		if !reflect.DeepEqual(names, w.apps) {
			t.Errorf("listener %s: apps %q, want %q", l.Addr, names, w.apps)
		}
		switch {
		case w.def == "" && l.Default != nil:
			t.Errorf("listener %s: default %q, want none", l.Addr, l.Default.Name)
		case w.def != "" && l.Default != app[w.def]:
			t.Errorf("listener %s: default %v, want %q", l.Addr, l.Default, w.def)
		}
	}
	if s.Listeners[2].TLS.CertFile != cert || s.Listeners[2].TLS.KeyFile != key {
		t.Errorf("tls = %+v", s.Listeners[2].TLS)
	}
}

// TestNormalisation: addresses and hosts are put in one canonical form.
func TestNormalisation(t *testing.T) {
	s := mustParse(t, `
apps:
  - name: a
    listen: [":08080", "LOCALHOST:81", "[::FFFF:1.2.3.4]:82"]
    hosts: [WWW.Example.COM, "www.example.org:443", "[2001:DB8::1]", "2001:db8::2"]
    backends: {static: ["Backend.Local:0080", "[2001:db8::1]:80"]}
`)
	a := s.Apps[0]
	if want := []string{":8080", "localhost:81", "[::ffff:1.2.3.4]:82"}; !reflect.DeepEqual(a.Listen, want) {
		t.Errorf("listen = %q, want %q", a.Listen, want)
	}
	if want := []string{"www.example.com", "www.example.org", "[2001:db8::1]", "[2001:db8::2]"}; !reflect.DeepEqual(a.Hosts, want) {
		t.Errorf("hosts = %q, want %q", a.Hosts, want)
	}
	if want := []string{"backend.local:80", "[2001:db8::1]:80"}; !reflect.DeepEqual(a.Backends.Static, want) {
		t.Errorf("backends = %q, want %q", a.Backends.Static, want)
	}
}

// TestExplicitZero: a zero written in the file is kept, not replaced by the
// default.
func TestExplicitZero(t *testing.T) {
	s := mustParse(t, `
server: {write_timeout: 0}
apps:
  - name: a
    backends: {static: ["h:1"]}
    max_body_bytes: 0
    health: {passive: {failures: 0}}
    reject: {body: ""}
    classes: [{name: only, period: 0s}]
    sla: {revenue: 0, targets: [{target: 2s}]}
    admission:
      batch: {parallelism: 0}
      threshold: {capacity: 0}
`)
	a := s.Apps[0]
	if s.Server.WriteTimeout != 0 || a.MaxBodyBytes != 0 || a.Health.Passive.Failures != 0 || a.Reject.Body != "" {
		t.Errorf("zeros not kept: %+v %+v", s.Server, *a)
	}
	if len(a.Classes) != 1 || a.Classes[0].Period != 0 || a.SLA.Revenue != 0 ||
		!reflect.DeepEqual(a.SLA.Targets, []SLABand{{Below: 0, Target: 2 * time.Second}}) ||
		a.Admission.Batch.Parallelism != 0 || a.Admission.Threshold.Capacity != 0 {
		t.Errorf("zeros not kept: %+v %+v %+v", a.Classes, a.SLA, a.Admission)
	}
	if a.Health.Passive.Cooldown != 10*time.Second {
		t.Errorf("cooldown = %v, want the default 10s", a.Health.Passive.Cooldown)
	}
}

// TestMergeKeys: anchors, aliases and merge keys, with explicit keys
// winning, and x- keys at the top level to hold the anchors.
func TestMergeKeys(t *testing.T) {
	s := mustParse(t, `
x-common: &common
  backends: {static: ["h:1"]}
  timeouts: {connect: 1s}
  balance: round_robin
apps:
  - <<: *common
    name: a
    timeouts: {connect: 3s}
  - <<: [{balance: p2c}, *common]
    name: b
    listen: 127.0.0.1:8081
`)
	a, b := s.Apps[0], s.Apps[1]
	if a.Timeouts.Connect != 3*time.Second || a.Timeouts.Response != 30*time.Second || a.Balance != RoundRobin {
		t.Errorf("a: %+v %v", a.Timeouts, a.Balance)
	}
	if b.Timeouts.Connect != time.Second || b.Balance != P2C || !reflect.DeepEqual(b.Backends.Static, []string{"h:1"}) {
		t.Errorf("b: %+v %v %v", b.Timeouts, b.Balance, b.Backends)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	writePair(t, dir, "c")
	data := []byte("apps:\n  - name: a\n    tls: {cert: c.pem, key: c.key}\n    backends: {static: [\"h:1\"]}\n")
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.Source != path || s.Hash != sha256.Sum256(data) {
		t.Errorf("Source %q, Hash %x", s.Source, s.Hash)
	}
	if want := (TLS{CertFile: filepath.Join(dir, "c.pem"), KeyFile: filepath.Join(dir, "c.key")}); s.Apps[0].TLS == nil || *s.Apps[0].TLS != want {
		t.Errorf("TLS = %+v, want %+v (relative to the policy file)", s.Apps[0].TLS, want)
	}

	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want ErrNotExist", err)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("apps: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(bad)
	if es := asErrors(t, err); len(es) != 1 || es[0].File != bad || es[0].Line != 1 {
		t.Errorf("Load(bad) = %v", err)
	}
}

// TestSnapshotsIndependent: two parses share nothing mutable, with each
// other or with the libraries' defaults.
func TestSnapshotsIndependent(t *testing.T) {
	src := "apps: [{name: a, backends: {static: [\"h:1\"]}}]"
	s1 := mustParse(t, src)
	s2 := mustParse(t, src)
	a1 := s1.Apps[0]
	a1.Backends.Static[0] = "changed:1"
	a1.Listen[0] = "changed:2"
	a1.Classes[0].Name = "changed"
	a1.SLA.Targets[0].Target = time.Hour
	a1.Estimator.Edges[0] = time.Hour
	a2 := s2.Apps[0]
	if a2.Backends.Static[0] != "h:1" || a2.Listen[0] != DefaultListen || a2.Classes[0].Name != DefaultClassName ||
		a2.SLA.Targets[0].Target != time.Second || a2.Estimator.Edges[0] != time.Millisecond {
		t.Errorf("snapshots share slices")
	}
	if estimator.DefaultEdges[0] != time.Millisecond {
		t.Errorf("a snapshot shares estimator.DefaultEdges")
	}
}

// TestSharedClasses: a class list written once under an anchor serves
// several apps, each with its own copy.
func TestSharedClasses(t *testing.T) {
	s := mustParse(t, `
x-classes: &classes
  - name: gold
    rules: [{headers: [{name: X-Tier, value: gold}]}]
  - name: rest
apps:
  - name: a
    backends: {static: ["h:1"]}
    classes: *classes
  - name: b
    listen: 127.0.0.1:8081
    backends: {static: ["h:1"]}
    classes: *classes
`)
	a, b := s.Apps[0], s.Apps[1]
	if !reflect.DeepEqual(a.Classes, b.Classes) || len(a.Classes) != 2 || a.Classes[0].Rules[0].Headers[0].Name != "X-Tier" {
		t.Fatalf("classes: %+v %+v", a.Classes, b.Classes)
	}
	a.Classes[0].Rules[0].Headers[0].Value = "changed"
	if b.Classes[0].Rules[0].Headers[0].Value != "gold" {
		t.Errorf("apps share a rule")
	}
}

func TestFromFlags(t *testing.T) {
	s, err := FromFlags("", []string{"127.0.0.1:9001, 127.0.0.1:9002", "backend.local:80"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if s.Source != "<flags>" || s.Admin.Listen != DefaultAdminListen || len(s.Apps) != 1 || len(s.Listeners) != 1 {
		t.Fatalf("snapshot = %+v", s)
	}
	a := s.Apps[0]
	if a.Name != "default" || !reflect.DeepEqual(a.Listen, []string{DefaultListen}) ||
		!reflect.DeepEqual(a.Backends.Static, []string{"127.0.0.1:9001", "127.0.0.1:9002", "backend.local:80"}) {
		t.Errorf("app = %+v", *a)
	}
	if s.Listeners[0].Default != a || s.Listeners[0].Addr != DefaultListen {
		t.Errorf("listener = %+v", *s.Listeners[0])
	}
	if a.Admission.Mode != "auto" || len(a.Classes) != 1 || a.Classes[0].Name != DefaultClassName || !a.ServerTiming.Strip {
		t.Errorf("quick policy: admission %+v classes %+v server timing %+v", a.Admission, a.Classes, a.ServerTiming)
	}
	// Same defaults as a file.
	f := mustParse(t, "apps: [{name: default, backends: {static: [127.0.0.1:9001, 127.0.0.1:9002, backend.local:80]}}]")
	if !reflect.DeepEqual(a, f.Apps[0]) || s.Server != f.Server || s.Log != f.Log || !reflect.DeepEqual(s.Admin, f.Admin) {
		t.Errorf("FromFlags differs from the equivalent file:\n%+v\n%+v", *a, *f.Apps[0])
	}
	// Hash is deterministic and depends on the inputs.
	s2, _ := FromFlags("", []string{"127.0.0.1:9001,127.0.0.1:9002,backend.local:80"}, "")
	s3, _ := FromFlags("", []string{"127.0.0.1:9001"}, "")
	if s.Hash != s2.Hash || s.Hash == s3.Hash || s.Hash == [32]byte{} {
		t.Errorf("hashes: %x %x %x", s.Hash, s2.Hash, s3.Hash)
	}

	s, err = FromFlags(":8080,127.0.0.1:9090", []string{"h:1"}, "off")
	if err != nil {
		t.Fatal(err)
	}
	if s.Admin.Listen != "" || !reflect.DeepEqual(s.Apps[0].Listen, []string{":8080", "127.0.0.1:9090"}) || len(s.Listeners) != 2 {
		t.Errorf("snapshot = %+v %+v", s.Admin, s.Apps[0].Listen)
	}
}

func TestFromFlagsErrors(t *testing.T) {
	tests := []struct {
		listen   string
		backends []string
		admin    string
		want     []string
	}{
		{"", nil, "", []string{"-backend: at least one backend address (host:port) is required"}},
		{"", []string{" , "}, "", []string{"-backend: at least one backend"}},
		{"", []string{"h"}, "", []string{`-backend: invalid address "h": missing port in address`}},
		{"", []string{"h:1", "h:1"}, "", []string{"-backend: h:1 is given twice"}},
		{"localhost", []string{"h:1"}, "", []string{`-listen: invalid address "localhost"`}},
		{":1,:1", []string{"h:1"}, "", []string{"-listen: :1 is given twice"}},
		{"", []string{"h:1"}, "9901", []string{`-admin: invalid address "9901"`}},
		{"", []string{"h:1"}, "127.0.0.1:8080", []string{"admin.listen 127.0.0.1:8080 conflicts with the app listen address 127.0.0.1:8080"}},
		{"x:y", []string{":1"}, "z", []string{"-listen:", "-backend:", "-admin:"}},
	}
	for _, tc := range tests {
		s, err := FromFlags(tc.listen, tc.backends, tc.admin)
		if err == nil || s != nil {
			t.Errorf("FromFlags(%q, %q, %q) = %v, %v; want errors", tc.listen, tc.backends, tc.admin, s, err)
			continue
		}
		es := asErrors(t, err)
		if len(es) != len(tc.want) {
			t.Errorf("FromFlags(%q, %q, %q): %d errors, want %d:\n%v", tc.listen, tc.backends, tc.admin, len(es), len(tc.want), err)
			continue
		}
		for _, e := range es {
			if e.File != "<flags>" || e.Line != 0 || !strings.HasPrefix(e.Error(), "<flags>: ") {
				t.Errorf("error %#v: want File <flags>, no line", e)
			}
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("FromFlags(%q, %q, %q):\n%v\nwant %q", tc.listen, tc.backends, tc.admin, err, w)
			}
		}
	}
}

// exampleFiles lists deploy/examples/*.yaml.
func exampleFiles(t testing.TB) []string {
	files, err := filepath.Glob(filepath.Join("..", "deploy", "examples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestExamples: every shipped example is a valid policy.
func TestExamples(t *testing.T) {
	files := exampleFiles(t)
	if len(files) < 5 {
		t.Fatalf("found %d examples in deploy/examples, want at least 5", len(files))
	}
	sawTLS := false
	for _, f := range files {
		s, err := Load(f)
		if err != nil {
			t.Errorf("%s:\n%v", f, err)
			continue
		}
		checkInvariants(t, s)
		for _, l := range s.Listeners {
			sawTLS = sawTLS || l.TLS != nil
		}
	}
	if !sawTLS {
		t.Errorf("no example uses tls")
	}
}

// docsExample returns the YAML block under "## Complete example" in
// docs/policy.md.
func docsExample(t testing.TB) []byte {
	data, err := os.ReadFile(filepath.Join("..", "docs", "policy.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := bytes.Cut(data, []byte("\n## Complete example\n"))
	if !ok {
		t.Fatal("docs/policy.md has no Complete example section")
	}
	_, rest, ok = bytes.Cut(rest, []byte("```yaml\n"))
	if !ok {
		t.Fatal("no yaml block in the Complete example section")
	}
	block, _, ok := bytes.Cut(rest, []byte("\n```"))
	if !ok {
		t.Fatal("unterminated yaml block")
	}
	return block
}

// TestDocsExample: the reference's complete example is a valid policy, and
// really does set every key (each default is written out).
func TestDocsExample(t *testing.T) {
	src := filepath.Join("..", "deploy", "examples", "docs-policy-md.yaml") // for relative TLS names
	s, err := Parse(src, docsExample(t))
	if err != nil {
		t.Fatalf("docs/policy.md example:\n%v", err)
	}
	if len(s.Apps) != 2 || len(s.Listeners) != 1 || s.Listeners[0].TLS == nil {
		t.Fatalf("apps %d listeners %d", len(s.Apps), len(s.Listeners))
	}
	// The example writes the tuning sections out at their defaults; they
	// must be the defaults.
	shop, def := s.Apps[0], defaultApp()
	if !reflect.DeepEqual(shop.ServerTiming, def.ServerTiming) || !reflect.DeepEqual(shop.SLA, def.SLA) ||
		!reflect.DeepEqual(shop.Estimator, def.Estimator) || !reflect.DeepEqual(shop.Admission, def.Admission) {
		t.Errorf("docs example's tuning sections differ from the defaults:\n%+v %+v %+v %+v\nwant\n%+v %+v %+v %+v",
			shop.ServerTiming, shop.SLA, shop.Estimator, shop.Admission, def.ServerTiming, def.SLA, def.Estimator, def.Admission)
	}
	if len(shop.Classes) < 3 {
		t.Errorf("docs example has %d classes; it should show several", len(shop.Classes))
	}
	// The second app leaves every new section out.
	api := s.Apps[1]
	if !reflect.DeepEqual(api.Classes, def.Classes) || api.Admission.Mode != "auto" {
		t.Errorf("api app: %+v %+v", api.Classes, api.Admission)
	}
}

func TestAdminAllowedHosts(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want []string
	}{
		{"", nil}, // default: localhost and the machine's name (status.AllowHosts)
		{"admin: {allowed_hosts: []}\n", []string{}},
		{"admin: {allowed_hosts: }\n", []string{}}, // null: an empty list, as for every list
		{"admin: {allowed_hosts: [Metrics.Internal:9901, \"[::1]\", 10.0.0.1]}\n", []string{"metrics.internal", "[::1]", "10.0.0.1"}},
		{"admin: {allowed_hosts: [\"*\"]}\n", []string{AnyHost}},
	} {
		s := mustParse(t, tc.yaml+"apps: [{name: a, backends: {static: [\"h:1\"]}}]")
		if !reflect.DeepEqual(s.Admin.AllowedHosts, tc.want) {
			t.Errorf("%q: allowed hosts %#v, want %#v", tc.yaml, s.Admin.AllowedHosts, tc.want)
		}
	}
}

// TestAccessLogMapping: log.access as a mapping sets every field; the
// bool form keeps the defaults.
func TestAccessLogMapping(t *testing.T) {
	src := `
log:
  access: {enabled: true, output: /var/log/sentry/access.log, format: json, rate: 0, reject_rate: 5}
apps: [{name: a, backends: {static: ["h:1"]}}]
`
	s, err := Parse("p.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := Log{Level: "info", Format: "text", Access: true, AccessLog: AccessLog{Output: "/var/log/sentry/access.log", Format: "json", Rate: 0, RejectRate: 5}}
	if s.Log != want {
		t.Errorf("Log = %+v, want %+v", s.Log, want)
	}
}

// TestListenerH2C: h2c is off by default and, when every app on a plain
// address sets it, the listener serves h2c.
func TestListenerH2C(t *testing.T) {
	s := mustParse(t, `
apps:
  - name: a
    listen: 127.0.0.1:9000
    hosts: [a.example]
    h2c: true
    backends: {static: ["h:1"]}
  - name: b
    listen: 127.0.0.1:9000
    h2c: true
    backends: {static: ["h:1"]}
  - name: c
    listen: 127.0.0.1:9001
    backends: {static: ["h:1"]}
`)
	got := map[string]bool{}
	for _, l := range s.Listeners {
		got[l.Addr] = l.H2C
	}
	if !got["127.0.0.1:9000"] || got["127.0.0.1:9001"] {
		t.Errorf("listener h2c = %v, want 9000 on and 9001 off", got)
	}
	if !s.Apps[0].H2C || s.Apps[2].H2C {
		t.Errorf("apps h2c = %v %v, want true false", s.Apps[0].H2C, s.Apps[2].H2C)
	}
}
