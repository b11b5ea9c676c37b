package pipeline

import (
	"bytes"
	"net/netip"
)

// headers.go is the one header table of the request path and the header
// policy built on it. Two names are the app's own, not fixed, so they are
// matched with NameMatch rather than by FieldKind: the request ID header
// (App.ReqID) and the degradation signal's load header (App.LoadHeader,
// load.go), which is dropped from client input in every spelling. The event loops (rawhead.go, package proxy/evloop), the
// fasthttp handler (handler.go) and HTTP/2 (h2.go) all classify names with
// FieldKind and apply the policy below; docs/request-path.md ("The header policy") says
// what it does and why.

// Header names the request path looks at, by their fixed index.
const (
	KindOther = iota
	KindHost
	KindContentLength
	KindTransferEncoding
	KindConnection
	KindUpgrade
	KindExpect
	KindXFF
	KindXFProto
	KindXFHost
	KindServerTiming
	KindHopByHop // Keep-Alive, Proxy-Connection, TE, Trailer, Proxy-Authorization, Proxy-Authenticate
	KindFwdAlias // X_Forwarded_For and other spellings with '_' of a forwarding header: always dropped
)

// HopByHopNames are the hop-by-hop headers (RFC 9110 §7.6.1) besides
// Connection and Upgrade: never forwarded either way. Each is of kind
// KindHopByHop.
var HopByHopNames = [...]string{"Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Proxy-Authorization", "Proxy-Authenticate"}

// ForwardingNames are sentry's own forwarding headers (besides the app's
// request-ID header, request_id_header): every incoming copy is removed and
// sentry adds exactly one of each.
var ForwardingNames = [...]string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}

var (
	HdrXFF     = []byte("X-Forwarded-For")
	HdrXFProto = []byte("X-Forwarded-Proto")
	HdrXFHost  = []byte("X-Forwarded-Host")
	HdrUpgrade = []byte("Upgrade")
)

// FieldKind classifies a header name, case-insensitively.
func FieldKind(name []byte) uint8 {
	switch len(name) {
	case 2:
		if EqFold(name, "te") {
			return KindHopByHop
		}
	case 4:
		if EqFold(name, "host") {
			return KindHost
		}
	case 6:
		if EqFold(name, "expect") {
			return KindExpect
		}
	case 7:
		if EqFold(name, "upgrade") {
			return KindUpgrade
		}
		if EqFold(name, "trailer") {
			return KindHopByHop
		}
	case 10:
		if EqFold(name, "connection") {
			return KindConnection
		}
		if EqFold(name, "keep-alive") {
			return KindHopByHop
		}
	case 13:
		if EqFold(name, "server-timing") {
			return KindServerTiming
		}
	case 14:
		if EqFold(name, "content-length") {
			return KindContentLength
		}
	case 15:
		return fwdKind(name, "x-forwarded-for", KindXFF)
	case 16:
		if k := fwdKind(name, "x-forwarded-host", KindXFHost); k != KindOther {
			return k
		}
		if EqFold(name, "proxy-connection") {
			return KindHopByHop
		}
	case 17:
		if EqFold(name, "transfer-encoding") {
			return KindTransferEncoding
		}
		return fwdKind(name, "x-forwarded-proto", KindXFProto)
	case 18:
		if EqFold(name, "proxy-authenticate") {
			return KindHopByHop
		}
	case 19:
		if EqFold(name, "proxy-authorization") {
			return KindHopByHop
		}
	}
	return KindOther
}

// fwdKind returns k if name is the forwarding header canon (lower case),
// KindFwdAlias if it is canon spelt with '_' for some '-', else KindOther.
func fwdKind(name []byte, canon string, k uint8) uint8 {
	switch exact, alias := NameMatch(name, canon); {
	case exact:
		return k
	case alias:
		return KindFwdAlias
	}
	return KindOther
}

