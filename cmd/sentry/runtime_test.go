package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/sentry-proxy/sentry/adminapi"
	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/status"
)

// lockedBuffer is a log sink safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runtimeRig is a daemon with an admin listener and two backends, a and
// b, whose log is kept.
type runtimeRig struct {
	d      *daemon
	admin  string // the admin listener's address
	listen string // the app's
	a, b   string // the backends' addresses
	log    *lockedBuffer
	policy string // the policy's text
}

const runtimePolicy = `
admin: {listen: %s%s}
log: {level: info}
apps:
  - name: web
    listen: %s
    balance: round_robin
    backends: {static: [%s, %s]}
    admission: {mode: %s}
`

func newRuntimeRig(t *testing.T, mode, adminExtra string) *runtimeRig {
	t.Helper()
	r := &runtimeRig{admin: freeAddr(t), listen: freeAddr(t), a: backendServer(t, "a"), b: backendServer(t, "b"), log: &lockedBuffer{}}
	r.policy = fmt.Sprintf(runtimePolicy, r.admin, adminExtra, r.listen, r.a, r.b, mode)
	log := hclog.New(&hclog.LoggerOptions{Name: "sentry", Level: hclog.Info, Output: r.log})
	d, err := startDaemon(parse(t, r.policy), log, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.shutdown(2e9, false) })
	r.d = d
	return r
}

// call makes a real HTTP request to the admin listener and decodes the
// JSON answer into out (when not nil).
func (r *runtimeRig) call(t *testing.T, method, path string, hdr map[string]string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+r.admin+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(path, "/runtime") && ct != "application/json" {
		t.Fatalf("%s %s: Content-Type %q", method, path, ct)
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, body, err)
		}
	}
	return resp.StatusCode
}

