package scenario

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

const withSentry = minimal + `sentry:
  sla: {targets: [{target: 500ms}]}
  admission: {mode: batch}
`

func TestSentryPolicy(t *testing.T) {
	sc, err := Parse("t.yaml", []byte(withSentry))
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []bool{false, true} {
		b, err := SentryPolicy(sc, "127.0.0.1:1000", "127.0.0.1:1001", []string{"127.0.0.1:2000", "127.0.0.1:2001"}, off)
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Admin struct{ Listen string }
			Apps  []struct {
				Name, Listen string
				Backends     struct{ Static []string }
				SLA          any `yaml:"sla"`
				Admission    struct{ Mode string }
			}
		}
		if err := yaml.Unmarshal(b, &p); err != nil {
			t.Fatalf("%v\n%s", err, b)
		}
		a := p.Apps[0]
		want := map[bool]string{false: "batch", true: "off"}[off]
		if p.Admin.Listen != "127.0.0.1:1001" || a.Name != "t" || a.Listen != "127.0.0.1:1000" ||
			strings.Join(a.Backends.Static, ",") != "127.0.0.1:2000,127.0.0.1:2001" || a.SLA == nil || a.Admission.Mode != want {
			t.Errorf("off=%v: policy\n%s", off, b)
		}
	}
	// sentry-nodegrade leaves the degradation section out, and only it.
	sc3, err := Parse("t.yaml", []byte(withSentry+"  degradation: {enabled: true, header: X-Load}\n"))
	if err != nil {
		t.Fatal(err)
	}
	with, _ := SentryPolicy(sc3, "127.0.0.1:1000", "127.0.0.1:1001", []string{"127.0.0.1:2000"}, false)
	without, _ := SentryPolicyNoDegrade(sc3, "127.0.0.1:1000", "127.0.0.1:1001", []string{"127.0.0.1:2000"})
	if !strings.Contains(string(with), "degradation:") || strings.Contains(string(without), "degradation") ||
		!strings.Contains(string(without), "mode: batch") {
		t.Errorf("policies with and without degradation:\n%s\n---\n%s", with, without)
	}
	// Without an admission section, off still writes mode off.
	sc2, _ := Parse("t.yaml", []byte(minimal))
	b, _ := SentryPolicy(sc2, "127.0.0.1:1000", "127.0.0.1:1001", []string{"127.0.0.1:2000"}, true)
	if !strings.Contains(string(b), `mode: "off"`) {
		t.Errorf("off policy without admission:\n%s", b)
	}
}

func TestPeerConfigsCheck(t *testing.T) {
	sc, err := Parse("t.yaml", []byte(withSentry))
	if err != nil {
		t.Fatal(err)
	}
	backends := []string{"127.0.0.1:2000", "127.0.0.1:2001"}
	t.Run("haproxy", func(t *testing.T) {
		if lookBin("haproxy") != nil {
			t.Skip("haproxy not installed")
		}
		dir := t.TempDir()
		cfg, err := HAProxyConfig(sc, "127.0.0.1:1000", backends, filepath.Join(dir, "pid"))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(cfg), "set-priority-class") {
			t.Errorf("one class, yet priority classes:\n%s", cfg)
		}
		// minimal's farm: 20 ms of service, SLA 1s (the load default).
		for _, want := range []string{"timeout queue 980ms", "server s1 127.0.0.1:2001 maxconn 4", "option http-keep-alive", "balance leastconn"} {
			if !strings.Contains(string(cfg), want) {
				t.Errorf("config lacks %q:\n%s", want, cfg)
			}
		}
		p := filepath.Join(dir, "haproxy.cfg")
		os.WriteFile(p, cfg, 0o644)
		if out, err := exec.Command("haproxy", "-c", "-f", p).CombinedOutput(); err != nil {
			t.Fatalf("haproxy -c: %v\n%s\n%s", err, out, cfg)
		}
	})
	t.Run("nginx", func(t *testing.T) {
		if lookBin("nginx") != nil {
			t.Skip("nginx not installed")
		}
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "tmp"), 0o755)
		cfg := NginxConfig(sc, "127.0.0.1:1000", backends, dir)
		for _, want := range []string{"limit_conn perserver 8;", "limit_conn_status 503;", "keepalive 32;", "server_name farm;"} {
			if !strings.Contains(string(cfg), want) {
				t.Errorf("config lacks %q:\n%s", want, cfg)
			}
		}
		p := filepath.Join(dir, "nginx.conf")
		os.WriteFile(p, cfg, 0o644)
		if out, err := exec.Command("nginx", "-t", "-q", "-p", dir, "-c", p, "-e", filepath.Join(dir, "error.log")).CombinedOutput(); err != nil {
			t.Fatalf("nginx -t: %v\n%s\n%s", err, out, cfg)
		}
	})
}

