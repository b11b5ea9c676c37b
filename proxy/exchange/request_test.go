package exchange

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// testApp is an app with the request ID header X-Request-Id and the load
// header Sentry-Load (its signal off: the header is dropped from clients,
// never set), trusting 10.0.0.0/8 when trusted.
func testApp(trusted bool) *pipeline.App {
	pa := &policy.App{Name: "web", RequestIDHeader: "X-Request-Id"}
	a := &pipeline.App{Policy: pa, Name: "web", ReqID: "X-Request-Id", LoadHeader: "Sentry-Load"}
	if trusted {
		pa.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
		a.Trusted = true
	}
	return a
}

func testIDs() *pipeline.IDGen {
	var ids pipeline.IDGen
	ids.Counting("0123456789abcdef")
	return &ids
}

// h1Head parses raw as the HTTP/1.1 drivers do.
func h1Head(t *testing.T, raw string) *Head {
	t.Helper()
	var rh pipeline.RawHead
	b := []byte(raw)
	if pipeline.ParseRequestHead(b, &rh) != pipeline.HeadOK {
		t.Fatalf("%q does not parse", raw)
	}
	return &Head{B: b, Raw: &rh, Body: b[rh.N:], Size: int64(len(b))}
}

// h2Head builds the head an HTTP/2 driver fills from a stream: the
// fields' names and values in one arena, no lines, Host from :authority.
func h2Head(method, path, authority string, fields ...string) *Head {
	var rh pipeline.RawHead
	var b []byte
	span := func(s string) pipeline.Span {
		sp := pipeline.Span{S: int32(len(b)), E: int32(len(b) + len(s))}
		b = append(b, s...)
		return sp
	}
	rh.Method, rh.Target, rh.Host = span(method), span(path), span(authority)
	for i := 0; i+1 < len(fields); i += 2 {
		f := &rh.Fields[rh.NFields]
		f.Name, f.Value = span(fields[i]), span(fields[i+1])
		rh.Kinds[rh.NFields] = pipeline.FieldKind([]byte(fields[i]))
		rh.NFields++
	}
	rh.ContentLength = -1
	return &Head{B: b, Raw: &rh, H2: true, TLS: true}
}

// TestAppendRequest pins the one writer of a backend's request: the
// header policy, the forwarding headers, and, for an h2 head, the
// HTTP/1.1 form its engines always gave it (Host first, cookies joined
// last, "name: value").
func TestAppendRequest(t *testing.T) {
	now := time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		trusted bool
		peer    string
		head    func(t *testing.T) *Head
		want    string
		client  string
	}{{
		name: "h1",
		peer: "198.51.100.7",
		head: func(t *testing.T) *Head {
			return h1Head(t, "POST /a?b=1 HTTP/1.1\r\nHost:x\r\nX-Forwarded-For: 1.2.3.4\r\nx_forwarded_for: 5.6.7.8\r\n"+
				"Keep-Alive: 300\r\nX-Request-Id: forged\r\nX_Request_Id: forged\r\nSentry_Load: 9\r\nCookie: a=1\r\n"+
				"X-Keep:  yes \r\nContent-Length: 4\r\n\r\nbody")
		},
		want: "POST /a?b=1 HTTP/1.1\r\nHost:x\r\nCookie: a=1\r\nX-Keep:  yes \r\nContent-Length: 4\r\n" +
			"X-Forwarded-For: 198.51.100.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: x\r\n" +
			"X-Request-Id: 0123456789abcdef0000000000000001\r\n\r\nbody",
		client: "198.51.100.7",
	}, {
		name:    "h1-trusted",
		trusted: true,
		peer:    "10.0.0.2",
		head: func(t *testing.T) *Head {
			return h1Head(t, "GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 1.2.3.4\r\nX-Forwarded-For: 10.9.9.9\r\n"+
				"X-Forwarded-Proto: https\r\nX-Request-Id: abc\r\n\r\n")
		},
		want: "GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 1.2.3.4, 10.9.9.9, 10.0.0.2\r\nX-Forwarded-Proto: https\r\n" +
			"X-Forwarded-Host: x\r\nX-Request-Id: abc\r\n\r\n",
		client: "1.2.3.4",
	}, {
		name: "h2",
		peer: "198.51.100.7",
		head: func(*testing.T) *Head {
			return h2Head("GET", "/s", "a.test", "cookie", "a=1", "x-forwarded-for", "6.6.6.6", "accept", "*/*",
				"x-request-id", "forged", "cookie", "b=2", "sentry-load", "3")
		},
		want: "GET /s HTTP/1.1\r\nHost: a.test\r\naccept: */*\r\ncookie: a=1; b=2\r\n" +
			"X-Forwarded-For: 198.51.100.7\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: a.test\r\n" +
			"X-Request-Id: 0123456789abcdef0000000000000001\r\n\r\n",
		client: "198.51.100.7",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var sc Scratch
			a, h, peer := testApp(tc.trusted), tc.head(t), netip.MustParseAddr(tc.peer)
			if c := sc.Forwarded(a, h, peer); c.String() != tc.client {
				t.Errorf("client %v, want %s", c, tc.client)
			}
			req, _ := sc.AppendRequest(nil, a, h, peer, testIDs(), new(pipeline.Trace), 0, now)
			if string(req) != tc.want {
				t.Errorf("request\n%q\nwant\n%q", req, tc.want)
			}
		})
	}
}