func (r *runtimeRig) get(t *testing.T, path string) string {
	t.Helper()
	resp, err := http.Get("http://" + r.admin + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// through sends n requests through the proxy and counts the answers by
// body.
func (r *runtimeRig) through(t *testing.T, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		resp, err := http.Get("http://" + r.listen + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got[fmt.Sprint(resp.StatusCode, " ", string(b))]++
	}
	return got
}

// checkConfig checks /config: the policy in force as the dump writes it,
// followed by the overrides (when want is not empty), a valid policy
// that dumps back to the policy part.
func (r *runtimeRig) checkConfig(t *testing.T, want ...string) {
	t.Helper()
	cfg := r.get(t, "/config")
	plain, err := policy.Dump(r.d.proxy.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cfg, string(plain)) {
		t.Fatalf("/config does not begin with the dump:\n%s", cfg)
	}
	rest := cfg[len(plain):]
	if len(want) == 0 && rest != "" {
		t.Fatalf("/config has more than the policy with no override:\n%s", rest)
	}
	for _, w := range want {
		if !strings.Contains(rest, w) {
			t.Errorf("/config's overrides lack %q:\n%s", w, rest)
		}
	}
	f := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(f, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := policy.Load(f)
	if err != nil {
		t.Fatalf("/config is not a valid policy: %v\n%s", err, cfg)
	}
	if again, _ := policy.Dump(s); !bytes.Equal(again, plain) {
		t.Fatalf("/config checked again dumps to other bytes:\n%s", again)
	}
}

// TestRuntimeBackend: drain, disable and enable a backend through the
// admin listener; the proxy follows, the change is logged with the peer,
// shown in /runtime, /status.json, /config and the metrics.
func TestRuntimeBackend(t *testing.T) {
	r := newRuntimeRig(t, "off", "")
	var list []adminapi.BackendState
	if code := r.call(t, "GET", "/runtime/backend?app=web", nil, &list); code != 200 || len(list) != 2 || list[0].State != "enabled" {
		t.Fatalf("GET: %d %+v", code, list)
	}
	var ans struct{ Backends []adminapi.BackendState }
	if code := r.call(t, "POST", "/runtime/backend?app=web&backend="+r.b+"&state=drain", nil, &ans); code != 200 ||
		len(ans.Backends) != 1 || ans.Backends[0].State != "draining" || !ans.Backends[0].Drained {
		t.Fatalf("drain: %d %+v", code, ans)
	}
	if got := r.through(t, 10); got["200 a"] != 10 {
		t.Fatalf("after draining b: %v", got)
	}
	logs := r.log.String()
	if !strings.Contains(logs, "[INFO]  sentry.admin: runtime override: backend state: app=web backend="+r.b+" from=enabled to=draining by=127.0.0.1:") ||
		!strings.Contains(logs, "auth=loopback") || !strings.Contains(logs, "backend drained: app=web backend="+r.b) {
		t.Fatalf("log:\n%s", logs)
	}
	if v, _ := metric(t, r.d, "sentry_backend_state", map[string]string{"backend": r.b, "state": "draining"}); v != 1 {
		t.Fatal("sentry_backend_state{draining} is not 1")
	}
	var st status.Snapshot
	if err := json.Unmarshal([]byte(r.get(t, "/status.json")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Overrides) != 1 || st.Overrides[0].Kind != "backend" || st.Overrides[0].Value != "draining" || !strings.HasPrefix(st.Overrides[0].By, "127.0.0.1:") {
		t.Fatalf("/status.json overrides: %+v", st.Overrides)
	}
	for _, be := range st.Apps[0].Backends {
		if want := map[string]string{r.a: "enabled", r.b: "draining"}[be.Addr]; be.State != want {
			t.Fatalf("/status.json backend %s: state %q", be.Addr, be.State)
		}
	}
	r.checkConfig(t, adminapi.ConfigKey+":", "kind: backend", "backend: "+r.b, "value: draining", "policy: enabled", "by: 127.0.0.1:")

	// Disable: out of rotation too; the same once more changes nothing.
	r.call(t, "POST", "/runtime/backend?backend="+r.b+"&state=disable", nil, &ans)
	if ans.Backends[0].State != "disabled" {
		t.Fatalf("disable: %+v", ans)
	}
	r.call(t, "POST", "/runtime/backend?backend="+r.b+"&state=disable", nil, nil)
	if n := strings.Count(r.log.String(), "to=disabled"); n != 1 {
		t.Fatalf("a repeated disable logged %d times", n)
	}
	r.checkConfig(t, "value: disabled")
	// Enable: back in rotation; no override left.
	r.call(t, "POST", "/runtime/backend?backend="+r.b+"&state=enable", nil, &ans)
	if got := r.through(t, 10); got["200 b"] == 0 {
		t.Fatalf("after enabling b: %v", got)
	}
	r.checkConfig(t)
	var all adminapi.State
	r.call(t, "GET", "/runtime", nil, &all)
	if len(all.Overrides) != 0 || all.Auth != "loopback" || len(all.Backends) != 2 {
		t.Fatalf("GET /runtime: %+v", all)
	}

	for _, tc := range []struct {
		q    string
		code int
	}{
		{"backend=" + r.b + "&state=pause", 400},
		{"state=drain", 400},
		{"backend=10.9.9.9:1&state=drain", 404},
		{"app=nope&backend=" + r.b + "&state=drain", 404},
		{"app=web&backend=10.9.9.9:1&state=drain", 404},
	} {
		var e map[string]string
		if code := r.call(t, "POST", "/runtime/backend?"+tc.q, nil, &e); code != tc.code || e["error"] == "" {
			t.Errorf("%s: %d %v, want %d with an error", tc.q, code, e, tc.code)
		}
	}
}

// TestRuntimeLogLevel: the log level is set on the root logger, so every
// named logger follows; "policy" (or the policy's level) ends it.
func TestRuntimeLogLevel(t *testing.T) {
	r := newRuntimeRig(t, "off", "")
	var lv adminapi.LogLevel
	if code := r.call(t, "POST", "/runtime/log?level=debug", nil, &lv); code != 200 || lv.Level != "debug" || lv.Policy != "info" {
		t.Fatalf("%d %+v", code, lv)
	}
	if !r.d.log.IsDebug() || !r.d.log.Named("lb").IsDebug() {
		t.Fatal("the loggers are not at debug")
	}
	if !strings.Contains(r.log.String(), "runtime override: log level: from=info to=debug by=127.0.0.1:") {
		t.Fatalf("log:\n%s", r.log.String())
	}
	r.checkConfig(t, "kind: log_level", "value: debug", "policy: info")
	// Up to error: logged before it hides INFO.
	r.call(t, "POST", "/runtime/log?level=error", nil, &lv)
	if !strings.Contains(r.log.String(), "from=debug to=error") || r.d.log.IsWarn() {
		t.Fatalf("to error:\n%s", r.log.String())
	}
	r.call(t, "POST", "/runtime/log?level=policy", nil, &lv)
	if lv.Level != "info" || !r.d.log.IsInfo() || r.d.log.IsDebug() || !strings.Contains(r.log.String(), "from=error to=info") {
		t.Fatalf("policy: %+v\n%s", lv, r.log.String())
	}
	r.checkConfig(t)
	if code := r.call(t, "POST", "/runtime/log?level=loud", nil, nil); code != 400 {
		t.Fatalf("a bad level: %d", code)
	}
}

// TestRuntimeAdmission: a forced mode decides from the call on, for one
// app or every app; "policy" ends it.
func TestRuntimeAdmission(t *testing.T) {
	r := newRuntimeRig(t, "batch", "")
	mode := func() string {
		for _, m := range []string{"batch", "threshold", "adaptive", "off"} {
			if v, _ := metric(t, r.d, "sentry_admission_mode", map[string]string{"app": "web", "mode": m}); v == 1 {
				return m
			}
		}
		return ""
	}
	var ans struct{ Admission []adminapi.AppMode }
	if code := r.call(t, "POST", "/runtime/admission?mode=off", nil, &ans); code != 200 || len(ans.Admission) != 1 ||
		ans.Admission[0] != (adminapi.AppMode{App: "web", Mode: "off", Policy: "batch", Forced: true}) {
		t.Fatalf("%d %+v", code, ans)
	}
	if mode() != "off" {
		t.Fatalf("sentry_admission_mode says %s", mode())
	}
	if got := r.through(t, 4); got["200 a"]+got["200 b"] != 4 {
		t.Fatalf("forced off: %v", got)
	}
	if !strings.Contains(r.log.String(), "runtime override: admission mode: app=web from=batch to=off policy=batch by=127.0.0.1:") {
		t.Fatalf("log:\n%s", r.log.String())
	}
	r.checkConfig(t, "kind: admission", "app: web", `value: "off"`, "policy: batch")
	r.call(t, "POST", "/runtime/admission?app=web&mode=threshold", nil, &ans)
	if mode() != "threshold" || !ans.Admission[0].Forced {
		t.Fatalf("threshold: %s %+v", mode(), ans)
	}
	// The policy's own mode is no override.
	r.call(t, "POST", "/runtime/admission?app=web&mode=batch", nil, &ans)
	if mode() != "batch" || ans.Admission[0].Forced {
		t.Fatalf("batch: %s %+v", mode(), ans)
	}
	r.checkConfig(t)
	for q, code := range map[string]int{"mode=auto": 400, "mode=": 400, "app=nope&mode=off": 404} {
		if got := r.call(t, "POST", "/runtime/admission?"+q, nil, nil); got != code {
			t.Errorf("%s: %d, want %d", q, got, code)
		}
	}
}

// TestRuntimeReloadReverts: a reload ends every override, each logged;
// a refused reload ends none.
func TestRuntimeReloadReverts(t *testing.T) {
	r := newRuntimeRig(t, "batch", "")
	r.call(t, "POST", "/runtime/backend?backend="+r.a+"&state=drain", nil, nil)
	r.call(t, "POST", "/runtime/log?level=debug", nil, nil)
	r.call(t, "POST", "/runtime/admission?mode=off", nil, nil)
	var all adminapi.State
	r.call(t, "GET", "/runtime", nil, &all)
	if len(all.Overrides) != 3 {
		t.Fatalf("overrides %+v", all.Overrides)
	}
	busy := freeAddr(t)
	ln, err := net.Listen("tcp", busy)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	bad := parse(t, strings.Replace(r.policy, "listen: "+r.listen, "listen: ["+r.listen+", "+busy+"]", 1))
	if err := r.d.reload(bad); err == nil {
		t.Fatal("a reload onto a busy port applied")
	}
	r.call(t, "GET", "/runtime", nil, &all)
	if len(all.Overrides) != 3 {
		t.Fatalf("a refused reload ended overrides: %+v", all.Overrides)
	}
	if err := r.d.reload(parse(t, r.policy)); err != nil {
		t.Fatal(err)
	}
	r.call(t, "GET", "/runtime", nil, &all)
	if len(all.Overrides) != 0 || all.Log.Level != "info" || all.Admission[0].Forced || all.Backends[0].State != "enabled" {
		t.Fatalf("after a reload: %+v", all)
	}
	for _, want := range []string{"runtime override reverted: backend state: app=web backend=" + r.a + " from=draining to=enabled by=reload",
		"runtime override reverted: admission mode: app=web from=off to=batch by=reload", "from=debug to=info by=reload"} {
		if !strings.Contains(r.log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, r.log.String())
		}
	}
	if got := r.through(t, 10); got["200 a"] == 0 {
		t.Fatalf("a is not back after the reload: %v", got)
	}
	r.checkConfig(t)

	// POST /runtime/reset does the same without a reload.
	r.call(t, "POST", "/runtime/backend?backend="+r.b+"&state=disable", nil, nil)
	var reset struct {
		Reverted  int
		Overrides []status.Override
	}
	if code := r.call(t, "POST", "/runtime/reset", nil, &reset); code != 200 || reset.Reverted != 1 || len(reset.Overrides) != 0 {
		t.Fatalf("reset: %d %+v", code, reset)
	}
}

// TestRuntimeAuth: who may change things (adminapi's doc.go), through the
// admin listener's real handler: loopback only without a token; with
// admin.token_file, the bearer token from every peer; a browser's
// cross-site request never; the Host allow-list first; reads stay open.
func TestRuntimeAuth(t *testing.T) {
	r := newRuntimeRig(t, "off", "")
	h := r.d.admin.Handler
	do := func(method, target, peer string, hdr map[string]string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, target, nil)
		req.Host, req.RemoteAddr = r.admin, peer
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	drain := "/runtime/backend?backend=" + r.b + "&state=drain"
	if rec := do("POST", drain, "10.1.2.3:4000", nil); rec.Code != 403 || !strings.Contains(rec.Body.String(), "admin.token_file") {
		t.Fatalf("a remote peer without a token: %d %s", rec.Code, rec.Body)
	}
	if !strings.Contains(r.log.String(), "runtime change refused: not a loopback peer and no admin.token_file: by=10.1.2.3:4000") {
		t.Fatalf("the refusal is not logged:\n%s", r.log.String())
	}
	if rec := do("GET", "/runtime", "10.1.2.3:4000", nil); rec.Code != 200 {
		t.Fatalf("a remote read: %d", rec.Code)
	}
	if rec := do("POST", drain, "[::1]:4000", map[string]string{"Sec-Fetch-Site": "cross-site"}); rec.Code != 403 {
		t.Fatalf("a cross-site browser request: %d", rec.Code)
	}
	if rec := do("POST", drain, "127.0.0.1:4000", map[string]string{"Origin": "http://evil.example"}); rec.Code != 403 {
		t.Fatalf("a cross-origin request: %d", rec.Code)
	}
	req := httptest.NewRequest("POST", drain, nil)
	req.Host, req.RemoteAddr = "rebind.evil.example", "127.0.0.1:4000"
	if rec := httptest.NewRecorder(); func() int { h.ServeHTTP(rec, req); return rec.Code }() != 421 {
		t.Fatal("a Host not allowed was not refused with 421")
	}
	for _, m := range []string{"PUT", "DELETE"} {
		if rec := do(m, drain, "127.0.0.1:4000", nil); rec.Code != 405 || rec.Header().Get("Allow") != "GET, HEAD, POST" {
			t.Fatalf("%s: %d Allow %q", m, rec.Code, rec.Header().Get("Allow"))
		}
	}
	if rec := do("POST", "/runtime", "127.0.0.1:4000", nil); rec.Code != 405 {
		t.Fatalf("POST /runtime: %d", rec.Code)
	}
	if p := r.d.proxy.Pool("web").Backend(r.b); p.State().String() != "enabled" {
		t.Fatalf("a refused request changed the state to %s", p.State())
	}
	if rec := do("POST", drain, "[::1]:4000", nil); rec.Code != 200 {
		t.Fatalf("loopback without a token: %d %s", rec.Code, rec.Body)
	}

	// With a token (a reload applies it, and ends the drain).
	tok := "s3cr3t-token-0123456789abcdef"
	f := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(f, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.d.reload(parse(t, strings.Replace(r.policy, "admin: {listen: "+r.admin+"}", "admin: {listen: "+r.admin+", token_file: "+f+"}", 1))); err != nil {
		t.Fatal(err)
	}
	for _, hdr := range []map[string]string{nil, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": "Basic " + tok}, {"Authorization": "Bearer " + tok + "x"}} {
		rec := do("POST", drain, "127.0.0.1:4000", hdr)
		if rec.Code != 401 || !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer ") {
			t.Fatalf("%v: %d %q", hdr, rec.Code, rec.Header().Get("WWW-Authenticate"))
		}
		if strings.Contains(rec.Body.String(), tok) {
			t.Fatal("the answer shows the token")
		}
	}
	for _, peer := range []string{"127.0.0.1:4000", "10.1.2.3:4000"} {
		if rec := do("POST", drain, peer, map[string]string{"Authorization": "Bearer " + tok}); rec.Code != 200 {
			t.Fatalf("the token from %s: %d %s", peer, rec.Code, rec.Body)
		}
	}
	if !strings.Contains(r.log.String(), "auth=token") {
		t.Fatal("a change with the token is not logged as such")
	}
	var all adminapi.State
	if code := r.call(t, "GET", "/runtime", nil, &all); code != 200 || all.Auth != "token" {
		t.Fatalf("a read with a token set: %d %+v", code, all)
	}
	cfg := r.get(t, "/config")
	if strings.Contains(cfg, tok) || !strings.Contains(cfg, "token_file: "+f) {
		t.Fatalf("/config and the token:\n%s", cfg)
	}
	if strings.Contains(r.log.String(), tok) {
		t.Fatal("the log shows the token")
	}
}

// TestAdminCommand: `sentry admin` drives the runtime API, taking the
// address and the token from the policy with -config.
func TestAdminCommand(t *testing.T) {
	tok := "cli-token-0123456789abcdef"
	dir := t.TempDir()
	f := filepath.Join(dir, "admin.token")
	if err := os.WriteFile(f, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := newRuntimeRig(t, "batch", ", token_file: "+f)
	pf := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pf, []byte(r.policy), 0o644); err != nil {
		t.Fatal(err)
	}
	state := func() string { return r.d.proxy.Pool("web").Backend(r.b).State().String() }
	if code := realMain([]string{"admin", "-addr", r.admin, "backend", "drain", "web", r.b}); code != 1 || state() != "enabled" {
		t.Fatalf("without the token: exit %d, state %s", code, state())
	}
	if code := realMain([]string{"admin", "-config", pf, "backend", "drain", "web", r.b}); code != 0 || state() != "draining" {
		t.Fatalf("-config: exit %d, state %s", code, state())
	}
	if code := realMain([]string{"admin", "-addr", r.admin, "-token-file", f, "backend", "enable", r.b}); code != 0 || state() != "enabled" {
		t.Fatalf("-token-file, every app: exit %d, state %s", code, state())
	}
	if code := realMain([]string{"admin", "-config", pf, "admission", "off", "web"}); code != 0 || r.d.ctl.App("web").Mode().String() != "off" {
		t.Fatalf("admission: exit %d", code)
	}
	if code := realMain([]string{"admin", "-config", pf, "log", "debug"}); code != 0 || !r.d.log.IsDebug() {
		t.Fatalf("log: exit %d", code)
	}
	if code := realMain([]string{"admin", "-config", pf, "state"}); code != 0 {
		t.Fatalf("state: exit %d", code)
	}
	if code := realMain([]string{"admin", "-config", pf, "reset"}); code != 0 || r.d.ctl.App("web").Mode().String() != "batch" || r.d.log.IsDebug() {
		t.Fatalf("reset: exit %d", code)
	}
	if code := realMain([]string{"admin", "-config", pf, "log", "loud"}); code != 1 {
		t.Fatalf("a refused change: exit %d", code)
	}
	for _, args := range [][]string{{}, {"backend", "drain"}, {"log"}, {"frobnicate"}, {"state", "x"}} {
		if code := realMain(append([]string{"admin", "-addr", r.admin}, args...)); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if code := realMain([]string{"admin", "-h"}); code != 0 {
		t.Errorf("-h: exit %d", code)
	}
}

// TestRuntimeAdmissionReachesOffApp: a mode forced on an app whose policy
// says off decides its requests (the request path asks the controller,
// not a flag of the policy): with every backend disabled, forced batch
// mode refuses for want of a backend (verdict no_backend) where off
// admits, and the relay then finds none.
func TestRuntimeAdmissionReachesOffApp(t *testing.T) {
	r := newRuntimeRig(t, "off", "")
	for _, b := range []string{r.a, r.b} {
		r.call(t, "POST", "/runtime/backend?backend="+b+"&state=disable", nil, nil)
	}
	verdict := func(v string) float64 {
		n, _ := metric(t, r.d, "sentry_admission_decisions_total", map[string]string{"app": "web", "verdict": v})
		return n
	}
	if got := r.through(t, 1); got["503 sentry: no healthy backend\n"] != 1 || verdict("admitted") != 1 {
		t.Fatalf("off: %v, admitted %v", got, verdict("admitted"))
	}
	r.call(t, "POST", "/runtime/admission?mode=batch", nil, nil)
	r.through(t, 1)
	if verdict("no_backend") != 1 || verdict("admitted") != 1 {
		t.Fatalf("forced batch: no_backend %v, admitted %v", verdict("no_backend"), verdict("admitted"))
	}
}
