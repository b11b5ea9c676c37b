//go:build linux

package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// The request-path behaviour table, run once per engine and, on each, with
// the request sent two ways: in one write (the loops may serve it
// themselves) and with the request line split over two writes (the loops
// hand the connection to fasthttp before the head is complete). Every case
// says what the client gets and what the backend received -- the backend
// is a raw TCP one that records each request as it read it.
//
// Where the engines must differ, knownDifferences (below) says so, in one
// place, and a test pins each entry; no case of the table differs: what a
// loop does not serve itself it hands to fasthttp, and what it serves
// follows the same header table (docs/request-path.md, "The header policy").

type sendMode int

const (
	oneWrite  sendMode = iota
	splitLine          // "GE" then the rest, after the loops handed the connection off
)

func (m sendMode) String() string {
	if m == splitLine {
		return "split"
	}
	return "one-write"
}

// rig is one proxy of one engine and configuration in front of a
// recording raw backend.
type rig struct {
	h      *harness
	rb     *rawBackend
	engine string
	tls    bool // the listener terminates TLS (startRigTLS)
}

// rigConfigs are the configurations the table uses, by name.
var rigConfigs = map[string]func(ctl **fakeControl) (Options, func(*policy.Snapshot, *policy.App)){
	"plain": func(**fakeControl) (Options, func(*policy.Snapshot, *policy.App)) { return Options{}, nil },
	"trusted": func(**fakeControl) (Options, func(*policy.Snapshot, *policy.App)) {
		return Options{}, func(_ *policy.Snapshot, a *policy.App) {
			a.TrustedProxies = append(a.TrustedProxies, mustPrefix("127.0.0.0/8"))
		}
	},
	"limits": func(**fakeControl) (Options, func(*policy.Snapshot, *policy.App)) {
		return Options{}, func(s *policy.Snapshot, a *policy.App) {
			s.Server.MaxHeaderBytes = 4096
			s.Server.ReadHeaderTimeout = 300 * time.Millisecond
			a.MaxBodyBytes = 100
		}
	},
	// request_buffer of 16 bytes: larger bodies stream after them.
	"smallbuf": func(**fakeControl) (Options, func(*policy.Snapshot, *policy.App)) {
		return Options{}, func(s *policy.Snapshot, _ *policy.App) { s.Server.RequestBuffer = 16 }
	},
	// gold (X-Class: gold) is admitted, everything else rejected; timing
	// entries of Server-Timing are stripped.
	"controlled": func(ctl **fakeControl) (Options, func(*policy.Snapshot, *policy.App)) {
		*ctl = &fakeControl{strip: true}
		return Options{Control: *ctl}, func(_ *policy.Snapshot, a *policy.App) { a.Admission.Mode = "batch" }
	},
	// "controlled" with the degradation signal on (the fake's load is
	// 0.937), under the header name X-Farm-Load.
	"degrade": func(ctl **fakeControl) (Options, func(*policy.Snapshot, *policy.App)) {
		*ctl = &fakeControl{strip: true}
		return Options{Control: *ctl}, func(_ *policy.Snapshot, a *policy.App) {
			a.Admission.Mode = "batch"
			a.Degradation = policy.Degradation{Enabled: true, Header: "X-Farm-Load"}
		}
	},
}

// tableBackend answers HEAD with a Content-Length and no body, and any
// other request with "ok <target>", a Server-Timing header and hop-by-hop
// headers that must not reach the client.
func tableBackend(_ *rawBackend, _, _ int, r *beReq, c net.Conn, _ *bufio.Reader) bool {
	id := r.header.Get("X-Request-Id")
	extra := "Server-Timing: cpu;dur=2, cache;desc=hit\r\nKeep-Alive: timeout=5\r\nProxy-Authenticate: Basic\r\nX-Request-Id: backend-own\r\nX-Seen-Id: " + id + "\r\n"
	if r.method == http.MethodHead {
		_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\n%sContent-Length: 5\r\n\r\n", extra)
		return err == nil
	}
	body := "ok " + r.target
	_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n%s", extra, len(body), body)
	return err == nil
}

func startRig(t testing.TB, e string, cfg string) *rig {
	t.Helper()
	rb := startRawBackend(t, tableBackend)
	var ctl *fakeControl
	opts, mod := rigConfigs[cfg](&ctl)
	h := startEngine(t, e, []string{rb.addr}, opts, mod)
	return &rig{h: h, rb: rb, engine: e}
}

// startRigTLS is startRig with the listener terminating TLS: on the
// loops engine, HTTP/1.1 over TLS 1.3 is the loops' (tlsloop_linux.go),
// on the portable engine crypto/tls's and fasthttp's.
func startRigTLS(t *testing.T, e string, cfg string) *rig {
	t.Helper()
	rb := startRawBackend(t, tableBackend)
	var ctl *fakeControl
	opts, mod := rigConfigs[cfg](&ctl)
	cf, kf := writeTestCert(t)
	h := startEngine(t, e, []string{rb.addr}, opts, func(s *policy.Snapshot, a *policy.App) {
		if mod != nil {
			mod(s, a)
		}
		a.TLS = &policy.TLS{CertFile: cf, KeyFile: kf}
	})
	return &rig{h: h, rb: rb, engine: e, tls: true}
}

// rigScheme is the scheme of the listener the table runs against
// (X-Forwarded-Proto): TestRequestTableTLS sets https while it runs.
var rigScheme = "http"

// send opens a connection and writes raw the way mode says.
func (r *rig) send(t *testing.T, mode sendMode, raw string) *tconn {
	t.Helper()
	var c *tconn
	if r.tls {
		c = dialProxyTLS(t, r.h.addr)
	} else {
		c = dialProxy(t, r.h.addr)
	}
	if mode == oneWrite {
		c.write(raw)
		return c
	}
	var d *loopDelta
	if r.engine == policy.EngineLoops {
		d = countFrom(fastOf(t, r.h))
	}
	c.write(raw[:2])
	if d != nil {
		d.waitHanded(t, 1) // the loop saw an incomplete head and handed it off
	}
	c.write(raw[2:])
	return c
}

// received returns the requests the backend read whose target contains
// tag (the run's unique path).
func (r *rig) received(tag string) []*beReq {
	var out []*beReq
	for _, q := range r.rb.all() {
		if strings.Contains(q.target, tag) {
			out = append(out, q)
		}
	}
	return out
}

var pathSeq atomic.Int64

