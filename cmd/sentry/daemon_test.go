package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sentry-proxy/sentry/internal/freeport"
	"github.com/sentry-proxy/sentry/policy"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

func parse(t *testing.T, yaml string) *policy.Snapshot {
	t.Helper()
	s, err := policy.Parse("<test>", []byte(yaml))
	if err != nil {
		t.Fatalf("policy: %v\n%s", err, yaml)
	}
	return s
}

func testDaemon(t *testing.T, snap *policy.Snapshot) *daemon {
	t.Helper()
	log := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: io.Discard})
	d, err := startDaemon(snap, log, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.shutdown(2*time.Second, false) })
	return d
}

// metric returns the value of one series in the daemon's registry.
func metric(t *testing.T, d *daemon, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := d.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			switch {
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			case m.Counter != nil:
				return m.GetCounter().GetValue(), true
			}
		}
	}
	return 0, false
}

func backendServer(t *testing.T, body string) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

// keepAlive is one client connection that sends requests in turn.
type keepAlive struct {
	c  net.Conn
	br *bufio.Reader
}

func dialKeepAlive(t *testing.T, addr string) *keepAlive {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &keepAlive{c: c, br: bufio.NewReader(c)}
}

func (k *keepAlive) get(t *testing.T) string {
	t.Helper()
	k.c.SetDeadline(time.Now().Add(3 * time.Second))
	fmt.Fprintf(k.c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(k.br, nil)
	if err != nil {
		t.Fatalf("keep-alive request: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Close {
		t.Fatalf("keep-alive request: %d, close=%v", resp.StatusCode, resp.Close)
	}
	return string(b)
}

// A reload that adds and then removes a listener leaves the other
// listener's connections alone; the removed address refuses connections at
// once; an app's backend pool (its ejected backend here) survives.
func TestReloadListenersAndLearnedState(t *testing.T) {
	be := backendServer(t, "one")
	dead := freeAddr(t)
	l1, l2 := freeAddr(t), freeAddr(t)
	base := fmt.Sprintf(`
admin: {listen: "off"}
apps:
  - name: web
    listen: %s
    backends: {static: [%s, %s]}
    health: {passive: {failures: 1, cooldown: 1h}}
`, l1, be, dead)
	withL2 := base + fmt.Sprintf(`
  - name: api
    listen: %s
    backends: {static: [%s]}
`, l2, be)
	d := testDaemon(t, parse(t, base))
	ka := dialKeepAlive(t, l1)
	for i := 0; i < 4; i++ { // the dead backend fails once, is ejected, the request retried
		if got := ka.get(t); got != "one" {
			t.Fatalf("got %q", got)
		}
	}
	healthy := map[string]string{"app": "web", "backend": dead}
	if v, _ := metric(t, d, "sentry_backend_healthy", healthy); v != 0 {
		t.Fatalf("dead backend not ejected")
	}

	if err := d.reload(parse(t, withL2)); err != nil {
		t.Fatal(err)
	}
	if got := ka.get(t); got != "one" {
		t.Errorf("old listener after adding one: %q", got)
	}
	if got := dialKeepAlive(t, l2).get(t); got != "one" {
		t.Errorf("new listener: %q", got)
	}
	if v, _ := metric(t, d, "sentry_backend_healthy", healthy); v != 0 {
		t.Errorf("reload brought the ejected backend back")
	}

	if err := d.reload(parse(t, base)); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", l2, time.Second); err == nil {
		c.Close()
		t.Errorf("removed listener %s still accepts", l2)
	}
	if got := ka.get(t); got != "one" {
		t.Errorf("old listener after removing one: %q", got)
	}
	if v, ok := metric(t, d, "sentry_policy_reloads_total", map[string]string{"result": "success"}); !ok || v != 2 {
		t.Errorf("reloads_total{success} = %v", v)
	}
}

// A policy whose new listener cannot be opened is refused whole: the old
// policy stays in force and the listeners the refused reload opened are
// closed again.
func TestReloadRefusesUnopenableListener(t *testing.T) {
	be := backendServer(t, "one")
	l1, l2 := freeAddr(t), freeAddr(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	old := parse(t, fmt.Sprintf("admin: {listen: \"off\"}\napps:\n  - name: web\n    listen: %s\n    backends: {static: [%s]}\n", l1, be))
	d := testDaemon(t, old)
	next := parse(t, fmt.Sprintf(`
admin: {listen: "off"}
apps:
  - name: web
    listen: [%s, %s, %s]
    backends: {static: [%s]}
`, l1, l2, busy.Addr(), be))
	if err := d.reload(next); err == nil || !strings.Contains(err.Error(), busy.Addr().String()) {
		t.Fatalf("reload: %v", err)
	}
	if d.proxy.Snapshot() != old {
		t.Errorf("the refused policy is in force")
	}
	if v, _ := metric(t, d, "sentry_policy_reloads_total", map[string]string{"result": "error"}); v != 1 {
		t.Errorf("reloads_total{error} = %v", v)
	}
	if v, _ := metric(t, d, "sentry_policy_last_reload_success", nil); v != 0 {
		t.Errorf("last_reload_success = %v", v)
	}
	ln, err := net.Listen("tcp", l2) // closed again
	if err != nil {
		t.Errorf("the refused reload left %s open: %v", l2, err)
	} else {
		ln.Close()
	}
	if got := dialKeepAlive(t, l1).get(t); got != "one" {
		t.Errorf("old listener: %q", got)
	}
}

// Moving the admin listener opens the new address and closes the old one.
func TestReloadMovesAdmin(t *testing.T) {
	be := backendServer(t, "one")
	l1, a1, a2 := freeAddr(t), freeAddr(t), freeAddr(t)
	pol := "admin: {listen: %s}\napps:\n  - name: web\n    listen: %s\n    backends: {static: [%s]}\n"
	d := testDaemon(t, parse(t, fmt.Sprintf(pol, a1, l1, be)))
	if err := d.reload(parse(t, fmt.Sprintf(pol, a2, l1, be))); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + a2 + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("new admin: %v %v", resp, err)
	}
	resp.Body.Close()
	if c, err := net.DialTimeout("tcp", a1, time.Second); err == nil {
		c.Close()
		t.Errorf("old admin address still accepts")
	}
}

func TestServerDiff(t *testing.T) {
	a := policy.Server{IdleTimeout: time.Minute, MaxConns: 10, ShutdownTimeout: time.Second}
	b := a
	if d := serverDiff(a, b); d != "" {
		t.Errorf("same: %q", d)
	}
	b.ShutdownTimeout = time.Hour // applies at once: not reported
	if d := serverDiff(a, b); d != "" {
		t.Errorf("shutdown_timeout only: %q", d)
	}
	b.IdleTimeout, b.MaxConns = 30*time.Second, 20
	if d := serverDiff(a, b); d != "idle_timeout: 1m0s -> 30s, max_conns: 10 -> 20" {
		t.Errorf("got %q", d)
	}
}

// TestH2CTurnedOn: a reload that turns h2c on for a listener it keeps is
// reported (it applies after a restart); a new listener, one already with
// h2c, and one turning it off are not.
func TestH2CTurnedOn(t *testing.T) {
	cur := &policy.Snapshot{Listeners: []*policy.Listener{
		{Addr: "127.0.0.1:1"}, {Addr: "127.0.0.1:2", H2C: true}, {Addr: "127.0.0.1:3", H2C: true}, {Addr: "127.0.0.1:5"},
	}}
	next := &policy.Snapshot{Listeners: []*policy.Listener{
		{Addr: "127.0.0.1:1", H2C: true}, {Addr: "127.0.0.1:2", H2C: true}, {Addr: "127.0.0.1:3"}, {Addr: "127.0.0.1:4", H2C: true},
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	opened := map[string]net.Listener{"127.0.0.1:4": ln} // new in this reload
	if got := h2cTurnedOn(cur, next, opened); len(got) != 1 || got[0] != "127.0.0.1:1" {
		t.Errorf("h2cTurnedOn = %q, want [127.0.0.1:1]", got)
	}
}

// TestTLSToggled: a reload that turns TLS on or off for a listener it
// keeps is reported (it applies after a restart); a new listener, an
// unchanged one and a certificate change are not.
func TestTLSToggled(t *testing.T) {
	tl := func(cert string) *policy.TLS { return &policy.TLS{CertFile: cert} }
	cur := &policy.Snapshot{Listeners: []*policy.Listener{
		{Addr: "127.0.0.1:1"}, {Addr: "127.0.0.1:2", TLS: tl("a")}, {Addr: "127.0.0.1:3", TLS: tl("a")}, {Addr: "127.0.0.1:5"},
	}}
	next := &policy.Snapshot{Listeners: []*policy.Listener{
		{Addr: "127.0.0.1:1", TLS: tl("a")}, {Addr: "127.0.0.1:2"}, {Addr: "127.0.0.1:3", TLS: tl("b")}, {Addr: "127.0.0.1:4", TLS: tl("a")}, {Addr: "127.0.0.1:5"},
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	opened := map[string]net.Listener{"127.0.0.1:4": ln} // new in this reload
	if got := strings.Join(tlsToggled(cur, next, opened), " "); got != "127.0.0.1:1 127.0.0.1:2" {
		t.Errorf("tlsToggled = %q, want 127.0.0.1:1 127.0.0.1:2", got)
	}
	if got := tlsToggled(nil, next, opened); got != nil {
		t.Errorf("first load: %q, want none", got)
	}
}

// The admin listener answers IP literals and localhost, refuses other
// names with 421 (DNS rebinding), and follows admin.allowed_hosts on reload.
func TestAdminHostAllowList(t *testing.T) {
	be := backendServer(t, "one")
	l1, a := freeAddr(t), freeAddr(t)
	pol := "admin: {listen: %s%s}\napps:\n  - name: web\n    listen: %s\n    backends: {static: [%s]}\n"
	d := testDaemon(t, parse(t, fmt.Sprintf(pol, a, "", l1, be)))
	get := func(host string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+a+"/metrics", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for host, want := range map[string]int{a: 200, "localhost": 200, "rebind.attacker.example": 421, "metrics.internal": 421} {
		if got := get(host); got != want {
			t.Errorf("default, Host %q: %d, want %d", host, got, want)
		}
	}
	if err := d.reload(parse(t, fmt.Sprintf(pol, a, ", allowed_hosts: [metrics.internal]", l1, be))); err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]int{a: 200, "localhost": 421, "metrics.internal:9901": 200} {
		if got := get(host); got != want {
			t.Errorf("after reload, Host %q: %d, want %d", host, got, want)
		}
	}
}

// TestAdminPprofOptIn: /debug/pprof/ is 404 until admin.pprof is on, and a
// reload turns it on and off.
func TestAdminPprofOptIn(t *testing.T) {
	be := backendServer(t, "one")
	l1, a := freeAddr(t), freeAddr(t)
	pol := "admin: {listen: %s%s}\napps:\n  - name: web\n    listen: %s\n    backends: {static: [%s]}\n"
	d := testDaemon(t, parse(t, fmt.Sprintf(pol, a, "", l1, be)))
	get := func(path string) int {
		t.Helper()
		resp, err := http.Get("http://" + a + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := get("/debug/pprof/"); c != 404 {
		t.Errorf("pprof off by default: %d, want 404", c)
	}
	if err := d.reload(parse(t, fmt.Sprintf(pol, a, ", pprof: true", l1, be))); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/cmdline"} {
		if c := get(p); c != 200 {
			t.Errorf("pprof on, %s: %d, want 200", p, c)
		}
	}
	if err := d.reload(parse(t, fmt.Sprintf(pol, a, "", l1, be))); err != nil {
		t.Fatal(err)
	}
	if c := get("/debug/pprof/heap"); c != 404 {
		t.Errorf("pprof off again: %d, want 404", c)
	}
}

// TestReadyRequiresBackend: with admin.ready_requires_backend, /readyz is
// 503 (naming the app) once the app's only backend is ejected; without it
// (the default) a farm outage leaves sentry ready.
func TestReadyRequiresBackend(t *testing.T) {
	dead := freeAddr(t) // nothing listens there
	l1, a1 := freeAddr(t), freeAddr(t)
	pol := "admin: {listen: %s, ready_requires_backend: %v}\napps:\n  - name: web\n    listen: %s\n    backends: {static: [%s]}\n"
	d := testDaemon(t, parse(t, fmt.Sprintf(pol, a1, true, l1, dead)))
	ready := func() (int, string) {
		resp, err := http.Get("http://" + a1 + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := ready(); code != 200 {
		t.Fatalf("readyz %d before any failure", code)
	}
	// A request finds the connect refused: the backend is ejected.
	if resp, err := http.Get("http://" + l1 + "/"); err == nil {
		resp.Body.Close()
	}
	if code, body := ready(); code != 503 || !strings.Contains(body, "web") {
		t.Errorf("readyz %d %q with no healthy backend, want 503 naming web", code, body)
	}
	if err := d.reload(parse(t, fmt.Sprintf(pol, a1, false, l1, dead))); err != nil {
		t.Fatal(err)
	}
	if code, _ := ready(); code != 200 {
		t.Errorf("readyz %d with ready_requires_backend off, want 200", code)
	}
}

// TestAdminConfig: /config on the admin listener shows the policy in
// force as a valid policy, defaults filled in, and follows a reload.
func TestAdminConfig(t *testing.T) {
	be := backendServer(t, "one")
	l1, a1 := freeAddr(t), freeAddr(t)
	pol := "admin: {listen: %s}\nserver: {max_conns: %d}\napps:\n  - name: web\n    listen: %s\n    backends: {static: [%s]}\n"
	d := testDaemon(t, parse(t, fmt.Sprintf(pol, a1, 77, l1, be)))
	get := func() string {
		resp, err := http.Get("http://" + a1 + "/config")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("/config: %d %s", resp.StatusCode, b)
		}
		return string(b)
	}
	if c := get(); !strings.Contains(c, "max_conns: 77") || !strings.Contains(c, "read_header_timeout: 10s") || !strings.Contains(c, "name: web") {
		t.Errorf("/config:\n%s", c)
	}
	// The same document as `sentry check -dump`: a valid policy that reads
	// back to itself.
	c := get()
	want, _ := policy.Dump(d.proxy.Snapshot())
	back, err := policy.Parse("config.yaml", []byte(c))
	if c != string(want) || err != nil {
		t.Fatalf("/config is not the dump of the policy in force, or not a policy (%v):\n%s", err, c)
	}
	if again, _ := policy.Dump(back); string(again) != c {
		t.Errorf("/config does not read back to itself:\n%s\n---\n%s", c, again)
	}
	if err := d.reload(parse(t, fmt.Sprintf(pol, a1, 88, l1, be))); err != nil {
		t.Fatal(err)
	}
	if c := get(); !strings.Contains(c, "max_conns: 88") {
		t.Errorf("/config after the reload:\n%s", c)
	}
}

// lockedBuf is a log output tests read while the daemon may write.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestEngineKey: server.engine is what the proxy serves with, shown in
// /config and in sentry_build_info's engine label; a reload that changes
// it leaves the engine running (the label, the proxy) and logs a warning
// saying it applies after a restart or an upgrade, while /config shows
// the policy reloaded.
func TestEngineKey(t *testing.T) {
	be := backendServer(t, "one")
	for _, c := range []struct {
		engine, other string
	}{{policy.EngineLoops, policy.EnginePortable}, {policy.EnginePortable, policy.EngineLoops}} {
		t.Run(c.engine, func(t *testing.T) {
			if c.engine == policy.EngineLoops && runtime.GOOS != "linux" {
				t.Skip("the event loops exist on Linux only")
			}
			l1, a1 := freeAddr(t), freeAddr(t)
			pol := "admin: {listen: %s}\nserver: {engine: %s}\napps:\n  - name: web\n    listen: %s\n    backends: {static: [%s]}\n"
			var logs lockedBuf
			log := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: &logs})
			d, err := startDaemon(parse(t, fmt.Sprintf(pol, a1, c.engine, l1, be)), log, nil, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer d.shutdown(2*time.Second, false)
			config := func() string {
				resp, err := http.Get("http://" + a1 + "/config")
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return string(b)
			}
			if d.proxy.Engine() != c.engine {
				t.Fatalf("proxy engine %q, want %q", d.proxy.Engine(), c.engine)
			}
			if cf := config(); !strings.Contains(cf, "\n  engine: "+c.engine+"\n") {
				t.Errorf("/config does not show engine: %s:\n%s", c.engine, cf)
			}
			if v, ok := metric(t, d, "sentry_build_info", map[string]string{"engine": c.engine}); !ok || v != 1 {
				t.Errorf("sentry_build_info{engine=%q} = %v (found %v)", c.engine, v, ok)
			}
			resp, err := http.Get("http://" + l1 + "/")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "one" {
				t.Errorf("served %q", b)
			}

			if err := d.reload(parse(t, fmt.Sprintf(pol, a1, c.other, l1, be))); err != nil {
				t.Fatal(err)
			}
			if d.proxy.Engine() != c.engine {
				t.Errorf("after the reload: proxy engine %q, want %q still", d.proxy.Engine(), c.engine)
			}
			if _, ok := metric(t, d, "sentry_build_info", map[string]string{"engine": c.engine}); !ok {
				t.Errorf("after the reload: sentry_build_info lost engine=%q", c.engine)
			}
			if cf := config(); !strings.Contains(cf, "\n  engine: "+c.other+"\n") {
				t.Errorf("/config after the reload does not show engine: %s:\n%s", c.other, cf)
			}
			if l := logs.String(); !strings.Contains(l, "server.engine changed: it applies after a restart or an upgrade") {
				t.Errorf("no warning for the engine change:\n%s", l)
			}
		})
	}
}
