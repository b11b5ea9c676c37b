package pipeline

import (
	"testing"
)

func TestFieldKindAliases(t *testing.T) {
	cases := map[string]uint8{
		"X_Forwarded_For": KindFwdAlias, "x-forwarded_for": KindFwdAlias, "X_FORWARDED_PROTO": KindFwdAlias,
		"x_forwarded_host": KindFwdAlias, "X-Forwarded-For": KindXFF, "X-FORWARDED-HOST": KindXFHost,
		// '-' for '_' is not an alias the other way round, and other names
		// with '_' are not touched.
		"Content_Length": KindOther, "X_Forwarded_Fox": KindOther, "Proxy_Connection": KindOther, "Transfer_Encoding": KindOther,
	}
	for name, want := range cases {
		if got := FieldKind([]byte(name)); got != want {
			t.Errorf("fieldKind(%q) = %d, want %d", name, got, want)
		}
	}
	// Every name of the table is of its kind.
	for _, n := range ForwardingNames {
		if k := FieldKind([]byte(n)); k != KindXFF && k != KindXFHost && k != KindXFProto {
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
		if e, a := NameMatch([]byte(c.name), c.canon); e != c.exact || a != c.alias {
			t.Errorf("nameMatch(%q, %q) = %v, %v, want %v, %v", c.name, c.canon, e, a, c.exact, c.alias)
		}
	}
}

func TestConnProtected(t *testing.T) {
	for _, tok := range []string{"Content-Length", "transfer-encoding", "HOST", "X-Forwarded-For", "x-forwarded-proto",
		"X-Forwarded-Host", "X_Forwarded_For", "X-Request-Id", "x_request_id"} {
		if !ConnProtected([]byte(tok), "X-Request-Id") {
			t.Errorf("%s may be removed by a Connection list", tok)
		}
	}
	for _, tok := range []string{"X-Secret", "Keep-Alive", "Cookie", "Content-Type", "X-Forwarded-Port"} {
		if ConnProtected([]byte(tok), "X-Request-Id") {
			t.Errorf("%s is protected", tok)
		}
	}
}

func TestValidHost(t *testing.T) {
	for _, h := range []string{"a.test", "A.Test:8080", "[::1]:80", "127.0.0.1", "xn--bcher-kva.example", "a_b.test"} {
		if !ValidHost([]byte(h)) {
			t.Errorf("validHost(%q) = false", h)
		}
	}
	for _, h := range []string{"", "user@a.test", "user:pw@a.test", "a.test/x", "a test", "a.test\t", "a.test?x", "a.test#x", "a\x00b"} {
		if ValidHost([]byte(h)) {
			t.Errorf("validHost(%q) = true", h)
		}
	}
}

func TestScanHead(t *testing.T) {
	cases := []struct {
		raw  string
		want HeadFacts
	}{
		{"Host: x\r\nX-A: 1\r\n\r\n", HeadFacts{Hosts: 1}},
		{"Host: x\r\nhost: y\r\n\r\n", HeadFacts{Hosts: 2}},
		{"Host: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n", HeadFacts{Hosts: 1, Length: true}},
		{"Host: x\r\nX-A: 1\r\n  2\r\n\r\n", HeadFacts{Hosts: 1, Fold: true}},
		{"Host: x\r\nX_Forwarded_For: 1\r\n\r\n", HeadFacts{Hosts: 1, Aliases: true}},
		{"Host: x\r\nX_Request_Id: 1\r\n\r\n", HeadFacts{Hosts: 1, Aliases: true}},
		{"Host: x\r\nX_Other: 1\r\n\r\n", HeadFacts{Hosts: 1}},
		{"Host: x\r\nsentry-load: 0.5\r\n\r\n", HeadFacts{Hosts: 1, Load: true}},
		{"Host: x\r\nSentry_Load: 0.5\r\n\r\n", HeadFacts{Hosts: 1, Aliases: true}},
		{"Host: x\r\nKeep-Alive: 5\r\n\r\n", HeadFacts{Hosts: 1, Hop: true}},
		{"Host: x\r\nExpect: 100-continue\r\n\r\n", HeadFacts{Hosts: 1, Hop: true}},
		{"Host: x\r\nUpgrade: h2c\r\n\r\n", HeadFacts{Hosts: 1, Hop: true}},
		{"Host: x\r\nConnection: close, X-A\r\n\r\n", HeadFacts{Hosts: 1, ConnOther: true, Close: true, Hop: true}},
		{"Host: x\r\nConnection: keep-alive\r\nConnection: Upgrade\r\n\r\n", HeadFacts{Hosts: 1, Upgrade: true, Hop: true}},
		{"Host: x\r\nConnection: X-A\r\nConnection: content-length\r\n\r\n", HeadFacts{Hosts: 1, ConnOther: true, ConnBad: true, Hop: true}},
		{"Host: x\r\nConnection: ,, x_request_id ,\r\n\r\n", HeadFacts{Hosts: 1, ConnBad: true, Hop: true}},
	}
	for _, c := range cases {
		if got := ScanHead([]byte(c.raw), "X-Request-Id", "Sentry-Load"); got != c.want {
			t.Errorf("scanHead(%q) = %+v, want %+v", c.raw, got, c.want)
		}
	}
}

func BenchmarkScanHead(b *testing.B) {
	raw := []byte("Host: example.com\r\nUser-Agent: bench\r\nAccept: */*\r\nConnection: keep-alive\r\nX-Forwarded-For: 10.0.0.1\r\n\r\n")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if f := ScanHead(raw, "X-Request-Id", "Sentry-Load"); f.Hosts != 1 {
			b.Fatal(f)
		}
	}
}
