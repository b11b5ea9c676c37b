//go:build linux

package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sentry-proxy/sentry/control"
	"github.com/sentry-proxy/sentry/lb"
	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// controlBuilder adapts control.Manager to ControlBuilder, as cmd/sentry
// does, so that these tests run the real admission stack.
type controlBuilder struct{ *control.Manager }

func (b controlBuilder) Build(ac *policy.App, pool *lb.Pool) (pipeline.Controller, error) {
	a, err := b.Manager.Build(ac, pool)
	if err != nil {
		return nil, err
	}
	return a, nil
}

// parkPolicy: batch mode; fast (the default) and slow wait 20ms for their
// policer run, hold waits a minute (its requests stay parked while a test
// looks at them). slow's requests share one history key, so what the
// first one teaches the estimator (the backend reports 10 minutes of cpu)
// makes the next fail the batch test.
const parkPolicy = `
apps:
  - name: web
    listen: %s
    backends: {static: [%s]}
    sla:
      targets: [{target: 5m}]
    admission:
      mode: batch
      reserve: false
      batch: {parallelism: 1, strict_periods: true} # every arrival parks
    classes:
      - name: fast
        period: 20ms
        default: true
      - name: slow
        period: 20ms
        rules: [{path_prefix: /slow, key: /slow}]
      - name: hold
        period: 1m
        rules: [{path_prefix: /hold}]
`

// startParked starts engine e with parkPolicy and the real control stack
// in front of a raw backend that reports Server-Timing cpu 600000ms for
// /slow and 1ms otherwise.
func startParked(t *testing.T, e string) (*harness, *rawBackend) {
	t.Helper()
	return startParkedWith(t, e, nil)
}

// startParkedWith is startParked with the policy text changed by edit
// (nil: as is).
func startParkedWith(t *testing.T, e string, edit func(string) string) (*harness, *rawBackend) {
	t.Helper()
	rb := startRawBackend(t, func(_ *rawBackend, _, _ int, r *beReq, c net.Conn, _ *bufio.Reader) bool {
		st := "cpu;dur=1"
		if strings.HasPrefix(r.target, "/slow") {
			st = "cpu;dur=600000"
		}
		body := "ok " + r.target
		_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nServer-Timing: %s\r\nContent-Length: %d\r\n\r\n%s", st, len(body), body)
		return err == nil
	})
	addr := freeAddr(t)
	pol := fmt.Sprintf("server: {engine: %s}\n", e) + fmt.Sprintf(parkPolicy, addr, rb.addr)
	if edit != nil {
		pol = edit(pol)
	}
	snap, err := policy.Parse("<test>", []byte(pol))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	log := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: io.Discard})
	m, err := control.NewManager(control.Options{Logger: log, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Control: controlBuilder{m}, Registerer: reg, Logger: log}
	return startProxySnap(t, addr, snap, opts), rb
}

// metricValue returns the value of the series name whose labels include
// want (a histogram: its sample count); 0 if there is none yet.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