// tableCase is one row: raw is the request, with {p} standing for a path
// unique to the run (and {n} for the length of the body after the head,
// for bodies that hide a request).
type tableCase struct {
	name   string
	cfg    string
	raw    string
	status int
	closes bool // the connection is closed after the response
	// reached: the backend receives exactly one request for {p}, which
	// check inspects; otherwise nothing containing {p} reaches it.
	reached bool
	check   func(t *testing.T, q *beReq, resp *http.Response, body string)
}

// hiddenBody builds a head whose body is a whole second request for
// /smuggled{p}: if any part of the proxy reads the body as a request, the
// backend receives it.
func hiddenBody(head string) string {
	body := "GET /smuggled{p} HTTP/1.1\r\nHost: x\r\n\r\n"
	return strings.Replace(head, "{n}", strconv.Itoa(len(body)), 1) + body
}

var hexID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// wantForwarding checks that the backend got exactly one of each
// forwarding header, with these values (id "" means a fresh sentry ID),
// and no underscore spelling of any of them.
func wantForwarding(t *testing.T, q *beReq, resp *http.Response, xff, proto, host, id string) {
	t.Helper()
	if proto == "http" {
		proto = rigScheme
	}
	for name, want := range map[string]string{"X-Forwarded-For": xff, "X-Forwarded-Proto": proto, "X-Forwarded-Host": host} {
		if vs := q.header[name]; len(vs) != 1 || vs[0] != want {
			t.Errorf("backend %s = %q, want exactly [%q]", name, vs, want)
		}
	}
	ids := q.header["X-Request-Id"]
	switch {
	case len(ids) != 1:
		t.Errorf("backend X-Request-Id = %q, want exactly one", ids)
	case id == "" && !hexID.MatchString(ids[0]):
		t.Errorf("backend X-Request-Id = %q, want a fresh 32-hex id", ids[0])
	case id != "" && ids[0] != id:
		t.Errorf("backend X-Request-Id = %q, want %q", ids[0], id)
	}
	if len(ids) == 1 && resp.Header.Get("X-Request-Id") != ids[0] {
		t.Errorf("response X-Request-Id = %q, backend got %q", resp.Header.Get("X-Request-Id"), ids[0])
	}
	for name := range q.header {
		for _, canon := range []string{"x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "x-request-id"} {
			if _, alias := pipeline.NameMatch([]byte(name), canon); alias {
				t.Errorf("backend received %s", name)
			}
		}
		// The load header (degradation signal, off in these rigs) is
		// never a client's: dropped in every spelling.
		if exact, alias := pipeline.NameMatch([]byte(name), policy.DefaultLoadHeader); exact || alias {
			t.Errorf("backend received %s: %q", name, q.header[name])
		}
	}
}

func wantAbsent(t *testing.T, q *beReq, names ...string) {
	t.Helper()
	for _, n := range names {
		if v, ok := q.header[http.CanonicalHeaderKey(n)]; ok {
			t.Errorf("backend received %s: %q", n, v)
		}
	}
}

// fwdPlainCheck: an untrusted client's request for example.com.
func fwdPlainCheck(t *testing.T, q *beReq, resp *http.Response) {
	t.Helper()
	wantForwarding(t, q, resp, "127.0.0.1", "http", "example.com", "")
	if q.header.Get("Host") != "example.com" {
		t.Errorf("backend Host = %q, want the client's", q.header.Get("Host"))
	}
}

