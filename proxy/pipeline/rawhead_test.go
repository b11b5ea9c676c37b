package pipeline

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// Tests of the event loop's strict head parser (rawhead.go): unit tables
// for its helpers, and fuzzers that hold it to fasthttp's reading of the
// same bytes.

func TestNormalPath(t *testing.T) {
	cases := []struct {
		path string
		want bool
	}{
		{"", true},
		{"/", true},
		{"/a", true},
		{"/a/b", true},
		{"/a/b/", true},
		{"/.a", true},
		{"/..a", true},
		{"/a.", true},
		{"/a..", true},
		{"/...", true},
		{"/a./b", true},
		{"/a/.b/c", true},
		{"/a;b=c/d", true},
		{"//", false},
		{"//a", false},
		{"/a//b", false},
		{"/a/b//", false},
		{"/.", false},
		{"/./", false},
		{"/./a", false},
		{"/a/.", false},
		{"/a/./b", false},
		{"/..", false},
		{"/../", false},
		{"/../a", false},
		{"/a/..", false},
		{"/a/../b", false},
		{"/a/b/..", false},
	}
	for _, c := range cases {
		if got := NormalPath([]byte(c.path)); got != c.want {
			t.Errorf("normalPath(%q) = %v, want %v", c.path, got, c.want)
		}
		if ref := normalPathRef(c.path); ref != c.want {
			t.Errorf("reference disagrees on %q: %v (table is wrong)", c.path, ref)
		}
	}
}

// normalPathRef is NormalPath written the obvious way: no empty, "." or
// ".." segment (a trailing slash is allowed).
func normalPathRef(p string) bool {
	if p == "" || p == "/" {
		return true
	}
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		if s == "" && i == len(segs)-1 {
			continue // trailing slash
		}
		if s == "" || s == "." || s == ".." {
			return false
		}
	}
	return true
}

func TestParseLength(t *testing.T) {
	cases := []struct {
		in   string
		n    int64
		want bool
	}{
		{"0", 0, true},
		{"7", 7, true},
		{"1234", 1234, true},
		{"000123", 123, true},
		{"999999999999999999", 999999999999999999, true}, // 18 digits
		{"1000000000000000000", 0, false},                // 19 digits
		{"", 0, false},
		{"-1", 0, false},
		{"+1", 0, false},
		{" 1", 0, false},
		{"1 ", 0, false},
		{"1a", 0, false},
		{"0x10", 0, false},
		{"1,2", 0, false},
		{"1.0", 0, false},
	}
	for _, c := range cases {
		n, ok := ParseLength([]byte(c.in))
		if ok != c.want || ok && n != c.n {
			t.Errorf("parseLength(%q) = %d, %v; want %d, %v", c.in, n, ok, c.n, c.want)
		}
	}
}

func TestCookieValue(t *testing.T) {
	cases := []struct {
		header, name string
		want         string
		found        bool
	}{
		{"a=1", "a", "1", true},
		{"a=1; b=2", "b", "2", true},
		{"a=1;b=2", "b", "2", true},
		{"a=1; a=2", "a", "1", true},
		{"ab=1; a=2", "a", "2", true},
		{"a=1", "A", "", false},
		{"a=1", "b", "", false},
		{`a="quoted"`, "a", "quoted", true},
		{`a=""`, "a", "", true},
		{`a="`, "a", `"`, true},
		{"a=", "a", "", true},
		{"a=b=c", "a", "b=c", true},
		{"flag; a=1", "a", "1", true},
		{"a = 1", "a", "1", true},
		{"a= 1 ;b=2", "a", "1", true},
		{"", "a", "", false},
		{";;;", "a", "", false},
	}
	for _, c := range cases {
		got := CookieValue([]byte(c.header), c.name)
		if (got != nil) != c.found || string(got) != c.want {
			t.Errorf("cookieValue(%q, %q) = %q (found %v), want %q (found %v)", c.header, c.name, got, got != nil, c.want, c.found)
		}
		// The classifier must see the cookie fasthttp would give it.
		if fh := fasthttpCookie(t, c.header, c.name); fh != string(got) {
			t.Errorf("cookie %q in %q: event loop sees %q, fasthttp %q", c.name, c.header, got, fh)
		}
	}
}