// NameMatch compares a header name with canon ignoring ASCII case: exact
// if equal, alias if equal only when each '_' in name is read as '-'
// (how CGI-style backends read names: X_Forwarded_For and X-Forwarded-For
// are both HTTP_X_FORWARDED_FOR there).
func NameMatch(name []byte, canon string) (exact, alias bool) {
	if len(name) != len(canon) {
		return false, false
	}
	under := false
	for i := 0; i < len(name); i++ {
		x, y := foldByte(name[i]), foldByte(canon[i])
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

// EqFold compares b with the lower-case ASCII string s, ignoring case.
func EqFold(b []byte, s string) bool {
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

// ConnProtected reports whether a Connection token names a header that a
// Connection list may never remove: framing (Content-Length,
// Transfer-Encoding), Host, and sentry's forwarding headers in any
// spelling. A request that tries gets 400 (as nginx answers).
func ConnProtected(tok []byte, reqID string) bool {
	switch FieldKind(tok) {
	case KindHost, KindContentLength, KindTransferEncoding, KindXFF, KindXFProto, KindXFHost, KindFwdAlias:
		return true
	}
	exact, alias := NameMatch(tok, reqID)
	return exact || alias
}

// ConnList walks the tokens of a Connection value, calling f for each
// non-empty one (trimmed); it stops when f returns false.
func ConnList(v []byte, f func(tok []byte) bool) {
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

// ValidHost reports whether a Host value (or the authority of an
// absolute-form target) is uri-host [":" port] (RFC 9110 §7.2): no
// userinfo ('@'), no path, no spaces or controls. fasthttp would turn
// "user@host" into an Authorization header on the way to the backend.
func ValidHost(h []byte) bool {
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

// HeadFacts is what one pass over a request's raw head found.
type HeadFacts struct {
	Hosts     int  // Host lines
	Fold      bool // an obs-fold continuation line
	Aliases   bool // an underscore spelling of a forwarding or request-ID header
	ConnOther bool // Connection lists a header to remove
	ConnBad   bool // Connection lists a protected header
	Upgrade   bool // Connection lists "upgrade"
	Close     bool // Connection lists "close" (fasthttp sees it only alone)
	Length    bool // a Content-Length line
	Hop       bool // a hop-by-hop line (Connection, Upgrade, Expect, HopByHopNames)
	Load      bool // the app's load header, exactly (its '_' spelling counts in Aliases)
}

// ScanHead reads the raw header lines fasthttp keeps (RawHeaders; empty
// for a request built in HTTP/2). reqID and load are the app's request-ID
// and load headers (App.ReqID, App.LoadHeader; "" for none): an underscore
// spelling of either counts in Aliases. One pass, no allocation.
func ScanHead(raw []byte, reqID, load string) (f HeadFacts) {
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		if len(line) > 0 && (line[0] == ' ' || line[0] == '\t') {
			f.Fold = true
			continue
		}
		c := bytes.IndexByte(line, ':')
		if c <= 0 {
			continue
		}
		name := line[:c]
		switch FieldKind(name) {
		case KindHost:
			f.Hosts++
		case KindContentLength:
			f.Length = true
		case KindFwdAlias:
			f.Aliases = true
		case KindHopByHop, KindUpgrade, KindExpect:
			f.Hop = true
		case KindConnection:
			f.Hop = true
			ConnList(bytes.TrimRight(line[c+1:], "\r"), func(tok []byte) bool {
				switch {
				case EqFold(tok, "close"):
					f.Close = true
				case EqFold(tok, "keep-alive"):
				case EqFold(tok, "upgrade"):
					f.Upgrade = true
				case ConnProtected(tok, reqID):
					f.ConnBad = true
				default:
					f.ConnOther = true
				}
				return true
			})
		case KindOther:
			exactL, aliasL := NameMatch(name, load)
			f.Load = f.Load || exactL
			if bytes.IndexByte(name, '_') >= 0 {
				_, alias := NameMatch(name, reqID)
				if alias || aliasL {
					f.Aliases = true
				}
			}
		}
	}
	return f
}

// H2Skip reports whether a header of an HTTP/2 request is left out when the
// request is copied for the HTTP/1.1 path: hop-by-hop names (x/net/http2
// refuses most already), Host (":authority" wins, RFC 9113 §8.3.1), Expect
// (answered by x/net/http2), underscore spellings of sentry's headers,
// and the app's load header (load, App.LoadHeader) in any spelling.
func H2Skip(name []byte, reqID, load string) bool {
	switch FieldKind(name) {
	case KindHost, KindConnection, KindUpgrade, KindHopByHop, KindExpect, KindFwdAlias, KindTransferEncoding:
		return true
	}
	_, alias := NameMatch(name, reqID)
	exactL, aliasL := NameMatch(name, load)
	return alias || exactL || aliasL
}

// ---------------------------------------------------------------- forwarding

// TrustedFwd is what a trusted proxy sent (step 4 of the header policy):
// its X-Forwarded-For lines merged into one list, and the first non-empty
// X-Forwarded-Proto, X-Forwarded-Host and request ID (nil when none). For
// any other peer it stays empty: nothing incoming is believed.
type TrustedFwd struct{ XFF, proto, host, id []byte }

// Forwarding is the one value of each forwarding header sentry sets.
type Forwarding struct{ XFF, Proto, Host, ID []byte }

// PlanForwarding decides the forwarding headers of a request for every
// engine; the engines only remove the incoming copies and write these.
// The values are appended to buf (returned, grown) and sliced from it:
// X-Forwarded-For is the trusted chain (if any) followed by the peer,
// and X-Forwarded-Proto, -Host and the request ID are the trusted values
// or else sentry's (the listener's scheme, the request's Host, a fresh
// ID). in's slices may alias request memory but not buf.
func PlanForwarding(buf []byte, in *TrustedFwd, peer netip.Addr, isTLS bool, host []byte, ids IDs) ([]byte, Forwarding) {
	buf = buf[:0]
	if len(in.XFF) > 0 {
		buf = append(append(buf, in.XFF...), ", "...)
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
		buf = ids.AppendID(buf)
	}
	return buf, Forwarding{XFF: buf[:eXFF], Proto: buf[eXFF:eProto], Host: buf[eProto:eHost], ID: buf[eHost:]}
}

// Add adds one incoming value of kind k (KindXFF, KindXFProto,
// KindXFHost, or KindOther for the request ID) to in: X-Forwarded-For values are
// chained into chain (the caller's scratch, returned), the others keep the
// first non-empty one.
func (in *TrustedFwd) Add(k uint8, v []byte, chain []byte) []byte {
	if len(v) == 0 {
		return chain
	}
	switch k {
	case KindXFF:
		if len(chain) > 0 {
			chain = append(chain, ", "...)
		}
		chain = append(chain, v...)
		in.XFF = chain
	case KindXFProto:
		if in.proto == nil {
			in.proto = v
		}
	case KindXFHost:
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