func requestTable() []tableCase {
	fwdPlain := func(t *testing.T, q *beReq, resp *http.Response, _ string) { fwdPlainCheck(t, q, resp) }
	cases := []tableCase{
		// Forwarding headers (issue 18 items 5 and 6).
		{name: "forged forwarding headers replaced", cfg: "plain", status: 200, reached: true, check: fwdPlain,
			raw: "GET {p} HTTP/1.1\r\nHost: example.com\r\nX-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: evil\r\nX-Request-Id: forged\r\n\r\n"},
		{name: "repeated forwarding lines all replaced", cfg: "plain", status: 200, reached: true, check: fwdPlain,
			raw: "GET {p} HTTP/1.1\r\nHost: example.com\r\nX-Forwarded-For: 6.6.6.6\r\nX-Forwarded-For: 7.7.7.7\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Proto: https\r\n" +
				"X-Forwarded-Host: evil\r\nX-Forwarded-Host: evil2\r\nX-Request-Id: forged\r\nX-Request-Id: forged2\r\n\r\n"},
		{name: "underscore spellings dropped", cfg: "plain", status: 200, reached: true,
			raw: "GET {p} HTTP/1.1\r\nHost: example.com\r\nX_Forwarded_For: 6.6.6.6\r\nx_forwarded_host: evil\r\nX_FORWARDED_PROTO: https\r\nX-Forwarded_For: 5.5.5.5\r\nX_Request_Id: forged\r\nX_Other: kept\r\n\r\n",
			check: func(t *testing.T, q *beReq, resp *http.Response, body string) {
				fwdPlain(t, q, resp, body)
				kept := false
				for name, vs := range q.header {
					if strings.EqualFold(name, "X_Other") && len(vs) == 1 && vs[0] == "kept" {
						kept = true
					}
				}
				if !kept {
					t.Errorf("X_Other (not one of sentry's headers) was dropped: %v", q.header)
				}
			}},
		{name: "trusted chain merged, first trusted values kept", cfg: "trusted", status: 200, reached: true,
			raw: "GET {p} HTTP/1.1\r\nHost: example.com\r\nX-Forwarded-For: 203.0.113.9\r\nX-Forwarded-Proto:\r\nX-Forwarded-Proto: https\r\nX-Forwarded-For: 198.51.100.7\r\n" +
				"X-Forwarded-Host: orig.example\r\nX-Forwarded-Host: second.example\r\nX-Request-Id: abc123\r\nX-Request-Id: def456\r\nX_Forwarded_For: 6.6.6.6\r\n\r\n",
			check: func(t *testing.T, q *beReq, resp *http.Response, _ string) {
				wantForwarding(t, q, resp, "203.0.113.9, 198.51.100.7, 127.0.0.1", "https", "orig.example", "abc123")
			}},
		{name: "trusted peer without forwarding headers", cfg: "trusted", status: 200, reached: true,
			raw: "GET {p} HTTP/1.1\r\nHost: example.com\r\n\r\n",
			check: func(t *testing.T, q *beReq, resp *http.Response, _ string) {
				wantForwarding(t, q, resp, "127.0.0.1", "http", "example.com", "")
			}},

		// Hop-by-hop and the Connection list (issue 18 items 4 and 5).
		{name: "hop-by-hop removed both ways", cfg: "plain", status: 200, reached: true,
			raw: "GET {p} HTTP/1.1\r\nHost: x\r\nKeep-Alive: 300\r\nProxy-Authorization: Basic Zm9v\r\nTE: trailers\r\nProxy-Connection: keep-alive\r\nTrailer: X-T\r\nX-Keep: yes\r\n\r\n",
			check: func(t *testing.T, q *beReq, resp *http.Response, _ string) {
				wantAbsent(t, q, "Keep-Alive", "Proxy-Authorization", "Te", "Proxy-Connection", "Trailer", "Connection", "Upgrade")
				if q.header.Get("X-Keep") != "yes" {
					t.Errorf("end-to-end X-Keep dropped")
				}
				for _, k := range []string{"Keep-Alive", "Proxy-Authenticate"} {
					if v := resp.Header.Get(k); v != "" {
						t.Errorf("response hop-by-hop %s reached the client: %q", k, v)
					}
				}
			}},
		{name: "Connection-listed header removed", cfg: "plain", status: 200, reached: true,
			raw: "GET {p} HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, X-Secret\r\nConnection: X-Other-Secret\r\nX-Secret: s\r\nX-Other-Secret: s\r\nX-Keep: yes\r\n\r\n",
			check: func(t *testing.T, q *beReq, _ *http.Response, _ string) {
				wantAbsent(t, q, "X-Secret", "X-Other-Secret", "Connection")
				if q.header.Get("X-Keep") != "yes" {
					t.Errorf("end-to-end X-Keep dropped")
				}
			}},
		{name: "Connection: close with a listed header", cfg: "plain", status: 200, reached: true, closes: true,
			raw:   "GET {p} HTTP/1.1\r\nHost: x\r\nConnection: close, X-Secret\r\nX-Secret: s\r\n\r\n",
			check: func(t *testing.T, q *beReq, _ *http.Response, _ string) { wantAbsent(t, q, "X-Secret", "Connection") }},
		{name: "Connection: close", cfg: "plain", status: 200, reached: true, closes: true,
			raw:   "GET {p} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
			check: func(t *testing.T, q *beReq, _ *http.Response, _ string) { wantAbsent(t, q, "Connection") }},
		{name: "Upgrade the backend refuses", cfg: "plain", status: 200, reached: true,
			raw: "GET {p} HTTP/1.1\r\nHost: example.com\r\nConnection: Upgrade, X-Secret\r\nUpgrade: websocket\r\nX-Secret: s\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n",
			check: func(t *testing.T, q *beReq, resp *http.Response, _ string) {
				if q.header.Get("Upgrade") != "websocket" || q.header.Get("Connection") != "Upgrade" {
					t.Errorf("backend got Upgrade %q Connection %q", q.header.Get("Upgrade"), q.header.Get("Connection"))
				}
				wantAbsent(t, q, "X-Secret")
				fwdPlainCheck(t, q, resp)
				for _, k := range []string{"Keep-Alive", "Proxy-Authenticate"} {
					if v := resp.Header.Get(k); v != "" {
						t.Errorf("response hop-by-hop %s reached the client: %q", k, v)
					}
				}
			}},
		{name: "CL.0: Connection names Content-Length", cfg: "plain", status: 400, closes: true,
			raw: hiddenBody("POST {p} HTTP/1.1\r\nHost: x\r\nConnection: Content-Length\r\nContent-Length: {n}\r\n\r\n")},
		{name: "Connection names Transfer-Encoding", cfg: "plain", status: 400, closes: true,
			raw: "POST {p} HTTP/1.1\r\nHost: x\r\nConnection: Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
		{name: "Connection names Host", cfg: "plain", status: 400, closes: true,
			raw: "GET {p} HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, host\r\n\r\n"},
		{name: "Upgrade with a body", cfg: "plain", status: 400, closes: true,
			raw: hiddenBody("GET {p} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nContent-Length: {n}\r\n\r\n")},

		// Request targets and Host (issue 18 items 7 and 10).
		{name: "absolute-form sets Host", cfg: "plain", status: 200, reached: true,
			raw: "GET http://b.test{p}?q=1 HTTP/1.1\r\nHost: a.test\r\n\r\n",
			check: func(t *testing.T, q *beReq, resp *http.Response, _ string) {
				if q.header.Get("Host") != "b.test" || !strings.HasPrefix(q.target, "/") || !strings.HasSuffix(q.target, "?q=1") {
					t.Errorf("backend got %s with Host %q, want origin-form and Host b.test", q.target, q.header.Get("Host"))
				}
				wantForwarding(t, q, resp, "127.0.0.1", "http", "b.test", "")
			}},
		{name: "https absolute-form on a plain listener", cfg: "plain", status: 400, closes: true,
			raw: "GET https://b.test{p} HTTP/1.1\r\nHost: b.test\r\n\r\n"},
		{name: "absolute-form with userinfo", cfg: "plain", status: 400, closes: true,
			raw: "GET http://user:pw@b.test{p} HTTP/1.1\r\nHost: b.test\r\n\r\n"},
		{name: "Host with userinfo", cfg: "plain", status: 400, closes: true,
			raw: "GET {p} HTTP/1.1\r\nHost: user:pw@x\r\n\r\n"},
		{name: "duplicate Host", cfg: "plain", status: 400, closes: true,
			raw: "GET {p} HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n"},
		{name: "missing Host on HTTP/1.1", cfg: "plain", status: 400, closes: true,
			raw: "GET {p} HTTP/1.1\r\nX-A: a\r\n\r\n"},
		{name: "obs-fold", cfg: "plain", status: 400, closes: true,
			raw: "GET {p} HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n"},
		{name: "HTTP/1.0 with chunked", cfg: "plain", status: 400, closes: true,
			raw: "POST {p} HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
		{name: "CONNECT", cfg: "plain", status: 405, closes: true,
			raw: "CONNECT b.test:443 HTTP/1.1\r\nHost: b.test:443\r\nX-Tag: {p}\r\n\r\n"},
		{name: "asterisk-form other than OPTIONS", cfg: "plain", status: 400, closes: true,
			raw: "GET * HTTP/1.1\r\nHost: x\r\nX-Tag: {p}\r\n\r\n"},
		{name: "PRI on a plain listener", cfg: "plain", status: 400, closes: true,
			raw: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"},
		{name: "HTTP/1.0 without Host", cfg: "plain", status: 400, closes: true,
			raw: "GET {p} HTTP/1.0\r\n\r\n"},

		// Smuggling shapes and limits: 400/431/413/408.
		{name: "CL and TE", cfg: "plain", status: 400, closes: true,
			raw: "POST {p} HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
		{name: "TE and CL", cfg: "plain", status: 400, closes: true,
			raw: "POST {p} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n"},
		{name: "conflicting CL", cfg: "plain", status: 400, closes: true,
			raw: "POST {p} HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde"},
		{name: "negative CL", cfg: "plain", status: 400, closes: true,
			raw: "POST {p} HTTP/1.1\r\nHost: x\r\nContent-Length: -4\r\n\r\n"},
		{name: "unknown TE", cfg: "plain", status: 400, closes: true,
			raw: "POST {p} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"},
		{name: "length body relayed as sent", cfg: "plain", status: 200, reached: true,
			raw: "POST {p} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
			check: func(t *testing.T, q *beReq, _ *http.Response, _ string) {
				if q.header.Get("Content-Length") != "5" || q.header.Get("Transfer-Encoding") != "" || string(q.body) != "hello" {
					t.Errorf("backend framing CL=%q TE=%q body %q", q.header.Get("Content-Length"), q.header.Get("Transfer-Encoding"), q.body)
				}
			}},
		// A small chunked body is buffered (server.request_buffer) and sent
		// whole with its length, as nginx does: the same bytes, one framing.
		{name: "chunked body buffered and relayed with its length", cfg: "plain", status: 200, reached: true,
			raw: "POST {p} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
			check: func(t *testing.T, q *beReq, _ *http.Response, _ string) {
				if q.header.Get("Content-Length") != "5" || q.header.Get("Transfer-Encoding") != "" || string(q.body) != "hello" {
					t.Errorf("backend framing CL=%q TE=%q body %q", q.header.Get("Content-Length"), q.header.Get("Transfer-Encoding"), q.body)
				}
			}},
		// Trailers of a chunked body arrive after the header policy ran:
		// they are dropped, never forwarded as headers (nginx does not
		// forward request trailers either).
		{name: "chunked trailers dropped", cfg: "plain", status: 200, reached: true,
			raw: "POST {p} HTTP/1.1\r\nHost: example.com\r\nX-Keep: yes\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n" +
				"X_Forwarded_For: 6.6.6.6\r\nX_Request_Id: forged\r\nUpgrade: h2c\r\nX-Forwarded-Host: evil.example\r\nX-Request-Id: forged\r\nX-Keep: evil\r\nX-Trail: t\r\nX-Keep: evil2\r\n\r\n",
			check: func(t *testing.T, q *beReq, resp *http.Response, _ string) {
				fwdPlainCheck(t, q, resp)
				wantAbsent(t, q, "Upgrade", "X-Trail", "Sentry Trailer Mark")
				if vs := q.header["X-Keep"]; len(vs) != 1 || vs[0] != "yes" {
					t.Errorf("backend X-Keep = %q, want the head's [yes] only", vs)
				}
				if q.header.Get("Content-Length") != "5" || string(q.body) != "hello" {
					t.Errorf("backend framing CL=%q body %q", q.header.Get("Content-Length"), q.body)
				}
			}},
		{name: "trusted: trailer X-Forwarded-For does not join the chain", cfg: "trusted", status: 200, reached: true,
			raw: "POST {p} HTTP/1.1\r\nHost: example.com\r\nX-Forwarded-For: 203.0.113.9\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n" +
				"X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: https\r\n\r\n",
			check: func(t *testing.T, q *beReq, resp *http.Response, _ string) {
				wantForwarding(t, q, resp, "203.0.113.9, 127.0.0.1", "http", "example.com", "")
			}},
		{name: "streamed chunked body: trailers not forwarded", cfg: "smallbuf", status: 200, reached: true,
			raw: "POST {p} HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n\r\n14\r\n01234567890123456789\r\n14\r\nabcdefghijabcdefghij\r\n0\r\n" +
				"X_Forwarded_For: 6.6.6.6\r\nUpgrade: h2c\r\nX-Forwarded-Host: evil.example\r\nX-Trail: t\r\n\r\n",
			check: func(t *testing.T, q *beReq, resp *http.Response, _ string) {
				fwdPlainCheck(t, q, resp)
				wantAbsent(t, q, "Upgrade", "X-Trail", "Sentry Trailer Mark")
				if len(q.trailer) != 0 {
					t.Errorf("backend received trailers %q", q.trailer)
				}
				if q.header.Get("Transfer-Encoding") != "chunked" || string(q.body) != "01234567890123456789abcdefghijabcdefghij" {
					t.Errorf("backend framing TE=%q body %q", q.header.Get("Transfer-Encoding"), q.body)
				}
			}},
		{name: "malformed chunk past the buffer", cfg: "smallbuf", status: 400, closes: true,
			raw: "POST {p} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n14\r\n01234567890123456789\r\nzz\r\nhello\r\n0\r\n\r\n"},
		{name: "malformed chunked body", cfg: "plain", status: 400, closes: true,
			raw: "POST {p} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"},
		{name: "header too large", cfg: "limits", status: 431, closes: true,
			raw: "GET {p} HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 8000) + "\r\n\r\n"},
		{name: "body over max_body_bytes", cfg: "limits", status: 413, closes: true,
			raw: "POST {p} HTTP/1.1\r\nHost: x\r\nContent-Length: 200\r\n\r\n" + strings.Repeat("b", 200)},
		{name: "slow head", cfg: "limits", status: 408, closes: true,
			raw: "GET {p} HTTP/1.1\r\nHost: x\r\n"},

		// Rejections, Server-Timing, HEAD.
		{name: "admission rejection", cfg: "controlled", status: 503,
			raw: "GET {p} HTTP/1.1\r\nHost: x\r\n\r\n",
			check: func(t *testing.T, _ *beReq, resp *http.Response, body string) {
				if resp.Header.Get("Retry-After") != "3" || resp.Header.Get("X-Sentry-Reject") != "rejected_test" || body != "sentry: overloaded, retry later\n" {
					t.Errorf("rejection: %v %q", resp.Header, body)
				}
			}},
		// A gRPC request's rejection is gRPC's (pipeline.ReplyFor): 200,
		// grpc-status 14 (the default reject.grpc_status), the message,
		// and the pushback of the same predicted wait (3 s) in ms.
		{name: "gRPC admission rejection", cfg: "controlled", status: 200,
			raw: "POST {p} HTTP/1.1\r\nHost: x\r\nContent-Type: application/grpc+proto\r\nContent-Length: 5\r\n\r\nhello",
			check: func(t *testing.T, _ *beReq, resp *http.Response, body string) {
				h := resp.Header
				if h.Get("Content-Type") != "application/grpc" || h.Get("Grpc-Status") != "14" || h.Get("Grpc-Message") != "sentry: overloaded, retry later" ||
					h.Get("Grpc-Retry-Pushback-Ms") != "3000" || h.Get("Retry-After") != "" || h.Get("X-Sentry-Reject") != "rejected_test" || body != "" || resp.ContentLength != 0 {
					t.Errorf("gRPC rejection: %v %q", h, body)
				}
			}},
		{name: "grpc-web rejection stays HTTP", cfg: "controlled", status: 503,
			raw: "POST {p} HTTP/1.1\r\nHost: x\r\nContent-Type: application/grpc-web\r\nContent-Length: 5\r\n\r\nhello",
			check: func(t *testing.T, _ *beReq, resp *http.Response, body string) {
				if resp.Header.Get("Grpc-Status") != "" || resp.Header.Get("Retry-After") != "3" {
					t.Errorf("grpc-web rejection: %v %q", resp.Header, body)
				}
			}},
		// A rejected request whose body was read whole keeps its
		// connection, on both engines.
		{name: "rejected POST with a buffered body keeps the connection", cfg: "controlled", status: 503,
			raw: "POST {p} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"},
		{name: "rejected chunked POST keeps the connection", cfg: "controlled", status: 503,
			raw: "POST {p} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
		{name: "HEAD rejection has no body", cfg: "controlled", status: 503,
			raw: "HEAD {p} HTTP/1.1\r\nHost: x\r\n\r\n",
			check: func(t *testing.T, _ *beReq, resp *http.Response, body string) {
				if body != "" || resp.ContentLength != int64(len("sentry: overloaded, retry later\n")) {
					t.Errorf("HEAD rejection: Content-Length %d body %q", resp.ContentLength, body)
				}
			}},
		{name: "Server-Timing stripped of timing entries", cfg: "controlled", status: 200, reached: true,
			raw: "GET {p} HTTP/1.1\r\nHost: x\r\nX-Class: gold\r\n\r\n",
			check: func(t *testing.T, _ *beReq, resp *http.Response, _ string) {
				if st := resp.Header.Values("Server-Timing"); len(st) != 1 || st[0] != "cache;desc=hit" {
					t.Errorf("Server-Timing to the client = %q", st)
				}
			}},
		{name: "Server-Timing passed when not stripped", cfg: "plain", status: 200, reached: true,
			raw: "GET {p} HTTP/1.1\r\nHost: x\r\n\r\n",
			check: func(t *testing.T, _ *beReq, resp *http.Response, body string) {
				if st := resp.Header.Get("Server-Timing"); st != "cpu;dur=2, cache;desc=hit" {
					t.Errorf("Server-Timing to the client = %q", st)
				}
				if !strings.HasPrefix(body, "ok /") {
					t.Errorf("body %q", body)
				}
			}},
		{name: "HEAD relayed without a body", cfg: "plain", status: 200, reached: true,
			raw: "HEAD {p} HTTP/1.1\r\nHost: x\r\n\r\n",
			check: func(t *testing.T, q *beReq, resp *http.Response, body string) {
				if q.method != "HEAD" || body != "" || resp.ContentLength != 5 {
					t.Errorf("HEAD: backend %s, Content-Length %d, body %q", q.method, resp.ContentLength, body)
				}
			}},
	}
	for _, name := range []string{"X-Forwarded-For", "x-forwarded-host", "X-Forwarded-Proto", "X-Request-Id", "X_Forwarded_For", "x_request_id"} {
		cases = append(cases,
			tableCase{name: "Connection names " + name, cfg: "plain", status: 400, closes: true,
				raw: "GET {p} HTTP/1.1\r\nHost: x\r\nConnection: " + name + "\r\n\r\n"},
			tableCase{name: "trusted: Connection names " + name, cfg: "trusted", status: 400, closes: true,
				raw: "GET {p} HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 203.0.113.9\r\nConnection: keep-alive, " + name + "\r\n\r\n"})
	}
	return cases
}

// TestRequestTable runs the request-path table on every engine, each
// request sent in one write and with its request line split.
func TestRequestTable(t *testing.T) {
	cases := requestTable()
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			rigs := map[string]*rig{}
			for _, c := range cases {
				if rigs[c.cfg] == nil {
					rigs[c.cfg] = startRig(t, e, c.cfg)
				}
			}
			for _, mode := range []sendMode{oneWrite, splitLine} {
				for _, c := range cases {
					t.Run(mode.String()+"/"+c.name, func(t *testing.T) {
						runCase(t, rigs[c.cfg], mode, c)
					})
				}
			}
		})
	}
}

// TestRequestTableTLS runs the table over TLS (HTTP/1.1, TLS 1.3): on
// the loops, every case goes through the record layer, the split ones
// through the hand-off to fasthttp over a tls13.Conn.
func TestRequestTableTLS(t *testing.T) {
	rigScheme = "https"
	defer func() { rigScheme = "http" }()
	var cases []tableCase
	for _, c := range requestTable() {
		// What only a plain listener refuses (an https absolute-form
		// target) is served here, on both engines alike.
		if !strings.Contains(c.name, "on a plain listener") {
			cases = append(cases, c)
		}
	}
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			rigs := map[string]*rig{}
			for _, c := range cases {
				if rigs[c.cfg] == nil {
					rigs[c.cfg] = startRigTLS(t, e, c.cfg)
				}
			}
			for _, mode := range []sendMode{oneWrite, splitLine} {
				for _, c := range cases {
					t.Run(mode.String()+"/"+c.name, func(t *testing.T) {
						runCase(t, rigs[c.cfg], mode, c)
					})
				}
			}
		})
	}
}

