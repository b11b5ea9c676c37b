//go:build linux

package proxy

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// Trace context (docs/tracing.md) is held to one table on every driver:
// both engines over HTTP/1.1 and over h2c, and the loops' own h2 streams
// over TLS.
// For each trace_context mode and each case, what the backend received
// (its traceparent and tracestate fields, in order) and what the access
// line says (trace_id, span_id) must read the same on every driver; a
// traceparent sentry started reads "new" once checked (well formed,
// sampled, and the very ids the access line names).

// traceDriver is one way a request reaches sentry.
type traceDriver struct {
	name   string
	engine string // server.engine
	mod    func(*testing.T, *policy.App)
	// send sends a GET for path with fields (lower-case name, value
	// pairs) and returns the status.
	send func(t *testing.T, h *harness, path string, fields []string) int
}

func traceDrivers() []traceDriver {
	h1 := func(t *testing.T, h *harness, path string, fields []string) int {
		var b strings.Builder
		b.WriteString("GET " + path + " HTTP/1.1\r\nHost: a.test\r\n")
		for i := 0; i+1 < len(fields); i += 2 {
			b.WriteString(fields[i] + ": " + fields[i+1] + "\r\n")
		}
		b.WriteString("\r\n")
		resp, _ := rawRequest(t, h.addr, b.String())
		return resp.StatusCode
	}
	h2c := func(t *testing.T, h *harness, path string, fields []string) int {
		st, _ := h2cExchange1(t, h.addr, append([]string{":method", "GET", ":scheme", "http", ":authority", "a.test", ":path", path}, fields...)...)
		return st
	}
	h2tls := func(t *testing.T, h *harness, path string, fields []string) int {
		c, fr := h2TLSRaw(t, h.addr)
		defer c.Close()
		writeHead(t, fr, 1, true, append([]string{":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", path}, fields...)...)
		return readAnswers(t, fr, true, 1)[1].status
	}
	onH2C := func(_ *testing.T, a *policy.App) { a.H2C = true }
	return []traceDriver{
		{name: "loops", engine: policy.EngineLoops, send: h1},
		{name: "portable", engine: policy.EnginePortable, send: h1},
		{name: "h2c-portable", engine: policy.EnginePortable, mod: onH2C, send: h2c},
		{name: "h2c-loops", engine: policy.EngineLoops, mod: onH2C, send: h2c},
		{name: "h2-loop-streams", engine: policy.EngineLoops, send: h2tls,
			mod: func(t *testing.T, a *policy.App) {
				cf, kf := writeTestCert(t)
				a.TLS = &policy.TLS{CertFile: cf, KeyFile: kf}
			}},
	}
}

const (
	tpValid    = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tpValid2   = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	tpUpper    = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"
	tpFuture   = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds"
	tsIncoming = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
)

// traceCases are the requests, by name; "gold" is admitted, the rest of
// the fake controller's classes rejected.
var traceCases = []struct {
	name   string
	fields []string
	status int
}{
	{"valid", []string{"x-class", "gold", "traceparent", tpValid, "tracestate", tsIncoming}, 200},
	{"absent", []string{"x-class", "gold"}, 200},
	{"invalid", []string{"x-class", "gold", "traceparent", tpUpper, "tracestate", tsIncoming}, 200},
	{"two", []string{"x-class", "gold", "traceparent", tpValid, "traceparent", tpValid2}, 200},
	{"future", []string{"x-class", "gold", "traceparent", tpFuture}, 200},
	{"rejected", []string{"traceparent", tpValid}, 503},
	{"rejected-absent", nil, 503},
}