// TestViewH2 pins what the classifier sees of an h2 head: Host is
// :authority, and the cookie fields read as the one line HTTP/1.1 joins.
func TestViewH2(t *testing.T) {
	var sc Scratch
	v := sc.View(h2Head("GET", "/p?q=1", "a.test", "cookie", "a=1", "user-agent", "ua", "cookie", "b=\"2\""))
	if p := v.Path(); string(p) != "/p" {
		t.Errorf("Path %q", p)
	}
	for name, want := range map[string]string{"Host": "a.test", "Cookie": "a=1; b=\"2\"", "User-Agent": "ua", "X-None": ""} {
		if got := v.Peek(name); string(got) != want {
			t.Errorf("Peek(%s) = %q, want %q", name, got, want)
		}
	}
	if got := v.Cookie("b"); string(got) != "2" {
		t.Errorf("Cookie(b) = %q", got)
	}
}

// FuzzRequestLine: for every head the strict parser takes, the request
// line the writer rebuilds from the method and the target is the line the
// client sent, byte for byte.
func FuzzRequestLine(f *testing.F) {
	for _, s := range []string{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "PURGE /a/b?c=%d HTTP/1.1\r\n\r\n", "GET  / HTTP/1.1\r\n\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var rh pipeline.RawHead
		if pipeline.ParseRequestHead(b, &rh) != pipeline.HeadOK {
			return
		}
		le := bytes.IndexByte(b, '\n') + 1
		line := string(rh.Method.Of(b)) + " " + string(rh.Target.Of(b)) + " HTTP/1.1\r\n"
		if line != string(b[:le]) {
			t.Errorf("rebuilt %q, sent %q", line, b[:le])
		}
	})
}