func runCase(t *testing.T, r *rig, mode sendMode, c tableCase) {
	tag := fmt.Sprintf("/t%d-%s", pathSeq.Add(1), r.engine)
	raw := strings.ReplaceAll(c.raw, "{p}", tag)
	// A refused head is counted as a client error, whoever refused it.
	reason := map[int]string{400: "bad_request", 405: "method_not_allowed"}[c.status]
	counter := r.h.p.metrics.clientErrors.WithLabelValues(r.h.addr, reason)
	before := testutil.ToFloat64(counter)
	conn := r.send(t, mode, raw)
	method := strings.Fields(raw)[0]
	resp, body, err := conn.read(method)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	if resp.StatusCode != c.status {
		t.Fatalf("status %d, want %d (body %q)", resp.StatusCode, c.status, body)
	}
	if reason != "" {
		if d := testutil.ToFloat64(counter) - before; d != 1 {
			t.Errorf("sentry_client_errors_total{reason=%q} rose by %v, want 1", reason, d)
		}
	}
	got := r.received(tag)
	var q *beReq
	if c.reached {
		// The backend has answered, so it has recorded the request.
		if len(got) != 1 || got[0].target != tag && !strings.HasPrefix(got[0].target, tag) {
			t.Fatalf("backend received %d requests for %s, want 1", len(got), tag)
		}
		q = got[0]
	} else if len(got) != 0 {
		t.Fatalf("backend received %d requests for %s (first %s %s), want none", len(got), tag, got[0].method, got[0].target)
	}
	if c.check != nil {
		c.check(t, q, resp, body)
	}
	if c.closes {
		expectClosed(t, conn)
		return
	}
	// The connection is still usable.
	resp, _ = conn.do("GET " + tag + "/again HTTP/1.1\r\nHost: x\r\nX-Class: gold\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Errorf("the next request on the connection got %d", resp.StatusCode)
	}
}