func fasthttpCookie(t *testing.T, header, name string) string {
	t.Helper()
	var h fasthttp.RequestHeader
	raw := "GET / HTTP/1.1\r\nHost: x\r\nCookie: " + header + "\r\n\r\n"
	if err := h.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		t.Fatalf("fasthttp refused %q: %v", raw, err)
	}
	return string(h.Cookie(name))
}

func TestFieldKind(t *testing.T) {
	cases := map[string]uint8{
		"Host": KindHost, "HOST": KindHost, "host": KindHost,
		"Content-Length": KindContentLength, "content-LENGTH": KindContentLength,
		"Transfer-Encoding": KindTransferEncoding,
		"Connection":        KindConnection,
		"Upgrade":           KindUpgrade,
		"Expect":            KindExpect,
		"X-Forwarded-For":   KindXFF, "x-forwarded-for": KindXFF,
		"X-Forwarded-Proto": KindXFProto,
		"X-Forwarded-Host":  KindXFHost,
		"Server-Timing":     KindServerTiming,
		"Keep-Alive":        KindHopByHop, "TE": KindHopByHop, "te": KindHopByHop, "Trailer": KindHopByHop,
		"Proxy-Connection": KindHopByHop, "Proxy-Authorization": KindHopByHop, "Proxy-Authenticate": KindHopByHop,
		// Near misses.
		"": KindOther, "Hosts": KindOther, "Hos": KindOther, "X-Host": KindOther, "Content-Type": KindOther,
		"Content_Length": KindOther, "Keep_Alive": KindOther, "Connections": KindOther, "X-Forwarded-Fo": KindOther,
		"X-Forwarded-Port": KindOther, "Tf": KindOther, "Expects": KindOther, "Upgrade-Insecure-Requests": KindOther,
		"Trailers": KindOther, "Server-Timings": KindOther, "Authorization": KindOther, "Cookie": KindOther,
	}
	for name, want := range cases {
		if got := FieldKind([]byte(name)); got != want {
			t.Errorf("fieldKind(%q) = %d, want %d", name, got, want)
		}
	}
	// Every hop-by-hop name the fasthttp path removes is one here too.
	for _, name := range HopByHopNames {
		if got := FieldKind([]byte(name)); got != KindHopByHop {
			t.Errorf("fieldKind(%q) = %d, want hop-by-hop", name, got)
		}
	}
}

