//go:build linux

package proxy

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"

	"github.com/sentry-proxy/sentry/internal/logwriter"
	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// accessSnap turns the access log on, to a file in dir.
func accessSnap(path, format string, rate, rejectRate int) func(*policy.Snapshot, *policy.App) {
	return func(s *policy.Snapshot, a *policy.App) {
		a.Admission.Mode = "batch"
		s.Log.Access = true
		s.Log.AccessLog = policy.AccessLog{Output: path, Format: format, Rate: rate, RejectRate: rejectRate}
	}
}

// syncAccess waits until the access log's writer has written every line
// logged so far (it writes from its own goroutine).
func syncAccess(t *testing.T, p *Proxy) {
	t.Helper()
	if out := p.accessOut.Load(); out != nil && !out.Sync(5*time.Second) {
		t.Fatal("the access log's writer did not catch up in 5s")
	}
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// TestAccessLogLines: on both engines, an admitted and a rejected request
// each get one line with the same fields, in text (nginx's combined format
// and key=value fields) and in JSON; the rejection's line and reply carry
// the same request ID, its class and its reason.
func TestAccessLogLines(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })
	for _, e := range engines {
		for _, format := range []string{"text", "json"} {
			t.Run(e+"/"+format, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "access.log")
				h := startEngine(t, e, []string{be}, Options{Control: &fakeControl{}}, accessSnap(path, format, 0, 0))
				c := &http.Client{}
				ok := getWith(t, c, h.url("/a?q=1"), "gold")
				rej := getWith(t, c, h.url("/b"), "bronze")
				if ok.StatusCode != 200 || rej.StatusCode != 503 {
					t.Fatalf("statuses %d, %d", ok.StatusCode, rej.StatusCode)
				}
				okID, rejID := ok.Header.Get("X-Request-Id"), rej.Header.Get("X-Request-Id")
				if len(okID) != 32 || len(rejID) != 32 || okID == rejID {
					t.Fatalf("request IDs %q, %q: every answer needs its own", okID, rejID)
				}
				syncAccess(t, h.p)
				lines := readLines(t, path)
				if len(lines) != 2 {
					t.Fatalf("%d lines, want 2:\n%s", len(lines), strings.Join(lines, "\n"))
				}
				if format == "text" {
					wantOK := []string{`127.0.0.1 - - [`, `] "GET /a?q=1 HTTP/1.1" 200 5 "http://ref.example/x" "probe/1.0" host="` + strings.TrimPrefix(h.url(""), "http://") + `"`,
						" id=" + okID, " app=web class=gold verdict=admitted reason=admitted backend=" + strings.TrimPrefix(be, "http://") + " upstream_time=0."}
					wantRej := []string{`"GET /b HTTP/1.1" 503 32 "http://ref.example/x" "probe/1.0"`,
						" id=" + rejID, " app=web class=bronze verdict=rejected_test reason=rejected_test backend=- upstream_time=-"}
					for i, want := range [][]string{wantOK, wantRej} {
						for _, w := range want {
							if !strings.Contains(lines[i], w) {
								t.Errorf("line %d %q lacks %q", i, lines[i], w)
							}
						}
					}
					return
				}
				var got [2]map[string]any
				for i := range got {
					if err := json.Unmarshal([]byte(lines[i]), &got[i]); err != nil {
						t.Fatalf("line %d is not JSON: %v\n%s", i, err, lines[i])
					}
				}
				if d, ok := got[0]["duration"].(float64); !ok || d <= 0 || d > 10 {
					t.Errorf("duration %v: want seconds as a number", got[0]["duration"])
				}
				if u, ok := got[0]["upstream_time"].(float64); !ok || u < 0 {
					t.Errorf("upstream_time %v", got[0]["upstream_time"])
				}
				for k, v := range map[string]any{"method": "GET", "uri": "/a?q=1", "status": 200.0, "class": "gold", "reason": "admitted", "request_id": okID,
					"user_agent": "probe/1.0", "referer": "http://ref.example/x", "client": "127.0.0.1", "proto": "HTTP/1.1", "bytes_out": 5.0} {
					if got[0][k] != v {
						t.Errorf("admitted %s = %v, want %v", k, got[0][k], v)
					}
				}
				for k, v := range map[string]any{"status": 503.0, "class": "bronze", "verdict": "rejected_test", "reason": "rejected_test", "request_id": rejID, "backend": nil} {
					if got[1][k] != v {
						t.Errorf("rejected %s = %v, want %v", k, got[1][k], v)
					}
				}
			})
		}
	}
}

