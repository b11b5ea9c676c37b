package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/sentry-proxy/sentry/policy"
)

// lockedBuf is a log output the test reads while the proxy writes.
type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
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

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

// TestNoBackendNamed: on every engine, with no healthy backend the reply
// is 503 with its own body and X-Sentry-Reject: no_backend, not the app's
// overload body.
func TestNoBackendNamed(t *testing.T) {
	for _, e := range []string{policy.EngineLoops, policy.EnginePortable} {
		t.Run(e, func(t *testing.T) {
			dead := deadAddr(t)
			h := startEngine(t, e, []string{dead}, Options{}, nil)
			// The first request finds the connect refused and ejects the
			// only backend (502); the next finds none healthy.
			for i := 0; i < 2; i++ {
				resp, err := http.Get(h.url("/"))
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if i == 0 {
					continue
				}
				if resp.StatusCode != 503 || string(body) != "sentry: no healthy backend\n" || resp.Header.Get("X-Sentry-Reject") != "no_backend" {
					t.Errorf("got %d %q reject=%q, want 503 \"sentry: no healthy backend\" no_backend", resp.StatusCode, body, resp.Header.Get("X-Sentry-Reject"))
				}
				if strings.Contains(string(body), "overloaded") || resp.Header.Get("Retry-After") == "" || resp.Header.Get("X-Request-Id") == "" {
					t.Errorf("no-backend reply %q, Retry-After %q, ID %q", body, resp.Header.Get("Retry-After"), resp.Header.Get("X-Request-Id"))
				}
			}
		})
	}
}

// TestUnreachableWarnedOnce: a backend whose connects are refused is
// logged at WARN once with its cause, however many requests fail on it;
// once it answers, the recovery is logged, and a new failure is warned
// again. Passive ejection is turned off (failures 0) so that every
// request tries it. A backend whose name does not resolve takes the same
// path (fasthttp resolves on each dial).
func TestUnreachableWarnedOnce(t *testing.T) {
	for _, e := range []string{policy.EngineLoops, policy.EnginePortable} {
		t.Run(e, func(t *testing.T) {
			addr := deadAddr(t)
			var out lockedBuf
			log := hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: &out})
			h := startEngine(t, e, []string{addr}, Options{Logger: log}, func(_ *policy.Snapshot, a *policy.App) {
				a.Health.Passive.Failures = 0
			})
			get := func() int {
				resp, err := http.Get(h.url("/"))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			for range 5 {
				if s := get(); s != 502 && s != 503 {
					t.Fatalf("status %d with the backend down", s)
				}
			}
			warns := strings.Count(out.String(), "backend unreachable")
			if warns != 1 || !strings.Contains(out.String(), "refused") || !strings.Contains(out.String(), "[WARN]") {
				t.Fatalf("%d WARN lines after 5 failures, want 1 naming the cause:\n%s", warns, out.String())
			}
			// The backend comes up on the same address.
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				t.Skipf("address taken meanwhile: %v", err)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })}
			go srv.Serve(ln)
			if s := get(); s != 200 {
				t.Fatalf("status %d once the backend is up", s)
			}
			if !strings.Contains(out.String(), "backend reachable again") {
				t.Errorf("no recovery logged:\n%s", out.String())
			}
			srv.Close()
			get()
			get()
			if n := strings.Count(out.String(), "backend unreachable"); n != 2 {
				t.Errorf("%d WARN lines after it failed anew, want 2:\n%s", n, out.String())
			}
		})
	}
}