func TestParseRequestHead(t *testing.T) {
	type want struct {
		res       ParseResult
		method    string
		target    string
		host      string
		cl        int64
		hostCount int
		flags     string // letters: c chunked, x close, k keep-alive, o other conn token, e expect, u upgrade, t te-other
	}
	cases := []struct {
		name, raw string
		want      want
	}{
		{"plain", "GET /a?b=c HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n",
			want{res: HeadOK, method: "GET", target: "/a?b=c", host: "example.com", cl: -1, hostCount: 1}},
		{"body follows", "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello",
			want{res: HeadOK, method: "POST", target: "/p", host: "h", cl: 5, hostCount: 1}},
		{"no fields", "GET / HTTP/1.1\r\n\r\n", want{res: HeadOK, method: "GET", target: "/", cl: -1}},
		{"value whitespace trimmed", "GET / HTTP/1.1\r\nHost: \t h \t\r\n\r\n",
			want{res: HeadOK, method: "GET", target: "/", host: "h", cl: -1, hostCount: 1}},
		{"two hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
			want{res: HeadOK, method: "GET", target: "/", host: "b", cl: -1, hostCount: 2}},
		{"connection tokens", "GET / HTTP/1.1\r\nHost: h\r\nConnection: Keep-Alive, close , X-Foo\r\n\r\n",
			want{res: HeadOK, method: "GET", target: "/", host: "h", cl: -1, hostCount: 1, flags: "xko"}},
		{"chunked", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked\r\n\r\n",
			want{res: HeadOK, method: "POST", target: "/", host: "h", cl: -1, hostCount: 1, flags: "c"}},
		{"gzip coding", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
			want{res: HeadOK, method: "POST", target: "/", host: "h", cl: -1, hostCount: 1, flags: "ct"}},
		{"expect and upgrade", "GET / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nUpgrade: websocket\r\n\r\n",
			want{res: HeadOK, method: "GET", target: "/", host: "h", cl: -1, hostCount: 1, flags: "eu"}},

		{"incomplete", "GET / HTTP/1.1\r\nHost: h\r\n", want{res: HeadIncomplete}},
		{"empty", "", want{res: HeadIncomplete}},
		{"bare LF", "GET / HTTP/1.1\nHost: h\n\n", want{res: HeadUnsure}},
		{"bare LF in a field", "GET / HTTP/1.1\r\nHost: h\nX: y\r\n\r\n", want{res: HeadUnsure}},
		{"HTTP/1.0", "GET / HTTP/1.0\r\nHost: h\r\n\r\n", want{res: HeadUnsure}},
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", want{res: HeadUnsure}},
		{"absolute form", "GET http://h/ HTTP/1.1\r\nHost: h\r\n\r\n", want{res: HeadUnsure}},
		{"authority form", "CONNECT h:443 HTTP/1.1\r\nHost: h\r\n\r\n", want{res: HeadUnsure}},
		{"asterisk", "OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n", want{res: HeadUnsure}},
		{"escape", "GET /%2e%2e/x HTTP/1.1\r\nHost: h\r\n\r\n", want{res: HeadUnsure}},
		{"dot segment", "GET /a/../b HTTP/1.1\r\nHost: h\r\n\r\n", want{res: HeadUnsure}},
		{"dot segment before query", "GET /a/..?x HTTP/1.1\r\nHost: h\r\n\r\n", want{res: HeadUnsure}},
		{"dots in query are fine", "GET /a?x=/../ HTTP/1.1\r\nHost: h\r\n\r\n",
			want{res: HeadOK, method: "GET", target: "/a?x=/../", host: "h", cl: -1, hostCount: 1}},
		{"empty segment", "GET //a HTTP/1.1\r\nHost: h\r\n\r\n", want{res: HeadUnsure}},
		{"backslash", "GET /a\\b HTTP/1.1\r\nHost: h\r\n\r\n", want{res: HeadUnsure}},
		{"fragment", "GET /a#b HTTP/1.1\r\nHost: h\r\n\r\n", want{res: HeadUnsure}},
		{"non-ASCII target", "GET /\xc3\xa9 HTTP/1.1\r\nHost: h\r\n\r\n", want{res: HeadUnsure}},
		{"two spaces", "GET  / HTTP/1.1\r\nHost: h\r\n\r\n", want{res: HeadUnsure}},
		{"space in target", "GET /a b HTTP/1.1\r\nHost: h\r\n\r\n", want{res: HeadUnsure}},
		{"lower-case version", "GET / http/1.1\r\nHost: h\r\n\r\n", want{res: HeadUnsure}},
		{"bad method", "G(T / HTTP/1.1\r\nHost: h\r\n\r\n", want{res: HeadUnsure}},
		{"leading CRLF", "\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", want{res: HeadUnsure}},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n", want{res: HeadUnsure}},
		{"space before colon", "GET / HTTP/1.1\r\nHost : h\r\n\r\n", want{res: HeadUnsure}},
		{"empty name", "GET / HTTP/1.1\r\n: h\r\n\r\n", want{res: HeadUnsure}},
		{"no colon", "GET / HTTP/1.1\r\nHost h\r\n\r\n", want{res: HeadUnsure}},
		{"control in value", "GET / HTTP/1.1\r\nHost: h\x00\r\n\r\n", want{res: HeadUnsure}},
		{"DEL in value", "GET / HTTP/1.1\r\nX: \x7f\r\n\r\n", want{res: HeadUnsure}},
		{"CR in value", "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", want{res: HeadUnsure}},
		{"bad length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1x\r\n\r\n", want{res: HeadUnsure}},
		{"negative length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", want{res: HeadUnsure}},
		{"conflicting lengths", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", want{res: HeadUnsure}},
		// fasthttp refuses any repeated Content-Length, equal or not.
		{"repeated length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", want{res: HeadUnsure}},
		{"too many fields", "GET / HTTP/1.1\r\n" + strings.Repeat("X: y\r\n", MaxRawFields+1) + "\r\n", want{res: HeadUnsure}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var h RawHead
			b := []byte(c.raw)
			res := ParseRequestHead(b, &h)
			if res != c.want.res {
				t.Fatalf("result %d, want %d", res, c.want.res)
			}
			if res != HeadOK {
				return
			}
			if end := strings.Index(c.raw, "\r\n\r\n") + 4; h.N != end {
				t.Errorf("n = %d, want %d", h.N, end)
			}
			if got := string(h.Method.Of(b)); got != c.want.method {
				t.Errorf("method %q, want %q", got, c.want.method)
			}
			if got := string(h.Target.Of(b)); got != c.want.target {
				t.Errorf("target %q, want %q", got, c.want.target)
			}
			if got := string(h.Host.Of(b)); got != c.want.host || h.HostCount != c.want.hostCount {
				t.Errorf("host %q x%d, want %q x%d", got, h.HostCount, c.want.host, c.want.hostCount)
			}
			if h.ContentLength != c.want.cl {
				t.Errorf("content length %d, want %d", h.ContentLength, c.want.cl)
			}
			var flags string
			for _, f := range []struct {
				on bool
				l  string
			}{{h.Chunked, "c"}, {h.ConnClose, "x"}, {h.ConnKeepAlive, "k"}, {h.ConnOther, "o"}, {h.Expect, "e"}, {h.Upgrade, "u"}, {h.TeOther, "t"}} {
				if f.on {
					flags += f.l
				}
			}
			if sortString(flags) != sortString(c.want.flags) {
				t.Errorf("flags %q, want %q", flags, c.want.flags)
			}
		})
	}
}