// TestParkedBothEngines: a request whose class has a period waits for its
// batch run on both engines; on the loops it parks in the loop (no
// hand-off, no goroutine) and the loop relays or rejects it when the run
// wakes it. A client that hangs up while parked leaves the queue, counted
// client_gone, and nothing reaches the backend.
func TestParkedBothEngines(t *testing.T) {
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			h, rb := startParked(t, e)
			var served, handed float64
			if e == policy.EngineLoops {
				ff := fastOf(t, h)
				s, hd := ff.Counts()
				served, handed = float64(s), float64(hd)
			}
			decided := func(class, verdict string) float64 {
				return metricValue(t, h.reg, "sentry_admission_decisions_total", map[string]string{"class": class, "verdict": verdict})
			}
			waited := func(class string) float64 {
				return metricValue(t, h.reg, "sentry_batch_wait_seconds", map[string]string{"class": class})
			}
			queued := func(class string) float64 {
				return metricValue(t, h.reg, "sentry_batch_queue_length", map[string]string{"class": class})
			}
			backendSaw := func(prefix string) int {
				n := 0
				for _, q := range rb.all() {
					if strings.HasPrefix(q.target, prefix) {
						n++
					}
				}
				return n
			}

			t.Run("admitted after its run", func(t *testing.T) {
				c := dialProxy(t, h.addr)
				for i := 0; i < 3; i++ {
					path := "/a" + strconv.Itoa(i)
					resp, body := c.do("GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n")
					if resp.StatusCode != 200 || body != "ok "+path {
						t.Fatalf("%s: %d %q", path, resp.StatusCode, body)
					}
				}
				if v := decided("fast", "admitted"); v != 3 {
					t.Errorf("decisions{fast,admitted} = %v, want 3", v)
				}
				if v := waited("fast"); v != 3 {
					t.Errorf("batch waits of fast = %v, want 3 (each request waited for a run)", v)
				}
				if n := backendSaw("/a"); n != 3 {
					t.Errorf("backend saw %d requests, want 3", n)
				}
			})

			// Pipelined requests wait behind a parked one, buffered, and
			// are answered in order, each after its own run.
			t.Run("pipelined behind a parked request", func(t *testing.T) {
				c := dialProxy(t, h.addr)
				c.write("GET /p1 HTTP/1.1\r\nHost: x\r\n\r\nGET /p2 HTTP/1.1\r\nHost: x\r\n\r\n")
				for _, path := range []string{"/p1", "/p2"} {
					resp, body, err := c.read("GET")
					if err != nil || resp.StatusCode != 200 || body != "ok "+path {
						t.Fatalf("%s: %v %q %v", path, resp, body, err)
					}
				}
				if v := waited("fast"); v != 5 {
					t.Errorf("batch waits of fast = %v, want 5", v)
				}
			})

			t.Run("rejected by its run", func(t *testing.T) {
				c := dialProxy(t, h.addr)
				resp, body := c.do("GET /slow/learn HTTP/1.1\r\nHost: x\r\n\r\n")
				if resp.StatusCode != 200 || body != "ok /slow/learn" {
					t.Fatalf("first slow request (S unknown yet): %d %q", resp.StatusCode, body)
				}
				// On an idle farm with nothing waiting, the work-conserving
				// rule (docs/algorithms.md §10) admits it over its target.
				resp, body = c.do("GET /slow/idle HTTP/1.1\r\nHost: x\r\n\r\n")
				if resp.StatusCode != 200 || body != "ok /slow/idle" {
					t.Fatalf("slow request on an idle farm: %d %q, want admitted over target", resp.StatusCode, body)
				}
				if v := metricValue(t, h.reg, "sentry_admitted_over_target_total", map[string]string{"class": "slow"}); v != 1 {
					t.Errorf("sentry_admitted_over_target_total{slow} = %v, want 1", v)
				}
				// With a request waiting (hold's, parked for its minute),
				// the run's verdict is the test's: rejected.
				c2 := dialProxy(t, h.addr)
				c2.write("GET /hold/wait HTTP/1.1\r\nHost: x\r\n\r\n")
				waitUntil(t, "a request waits in hold's queue", func() bool { return queued("hold") == 1 })
				resp, body = c.do("GET /slow/again HTTP/1.1\r\nHost: x\r\n\r\n")
				c2.c.Close()
				waitUntil(t, "hold's queue empties", func() bool { return queued("hold") == 0 })
				if resp.StatusCode != 503 || resp.Header.Get("X-Sentry-Reject") != "rejected_test" || body != "sentry: overloaded, retry later\n" {
					t.Fatalf("second slow request: %d %q %v, want a 503 rejected_test", resp.StatusCode, body, resp.Header)
				}
				if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 {
					t.Errorf("Retry-After %q, want whole seconds ≥ 1", resp.Header.Get("Retry-After"))
				}
				if v := waited("slow"); v != 3 {
					t.Errorf("batch waits of slow = %v, want 3 (the rejection came from a run)", v)
				}
				if v := decided("slow", "rejected_test"); v != 1 {
					t.Errorf("decisions{slow,rejected_test} = %v, want 1", v)
				}
				if n := backendSaw("/slow/again"); n != 0 {
					t.Errorf("a rejected request reached the backend")
				}
				// The connection is still usable after the rejection.
				resp, body = c.do("GET /a-after HTTP/1.1\r\nHost: x\r\n\r\n")
				if resp.StatusCode != 200 || body != "ok /a-after" {
					t.Errorf("after the rejection: %d %q", resp.StatusCode, body)
				}
			})

			t.Run("client gone while parked", func(t *testing.T) {
				c := dialProxy(t, h.addr)
				c.write("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
				waitUntil(t, "the request waits in hold's queue", func() bool { return queued("hold") == 1 })
				c.c.Close()
				waitUntil(t, "the request leaves the queue", func() bool { return queued("hold") == 0 })
				// The second client_gone: the first was /hold/wait's above.
				waitUntil(t, "client_gone is counted", func() bool { return decided("hold", "client_gone") == 2 })
				if n := backendSaw("/hold"); n != 0 {
					t.Errorf("a request whose client left reached the backend")
				}
				if v := decided("hold", "admitted"); v != 0 {
					t.Errorf("decisions{hold,admitted} = %v, want 0", v)
				}
			})

			if e == policy.EngineLoops {
				if v := gatherCounter(t, h.reg, "sentry_evloop_handoffs_total", h.addr); v != handed {
					t.Errorf("sentry_evloop_handoffs_total rose by %v, want 0: a parked request was handed off", v-handed)
				}
				// 3 fast, 2 pipelined, 3 slow, 1 waiting, 1 after the
				// rejection, 1 gone.
				if v := gatherCounter(t, h.reg, "sentry_evloop_requests_total", h.addr); v-served != 11 {
					t.Errorf("sentry_evloop_requests_total rose by %v, want 11", v-served)
				}
			}

			// A drain that runs out of time with a request parked cancels
			// it on every engine: it leaves the queue (the controller
			// still runs), counts as client_gone and its connection
			// closes unanswered; nothing leaks.
			t.Run("drain with a parked request", func(t *testing.T) {
				c := dialProxy(t, h.addr)
				c.write("GET /hold/drain HTTP/1.1\r\nHost: x\r\n\r\n")
				waitUntil(t, "the request waits in hold's queue", func() bool { return queued("hold") == 1 })
				ctx, cancel := contextWithTimeout(200 * time.Millisecond)
				defer cancel()
				_ = h.p.ShutdownAll(ctx)
				waitUntil(t, "the request leaves the queue", func() bool { return queued("hold") == 0 })
				waitUntil(t, "client_gone is counted", func() bool { return decided("hold", "client_gone") == 3 })
				if n := backendSaw("/hold"); n != 0 {
					t.Errorf("a request cancelled by the drain reached the backend")
				}
				_ = c.c.SetReadDeadline(time.Now().Add(3 * time.Second))
				if b, err := c.br.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
					t.Errorf("the parked request's connection: %q %v, want it closed unanswered", b, err)
				}
			})
		})
	}
}
