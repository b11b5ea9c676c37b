package e2e

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestQuickModeSlowBackendAdmitted is issue 29's first outage with the real
// binary: quick mode (`sentry run -listen -backend`, SLA target 1s) in
// front of a backend that answers in 1.5s. Sixteen requests sent one at a
// time find the farm idle every time, so every one is admitted (the
// work-conserving rule, docs/algorithms.md) and answered by the backend;
// sentry_admitted_over_target_total counts them and sentry logs one WARN
// for them (at most one a minute per class).
func TestQuickModeSlowBackendAdmitted(t *testing.T) {
	if testing.Short() {
		t.Skip("24s of sequential 1.5s requests")
	}
	b := newTestBackend(t, "slow", 1500*time.Millisecond)
	listen, admin := freePort(t), freePort(t)
	p := startSentry(t, "http://"+admin+"/readyz", "run", "-listen", listen, "-backend", b.addr, "-admin", admin)
	client := &http.Client{Timeout: 10 * time.Second}
	const n = 16
	for i := range n {
		resp, err := client.Get("http://" + listen + "/report")
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "slow" {
			t.Fatalf("request %d: %d %q (X-Sentry-Reject: %q), want 200 from the backend",
				i, resp.StatusCode, body, resp.Header.Get("X-Sentry-Reject"))
		}
	}
	if h := b.hits.Load(); h != n {
		t.Fatalf("backend answered %d requests, want %d", h, n)
	}
	_, metrics := get(t, "http://"+admin+"/metrics")
	// The first request is admitted by the test (nothing is known of its
	// size yet); every later one, estimated at 1.5s, by the rule.
	m := regexp.MustCompile(`(?m)^sentry_admitted_over_target_total\{app="default",class="default"\} (\d+)$`).FindStringSubmatch(metrics)
	if m == nil || m[1] != "15" {
		t.Fatalf("sentry_admitted_over_target_total = %v, want 15:\n%s", m, grepLines(metrics, "over_target", "decisions_total"))
	}
	out := p.out.String()
	if c := strings.Count(out, "admitted requests over their target"); c != 1 {
		t.Fatalf("%d over-target WARN lines, want 1:\n%s", c, out)
	}
	for _, kv := range []string{"[WARN]", "app=default", "class=default", "target=1s"} {
		if !strings.Contains(out, kv) {
			t.Fatalf("the WARN lacks %q:\n%s", kv, out)
		}
	}
}

// grepLines returns the lines of s that contain any of subs.
func grepLines(s string, subs ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, sub := range subs {
			if strings.Contains(l, sub) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