func sortString(s string) string {
	b := []byte(s)
	for i := range b {
		for j := i + 1; j < len(b); j++ {
			if b[j] < b[i] {
				b[i], b[j] = b[j], b[i]
			}
		}
	}
	return string(b)
}

func TestParseResponseHead(t *testing.T) {
	cases := []struct {
		name, raw string
		res       ParseResult
		status    int
		minor     int
		cl        int64
	}{
		{"ok", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc", HeadOK, 200, 1, 3},
		{"no reason", "HTTP/1.1 204\r\n\r\n", HeadOK, 204, 1, -1},
		{"empty reason", "HTTP/1.1 404 \r\n\r\n", HeadOK, 404, 1, -1},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\n\r\n", HeadOK, 200, 0, -1},
		{"interim", "HTTP/1.1 100 Continue\r\n\r\n", HeadOK, 100, 1, -1},
		{"incomplete", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n", HeadIncomplete, 0, 0, 0},
		{"HTTP/2", "HTTP/2 200 OK\r\n\r\n", HeadUnsure, 0, 0, 0},
		{"HTTP/1.2", "HTTP/1.2 200 OK\r\n\r\n", HeadUnsure, 0, 0, 0},
		{"letters in status", "HTTP/1.1 2x0 OK\r\n\r\n", HeadUnsure, 0, 0, 0},
		{"four digits", "HTTP/1.1 2000 OK\r\n\r\n", HeadUnsure, 0, 0, 0},
		{"status below 100", "HTTP/1.1 099 Low\r\n\r\n", HeadUnsure, 0, 0, 0},
		{"control in reason", "HTTP/1.1 200 O\x01K\r\n\r\n", HeadUnsure, 0, 0, 0},
		{"short", "HTTP/1.1 20\r\n\r\n", HeadUnsure, 0, 0, 0},
		{"garbage", "SPDY/3 nonsense here\r\n\r\n", HeadUnsure, 0, 0, 0},
		{"bad field", "HTTP/1.1 200 OK\r\nBad Field: x\r\n\r\n", HeadUnsure, 0, 0, 0},
		{"conflicting lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", HeadUnsure, 0, 0, 0},
		{"repeated length", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", HeadUnsure, 0, 0, 0},
	}
	for _, c := range cases {
		var h RawHead
		res := ParseResponseHead([]byte(c.raw), &h)
		if res != c.res {
			t.Errorf("%s: result %d, want %d", c.name, res, c.res)
			continue
		}
		if res == HeadOK && (h.Status != c.status || h.Minor != c.minor || h.ContentLength != c.cl) {
			t.Errorf("%s: status %d minor %d length %d; want %d %d %d", c.name, h.Status, h.Minor, h.ContentLength, c.status, c.minor, c.cl)
		}
	}
}

func TestChunkTracker(t *testing.T) {
	const (
		ends = iota // the body ends after body; after is not part of it
		more        // all consumed, not finished
		bad         // malformed
	)
	cases := []struct {
		name, body, after string
		want              int
	}{
		{"empty", "0\r\n\r\n", "", ends},
		{"two chunks", "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", "", ends},
		{"hex sizes", "a\r\n0123456789\r\nA\r\n0123456789\r\n0\r\n\r\n", "", ends},
		{"extension", "3;name=value\r\nabc\r\n0 ; last\r\n\r\n", "", ends},
		{"trailers", "1\r\nx\r\n0\r\nX-Sum: 1\r\nX-Other: 2\r\n\r\n", "", ends},
		{"followed by more", "0\r\n\r\n", "HTTP/1.1 200 OK\r\n", ends},
		{"not finished", "5\r\nhel", "", more},
		{"no final CRLF", "0\r\n", "", more},
		{"no size", "\r\nabc\r\n", "", bad},
		{"bad size", "g\r\n", "", bad},
		{"size too big", "1000000000000000\r\n", "", bad},
		{"data not followed by CRLF", "1\r\nxy\r\n", "", bad},
		{"LF only after size", "1\nx\r\n0\r\n\r\n", "", bad},
		{"control in extension", "1;\x01\r\nx\r\n", "", bad},
		// Trailer lines end in CRLF as the head's do (RFC 9112 §7.1.2):
		// a bare LF, or a CR not followed by LF, is a malformed body,
		// whichever trailer line it ends.
		{"trailer ends in bare LF", "0\r\nX-T: 1\n\r\n", "", bad},
		{"second trailer ends in bare LF", "0\r\nX-A: 1\r\nX-T: 1\n\r\n", "", bad},
		{"bare LF ends the trailers", "0\r\nX-T: 1\r\n\n", "", bad},
		{"bare LF as the last line", "0\r\n\n", "", bad},
		{"CR without LF in a trailer", "0\r\nX-T: 1\rX\r\n\r\n", "", bad},
		{"control in a trailer", "0\r\nX-T: \x01\r\n\r\n", "", bad},
		{"tab in a trailer", "0\r\nX-T:\t1\r\n\r\n", "", ends},
	}
	for _, c := range cases {
		b := []byte(c.body + c.after)
		for _, mode := range []string{"whole", "bytewise"} {
			var tr ChunkTracker
			var n int
			var done, ok bool
			if mode == "whole" {
				n, done, ok = tr.Feed(b)
			} else {
				n, done, ok = feedCuts(&tr, b, everyByte(len(b)))
			}
			switch c.want {
			case bad:
				if ok {
					t.Errorf("%s/%s: malformed body accepted (n=%d done=%v)", c.name, mode, n, done)
				}
			case more:
				if !ok || done || n != len(b) {
					t.Errorf("%s/%s: n=%d done=%v ok=%v; want all consumed, not done", c.name, mode, n, done, ok)
				}
			default:
				if !ok || !done || n != len(c.body) {
					t.Errorf("%s/%s: n=%d done=%v ok=%v; want end at %d", c.name, mode, n, done, ok, len(c.body))
				}
			}
		}
	}
}

func everyByte(n int) []int {
	cuts := make([]int, n)
	for i := range cuts {
		cuts[i] = i + 1
	}
	return cuts
}

// feedCuts feeds b in pieces ending at the given (increasing) cuts and
// returns the totals as one feed would: bytes consumed, ended, well formed.
func feedCuts(tr *ChunkTracker, b []byte, cuts []int) (n int, done, ok bool) {
	at := 0
	for _, c := range append(cuts, len(b)) {
		if c < at || c > len(b) {
			continue
		}
		m, d, o := tr.Feed(b[at:c])
		if m < 0 || m > c-at {
			panic(fmt.Sprintf("feed consumed %d of %d bytes", m, c-at))
		}
		n += m
		if !o {
			return n, false, false
		}
		if d {
			return n, true, true
		}
		if m != c-at {
			panic(fmt.Sprintf("feed stopped at %d of %d bytes without ending or failing", m, c-at))
		}
		at = c
	}
	return n, false, true
}

// encodeChunked is a simple chunked encoder: data cut into chunks of
// sizes drawn from rng, optional extensions and trailers, hex in either
// case.
func encodeChunked(data []byte, rng *rand.Rand) []byte {
	var out []byte
	for len(data) > 0 {
		k := 1 + rng.IntN(len(data))
		if rng.IntN(3) == 0 && k > 8 {
			k = 1 + rng.IntN(8)
		}
		size := fmt.Sprintf("%x", k)
		if rng.IntN(2) == 0 {
			size = strings.ToUpper(size)
		}
		if rng.IntN(4) == 0 {
			size = "0" + size // leading zero
		}
		out = append(out, size...)
		if rng.IntN(4) == 0 {
			out = append(out, ";ext=v"...)
		}
		out = append(out, "\r\n"...)
		out = append(out, data[:k]...)
		out = append(out, "\r\n"...)
		data = data[k:]
	}
	out = append(out, "0"...)
	if rng.IntN(4) == 0 {
		out = append(out, "; end"...)
	}
	out = append(out, "\r\n"...)
	for i := rng.IntN(3); i > 0; i-- {
		out = append(out, fmt.Sprintf("X-Trailer-%d: v%d\r\n", i, rng.IntN(100))...)
	}
	return append(out, "\r\n"...)
}

func FuzzChunkTracker(f *testing.F) {
	for _, s := range []string{
		"0\r\n\r\n",
		"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
		"3;a=b\r\nabc\r\n0\r\nX-Sum: 9\r\n\r\nHTTP/1.1 200 OK\r\n",
		"ffffffff\r\n",
		"1\r\nx\r\n0\r\n",
		"\r\n\r\n",
		"a\r\n0123456789\r\n",
	} {
		f.Add([]byte(s), uint64(len(s)))
	}
	f.Add([]byte(strings.Repeat("payload-", 24)), uint64(12345))
	f.Fuzz(func(t *testing.T, in []byte, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, seed>>7|1))
		cuts := func(n int) []int {
			var c []int
			for at := 0; at < n; {
				at += 1 + rng.IntN(n-at)
				c = append(c, at)
			}
			return c
		}

		// Arbitrary bytes: no panic, no more consumed than given, and the
		// same answer however the bytes are split.
		var whole ChunkTracker
		n, done, ok := whole.Feed(in)
		if n < 0 || n > len(in) || done && !ok {
			t.Fatalf("feed(%q) = %d, %v, %v", in, n, done, ok)
		}
		for _, cs := range [][]int{everyByte(len(in)), cuts(len(in))} {
			var tr ChunkTracker
			n2, done2, ok2 := feedCuts(&tr, in, cs)
			if n2 != n || done2 != done || ok2 != ok {
				t.Fatalf("%q: whole %d,%v,%v; split at %v %d,%v,%v", in, n, done, ok, cs, n2, done2, ok2)
			}
		}

		// A valid encoding of in ends exactly where the encoder stopped,
		// whatever follows and however it is split.
		enc := encodeChunked(in, rng)
		stream := append(append([]byte(nil), enc...), "0\r\n\r\nGET / HTTP/1.1\r\n"...)
		for _, cs := range [][]int{nil, everyByte(len(stream)), cuts(len(stream))} {
			var tr ChunkTracker
			n, done, ok := feedCuts(&tr, stream, cs)
			if !ok || !done || n != len(enc) {
				t.Fatalf("encoding %q split at %v: n=%d done=%v ok=%v, want end at %d", enc, cs, n, done, ok, len(enc))
			}
		}

		// Decode (an h2 stream's DATA from a chunked body) gives back in
		// exactly, however the encoding is split, and Feed's answers.
		for _, cs := range [][]int{nil, everyByte(len(enc)), cuts(len(enc))} {
			var tr ChunkTracker
			var data []byte
			at, total := 0, 0
			var done, ok bool
			for _, c := range append(cs, len(enc)) {
				var n int
				data, n, done, ok = tr.Decode(data, enc[at:c])
				total += n
				at = c
				if !ok || done {
					break
				}
			}
			if !ok || !done || total != len(enc) || !bytes.Equal(data, in) {
				t.Fatalf("decoding %q split at %v: %q (n=%d done=%v ok=%v), want %q", enc, cs, data, total, done, ok, in)
			}
		}
	})
}

func FuzzParseRequestHead(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"GET /api/items?id=3&x=y HTTP/1.1\r\nHost: api.example.com:8080\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n",
		"POST /submit HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"a\":\"hello\"}",
		"GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\nProxy-Connection: keep-alive\r\nTrailer: X-Sum\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nCookie: session=abc; theme=\"dark\"\r\nX-Class: gold\r\nX-Forwarded-For: 203.0.113.1, 10.0.0.1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
		"PUT /x HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\nabcd",
		"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost:\r\n\r\n",
		"GET / HTTP/1.1\r\nTrailer: Host\r\nHost: h\r\n\r\n",
		"GET /a/../b HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /%2e%2e/b HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /a/./b/ HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET //a HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /.well-known/x HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET http://h/ HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET / HTTP/1.0\r\n\r\n",
		"GET / HTTP/1.1\nHost: h\n\n",
		"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
		"GET / HTTP/1.1\r\nX:\tv\t\r\nY: \xff\xfe\r\n\r\n",
		"DELETE /r/1 HTTP/1.1\r\nHost: [::1]:80\r\nAuthorization: Bearer x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nX-Request-Id: abc\r\nServer-Timing: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var h RawHead
		res := ParseRequestHead(in, &h)
		if res == HeadOK {
			checkSpans(t, in, &h)
			checkAgainstFasthttp(t, in, &h)
		}
		// The response parser shares the field parser; it must be as
		// careful with the same bytes.
		var rh RawHead
		if ParseResponseHead(in, &rh) == HeadOK {
			checkSpans(t, in, &rh)
			if rh.Status < 100 || rh.Status > 999 || rh.Minor > 1 {
				t.Fatalf("response head %q: status %d minor %d", in, rh.Status, rh.Minor)
			}
		}
	})
}