// TestPipeliningBothEngines: requests sent back to back in one write are
// answered in order, each forwarded once.
func TestPipeliningBothEngines(t *testing.T) {
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			r := startRig(t, e, "plain")
			tag := fmt.Sprintf("/pipe%d", pathSeq.Add(1))
			c := dialProxy(t, r.h.addr)
			c.write("GET " + tag + "/1 HTTP/1.1\r\nHost: x\r\n\r\nHEAD " + tag + "/2 HTTP/1.1\r\nHost: x\r\n\r\nPOST " + tag + "/3 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
			for i, m := range []string{"GET", "HEAD", "POST"} {
				resp, body, err := c.read(m)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("response %d: %v %v", i+1, resp.StatusCode, err)
				}
				want := fmt.Sprintf("ok %s/%d", tag, i+1)
				if m == "HEAD" {
					want = ""
				}
				if body != want {
					t.Errorf("response %d body %q, want %q", i+1, body, want)
				}
			}
			if n := len(r.received(tag)); n != 3 {
				t.Errorf("backend received %d requests, want 3", n)
			}
		})
	}
}

// TestAbsoluteFormRoutesByTarget: the authority of an absolute-form target
// picks the app, and that app's backend receives it as Host (RFC 9112
// §3.2.2), on every engine.
func TestAbsoluteFormRoutesByTarget(t *testing.T) {
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			ra := startRawBackend(t, tableBackend)
			rb := startRawBackend(t, tableBackend)
			h := startEngine(t, e, []string{ra.addr}, Options{}, func(s *policy.Snapshot, app *policy.App) {
				app.Hosts = []string{"a.test"}
				second := *app
				second.Name, second.Hosts, second.Backends = "b", []string{"b.test"}, policy.Backends{Static: []string{rb.addr}}
				s.Apps = append(s.Apps, &second)
			})
			resp, _ := rawRequest(t, h.addr, "GET http://b.test/x HTTP/1.1\r\nHost: a.test\r\n\r\n")
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if n := len(ra.all()); n != 0 {
				t.Errorf("app a's backend received %d requests; routing used the Host header", n)
			}
			got := rb.all()
			if len(got) != 1 || got[0].header.Get("Host") != "b.test" || got[0].target != "/x" {
				t.Fatalf("app b's backend received %+v", got)
			}
		})
	}
}