// traceWant is the table: mode, then case, then what the backend got and
// the access line said.
var traceWant = map[string]map[string]string{
	"pass": {
		"valid":           "tp=[" + tpValid + "] ts=[" + tsIncoming + "] trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=-",
		"absent":          "tp=[] ts=[] trace_id=- span_id=-",
		"invalid":         "tp=[" + tpUpper + "] ts=[" + tsIncoming + "] trace_id=- span_id=-",
		"two":             "tp=[" + tpValid + " " + tpValid2 + "] ts=[] trace_id=- span_id=-",
		"future":          "tp=[" + tpFuture + "] ts=[] trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=-",
		"rejected":        "not relayed trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=-",
		"rejected-absent": "not relayed trace_id=- span_id=-",
	},
	"generate": {
		"valid":           "tp=[" + tpValid + "] ts=[" + tsIncoming + "] trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=-",
		"absent":          "tp=[new] ts=[] trace_id=new span_id=new",
		"invalid":         "tp=[new] ts=[] trace_id=new span_id=new",
		"two":             "tp=[new] ts=[] trace_id=new span_id=new",
		"future":          "tp=[" + tpFuture + "] ts=[] trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=-",
		"rejected":        "not relayed trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=-",
		"rejected-absent": "not relayed trace_id=- span_id=-",
	},
	"off": {
		"valid":           "tp=[" + tpValid + "] ts=[" + tsIncoming + "] trace_id=- span_id=-",
		"absent":          "tp=[] ts=[] trace_id=- span_id=-",
		"invalid":         "tp=[" + tpUpper + "] ts=[" + tsIncoming + "] trace_id=- span_id=-",
		"two":             "tp=[" + tpValid + " " + tpValid2 + "] ts=[] trace_id=- span_id=-",
		"future":          "tp=[" + tpFuture + "] ts=[] trace_id=- span_id=-",
		"rejected":        "not relayed trace_id=- span_id=-",
		"rejected-absent": "not relayed trace_id=- span_id=-",
	},
}

var startedTP = regexp.MustCompile(`^00-([0-9a-f]{32})-([0-9a-f]{16})-01$`)

func TestTraceContextEveryEngine(t *testing.T) {
	modes := make([]string, 0, len(traceWant))
	for m := range traceWant {
		modes = append(modes, m)
	}
	sort.Strings(modes)
	for _, d := range traceDrivers() {
		for _, mode := range modes {
			t.Run(d.name+"/"+mode, func(t *testing.T) {
				rb := startRawBackend(t, tableBackend)
				path := filepath.Join(t.TempDir(), "access.log")
				opts := Options{Control: &fakeControl{}}
				h := startProxyOpts(t, []string{rb.addr}, opts, withEngine(d.engine, func(s *policy.Snapshot, a *policy.App) {
					a.Admission.Mode = "batch"
					a.TraceContext = policy.TraceContext(mode)
					s.Log.Access = true
					s.Log.AccessLog = policy.AccessLog{Output: path, Format: "json"}
					if d.mod != nil {
						d.mod(t, a)
					}
				}))
				r := &rig{h: h, rb: rb}
				tags := map[string]string{}
				for _, c := range traceCases {
					tag := fmt.Sprintf("/trace-%d-%s", pathSeq.Add(1), c.name)
					tags[c.name] = tag
					if st := d.send(t, h, tag, c.fields); st != c.status {
						t.Fatalf("%s: status %d, want %d", c.name, st, c.status)
					}
				}
				syncAccess(t, h.p)
				logged := map[string]map[string]any{}
				for _, line := range readLines(t, path) {
					var m map[string]any
					if err := json.Unmarshal([]byte(line), &m); err != nil {
						t.Fatalf("access line is not JSON: %v\n%s", err, line)
					}
					uri, _ := m["uri"].(string)
					logged[uri] = m
				}
				for _, c := range traceCases {
					got := traceSummary(t, r, tags[c.name], logged[tags[c.name]])
					if want := traceWant[mode][c.name]; got != want {
						t.Errorf("%s:\n got %s\nwant %s", c.name, got, want)
					}
				}
			})
		}
	}
}

// traceSummary says what the backend got for tag and what its access
// line (m) says, a started trace checked and written "new".
func traceSummary(t *testing.T, r *rig, tag string, m map[string]any) string {
	t.Helper()
	if m == nil {
		return "no access line"
	}
	str := func(k string) string {
		if v, ok := m[k].(string); ok {
			return v
		}
		if m[k] != nil {
			t.Errorf("%s: %s = %v, want a string or null", tag, k, m[k])
		}
		return "-"
	}
	traceID, spanID := str("trace_id"), str("span_id")
	got := r.received(tag)
	if len(got) == 0 {
		return "not relayed trace_id=" + traceID + " span_id=" + spanID
	}
	if len(got) != 1 {
		t.Fatalf("%s: backend received %d requests", tag, len(got))
	}
	q := got[0]
	tp, ts := q.header["Traceparent"], q.header["Tracestate"]
	if len(tp) == 1 {
		if sm := startedTP.FindStringSubmatch(tp[0]); sm != nil && tp[0] != tpValid && tp[0] != tpValid2 {
			if traceID != sm[1] || spanID != sm[2] {
				t.Errorf("%s: sent %s, logged trace_id=%s span_id=%s", tag, tp[0], traceID, spanID)
			}
			tp, traceID, spanID = []string{"new"}, "new", "new"
		}
	}
	return fmt.Sprintf("tp=%v ts=%v trace_id=%s span_id=%s", tp, ts, traceID, spanID)
}