// checkSpans checks that a parsed head describes the bytes it came from.
func checkSpans(t *testing.T, in []byte, h *RawHead) {
	t.Helper()
	if h.N < 4 || h.N > len(in) || string(in[h.N-4:h.N]) != "\r\n\r\n" {
		t.Fatalf("%q: head length %d", in, h.N)
	}
	in32 := func(s Span) bool { return 0 <= s.S && s.S <= s.E && int(s.E) <= h.N }
	if !in32(h.Method) || !in32(h.Target) || !in32(h.Host) {
		t.Fatalf("%q: method %v target %v host %v out of range (n=%d)", in, h.Method, h.Target, h.Host, h.N)
	}
	if h.NFields < 0 || h.NFields > MaxRawFields {
		t.Fatalf("%q: %d fields", in, h.NFields)
	}
	hosts := 0
	prev := int32(-1)
	for i := 0; i < h.NFields; i++ {
		f := h.Fields[i]
		if !in32(f.Name) || !in32(f.Value) || !in32(f.Line) {
			t.Fatalf("%q: field %d spans %+v out of range", in, i, f)
		}
		if f.Line.S != f.Name.S || f.Name.E <= f.Name.S || f.Value.S < f.Name.E+1 || f.Line.E < f.Value.E+2 {
			t.Fatalf("%q: field %d spans %+v inconsistent", in, i, f)
		}
		if in[f.Name.E] != ':' || string(in[f.Line.E-2:f.Line.E]) != "\r\n" {
			t.Fatalf("%q: field %d line %q", in, i, f.Line.Of(in))
		}
		if prev >= 0 && f.Line.S != prev {
			t.Fatalf("%q: field %d does not follow the previous line", in, i)
		}
		prev = f.Line.E
		if k := FieldKind(f.Name.Of(in)); k != h.Kinds[i] {
			t.Fatalf("%q: field %d kind %d, want %d", in, i, h.Kinds[i], k)
		}
		if h.Kinds[i] == KindHost {
			hosts++
		}
	}
	if prev >= 0 && int(prev) != h.N-2 {
		t.Fatalf("%q: last field line ends at %d, head at %d", in, prev, h.N)
	}
	if hosts != h.HostCount {
		t.Fatalf("%q: %d Host fields, hostCount %d", in, hosts, h.HostCount)
	}
}