// expectClosed checks that the proxy closed the connection: EOF, or a
// reset when the client's unread bytes were still in the kernel buffer
// (a 431 for a head larger than the proxy reads).
func expectClosed(t *testing.T, c *tconn) {
	t.Helper()
	b, err := c.br.ReadByte()
	if err == io.EOF || errors.Is(err, syscall.ECONNRESET) {
		return
	}
	t.Errorf("want the connection closed, got byte %q err %v", b, err)
}

// FuzzHeaderPolicy sends random header sets, Connection lists included,
// through both engines to a raw backend. Every request is either refused
// with 400 (and nothing reaches the backend) or the backend receives it
// with exactly one of each forwarding header carrying sentry's values, no
// underscore spelling of them, and the body the client sent with exactly
// one framing: the client's own, or, for a chunked body that sentry
// buffered (server.request_buffer), its Content-Length, as nginx does.
func FuzzHeaderPolicy(f *testing.F) {
	for _, s := range [][]byte{
		{0, 0, 0, 1, 1, 2, 2, 3, 3},
		{1, 7, 6, 0, 0},            // Connection: X-Forwarded-For, split
		{0, 7, 8, 11, 12},          // Connection: Content-Length with a length
		{0, 4, 0, 5, 1, 6, 2},      // underscore spellings
		{0, 12, 11, 11, 12},        // chunked
		{0, 7, 10, 13, 13, 11, 12}, // upgrade with a body
		{1, 7, 7, 10, 3, 9, 9},
		{0, 14, 1, 11, 12, 12, 11},
	} {
		f.Add(s)
	}
	rigs := map[string]*rig{}
	for _, e := range engines {
		rigs[e] = startRig(f, e, "plain")
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 || len(in) > 64 {
			return
		}
		mode := sendMode(in[0] & 1)
		head, body, framing := fuzzHead(in[1:])
		for _, e := range engines {
			r := rigs[e]
			tag := fmt.Sprintf("/f%d-%s", pathSeq.Add(1), e)
			method := "GET"
			if framing != "" {
				method = "POST"
			}
			raw := method + " " + tag + " HTTP/1.1\r\nHost: x\r\n" + head + "\r\n" + body
			c := r.send(t, mode, raw)
			_ = c.c.SetDeadline(time.Now().Add(3 * time.Second))
			resp, _, err := c.read(method)
			if err != nil {
				t.Fatalf("%s: reading the answer to %q: %v", e, raw, err)
			}
			got := r.received(tag)
			switch resp.StatusCode {
			case 400:
				if len(got) != 0 {
					t.Fatalf("%s: 400, yet the backend received %q", e, raw)
				}
				continue
			case 200:
			default:
				t.Fatalf("%s: status %d for %q", e, resp.StatusCode, raw)
			}
			if len(got) != 1 {
				t.Fatalf("%s: backend received %d requests for %q", e, len(got), raw)
			}
			q := got[0]
			wantForwarding(t, q, resp, "127.0.0.1", "http", "x", "")
			cl, te := q.header.Get("Content-Length"), q.header.Get("Transfer-Encoding")
			switch framing {
			case "chunked":
				// Streamed as it came, or buffered and sent with its length
				// (server.request_buffer): either way one framing, same bytes.
				if !(te == "chunked" && cl == "" || te == "" && cl == "5") || string(q.body) != "hello" {
					t.Errorf("%s: chunked request reached the backend with CL=%q TE=%q body %q (%q)", e, cl, te, q.body, raw)
				}
			case "":
				if te != "" || (cl != "" && cl != "0") || len(q.body) != 0 {
					t.Errorf("%s: request without a body reached the backend with CL=%q TE=%q body %q (%q)", e, cl, te, q.body, raw)
				}
			default:
				if te != "" || cl != framing || string(q.body) != "hello"[:atoiSmall(framing)] {
					t.Errorf("%s: Content-Length %s request reached the backend with CL=%q TE=%q body %q (%q)", e, framing, cl, te, q.body, raw)
				}
			}
			if t.Failed() {
				t.Logf("request: %q", raw)
				return
			}
		}
	})
}

