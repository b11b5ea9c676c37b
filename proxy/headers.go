package proxy

import (
	"bytes"
	"net/netip"

	"github.com/valyala/fasthttp"
)

// headers.go is the one header table of the request path and the header
// policy built on it. The event loops (rawhead.go, evloop_*_linux.go), the
// fasthttp handler (handler.go) and HTTP/2 (h2.go) all classify names with
// fieldKind and apply the policy below; doc.go ("The header policy") says
// what it does and why.

// Header names the request path looks at, by their fixed index.
const (
	hOther = iota
	hHost
	hContentLength
	hTransferEncoding
	hConnection
	hUpgrade
	hExpect
	hXFF
	hXFProto
	hXFHost
	hServerTiming
	hHopByHop // Keep-Alive, Proxy-Connection, TE, Trailer, Proxy-Authorization, Proxy-Authenticate
	hFwdAlias // X_Forwarded_For and other spellings with '_' of a forwarding header: always dropped
)

// hopByHopNames are the hop-by-hop headers (RFC 9110 §7.6.1) besides
// Connection and Upgrade: never forwarded either way. Each is of kind
// hHopByHop.
var hopByHopNames = [...]string{"Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Proxy-Authorization", "Proxy-Authenticate"}

// forwardingNames are sentry's own forwarding headers (besides the app's
// request-ID header, request_id_header): every incoming copy is removed and
// sentry adds exactly one of each.
var forwardingNames = [...]string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}

var (
	hdrXFF     = []byte("X-Forwarded-For")
	hdrXFProto = []byte("X-Forwarded-Proto")
	hdrXFHost  = []byte("X-Forwarded-Host")
	hdrUpgrade = []byte("Upgrade")
)

// fieldKind classifies a header name, case-insensitively.
func fieldKind(name []byte) uint8 {
	switch len(name) {
	case 2:
		if eqFold(name, "te") {
			return hHopByHop
		}
	case 4:
		if eqFold(name, "host") {
			return hHost
		}
	case 6:
		if eqFold(name, "expect") {
			return hExpect
		}
	case 7:
		if eqFold(name, "upgrade") {
			return hUpgrade
		}
		if eqFold(name, "trailer") {
			return hHopByHop
		}
	case 10:
		if eqFold(name, "connection") {
			return hConnection
		}
		if eqFold(name, "keep-alive") {
			return hHopByHop
		}
	case 13:
		if eqFold(name, "server-timing") {
			return hServerTiming
		}
	case 14:
		if eqFold(name, "content-length") {
			return hContentLength
		}
	case 15:
		return fwdKind(name, "x-forwarded-for", hXFF)
	case 16:
		if k := fwdKind(name, "x-forwarded-host", hXFHost); k != hOther {
			return k
		}
		if eqFold(name, "proxy-connection") {
			return hHopByHop
		}
	case 17:
		if eqFold(name, "transfer-encoding") {
			return hTransferEncoding
		}
		return fwdKind(name, "x-forwarded-proto", hXFProto)
	case 18:
		if eqFold(name, "proxy-authenticate") {
			return hHopByHop
		}
	case 19:
		if eqFold(name, "proxy-authorization") {
			return hHopByHop
		}
	}
	return hOther
}

// fwdKind returns k if name is the forwarding header canon (lower case),
// hFwdAlias if it is canon spelt with '_' for some '-', else hOther.
func fwdKind(name []byte, canon string, k uint8) uint8 {
	switch exact, alias := nameMatch(name, canon); {
	case exact:
		return k
	case alias:
		return hFwdAlias
	}
	return hOther
}

