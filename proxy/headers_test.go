package proxy

import (
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/sentry-proxy/sentry/policy"
)

func TestFieldKindAliases(t *testing.T) {
	cases := map[string]uint8{
		"X_Forwarded_For": hFwdAlias, "x-forwarded_for": hFwdAlias, "X_FORWARDED_PROTO": hFwdAlias,
		"x_forwarded_host": hFwdAlias, "X-Forwarded-For": hXFF, "X-FORWARDED-HOST": hXFHost,
		// '-' for '_' is not an alias the other way round, and other names
		// with '_' are not touched.
		"Content_Length": hOther, "X_Forwarded_Fox": hOther, "Proxy_Connection": hOther, "Transfer_Encoding": hOther,
	}
	for name, want := range cases {
		if got := fieldKind([]byte(name)); got != want {
			t.Errorf("fieldKind(%q) = %d, want %d", name, got, want)
		}
	}
	// Every name of the table is of its kind.
	for _, n := range forwardingNames {
		if k := fieldKind([]byte(n)); k != hXFF && k != hXFHost && k != hXFProto {
			t.Errorf("forwarding name %s has kind %d", n, k)
		}
	}
}

func TestNameMatch(t *testing.T) {
	cases := []struct {
		name, canon  string
		exact, alias bool
	}{
		{"X-Request-Id", "X-Request-Id", true, false},
		{"x-request-id", "X-Request-Id", true, false},
		{"X_Request_Id", "X-Request-Id", false, true},
		{"X-Request_ID", "X-Request-Id", false, true},
		{"X-Request-Ids", "X-Request-Id", false, false},
		{"X-Request-Ix", "X-Request-Id", false, false},
		{"X-Request-Id", "X_Request_Id", false, false}, // '-' never stands for '_'
	}
	for _, c := range cases {
		if e, a := nameMatch([]byte(c.name), c.canon); e != c.exact || a != c.alias {
			t.Errorf("nameMatch(%q, %q) = %v, %v, want %v, %v", c.name, c.canon, e, a, c.exact, c.alias)
		}
	}
}

func TestConnProtected(t *testing.T) {
	for _, tok := range []string{"Content-Length", "transfer-encoding", "HOST", "X-Forwarded-For", "x-forwarded-proto",
		"X-Forwarded-Host", "X_Forwarded_For", "X-Request-Id", "x_request_id"} {
		if !connProtected([]byte(tok), "X-Request-Id") {
			t.Errorf("%s may be removed by a Connection list", tok)
		}
	}
	for _, tok := range []string{"X-Secret", "Keep-Alive", "Cookie", "Content-Type", "X-Forwarded-Port"} {
		if connProtected([]byte(tok), "X-Request-Id") {
			t.Errorf("%s is protected", tok)
		}
	}
}

func TestValidHost(t *testing.T) {
	for _, h := range []string{"a.test", "A.Test:8080", "[::1]:80", "127.0.0.1", "xn--bcher-kva.example", "a_b.test"} {
		if !validHost([]byte(h)) {
			t.Errorf("validHost(%q) = false", h)
		}
	}
	for _, h := range []string{"", "user@a.test", "user:pw@a.test", "a.test/x", "a test", "a.test\t", "a.test?x", "a.test#x", "a\x00b"} {
		if validHost([]byte(h)) {
			t.Errorf("validHost(%q) = true", h)
		}
	}
}

func TestScanHead(t *testing.T) {
	cases := []struct {
		raw  string
		want headFacts
	}{
		{"Host: x\r\nX-A: 1\r\n\r\n", headFacts{hosts: 1}},
		{"Host: x\r\nhost: y\r\n\r\n", headFacts{hosts: 2}},
		{"Host: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n", headFacts{hosts: 1, length: true}},
		{"Host: x\r\nX-A: 1\r\n  2\r\n\r\n", headFacts{hosts: 1, fold: true}},
		{"Host: x\r\nX_Forwarded_For: 1\r\n\r\n", headFacts{hosts: 1, aliases: true}},
		{"Host: x\r\nX_Request_Id: 1\r\n\r\n", headFacts{hosts: 1, aliases: true}},
		{"Host: x\r\nX_Other: 1\r\n\r\n", headFacts{hosts: 1}},
		{"Host: x\r\nKeep-Alive: 5\r\n\r\n", headFacts{hosts: 1, hop: true}},
		{"Host: x\r\nExpect: 100-continue\r\n\r\n", headFacts{hosts: 1, hop: true}},
		{"Host: x\r\nUpgrade: h2c\r\n\r\n", headFacts{hosts: 1, hop: true}},
		{"Host: x\r\nConnection: close, X-A\r\n\r\n", headFacts{hosts: 1, connOther: true, close: true, hop: true}},
		{"Host: x\r\nConnection: keep-alive\r\nConnection: Upgrade\r\n\r\n", headFacts{hosts: 1, upgrade: true, hop: true}},
		{"Host: x\r\nConnection: X-A\r\nConnection: content-length\r\n\r\n", headFacts{hosts: 1, connOther: true, connBad: true, hop: true}},
		{"Host: x\r\nConnection: ,, x_request_id ,\r\n\r\n", headFacts{hosts: 1, connBad: true, hop: true}},
	}
	for _, c := range cases {
		if got := scanHead([]byte(c.raw), "X-Request-Id"); got != c.want {
			t.Errorf("scanHead(%q) = %+v, want %+v", c.raw, got, c.want)
		}
	}
}

func BenchmarkScanHead(b *testing.B) {
	raw := []byte("Host: example.com\r\nUser-Agent: bench\r\nAccept: */*\r\nConnection: keep-alive\r\nX-Forwarded-For: 10.0.0.1\r\n\r\n")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if f := scanHead(raw, "X-Request-Id"); f.hosts != 1 {
			b.Fatal(f)
		}
	}
}

// BenchmarkRelayForwarded is BenchmarkRelay from a trusted proxy that
// sends two X-Forwarded-For lines, X-Forwarded-Proto and a request ID:
// the header policy's trusted path must stay allocation-free too.
func BenchmarkRelayForwarded(b *testing.B) {
	be := fastBackend(b)
	h := startProxy(&testing.T{}, []string{be}, func(_ *policy.Snapshot, a *policy.App) {
		a.TrustedProxies = append(a.TrustedProxies, mustPrefix("127.0.0.0/8"))
	})
	defer func() { b.StopTimer(); h.close() }()
	c := benchClient(h.addr)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + h.addr + "/x")
		req.Header.Add("X-Forwarded-For", "203.0.113.9")
		req.Header.Add("X-Forwarded-For", "10.0.0.1")
		req.Header.Set("X-Forwarded-Proto", "https")
		req.Header.Set("X-Request-Id", "abc123")
		for pb.Next() {
			if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				b.Errorf("relay: %v %d", err, resp.StatusCode())
				return
			}
		}
	})
}