func atoiSmall(s string) int { n, _ := strconv.Atoi(s); return n }

var (
	fuzzNames  = []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Request-Id", "X_Forwarded_For", "x_forwarded_host", "X-Request_Id", "Connection", "Keep-Alive", "TE", "X-Other", "Content-Length", "Transfer-Encoding", "Upgrade", "Host", "Proxy-Connection", "Sentry-Load", "sentry_load"}
	fuzzValues = []string{"6.6.6.6", "evil", "https", "", "close", "keep-alive", "X-Forwarded-For", "x-forwarded-proto, X-Other", "Content-Length", "X-Request-Id", "upgrade", "chunked", "5", "websocket", "X-Other", "0", "Transfer-Encoding", "host", "X_Forwarded_Host", "upgrade, x-other"}
)

// fuzzHead turns bytes into header lines (pairs: name, value from the
// pools; Content-Length takes "5" or "0", Transfer-Encoding "chunked" or
// "gzip"), and the body matching the framing they declare: framing is
// "chunked", a Content-Length, or "" for none.
func fuzzHead(in []byte) (head, body, framing string) {
	var cls []string
	var tes []string
	var b strings.Builder
	for i := 0; i+1 < len(in); i += 2 {
		name := fuzzNames[int(in[i])%len(fuzzNames)]
		v := fuzzValues[int(in[i+1])%len(fuzzValues)]
		switch name {
		case "Content-Length":
			v = []string{"5", "0", "3"}[int(in[i+1])%3]
			cls = append(cls, v)
		case "Transfer-Encoding":
			v = []string{"chunked", "gzip"}[int(in[i+1])%2]
			tes = append(tes, v)
		}
		b.WriteString(name + ": " + v + "\r\n")
	}
	switch {
	case len(tes) > 0:
		return b.String(), "5\r\nhello\r\n0\r\n\r\n", "chunked"
	case len(cls) > 0:
		n := atoiSmall(cls[0])
		return b.String(), "hello"[:n], cls[0]
	}
	return b.String(), "", ""
}

// TestLoadHeaderEveryEngine: with the degradation signal on, an admitted
// request reaches the backend with exactly one load header, sentry's
// ("0.94; class=gold", the fake's load 0.937), whatever copies the
// client sent in any spelling; a rejected request reaches nothing; and
// over HTTP/2 the same.
func TestLoadHeaderEveryEngine(t *testing.T) {
	check := func(t *testing.T, q *beReq) {
		t.Helper()
		if vs := q.header["X-Farm-Load"]; len(vs) != 1 || vs[0] != "0.94; class=gold" {
			t.Errorf("backend X-Farm-Load = %q, want exactly [\"0.94; class=gold\"]", vs)
		}
		for name := range q.header {
			if _, alias := pipeline.NameMatch([]byte(name), "x-farm-load"); alias {
				t.Errorf("backend received %s", name)
			}
		}
	}
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			r := startRig(t, e, "degrade")
			tag := fmt.Sprintf("/load-%d-%s", pathSeq.Add(1), e)
			resp, _ := rawRequest(t, r.h.addr, "GET "+tag+" HTTP/1.1\r\nHost: x\r\nX-Class: gold\r\nX-Farm-Load: 0.00\r\nx_farm_load: 0\r\nx-farm-load: 9; class=gold\r\n\r\n")
			if resp.StatusCode != 200 {
				t.Fatalf("gold: status %d", resp.StatusCode)
			}
			got := r.received(tag)
			if len(got) != 1 {
				t.Fatalf("backend received %d requests", len(got))
			}
			check(t, got[0])
			// Bronze is rejected: no answer from the backend, no header sent.
			rtag := tag + "-bronze"
			resp, _ = rawRequest(t, r.h.addr, "GET "+rtag+" HTTP/1.1\r\nHost: x\r\nX-Farm-Load: 0.00\r\n\r\n")
			if resp.StatusCode != 503 {
				t.Fatalf("bronze: status %d, want 503", resp.StatusCode)
			}
			if n := len(r.received(rtag)); n != 0 {
				t.Errorf("rejected request reached the backend %d times", n)
			}
		})
	}
	t.Run("h2", func(t *testing.T) {
		rb := startRawBackend(t, tableBackend)
		var ctl *fakeControl
		opts, mod := rigConfigs["degrade"](&ctl)
		h := startProxyOpts(t, []string{rb.addr}, opts, func(s *policy.Snapshot, a *policy.App) {
			mod(s, a)
			a.H2C = true
		})
		r := &rig{h: h, rb: rb}
		tag := fmt.Sprintf("/load-h2-%d", pathSeq.Add(1))
		st, _ := h2cExchange1(t, h.addr, ":method", "GET", ":scheme", "http", ":authority", "a.test", ":path", tag,
			"x-class", "gold", "x-farm-load", "0.00", "x-farm-load", "1", "x_farm_load", "2")
		if st != 200 {
			t.Fatalf("status %d", st)
		}
		got := r.received(tag)
		if len(got) != 1 {
			t.Fatalf("backend received %d requests", len(got))
		}
		check(t, got[0])
	})
}