// nameMatch compares a header name with canon ignoring ASCII case: exact
// if equal, alias if equal only when each '_' in name is read as '-'
// (how CGI-style backends read names: X_Forwarded_For and X-Forwarded-For
// are both HTTP_X_FORWARDED_FOR there).
func nameMatch(name []byte, canon string) (exact, alias bool) {
	if len(name) != len(canon) {
		return false, false
	}
	under := false
	for i := 0; i < len(name); i++ {
		x, y := name[i], canon[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x == y {
			continue
		}
		if x == '_' && y == '-' {
			under = true
			continue
		}
		return false, false
	}
	return !under, under
}

// eqFold compares b with the lower-case ASCII string s, ignoring case.
func eqFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// connProtected reports whether a Connection token names a header that a
// Connection list may never remove: framing (Content-Length,
// Transfer-Encoding), Host, and sentry's forwarding headers in any
// spelling. A request that tries gets 400 (as nginx answers).
func connProtected(tok []byte, reqID string) bool {
	switch fieldKind(tok) {
	case hHost, hContentLength, hTransferEncoding, hXFF, hXFProto, hXFHost, hFwdAlias:
		return true
	}
	exact, alias := nameMatch(tok, reqID)
	return exact || alias
}

// connList walks the tokens of a Connection value, calling f for each
// non-empty one (trimmed); it stops when f returns false.
func connList(v []byte, f func(tok []byte) bool) {
	for len(v) > 0 {
		var tok []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			tok, v = bytes.TrimSpace(v[:i]), v[i+1:]
		} else {
			tok, v = bytes.TrimSpace(v), nil
		}
		if len(tok) > 0 && !f(tok) {
			return
		}
	}
}

// validHost reports whether a Host value (or the authority of an
// absolute-form target) is uri-host [":" port] (RFC 9110 §7.2): no
// userinfo ('@'), no path, no spaces or controls. fasthttp would turn
// "user@host" into an Authorization header on the way to the backend.
func validHost(h []byte) bool {
	if len(h) == 0 {
		return false
	}
	for _, c := range h {
		if !hostTable[c] {
			return false
		}
	}
	return true
}

// hostTable: unreserved, sub-delims, ':' and the IP-literal brackets, and
// '%' for pct-encoded (RFC 3986 §3.2.2).
var hostTable = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "-._~!$&'()*+,;=:[]%" {
		t[c] = true
	}
	return t
}()

// ---------------------------------------------------------------- fasthttp

// headFacts is what one pass over a request's raw head found.
type headFacts struct {
	hosts     int  // Host lines
	fold      bool // an obs-fold continuation line
	aliases   bool // an underscore spelling of a forwarding or request-ID header
	connOther bool // Connection lists a header to remove
	connBad   bool // Connection lists a protected header
	upgrade   bool // Connection lists "upgrade"
	close     bool // Connection lists "close" (fasthttp sees it only alone)
	length    bool // a Content-Length line
	hop       bool // a hop-by-hop line (Connection, Upgrade, Expect, hopByHopNames)
}

// scanHead reads the raw header lines fasthttp keeps (RawHeaders; empty
// for a request built in HTTP/2). One pass, no allocation.
func scanHead(raw []byte, reqID string) (f headFacts) {
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		if len(line) > 0 && (line[0] == ' ' || line[0] == '\t') {
			f.fold = true
			continue
		}
		c := bytes.IndexByte(line, ':')
		if c <= 0 {
			continue
		}
		name := line[:c]
		switch fieldKind(name) {
		case hHost:
			f.hosts++
		case hContentLength:
			f.length = true
		case hFwdAlias:
			f.aliases = true
		case hHopByHop, hUpgrade, hExpect:
			f.hop = true
		case hConnection:
			f.hop = true
			connList(bytes.TrimRight(line[c+1:], "\r"), func(tok []byte) bool {
				switch {
				case eqFold(tok, "close"):
					f.close = true
				case eqFold(tok, "keep-alive"):
				case eqFold(tok, "upgrade"):
					f.upgrade = true
				case connProtected(tok, reqID):
					f.connBad = true
				default:
					f.connOther = true
				}
				return true
			})
		case hOther:
			if bytes.IndexByte(name, '_') >= 0 {
				if _, alias := nameMatch(name, reqID); alias {
					f.aliases = true
				}
			}
		}
	}
	return f
}

// dropListed removes the headers a request's Connection lines name (the
// rare path: only when scanHead found some) and the underscore spellings
// of sentry's headers.
func dropListed(h *fasthttp.RequestHeader, raw []byte, reqID string) {
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		c := bytes.IndexByte(line, ':')
		if c <= 0 {
			continue
		}
		name := line[:c]
		switch fieldKind(name) {
		case hFwdAlias:
			h.DelBytes(name)
		case hConnection:
			connList(bytes.TrimRight(line[c+1:], "\r"), func(tok []byte) bool {
				if !eqFold(tok, "close") && !eqFold(tok, "keep-alive") && !eqFold(tok, "upgrade") {
					h.DelBytes(tok)
				}
				return true
			})
		case hOther:
			if _, alias := nameMatch(name, reqID); alias {
				h.DelBytes(name)
			}
		}
	}
}

