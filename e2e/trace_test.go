package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestTraceContext is docs/tracing.md with the real binary, under
// trace_context: generate: a request without a traceparent reaches the
// backend with one sentry started, whose ids the access line names; a
// request with a valid one reaches it unchanged, with its tracestate, and
// the line names its trace and no span of sentry's; every request ID is
// 32 random hex digits, the same in the answer, at the backend and on the
// line.
func TestTraceContext(t *testing.T) {
	type seen struct{ tp, ts, id string }
	var mu sync.Mutex
	got := map[string]seen{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.URL.Path] = seen{strings.Join(r.Header.Values("Traceparent"), "|"), strings.Join(r.Header.Values("Tracestate"), "|"), r.Header.Get("X-Request-Id")}
		mu.Unlock()
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	listen, admin := freePort(t), freePort(t)
	logPath := filepath.Join(t.TempDir(), "access.log")
	cfg := writeFile(t, "trace.yaml", fmt.Sprintf(`
admin: {listen: %q}
log:
  access: {enabled: true, output: %q, format: json, rate: 0, reject_rate: 0}
apps:
  - name: web
    listen: %q
    backends: {static: [%q]}
    admission: {mode: "off"}
    trace_context: generate
`, admin, logPath, listen, ln.Addr().String()))
	startSentry(t, "http://"+admin+"/readyz", "run", "-config", cfg)

	const incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ids := map[string]string{}
	for _, path := range []string{"/none", "/valid"} {
		req, _ := http.NewRequest("GET", "http://"+listen+path, nil)
		if path == "/valid" {
			req.Header.Set("Traceparent", incoming)
			req.Header.Set("Tracestate", "congo=t61rcWkgMzE")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d", path, resp.StatusCode)
		}
		ids[path] = resp.Header.Get("X-Request-Id")
	}
	lines := map[string]map[string]any{}
	for deadline := time.Now().Add(5 * time.Second); len(lines) < 2 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(logPath)
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil {
				lines[fmt.Sprint(m["uri"])] = m
			}
		}
	}
	hexID := regexp.MustCompile(`^[0-9a-f]{32}$`)
	for path, id := range ids {
		if !hexID.MatchString(id) || got[path].id != id || lines[path]["request_id"] != id {
			t.Errorf("%s: request ID %q in the answer, %q at the backend, %v on the line", path, id, got[path].id, lines[path]["request_id"])
		}
	}
	if ids["/none"] == ids["/valid"] {
		t.Errorf("two requests, one ID %q", ids["/none"])
	}
	m := regexp.MustCompile(`^00-([0-9a-f]{32})-([0-9a-f]{16})-01$`).FindStringSubmatch(got["/none"].tp)
	if m == nil || got["/none"].ts != "" {
		t.Fatalf("/none: backend traceparent %q tracestate %q, want one sentry started", got["/none"].tp, got["/none"].ts)
	}
	if l := lines["/none"]; l["trace_id"] != m[1] || l["span_id"] != m[2] {
		t.Errorf("/none: sent %s, logged trace_id %v span_id %v", got["/none"].tp, l["trace_id"], l["span_id"])
	}
	if v := got["/valid"]; v.tp != incoming || v.ts != "congo=t61rcWkgMzE" {
		t.Errorf("/valid: backend traceparent %q tracestate %q, want them unchanged", v.tp, v.ts)
	}
	if l := lines["/valid"]; l["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" || l["span_id"] != nil {
		t.Errorf("/valid: logged trace_id %v span_id %v", l["trace_id"], l["span_id"])
	}
}