func TestCappedWriter(t *testing.T) {
	var b strings.Builder
	w := &cappedWriter{w: &b}
	big := strings.Repeat("x", maxLogBytes-1)
	if n, err := w.Write([]byte(big)); n != len(big) || err != nil {
		t.Fatal(n, err)
	}
	if n, err := w.Write([]byte("abc")); n != 3 || err != nil || b.Len() != maxLogBytes {
		t.Fatalf("n %d err %v len %d", n, err, b.Len())
	}
}

const prioritySentry = `sentry:
  classes:
    - name: gold
      rules:
        - path_prefix: /gold/
        - {path: /pay, methods: [post, PUT]}
    - name: silver
      period: 50ms
      rules:
        - headers: [{name: X-Tier, value: "it's silver"}, {name: X-App}]
        - cookies: [{name: plan, value: premium}, {name: session}]
        - {path_regexp: "^/item/[0-9]+$", hosts: [shop.example.com, "*.shop.example.com"]}
    - name: bronze
      default: true
    - name: batch
      rules:
        - {path_glob: "/static/**/*.css", networks: [10.0.0.0/8, 192.168.1.1]}
  sla: {targets: [{target: 100ms}]}
`

// The haproxy peer gives each sentry class its priority, matched by the
// class's rules, the default class first and then from the least
// important class to the most (the last match wins, so the first listed
// class that matches is the one a request gets, as in sentry).
func TestHAProxyPriorityClasses(t *testing.T) {
	src := minimal + prioritySentry
	sc, err := Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := HAProxyClasses(sc)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 4 || cs[0].Name != "gold" || cs[0].Priority != 0 || cs[3].Priority != 3 || !cs[2].Default || cs[0].Default {
		t.Fatalf("classes %+v", cs)
	}
	if got, want := cs[0].Cond(), "c0_gold_r0_path || c0_gold_r1_path c0_gold_r1_method"; got != want {
		t.Errorf("gold condition %q, want %q", got, want)
	}
	if got, want := cs[1].Cond(), "c1_silver_r0_hdr0 c1_silver_r0_hdr1 || c1_silver_r1_cook0 c1_silver_r1_cook1 || c1_silver_r2_path c1_silver_r2_host"; got != want {
		t.Errorf("silver condition %q, want %q", got, want)
	}
	cfg, err := HAProxyConfig(sc, "127.0.0.1:1000", []string{"127.0.0.1:2000", "127.0.0.1:2001"}, "/tmp/pid")
	if err != nil {
		t.Fatal(err)
	}
	text := string(cfg)
	for _, want := range []string{
		"acl c0_gold_r0_path path -m beg '/gold/'",
		"acl c0_gold_r1_path path -m str '/pay'",
		"acl c0_gold_r1_method method POST PUT",
		`acl c1_silver_r0_hdr0 req.fhdr(X-Tier,1) -m str 'it'\''s silver'`,
		"acl c1_silver_r0_hdr1 req.fhdr(X-App,1) -m len 1:",
		"acl c1_silver_r1_cook0 req.cook(plan) -m str 'premium'",
		"acl c1_silver_r1_cook1 req.cook(session) -m len 1:",
		"acl c1_silver_r2_path path -m reg '^/item/[0-9]+$'",
		"acl c1_silver_r2_host req.hdr(host),field(1,:),lower -m str 'shop.example.com'",
		"acl c1_silver_r2_host req.hdr(host),field(1,:),lower -m end '.shop.example.com'",
		"acl c3_batch_r0_path path -m reg '^/static(/[^/]*)*/[^/]*\\.css$'",
		"acl c3_batch_r0_src src 10.0.0.0/8 192.168.1.1",
		// 100 ms SLA (the fragment's target is not used; the load's
		// default SLA is 1s) minus 20 ms of service.
		"timeout queue 980ms",
		"server s1 127.0.0.1:2001 maxconn 4",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
	// Order: the default (bronze, 2) unconditionally, then batch (3),
	// silver (1), gold (0).
	var order []string
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "http-request set-priority-class") {
			order = append(order, strings.Fields(l)[2])
			if strings.Contains(l, "int(2)") && strings.Contains(l, " if ") {
				t.Errorf("the default class is set with a condition: %s", l)
			}
		}
	}
	if got := strings.Join(order, " "); got != "int(2) int(3) int(1) int(0)" {
		t.Errorf("set-priority-class order %q:\n%s", got, cfg)
	}
	if lookBin("haproxy") != nil {
		t.Skip("haproxy not installed: the config is not checked with haproxy -c")
	}
	p := filepath.Join(t.TempDir(), "haproxy.cfg")
	os.WriteFile(p, cfg, 0o644)
	if out, err := exec.Command("haproxy", "-c", "-f", p).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s\n%s", err, out, cfg)
	}
}