// checkAgainstFasthttp: a head the event loop accepts is read the same way
// by fasthttp, which serves everything the loop hands off.
func checkAgainstFasthttp(t *testing.T, in []byte, h *RawHead) {
	t.Helper()
	path := h.Target.Of(in)
	if i := bytes.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	if len(path) == 0 || path[0] != '/' || !normalPathRef(string(path)) {
		t.Fatalf("%q: accepted a path that is not normal: %q", in, path)
	}
	var req fasthttp.Request
	err := req.Header.Read(bufio.NewReaderSize(bytes.NewReader(in[:h.N]), h.N+16))
	if err != nil {
		hasTrailer := false
		for i := 0; i < h.NFields; i++ {
			hasTrailer = hasTrailer || EqFold(h.Fields[i].Name.Of(in), "trailer")
		}
		switch {
		case h.TeOther:
			// fasthttp refuses codings other than chunked; the loop
			// never serves such a request (serve hands it off).
			return
		case hasTrailer && errors.Is(err, fasthttp.ErrBadTrailer):
			// fasthttp checks the names a chunked body's trailer may
			// carry; the loop serves no chunked body and drops Trailer.
			return
		}
		t.Fatalf("event loop accepts %q, fasthttp refuses it: %v", in, err)
	}
	if got, want := string(req.Header.Method()), string(h.Method.Of(in)); got != want {
		t.Fatalf("%q: method %q, fasthttp %q", in, want, got)
	}
	if got, want := string(req.Header.RequestURI()), string(h.Target.Of(in)); got != want {
		t.Fatalf("%q: request URI %q, fasthttp %q", in, want, got)
	}
	if got, want := string(req.Header.Host()), string(h.Host.Of(in)); got != want {
		t.Fatalf("%q: Host %q, fasthttp %q", in, want, got)
	}
	if !h.Chunked {
		want := h.ContentLength
		if want < 0 {
			want = -2 // fasthttp: identity body, no length
		}
		if got := int64(req.Header.ContentLength()); got != want && !(want == -2 && got == 0) {
			t.Fatalf("%q: Content-Length %d, fasthttp %d", in, h.ContentLength, got)
		}
	}
	// The classifier sees the raw path; it must be fasthttp's normalised
	// one. (With a Host fasthttp cannot parse, its URI is empty and its
	// path "/" whatever the target; the target alone is checked then.)
	var u fasthttp.URI
	if err := u.Parse(req.Header.Host(), h.Target.Of(in)); err != nil {
		if err := u.Parse(nil, h.Target.Of(in)); err != nil {
			t.Fatalf("%q: fasthttp refuses the target: %v", in, err)
		}
	}
	if got := string(u.Path()); got != string(path) {
		t.Fatalf("%q: path %q, fasthttp normalises it to %q", in, path, got)
	}
}

// TestParseKeepsContentType: the first Content-Type's value is kept (any
// case of the name), and a head without one has none.
func TestParseKeepsContentType(t *testing.T) {
	var h RawHead
	b := []byte("POST /pkg.S/M HTTP/1.1\r\nHost: a\r\ncontent-TYPE:  application/grpc+proto \r\nContent-Type: text/plain\r\nContent-Length: 0\r\n\r\n")
	if r := ParseRequestHead(b, &h); r != HeadOK {
		t.Fatalf("parse: %v", r)
	}
	if got := string(h.ContentType.Of(b)); got != "application/grpc+proto" {
		t.Errorf("ContentType = %q", got)
	}
	b = []byte("GET / HTTP/1.1\r\nHost: a\r\nContent-Typo: application/grpc\r\n\r\n")
	if r := ParseRequestHead(b, &h); r != HeadOK || h.ContentType != (Span{}) {
		t.Errorf("without Content-Type: %v, %q", r, h.ContentType.Of(b))
	}
}
