package proxy

import (
	"bufio"
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/sentry-proxy/sentry/policy"
)

// FuzzRequestHead feeds arbitrary request heads through sentry's request
// path (routing by Host, the smuggling check, X-Forwarded-For trust,
// Connection tokens, request IDs, admission, the rejection) on an
// in-memory context whose only backend is down, so nothing leaves the
// process. Whatever fasthttp accepts must not panic sentry, and the answer
// must be one of the statuses sentry makes.
func FuzzRequestHead(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n",
		"POST /x HTTP/1.1\r\nHost: B.Example:80\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
		"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, X-Foo\r\nUpgrade: websocket\r\nX-Foo: 1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: [::1]:8080\r\nX-Forwarded-For: 203.0.113.1, 10.0.0.1, garbage\r\nX-Request-Id: abc\r\n\r\n",
		"GET /%2e%2e/a?b HTTP/1.0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	t := &testing.T{}
	h := startProxy(t, []string{"127.0.0.1:1"}, func(_ *policy.Snapshot, a *policy.App) {
		a.Hosts = []string{"a.example", "b.example", "[::1]"}
		a.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.0/8")}
	})
	f.Cleanup(h.close)
	fe := &frontend{p: h.p, addr: h.addr}
	fe.route.Store(h.p.cur.Load().routes[h.addr])
	a := h.p.cur.Load().apps[0]
	a.Pool.Eject(a.Pool.Backends()[0]) // answers come from sentry, never a socket
	f.Fuzz(func(t *testing.T, head []byte) {
		var ctx fasthttp.RequestCtx
		ctx.Init(&fasthttp.Request{}, &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 1}, nil)
		if err := ctx.Request.Header.Read(bufio.NewReader(bytes.NewReader(head))); err != nil {
			return // fasthttp refused it; the front end answers 400/431
		}
		fe.handle(&ctx)
		switch s := ctx.Response.StatusCode(); s {
		case 400, 404, 405, 411, 413, 502, 503:
		default:
			t.Fatalf("status %d for %q", s, head)
		}
	})
}
