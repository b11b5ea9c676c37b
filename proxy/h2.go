package proxy

import (
	"io"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2"
)

// serveH2Conn serves one TLS connection that negotiated h2 via ALPN. It
// runs golang.org/x/net/http2 on the connection and hands each stream to
// the same request path as HTTP/1.1 (serve): same routing, admission,
// balancing, headers and metrics. Only the framing differs.
func (fe *frontend) serveH2Conn(c net.Conn) error {
	fe.h2.ServeConn(c, &http2.ServeConnOpts{
		Handler:    http.HandlerFunc(fe.serveH2),
		BaseConfig: fe.h2cfg,
	})
	return nil
}

// serveH2 adapts one h2 stream to the fasthttp request path. It costs a
// RequestCtx and a header copy per request; h2 is the secondary front end.
func (fe *frontend) serveH2(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	p := fe.p
	rt := fe.route.Load()
	peer := netip.IPv6Unspecified()
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		peer = ap.Addr().Unmap()
	}
	var ctx fasthttp.RequestCtx
	ctx.Init(&fasthttp.Request{}, net.TCPAddrFromAddrPort(netip.AddrPortFrom(peer, 0)), nil)
	req := &ctx.Request
	req.Header.SetMethod(r.Method)
	req.SetRequestURI(r.URL.RequestURI())
	req.Header.SetHost(r.Host)
	for k, vs := range r.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	rc := http.NewResponseController(w)
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		req.SetBodyStream(r.Body, int(r.ContentLength))
		if fe.bodyTimeout > 0 {
			_ = rc.SetReadDeadline(time.Now().Add(fe.bodyTimeout))
		}
	}
	if fe.writeTimeout > 0 {
		_ = rc.SetWriteDeadline(time.Now().Add(fe.writeTimeout))
	}

	a := rt.lookup(req.Header.Host())
	var o outcome
	var u *upstream
	if a == nil {
		o = outNoApp
		p.writeError(&ctx, nil, o)
	} else {
		o, u = p.serve(a, &ctx, peer, true, start, r.Context().Done(), nil)
	}
	resp := &ctx.Response
	hdr := w.Header()
	resp.Header.VisitAll(func(k, v []byte) {
		switch string(k) {
		case "Connection", "Transfer-Encoding", "Keep-Alive", "Upgrade", "Proxy-Connection":
			return
		}
		hdr.Add(string(k), string(v))
	})
	w.WriteHeader(resp.StatusCode())
	if r.Method != http.MethodHead {
		if resp.IsBodyStream() {
			_, _ = io.Copy(w, resp.BodyStream())
		} else {
			_, _ = w.Write(resp.Body())
		}
	}
	_ = resp.CloseBodyStream()
	if a != nil {
		a.m.observe(o, resp.StatusCode(), u, start)
		if rt.access {
			p.logAccess(a, &ctx, o, u, start)
		}
	}
}
