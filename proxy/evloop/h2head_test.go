//go:build linux

package evloop

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sentry-proxy/sentry/proxy/exchange"
	"github.com/sentry-proxy/sentry/proxy/exchange/exchangetest"
	"github.com/sentry-proxy/sentry/proxy/h2srv"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// appendH2Request is how the loops once served an h2 stream: its head
// written as an HTTP/1.1 request (the request line, Host from
// :authority, the fields pipeline.H2Skip keeps, the cookies joined) and
// parsed again by the HTTP/1.1 path. Kept here as the reference the
// neutral head (streamReqHead) is held to.
func appendH2Request(b []byte, s *h2srv.Stream, reqID, load string) []byte {
	b = append(b, s.Method()...)
	b = append(b, ' ')
	b = append(b, s.Path()...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, s.Authority()...)
	b = append(b, "\r\n"...)
	cookies := 0
	for i := range s.NumFields() {
		k, v := s.Field(i)
		if string(k) == "cookie" {
			cookies++
			continue
		}
		if pipeline.H2Skip(k, reqID, load) {
			continue
		}
		b = append(append(append(append(b, k...), ": "...), v...), "\r\n"...)
	}
	if cookies > 0 {
		b = append(b, "cookie: "...)
		first := true
		for i := range s.NumFields() {
			if k, v := s.Field(i); string(k) == "cookie" {
				if !first {
					b = append(b, "; "...)
				}
				first = false
				b = append(b, v...)
			}
		}
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

// h2Streams decodes heads into h2srv streams, as a connection's core
// would surface them.
type h2Streams struct {
	c   *h2srv.Conn
	buf bytes.Buffer
	fr  *http2.Framer
	hb  bytes.Buffer
	enc *hpack.Encoder
	id  uint32
}

func newH2Streams() *h2Streams {
	s := &h2Streams{c: h2srv.NewConn(h2srv.Config{MaxHeaderListSize: 1 << 20})}
	s.fr = http2.NewFramer(&s.buf, nil)
	s.enc = hpack.NewEncoder(&s.hb)
	s.buf.WriteString(h2srv.Preface)
	s.fr.WriteSettings()
	return s
}

// stream feeds one HEADERS frame (END_STREAM) with fields and returns
// the stream it surfaced (nil: refused or malformed).
func (h *h2Streams) stream(t *testing.T, fields [][2]string) *h2srv.Stream {
	h.id += 2
	h.hb.Reset()
	for _, f := range fields {
		h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	block := h.hb.Bytes()
	first := min(len(block), 16000)
	h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: h.id + 1, BlockFragment: block[:first], EndStream: true, EndHeaders: first == len(block)})
	for rest := block[first:]; len(rest) > 0; {
		n := min(len(rest), 16000)
		h.fr.WriteContinuation(h.id+1, n == len(rest), rest[:n])
		rest = rest[n:]
	}
	if err := h.c.Feed(h.buf.Bytes()); err != nil {
		t.Fatalf("feed: %v", err)
	}
	h.buf.Reset()
	h.c.TakeOutput(nil)
	for _, e := range h.c.TakeEvents(nil) {
		if e.Kind == h2srv.EvRequest {
			return e.S
		}
	}
	return nil
}

// TestStreamReqHeadMatchesText holds the neutral head of an h2 stream to
// the HTTP/1.1 text the loops once made of it, over random heads: the
// loop takes the same streams, the backend gets the same bytes, the
// classifier and the access log see the same request. (One difference,
// at pipeline.MaxRawFields: see below.)
func TestStreamReqHeadMatchesText(t *testing.T) {
	a := exchangetest.App(t, &exchangetest.Control{})
	a.LoadHeader = "Sentry-Load"
	var routes atomic.Pointer[pipeline.Route]
	routes.Store(&pipeline.Route{Default: a})
	l := &eventLoop{ff: &Front{cfg: Config{Routes: &routes}, maxHeader: 12000}}
	now := time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)
	peer := netip.MustParseAddr("198.51.100.7")
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"host", "cookie", "cookie", "content-length", "content-type", "x-forwarded-for", "x_forwarded_for",
		"x-forwarded-proto", "x-forwarded-host", "te", "x-request-id", "x_request_id", "sentry-load", "sentry_load",
		"user-agent", "referer", "accept", "x-a", "keep-alive", "expect", "x-big", "proxy-authorization", "server-timing"}
	values := []string{"1", "0", "00", "x", "a=1", "b=\"2\"", "trailers", "application/grpc", "1.2.3.4", "a%41", "v\tw", "\x80\xff",
		strings.Repeat("v", 3000), strings.Repeat("w", 7000), strings.Repeat("0", 19), "a.test", "user:pw@a.test", "", "100-continue"}
	paths := []string{"/", "/a?b=1", "/a/../b", "/%41", "/a//b", "/a?x/../y", "*", "/a#b", "/\x80", "/s/t.u?v=w&x=y", "/a/."}
	auths := []string{"a.test", "a.test:8443", "", "user@a.test", "a b"}
	methods := []string{"GET", "HEAD", "POST", "OPTIONS", "DELETE", "PURGE"}
	pick := func(l []string) string { return l[rng.IntN(len(l))] }
	var hs *h2Streams
	taken, checked := 0, 0
	check := func(fields [][2]string) {
		s := hs.stream(t, fields)
		if s == nil {
			return // refused by the h2 core itself
		}
		checked++
		// The old way: the text, parsed and taken (takes) as the HTTP/1.1 path does.
		text := appendH2Request(nil, s, a.ReqID, a.LoadHeader)
		var th pipeline.RawHead
		sc := &cconn{n: len(text)}
		old := len(text) <= loopBufSize && pipeline.ParseRequestHead(text, &th) == pipeline.HeadOK
		if old {
			_, _, old = l.takes(sc, text, &th)
		}
		var nh pipeline.RawHead
		hd, ok := l.streamReqHead(s, a, &nh)
		if ok != old {
			// The one difference: the neutral head keeps each cookie
			// field (the text joined them), so a head whose fields,
			// cookies counted one by one, pass pipeline.MaxRawFields
			// goes to the workers, where the text way took it.
			fields := 0
			for i := range s.NumFields() {
				if k, _ := s.Field(i); string(k) == "cookie" || !pipeline.H2Skip(k, a.ReqID, a.LoadHeader) {
					fields++
				}
			}
			if !old || fields <= pipeline.MaxRawFields {
				t.Fatalf("%q: taken %v, the text way %v", text, ok, old)
			}
		}
		hs.c.Release(s)
		if !ok {
			return
		}
		taken++
		if hd.Size != int64(len(text)) {
			t.Errorf("%q: Size %d, text %d", text, hd.Size, len(text))
		}
		sc.total = len(text)
		th1 := reqHead(sc, text, &th)
		th1.TLS = true // (the stream's connection's, as the text way took it)
		var s1, s2 exchange.Scratch
		var ids1, ids2 pipeline.IDGen
		ids1.Counting("0123456789abcdef")
		ids2.Counting("0123456789abcdef")
		var tr1, tr2 pipeline.Trace
		s1.Forwarded(a, &th1, peer)
		s2.Forwarded(a, &hd, peer)
		r1, _ := s1.AppendRequest(nil, a, &th1, peer, &ids1, &tr1, 0, now)
		r2, _ := s2.AppendRequest(nil, a, &hd, peer, &ids2, &tr2, 0, now)
		if !bytes.Equal(r1, r2) {
			t.Fatalf("request\n%q\nthe text way\n%q", r2, r1)
		}
		v1, v2 := s1.View(&th1), s2.View(&hd)
		for _, name := range []string{"Host", "Cookie", "User-Agent", "Referer", "X-A", "Content-Type", "Te"} {
			if p, q := v1.Peek(name), v2.Peek(name); string(p) != string(q) {
				t.Errorf("%q: Peek(%s) = %q, the text way %q", text, name, q, p)
			}
		}
		for _, name := range []string{"a", "b"} {
			if p, q := v1.Cookie(name), v2.Cookie(name); string(p) != string(q) {
				t.Errorf("%q: Cookie(%s) = %q, the text way %q", text, name, q, p)
			}
		}
		if p, q := v1.Path(), v2.Path(); string(p) != string(q) || string(v1.Method()) != string(v2.Method()) {
			t.Errorf("%q: path or method differ: %q %q", text, p, q)
		}
	}
	for i := range 6000 {
		if i%200 == 0 {
			hs = newH2Streams()
		}
		fields := [][2]string{{":method", pick(methods)}, {":scheme", "https"}, {":path", pick(paths)}}
		if rng.IntN(8) > 0 {
			fields = append(fields, [2]string{":authority", pick(auths)})
		}
		n := rng.IntN(8)
		if rng.IntN(20) == 0 {
			n = 120 + rng.IntN(15) // around pipeline.MaxRawFields
		}
		for range n {
			name := pick(names)
			if rng.IntN(4) == 0 {
				name = fmt.Sprintf("x-f%d", rng.IntN(1000))
			}
			fields = append(fields, [2]string{name, pick(values)})
		}
		check(fields)
	}
	// At the field count's edge: 127 to 129 lines, a cookie line among them or not.
	for _, cookies := range []int{0, 1, 3} {
		for kept := 124; kept <= 130; kept++ {
			hs = newH2Streams()
			fields := [][2]string{{":method", "GET"}, {":scheme", "https"}, {":path", "/"}, {":authority", "a.test"}}
			for j := range kept {
				fields = append(fields, [2]string{fmt.Sprintf("x-f%d", j), "v"})
			}
			for range cookies {
				fields = append(fields, [2]string{"cookie", "c=1"})
			}
			check(fields)
		}
	}
	if taken < 500 || checked-taken < 500 {
		t.Errorf("%d heads checked, %d taken: the generator misses a side", checked, taken)
	}
}