// TestAccessLogFlood: a flood of rejections (500 requests against a
// reject_rate of 20 lines/s, on loopback) with the log on: every line
// written names its class, reason and ID; the lines written stay within
// the token bucket's bound for the time the flood took, whatever the
// machine's speed; and written + dropped is every request.
func TestAccessLogFlood(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "access.log")
			const n, conns, rejectRate = 500, 5, 20
			h := startEngine(t, e, []string{be}, Options{Control: &fakeControl{}}, accessSnap(path, "text", 1000, rejectRate))
			began := time.Now()
			var wg sync.WaitGroup
			ids := make(chan string, n)
			for range conns {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := &http.Client{}
					for range n / conns {
						resp := getWith(t, c, h.url("/flood"), "bronze")
						if resp.StatusCode != 503 {
							t.Errorf("status %d, want 503", resp.StatusCode)
						}
						ids <- resp.Header.Get("X-Request-Id")
					}
				}()
			}
			wg.Wait()
			took := time.Since(began)
			close(ids)
			sent := map[string]bool{}
			for id := range ids {
				sent[id] = true
			}
			syncAccess(t, h.p)
			lines := readLines(t, path)
			bound := int(rejectRate*(1+took.Seconds())) + 1
			if len(lines) > bound || len(lines) < rejectRate {
				t.Errorf("%d lines for %d rejections in %v, want between %d and %d", len(lines), n, took, rejectRate, bound)
			}
			for _, l := range lines {
				id := field(l, "id")
				if field(l, "class") != "bronze" || field(l, "reason") != "rejected_test" || !sent[id] {
					t.Errorf("line lacks class, reason or a sent ID: %s", l)
				}
			}
			written := testutil.ToFloat64(h.p.metrics.accessLines.WithLabelValues("rejected"))
			dropped := testutil.ToFloat64(h.p.metrics.accessDropped.WithLabelValues("rejected", dropSampled))
			if int(written) != len(lines) || int(written+dropped) != n {
				t.Errorf("written %v, dropped %v, lines %d, requests %d", written, dropped, len(lines), n)
			}
		})
	}
}

// field returns key=value's value in a text access line.
func field(line, key string) string {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		return ""
	}
	v := line[i+len(key)+2:]
	if j := strings.IndexByte(v, ' '); j >= 0 {
		v = v[:j]
	}
	return v
}