func TestHAProxyQueueTimeout(t *testing.T) {
	for _, tc := range []struct {
		name, farm, sla, peers string
		want                   time.Duration
	}{
		{"sla minus service", "10ms", "100ms", "", 90 * time.Millisecond},
		{"exponential: the mean", "exp:10ms", "100ms", "", 90 * time.Millisecond},
		{"service not below the sla", "200ms", "100ms", "", 100 * time.Millisecond},
		{"explicit", "10ms", "100ms", "peers: {queue_timeout: 40ms}\n", 40 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.peers + `name: t
farm: {servers: 1, slots: 2, routes: [{path: /, prefix: true, io: "` + tc.farm + `"}]}
classes:
  - {name: a, sla: ` + tc.sla + `, open: {rate: [{duration: 1s, from: 10}]}}
`
			sc, err := Parse("t.yaml", []byte(src))
			if err != nil {
				t.Fatal(err)
			}
			if got := HAProxyQueueTimeout(sc); got != tc.want {
				t.Errorf("timeout queue %v, want %v", got, tc.want)
			}
		})
	}
}

// Every scenario file's classes translate for the haproxy peer, and the
// multi-class ones get priorities.
// TestHAProxyHealthChecks: a fragment with health.active gives the
// haproxy peer the same checks (path, interval, rise, fall, timeout) and
// fastinter at a tenth of the interval; a scenario that kills a server
// gives it one retry on another server; without either, neither.
func TestHAProxyHealthChecks(t *testing.T) {
	src := minimal + `events: [{at: 2s, kill: 1}, {at: 5s, restart: 1}]
sentry:
  sla: {targets: [{target: 500ms}]}
  health: {active: {path: /healthz, interval: 1s, rise: 2}}
`
	sc, err := Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg, err := HAProxyConfig(sc, "127.0.0.1:1000", []string{"127.0.0.1:2000", "127.0.0.1:2001"}, filepath.Join(dir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"option httpchk GET /healthz", "timeout check 1000ms", "option redispatch", "retries 1",
		"server s1 127.0.0.1:2001 maxconn 4 check inter 1000ms fastinter 100ms rise 2 fall 3"} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
	if lookBin("haproxy") == nil {
		p := filepath.Join(dir, "haproxy.cfg")
		os.WriteFile(p, cfg, 0o644)
		if out, err := exec.Command("haproxy", "-c", "-f", p).CombinedOutput(); err != nil {
			t.Fatalf("haproxy -c: %v\n%s\n%s", err, out, cfg)
		}
	}
	plain, err := Parse("t.yaml", []byte(withSentry))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err = HAProxyConfig(plain, "127.0.0.1:1000", []string{"127.0.0.1:2000"}, filepath.Join(dir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(cfg), "check") || strings.Contains(string(cfg), "redispatch") || !strings.Contains(string(cfg), "retries 0") {
		t.Errorf("checks or retries without health.active or a kill:\n%s", cfg)
	}
}

func TestScenarioFilesHAProxy(t *testing.T) {
	files, _ := filepath.Glob("../scenarios/*.yaml")
	if len(files) == 0 {
		t.Fatal("no scenario files")
	}
	for _, f := range files {
		sc, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := HAProxyConfig(sc, "127.0.0.1:1000", []string{"127.0.0.1:2000"}, "/tmp/pid")
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		cs, _, _ := sc.sentryClasses()
		if got := strings.Count(string(cfg), "set-priority-class"); (len(cs) > 1) != (got > 0) {
			t.Errorf("%s: %d sentry classes, %d set-priority-class lines", f, len(cs), got)
		}
	}
}

// The priority classes the haproxy peer sets are the ones sentry would
// choose: haproxy runs the generated config (plus a response header
// showing prio_class) in front of a test backend, and requests of each
// kind come back with their class's priority.
func TestHAProxyPriorityLive(t *testing.T) {
	if lookBin("haproxy") != nil {
		t.Skip("haproxy not installed")
	}
	sc, err := Parse("t.yaml", []byte(minimal+prioritySentry))
	if err != nil {
		t.Fatal(err)
	}
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer backend.Close()
	listen, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg, err := HAProxyConfig(sc, listen, []string{strings.TrimPrefix(backend.URL, "http://")}, filepath.Join(dir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	show := "    http-after-response set-header X-Prio %[prio_class]\n    default_backend farm\n"
	cfg = []byte(strings.Replace(string(cfg), "    default_backend farm\n", show, 1))
	p := filepath.Join(dir, "haproxy.cfg")
	os.WriteFile(p, cfg, 0o644)
	proc, err := startProcess(filepath.Join(dir, "log"), "haproxy", "-db", "-f", p)
	if err != nil {
		t.Fatal(err)
	}
	defer proc.stop(syscall.SIGTERM, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := waitReady(ctx, proc, "http://"+listen+"/", 10*time.Second); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		t.Fatalf("haproxy: %v\n%s", err, log)
	}
	c := &http.Client{Timeout: 5 * time.Second}
	for _, tc := range []struct {
		name, method, path string
		hdr                map[string]string
		want               string
	}{
		{"gold by path prefix", "GET", "/gold/x", nil, "0"},
		{"gold by path and method", "POST", "/pay", nil, "0"},
		{"wrong method: the default (bronze)", "GET", "/pay", nil, "2"},
		{"silver by two headers, one with a quote", "GET", "/x", map[string]string{"X-Tier": "it's silver", "X-App": "a"}, "1"},
		{"one header of two: the default", "GET", "/x", map[string]string{"X-Tier": "it's silver"}, "2"},
		{"silver by cookies", "GET", "/x", map[string]string{"Cookie": "plan=premium; session=abc"}, "1"},
		{"silver by wildcard host (port dropped) and regexp", "GET", "/item/12", map[string]string{"Host": "a.Shop.example.com:8080"}, "1"},
		{"host right, regexp wrong: the default", "GET", "/item/x", map[string]string{"Host": "shop.example.com"}, "2"},
		{"glob matches but the network does not", "GET", "/static/a/b/c.css", nil, "2"},
		{"gold and silver match: gold, listed first", "GET", "/gold/y", map[string]string{"Cookie": "plan=premium; session=abc"}, "0"},
	} {
		req, _ := http.NewRequestWithContext(ctx, tc.method, "http://"+listen+tc.path, nil)
		for k, v := range tc.hdr {
			if k == "Host" {
				req.Host = v
				continue
			}
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if got := resp.Header.Get("X-Prio"); got != tc.want {
			t.Errorf("%s: priority class %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestPerSourceLimitConfigs: peers.per_source_rate hand-sets a per-source
// limit on the haproxy peer (a stick table on src, denied with 503 above
// the rate) and the nginx peer (limit_req keyed by the address, 503),
// both accepted by the real binaries; without it neither has one.
func TestPerSourceLimitConfigs(t *testing.T) {
	sc, err := Load("../scenarios/fairshare.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if sc.Peers.PerSourceRate != 200 {
		t.Fatalf("per_source_rate %v, want 200", sc.Peers.PerSourceRate)
	}
	plain, _ := Parse("t.yaml", []byte(withSentry))
	backends := []string{"127.0.0.1:2000", "127.0.0.1:2001"}
	t.Run("haproxy", func(t *testing.T) {
		dir := t.TempDir()
		cfg, err := HAProxyConfig(sc, "127.0.0.1:1000", backends, filepath.Join(dir, "pid"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"stick-table type ip size 100k expire 30s store http_req_rate(1s)", "http-request track-sc0 src", "deny_status 503 if { sc_http_req_rate(0) gt 200 }"} {
			if !strings.Contains(string(cfg), want) {
				t.Errorf("config lacks %q:\n%s", want, cfg)
			}
		}
		if c, _ := HAProxyConfig(plain, "127.0.0.1:1000", backends, filepath.Join(dir, "pid")); strings.Contains(string(c), "stick-table") {
			t.Errorf("a stick table without per_source_rate:\n%s", c)
		}
		if lookBin("haproxy") != nil {
			t.Skip("haproxy not installed")
		}
		p := filepath.Join(dir, "haproxy.cfg")
		os.WriteFile(p, cfg, 0o644)
		if out, err := exec.Command("haproxy", "-c", "-f", p).CombinedOutput(); err != nil {
			t.Fatalf("haproxy -c: %v\n%s\n%s", err, out, cfg)
		}
	})
	t.Run("nginx", func(t *testing.T) {
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "tmp"), 0o755)
		cfg := NginxConfig(sc, "127.0.0.1:1000", backends, dir)
		for _, want := range []string{"limit_req_zone $binary_remote_addr zone=persource:10m rate=200r/s;", "limit_req zone=persource burst=20 nodelay;", "limit_req_status 503;"} {
			if !strings.Contains(string(cfg), want) {
				t.Errorf("config lacks %q:\n%s", want, cfg)
			}
		}
		if c := NginxConfig(plain, "127.0.0.1:1000", backends, dir); strings.Contains(string(c), "limit_req") {
			t.Errorf("limit_req without per_source_rate:\n%s", c)
		}
		if lookBin("nginx") != nil {
			t.Skip("nginx not installed")
		}
		p := filepath.Join(dir, "nginx.conf")
		os.WriteFile(p, cfg, 0o644)
		if out, err := exec.Command("nginx", "-t", "-q", "-p", dir, "-c", p, "-e", filepath.Join(dir, "error.log")).CombinedOutput(); err != nil {
			t.Fatalf("nginx -t: %v\n%s\n%s", err, out, cfg)
		}
	})
}
