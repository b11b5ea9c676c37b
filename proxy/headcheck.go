package proxy

import (
	"bytes"

	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/valyala/fasthttp"
)

// headcheck.go: the fasthttp front end's checks of a request head and
// its framing, before the pipeline (docs/request-path.md, "The header policy").

// checkTarget checks the request line. CONNECT is refused (405: sentry is
// not a forward proxy), and so is PRI (an HTTP/2 preface on a listener
// without h2). An absolute-form target (RFC 9112 §3.2.2) sets Host, so
// routing and the Host the backend receives agree; the target becomes
// origin-form. An https:// target on a plain listener, another scheme, or
// userinfo in the authority is a 400. It returns ok (the outcome is then
// meaningless), or the outcome to answer with.
func checkTarget(req *fasthttp.Request, isTLS bool) (pipeline.Outcome, bool) {
	h := &req.Header
	switch string(h.Method()) {
	case fasthttp.MethodConnect:
		return pipeline.OutMethodNotAllowed, false
	case "PRI":
		return pipeline.OutBadRequest, false
	}
	u := h.RequestURI()
	if len(u) == 0 || u[0] == '/' {
		return pipeline.OutRelayed, true
	}
	if string(u) == "*" {
		if string(h.Method()) == fasthttp.MethodOptions {
			return pipeline.OutRelayed, true
		}
		return pipeline.OutBadRequest, false
	}
	var rest []byte
	switch {
	case len(u) > 7 && pipeline.EqFold(u[:7], "http://"):
		rest = u[7:]
	case len(u) > 8 && pipeline.EqFold(u[:8], "https://") && isTLS:
		rest = u[8:]
	default:
		return pipeline.OutBadRequest, false
	}
	end := bytes.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	if !pipeline.ValidHost(rest[:end]) {
		return pipeline.OutBadRequest, false
	}
	// The rare path: copies are fine here.
	host := append([]byte(nil), rest[:end]...)
	path := make([]byte, 0, len(rest)-end+1)
	if end == len(rest) || rest[end] != '/' {
		path = append(path, '/')
	}
	path = append(path, rest[end:]...)
	h.SetHostBytes(host)
	req.SetRequestURIBytes(path)
	return pipeline.OutRelayed, true
}

// checkHead refuses heads that parsers could read in different ways:
// Transfer-Encoding with Content-Length, HTTP/1.0 with Transfer-Encoding, repeated Host lines, obs-fold, a Host
// that is not uri-host[:port] (userinfo would become an Authorization
// header), a missing Host (on HTTP/1.0 too: the backend needs one), a
// Connection list naming a protected header, and an Upgrade request with a
// body (the body would never reach the backend and could be read as the
// next request). Like checkTarget, it returns ok, or the outcome to answer.
func checkHead(h *fasthttp.RequestHeader, f *pipeline.HeadFacts) (pipeline.Outcome, bool) {
	if f.Hosts > 1 || f.Fold || f.ConnBad {
		return pipeline.OutBadRequest, false
	}
	// Request smuggling: Transfer-Encoding with Content-Length. fasthttp
	// already refuses duplicate Content-Length and unknown encodings.
	if h.ContentLength() == -1 && f.Length {
		return pipeline.OutBadRequest, false
	}
	if !h.IsHTTP11() && h.ContentLength() == -1 {
		return pipeline.OutBadRequest, false
	}
	if !pipeline.ValidHost(h.Host()) {
		return pipeline.OutBadRequest, false
	}
	if cl := h.ContentLength(); f.Upgrade && len(h.PeekBytes(pipeline.HdrUpgrade)) > 0 && (cl > 0 || cl == -1) {
		return pipeline.OutBadRequest, false
	}
	return pipeline.OutRelayed, true
}

// checkFraming applies bodyCap to an HTTP/1.1 request with a body, before
// anything of the body is read. (Smuggling-shaped framing was refused by
// checkHead.) A refusal is written and the connection set to close.
func (p *Proxy) checkFraming(a *pipeline.App, ctx *fasthttp.RequestCtx) pipeline.Outcome {
	o := a.BodyCap(int64(ctx.Request.Header.ContentLength()))
	if o != pipeline.OutRelayed {
		ctx.SetConnectionClose()
		p.writeError(ctx, a, o)
	}
	return o
}