// knownDifferences are the behaviours where the engines differ on
// purpose; docs/operations.md ("Engines") lists them with these tests.
var knownDifferences = map[string]string{
	"trailer-bare-lf": "a loop refuses a backend's chunked trailer line that ends in a bare LF (502, the " +
		"connection closed): it passes the backend's bytes on as they are; fasthttp's parser reads a bare LF " +
		"as a line's end and writes its own framing and trailers, so its client gets a well-formed answer " +
		"(TestChunkedTrailerBareLF)",
	"stray-body": "a loop closes a connection whose answer had no body (HEAD, 204, 304) rather than hand it " +
		"straight to an exchange waiting at max_conns_per_backend, where a body the backend wrongly sends late " +
		"would be read as that exchange's answer; fasthttp's HostClient hands connections on itself: a HEAD " +
		"that takes the cap's last connection asks the backend to close (doBackend), a 204 or 304 cannot be " +
		"known in time (TestStrayBodyNotReadAsNextResponse)",
}

// TestHalfCloseDuringRelay: a client that closes its side (FIN) while
// its request is relayed is gone on every engine, as nginx takes it by
// default: the connection closes unanswered, while the backend still
// holds the request, and the request counts as a 499.
func TestHalfCloseDuringRelay(t *testing.T) {
	for _, e := range engines {
		for _, mode := range []sendMode{oneWrite, splitLine} {
			t.Run(e+"/"+mode.String(), func(t *testing.T) {
				arrived := make(chan struct{}, 1)
				release := make(chan struct{})
				rb := startRawBackend(t, func(_ *rawBackend, _, _ int, q *beReq, c net.Conn, _ *bufio.Reader) bool {
					arrived <- struct{}{}
					select {
					case <-release:
					case <-time.After(5 * time.Second):
					}
					_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
					return err == nil
				})
				h := startEngine(t, e, []string{rb.addr}, Options{}, nil)
				r := &rig{h: h, rb: rb, engine: e}
				c := r.send(t, mode, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
				select {
				case <-arrived:
				case <-time.After(3 * time.Second):
					t.Fatal("the request did not reach the backend")
				}
				if err := c.c.(*net.TCPConn).CloseWrite(); err != nil {
					t.Fatal(err)
				}
				// The backend is released only after the connection
				// closed, so the order cannot race.
				var once sync.Once
				free := func() { once.Do(func() { close(release) }) }
				defer free()
				_ = c.c.SetReadDeadline(time.Now().Add(3 * time.Second))
				if b, err := c.br.ReadByte(); err != io.EOF {
					t.Fatalf("want the connection closed unanswered, got %q %v", b, err)
				}
				free()
				deadline := time.Now().Add(3 * time.Second)
				var got map[string]uint64
				for {
					got = resultCounts(t, h)
					if got["code=4xx"] == 1 || time.Now().After(deadline) {
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
				if got["code=4xx"] != 1 || got["relayed"] != 0 {
					t.Errorf("results %v, want one 499 and nothing relayed", got)
				}
			})
		}
	}
}

// TestHalfCloseDuringBodyRead: on fasthttp's HTTP/1.1 front end, a
// client that closes its side after the backend's head came, while the
// rest of a body up to the stream threshold is read whole (reply), is
// gone too: the request counts once, as a 499, and the connection closes
// unanswered. An h2c backend's body is read there (an HTTP/1.1 backend's
// that small is read with its head).
func TestHalfCloseDuringBodyRead(t *testing.T) {
	const size, first = 60000, 10000
	headSent := make(chan struct{}, 1)
	release := make(chan struct{})
	be := h2cBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(size))
		_, _ = io.WriteString(w, strings.Repeat("x", first))
		w.(http.Flusher).Flush()
		headSent <- struct{}{}
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
		_, _ = io.WriteString(w, strings.Repeat("x", size-first))
	})
	h := startEngine(t, policy.EnginePortable, []string{be}, Options{}, func(_ *policy.Snapshot, a *policy.App) {
		a.Backends.Protocol = policy.ProtoH2C
	})
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /small HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-headSent:
	case <-time.After(3 * time.Second):
		t.Fatal("the request did not reach the backend")
	}
	// Give the proxy the head, so the FIN comes while the body is read;
	// seen earlier, it ends the same way.
	time.Sleep(50 * time.Millisecond)
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free()
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	var b [1]byte
	if n, err := c.Read(b[:]); err != io.EOF {
		t.Fatalf("want the connection closed unanswered, got %d bytes, %v", n, err)
	}
	free()
	deadline := time.Now().Add(3 * time.Second)
	var res map[string]uint64
	for {
		res = resultCounts(t, h)
		if res["code=4xx"] == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if res["code=4xx"] != 1 || res["relayed"] != 0 {
		t.Errorf("results %v, want one 499 and nothing relayed", res)
	}
}

// relayedCount is the number of relayed requests in the latency histogram.
func relayedCount(t *testing.T, h *harness) uint64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sentry_request_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "result" && lp.GetValue() == "relayed" {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

// TestLatencyToLastByte: every engine observes a relayed request's
// latency at the last byte it reads from the backend. The backend sends
// the head and part of a 100 KB body, then waits: once the client has
// some of those bytes, the request is not observed yet; it is once the
// body is through. Also when the loops hand the connection to fasthttp.
func TestLatencyToLastByte(t *testing.T) {
	for _, e := range engines {
		for _, mode := range []sendMode{oneWrite, splitLine} {
			t.Run(e+"/"+mode.String(), func(t *testing.T) { latencyToLastByte(t, e, mode) })
		}
	}
}

func latencyToLastByte(t *testing.T, e string, mode sendMode) {
	// first is more than fasthttp's 16 KiB write buffer, so its
	// front end flushes the head before the body is complete.
	const size, first = 100000, 20000
	rb, release := slowDownload(t, size, first)
	h := startEngine(t, e, []string{rb.addr}, Options{}, nil)
	r := &rig{h: h, rb: rb, engine: e}
	c := r.send(t, mode, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 1000)); err != nil { // of the first bytes
		t.Fatal(err)
	}
	if n := relayedCount(t, h); n != 0 {
		t.Errorf("relayed requests observed with the body in flight: %d, want 0", n)
	}
	close(release)
	if b, err := io.ReadAll(resp.Body); err != nil || len(b) != size-1000 {
		t.Fatalf("rest of the body: %d bytes, %v", len(b), err)
	}
	resp.Body.Close()
	// Observed once the body is through (bounded wait: the
	// engine observes after its last read).
	deadline := time.Now().Add(3 * time.Second)
	for relayedCount(t, h) != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := relayedCount(t, h); n != 1 {
		t.Errorf("relayed requests observed after the body: %d, want 1", n)
	}
}