// TestAccessLogSampling drives the two token buckets on a manual clock:
// at one instant each kind gets its burst (one second's worth) and no
// more; a second later, as much again; the kinds do not share.
func TestAccessLogSampling(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry(), &Proxy{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	path := filepath.Join(t.TempDir(), "a.log")
	f, err := openOutput(path)
	if err != nil {
		t.Fatal(err)
	}
	out := logwriter.New(f, logwriter.Options{})
	defer out.Close(time.Second)
	l := newAccessLog(policy.AccessLog{Output: path, Format: "text", Rate: 5, RejectRate: 3}, m, func() time.Time { return now }, out)
	app := &pipeline.App{Name: "web"}
	flood := func(o pipeline.Outcome, k int) {
		for range k {
			l.write(&pipeline.AccessEntry{App: app, Outcome: o, Class: -1, Start: now, Status: 503})
		}
	}
	flood(pipeline.OutRejected, 100)
	flood(pipeline.OutRelayed, 100)
	out.Sync(5 * time.Second)
	if n := len(readLines(t, path)); n != 3+5 {
		t.Errorf("%d lines at one instant, want 8 (reject_rate 3 + rate 5)", n)
	}
	now = now.Add(time.Second)
	flood(pipeline.OutNoBackend, 100) // counted as a rejection
	out.Sync(5 * time.Second)
	if n := len(readLines(t, path)); n != 8+3 {
		t.Errorf("%d lines a second later, want 11", n)
	}
	if d := testutil.ToFloat64(m.accessDropped.WithLabelValues("rejected", dropSampled)); d != 200-6 {
		t.Errorf("rejected dropped %v, want 194", d)
	}
	if d := testutil.ToFloat64(m.accessDropped.WithLabelValues("other", dropSampled)); d != 95 {
		t.Errorf("other dropped %v, want 95", d)
	}
}

// TestAccessLogReopen: after the file is moved away (logrotate), reopen
// makes a new one at the path and the next line goes there.
func TestAccessLogReopen(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	h := startProxyOpts(t, []string{be}, Options{Control: &fakeControl{}}, accessSnap(path, "text", 0, 0))
	c := &http.Client{}
	getWith(t, c, h.url("/before"), "gold")
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	getWith(t, c, h.url("/moved"), "gold") // still to the moved file
	if err := h.p.ReopenAccessLog(); err != nil {
		t.Fatal(err)
	}
	getWith(t, c, h.url("/after"), "gold")
	syncAccess(t, h.p)
	old, cur := readLines(t, path+".1"), readLines(t, path)
	if len(old) != 2 || len(cur) != 1 || !strings.Contains(cur[0], "/after") {
		t.Errorf("rotated %q, current %q", old, cur)
	}
}

// TestAccessLogOffWritesNothing: with log.access off, a request leaves no
// line anywhere and the proxy holds no access log.
func TestAccessLogOffWritesNothing(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	h := startProxyOpts(t, []string{be}, Options{Control: &fakeControl{}}, nil)
	getWith(t, &http.Client{}, h.url("/x"), "gold")
	if h.p.access.Load() != nil {
		t.Fatal("an access log exists with log.access off")
	}
	if n := testutil.ToFloat64(h.p.metrics.accessLines.WithLabelValues("other")); n != 0 {
		t.Errorf("%v lines written with the log off", n)
	}
}

// TestAccessLogH2: an h2 stream's line has the same fields as HTTP/1.1's,
// with protocol HTTP/2.0; its rejection carries class, reason and the
// reply's ID.
func TestAccessLogH2(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })
	certFile, keyFile := writeTestCert(t)
	path := filepath.Join(t.TempDir(), "access.log")
	on := accessSnap(path, "text", 0, 0)
	h := startProxyOpts(t, []string{be}, Options{Control: &fakeControl{}}, func(s *policy.Snapshot, a *policy.App) {
		on(s, a)
		a.TLS = &policy.TLS{CertFile: certFile, KeyFile: keyFile}
	})
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}}
	if err := http2.ConfigureTransport(tr); err != nil {
		t.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	ok := getWith(t, c, "https://"+h.addr+"/a", "gold")
	rej := getWith(t, c, "https://"+h.addr+"/b", "bronze")
	if ok.ProtoMajor != 2 || ok.StatusCode != 200 || rej.StatusCode != 503 {
		t.Fatalf("proto %d, statuses %d %d", ok.ProtoMajor, ok.StatusCode, rej.StatusCode)
	}
	syncAccess(t, h.p)
	lines := readLines(t, path)
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for i, want := range [][]string{
		{`"GET /a HTTP/2.0" 200 5 "http://ref.example/x" "probe/1.0"`, " id=" + ok.Header.Get("X-Request-Id"), " class=gold verdict=admitted reason=admitted"},
		{`"GET /b HTTP/2.0" 503 `, " id=" + rej.Header.Get("X-Request-Id"), " class=bronze verdict=rejected_test reason=rejected_test backend=-"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) || strings.Contains(lines[i], " id=-") {
				t.Errorf("line %d %q lacks %q", i, lines[i], w)
			}
		}
	}
}

// TestAccessLogWriteAllocs: with the log on, a line costs no allocation
// once the buffers have grown (formatting into the log's buffer, the copy
// into the writer's), whatever the writer's goroutine is doing.
func TestAccessLogWriteAllocs(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry(), &Proxy{})
	if err != nil {
		t.Fatal(err)
	}
	out := logwriter.New(io.Discard, logwriter.Options{})
	defer out.Close(time.Second)
	now := time.Unix(1000, 0)
	for _, format := range []string{"text", "json"} {
		l := newAccessLog(policy.AccessLog{Output: "stdout", Format: format}, m, func() time.Time { return now }, out)
		e := &pipeline.AccessEntry{App: &pipeline.App{Name: "web"}, Outcome: pipeline.OutRelayed, Class: -1, Start: now, Status: 200,
			Method: []byte("GET"), URI: []byte("/a?q=1"), Proto: "HTTP/1.1", Host: []byte("x"), Agent: []byte("probe/1.0")}
		for range 100 {
			l.write(e)
		}
		if n := testing.AllocsPerRun(1000, func() { l.write(e) }); n != 0 {
			t.Errorf("%s: %v allocs per line", format, n)
		}
	}
}