// TestRelayLogLinesNameTheRequest: sentry's own log lines about a failed
// relay (the WARN of an unreachable backend, then DEBUG "relay failed")
// carry the request's ID and trace ID, and the
// span ID of a trace sentry started, on the loops, fasthttp and the own
// h2 server's workers.
func TestRelayLogLinesNameTheRequest(t *testing.T) {
	for _, d := range traceDrivers()[:3] {
		t.Run(d.name, func(t *testing.T) {
			var out lockedBuf
			log := hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: &out})
			opts := Options{Logger: log}
			h := startProxyOpts(t, []string{deadAddr(t)}, opts, withEngine(d.engine, func(_ *policy.Snapshot, a *policy.App) {
				a.Health.Passive.Failures = 0
				a.TraceContext = policy.TraceGenerate
				if d.mod != nil {
					d.mod(t, a)
				}
			}))
			if st := d.send(t, h, "/warn", []string{"traceparent", tpValid}); st != 502 {
				t.Fatalf("status %d with the backend down", st)
			}
			if st := d.send(t, h, "/debug", nil); st != 502 {
				t.Fatalf("status %d with the backend down", st)
			}
			lines := strings.Split(out.String(), "\n")
			find := func(msg string) string { // the last such line
				for i := len(lines) - 1; i >= 0; i-- {
					l := lines[i]
					if strings.Contains(l, msg) {
						return l
					}
				}
				t.Fatalf("no %q line:\n%s", msg, out.String())
				return ""
			}
			warn := find("backend unreachable")
			if !regexp.MustCompile(`request_id=[0-9a-f]{32}\b`).MatchString(warn) ||
				!strings.Contains(warn, "trace_id=4bf92f3577b34da6a3ce929d0e0e4736") || strings.Contains(warn, "span_id=") {
				t.Errorf("WARN line does not name the request and its (forwarded) trace:\n%s", warn)
			}
			debug := find("relay failed") // the second request's (the first one's retries log too)
			if !regexp.MustCompile(`request_id=[0-9a-f]{32} trace_id=[0-9a-f]{32} span_id=[0-9a-f]{16}`).MatchString(debug) {
				t.Errorf("DEBUG line does not name the request and the trace sentry started:\n%s", debug)
			}
		})
	}
}

// TestAccessFormatsTrace: both access-log formats carry trace_id and
// span_id: a trace the request came with (no span of sentry's), one
// sentry started (both), none ("-" in text, null in JSON).
func TestAccessFormatsTrace(t *testing.T) {
	var in, started pipeline.Trace
	if !in.Read([]byte(tpValid)) {
		t.Fatal("tpValid does not read")
	}
	var g pipeline.IDGen
	g.Counting("0123456789abcdef")
	started.Start(&g)
	for _, c := range []struct {
		tr                  pipeline.Trace
		text, jtrace, jspan string
	}{
		{in, " trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=- ", `"4bf92f3577b34da6a3ce929d0e0e4736"`, "null"},
		{started, " trace_id=00000000000000010000000000000002 span_id=0000000000000003 ", `"00000000000000010000000000000002"`, `"0000000000000003"`},
		{pipeline.Trace{}, " trace_id=- span_id=- ", "null", "null"},
	} {
		e := &pipeline.AccessEntry{Class: -1, Proto: "HTTP/1.1", Status: 200, ID: []byte("abc"), Trace: c.tr}
		if line := string(appendText(nil, e)); !strings.Contains(line, " id=abc"+c.text+"app=") {
			t.Errorf("text line %q lacks %q", line, c.text)
		}
		line := appendJSON(nil, e)
		var m map[string]json.RawMessage
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if string(m["trace_id"]) != c.jtrace || string(m["span_id"]) != c.jspan {
			t.Errorf("JSON line %s: trace_id %s span_id %s, want %s %s", line, m["trace_id"], m["span_id"], c.jtrace, c.jspan)
		}
	}
}