// TestAppendRequestTrace pins trace context in the one writer of a
// backend's request (docs/tracing.md): generate replaces an absent,
// invalid or doubled traceparent with the one it starts (written after the
// request ID; every incoming traceparent and tracestate dropped, in any
// case) and keeps a valid one as it came; pass and off never write one.
// The counting generator makes the started ids 1, 2 (trace-id) and 3
// (span-id), then the request ID 4.
func TestAppendRequestTrace(t *testing.T) {
	now := time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)
	const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	const started = "Traceparent: 00-00000000000000010000000000000002-0000000000000003-01\r\n"
	const fwd = "X-Forwarded-For: 198.51.100.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: x\r\n"
	for _, tc := range []struct {
		name     string
		mode     pipeline.TraceMode
		head     func(t *testing.T) *Head
		want     string
		trace    string // the trace ID the exchange logs
		span     string
		readMode bool // read the head's traceparent first (the drivers do unless off)
	}{{
		name: "generate-absent", mode: pipeline.TraceGenerate, readMode: true,
		head: func(t *testing.T) *Head { return h1Head(t, "GET / HTTP/1.1\r\nHost: x\r\n\r\n") },
		want: "GET / HTTP/1.1\r\nHost: x\r\n" + fwd +
			"X-Request-Id: 0123456789abcdef0000000000000004\r\n" + started + "\r\n",
		trace: "00000000000000010000000000000002", span: "0000000000000003",
	}, {
		name: "generate-invalid", mode: pipeline.TraceGenerate, readMode: true,
		head: func(t *testing.T) *Head {
			return h1Head(t, "GET / HTTP/1.1\r\nHost: x\r\ntraceparent: 00-XYZ\r\nTraceState: a=1\r\nX-Keep: 1\r\n\r\n")
		},
		want: "GET / HTTP/1.1\r\nHost: x\r\nX-Keep: 1\r\n" + fwd +
			"X-Request-Id: 0123456789abcdef0000000000000004\r\n" + started + "\r\n",
		trace: "00000000000000010000000000000002", span: "0000000000000003",
	}, {
		name: "generate-two", mode: pipeline.TraceGenerate, readMode: true,
		head: func(t *testing.T) *Head {
			return h1Head(t, "GET / HTTP/1.1\r\nHost: x\r\nTraceparent: "+valid+"\r\nTRACEPARENT: "+valid+"\r\n\r\n")
		},
		want: "GET / HTTP/1.1\r\nHost: x\r\n" + fwd +
			"X-Request-Id: 0123456789abcdef0000000000000004\r\n" + started + "\r\n",
		trace: "00000000000000010000000000000002", span: "0000000000000003",
	}, {
		name: "generate-valid", mode: pipeline.TraceGenerate, readMode: true,
		head: func(t *testing.T) *Head {
			return h1Head(t, "GET / HTTP/1.1\r\nHost: x\r\ntraceparent: "+valid+"\r\ntracestate: a=1\r\n\r\n")
		},
		want: "GET / HTTP/1.1\r\nHost: x\r\ntraceparent: " + valid + "\r\ntracestate: a=1\r\n" + fwd +
			"X-Request-Id: 0123456789abcdef0000000000000001\r\n\r\n",
		trace: "4bf92f3577b34da6a3ce929d0e0e4736",
	}, {
		name: "pass-absent", mode: pipeline.TracePass, readMode: true,
		head: func(t *testing.T) *Head { return h1Head(t, "GET / HTTP/1.1\r\nHost: x\r\n\r\n") },
		want: "GET / HTTP/1.1\r\nHost: x\r\n" + fwd + "X-Request-Id: 0123456789abcdef0000000000000001\r\n\r\n",
	}, {
		name: "off-valid", mode: pipeline.TraceOff,
		head: func(t *testing.T) *Head {
			return h1Head(t, "GET / HTTP/1.1\r\nHost: x\r\ntraceparent: "+valid+"\r\n\r\n")
		},
		want: "GET / HTTP/1.1\r\nHost: x\r\ntraceparent: " + valid + "\r\n" + fwd +
			"X-Request-Id: 0123456789abcdef0000000000000001\r\n\r\n",
	}, {
		name: "h2-generate-invalid", mode: pipeline.TraceGenerate, readMode: true,
		head: func(*testing.T) *Head {
			h := h2Head("GET", "/", "x", "traceparent", "00-0-0-0", "tracestate", "a=1", "accept", "*/*")
			h.TLS = false
			return h
		},
		want: "GET / HTTP/1.1\r\nHost: x\r\naccept: */*\r\n" + fwd +
			"X-Request-Id: 0123456789abcdef0000000000000004\r\n" + started + "\r\n",
		trace: "00000000000000010000000000000002", span: "0000000000000003",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var sc Scratch
			a, h, peer := testApp(false), tc.head(t), netip.MustParseAddr("198.51.100.7")
			a.Trace = tc.mode
			sc.Forwarded(a, h, peer)
			var tr pipeline.Trace
			if tc.readMode {
				readTrace(&tr, h)
			}
			req, _ := sc.AppendRequest(nil, a, h, peer, testIDs(), &tr, 0, now)
			if string(req) != tc.want {
				t.Errorf("request\n%q\nwant\n%q", req, tc.want)
			}
			if string(tr.TraceID()) != tc.trace || string(tr.SpanID()) != tc.span {
				t.Errorf("trace %q span %q, want %q %q", tr.TraceID(), tr.SpanID(), tc.trace, tc.span)
			}
		})
	}
}