// stripHopByHop removes the hop-by-hop request headers (Connection, the
// hopByHopNames, and Upgrade unless the request is an upgrade) and Expect
// (the 100-continue handshake is the front end's).
func stripHopByHop(h *fasthttp.RequestHeader, upgrade bool) {
	h.Del(fasthttp.HeaderConnection)
	for _, k := range hopByHopNames {
		h.Del(k)
	}
	if !upgrade {
		h.Del(fasthttp.HeaderUpgrade)
	}
	h.Del(fasthttp.HeaderExpect)
}

// stripHopByHopResponse removes hop-by-hop response headers.
func stripHopByHopResponse(rh *fasthttp.ResponseHeader) {
	rh.ResetConnectionClose()
	for _, k := range hopByHopNames {
		rh.Del(k)
	}
	rh.Del(fasthttp.HeaderConnection)
	rh.Del(fasthttp.HeaderUpgrade)
}

// h2Skip reports whether a header of an HTTP/2 request is left out when the
// request is copied for the HTTP/1.1 path: hop-by-hop names (x/net/http2
// refuses most already), Host (":authority" wins, RFC 9113 §8.3.1), Expect
// (answered by x/net/http2) and underscore spellings of sentry's headers.
func h2Skip(name []byte, reqID string) bool {
	switch fieldKind(name) {
	case hHost, hConnection, hUpgrade, hHopByHop, hExpect, hFwdAlias, hTransferEncoding:
		return true
	}
	_, alias := nameMatch(name, reqID)
	return alias
}

// ---------------------------------------------------------------- forwarding

// trustedFwd is what a trusted proxy sent (step 4 of the header policy):
// its X-Forwarded-For lines merged into one list, and the first non-empty
// X-Forwarded-Proto, X-Forwarded-Host and request ID (nil when none). For
// any other peer it stays empty: nothing incoming is believed.
type trustedFwd struct{ xff, proto, host, id []byte }

// forwarding is the one value of each forwarding header sentry sets.
type forwarding struct{ xff, proto, host, id []byte }

// planForwarding decides the forwarding headers of a request for every
// engine; the engines only remove the incoming copies and write these.
// The values are appended to buf (returned, grown) and sliced from it:
// X-Forwarded-For is the trusted chain (if any) followed by the peer,
// and X-Forwarded-Proto, -Host and the request ID are the trusted values
// or else sentry's (the listener's scheme, the request's Host, a fresh
// ID). in's slices may alias request memory but not buf.
func planForwarding(buf []byte, in *trustedFwd, peer netip.Addr, isTLS bool, host []byte, ids *idSource) ([]byte, forwarding) {
	buf = buf[:0]
	if len(in.xff) > 0 {
		buf = append(append(buf, in.xff...), ", "...)
	}
	buf = peer.AppendTo(buf)
	eXFF := len(buf)
	switch {
	case len(in.proto) > 0:
		buf = append(buf, in.proto...)
	case isTLS:
		buf = append(buf, "https"...)
	default:
		buf = append(buf, "http"...)
	}
	eProto := len(buf)
	if len(in.host) > 0 {
		buf = append(buf, in.host...)
	} else {
		buf = append(buf, host...)
	}
	eHost := len(buf)
	if len(in.id) > 0 {
		buf = append(buf, in.id...)
	} else {
		buf = ids.append(buf)
	}
	return buf, forwarding{xff: buf[:eXFF], proto: buf[eXFF:eProto], host: buf[eProto:eHost], id: buf[eHost:]}
}

// add adds one incoming value of kind k (hXFF, hXFProto,
// hXFHost, or hOther for the request ID) to in: X-Forwarded-For values are
// chained into chain (the caller's scratch, returned), the others keep the
// first non-empty one.
func (in *trustedFwd) add(k uint8, v []byte, chain []byte) []byte {
	if len(v) == 0 {
		return chain
	}
	switch k {
	case hXFF:
		if len(chain) > 0 {
			chain = append(chain, ", "...)
		}
		chain = append(chain, v...)
		in.xff = chain
	case hXFProto:
		if in.proto == nil {
			in.proto = v
		}
	case hXFHost:
		if in.host == nil {
			in.host = v
		}
	default:
		if in.id == nil {
			in.id = v
		}
	}
	return chain
}
