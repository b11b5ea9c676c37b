package pipeline

import (
	"strings"

	"github.com/sentry-proxy/sentry/policy"
)

// route.go: routing by listener and Host to an app, for every front end.

// Route maps a Host to an app on one listener.
type Route struct {
	Hosts   map[string]*App
	Default *App
	TLS     *policy.TLS
	H2C     bool // plain listener: serve an HTTP/2 preface (h2c, prior knowledge)
	Access  bool // access log on
}

func lowerASCII(b []byte) bool {
	for _, c := range b {
		if 'A' <= c && c <= 'Z' {
			return false
		}
	}
	return true
}

// hostOnly strips a port from a Host value.
func hostOnly(h []byte) []byte {
	if len(h) > 0 && h[0] == '[' { // [v6]:port
		if i := strings.IndexByte(string(h), ']'); i > 0 {
			return h[:i+1]
		}
		return h
	}
	for i := len(h) - 1; i >= 0; i-- {
		if h[i] == ':' {
			return h[:i]
		}
		if h[i] < '0' || h[i] > '9' {
			break
		}
	}
	return h
}

// Lookup returns the app for a Host header on this route.
func (rt *Route) Lookup(host []byte) *App {
	if len(rt.Hosts) == 0 {
		return rt.Default
	}
	h := hostOnly(host)
	if a, ok := rt.Hosts[string(h)]; ok {
		return a
	}
	if !lowerASCII(h) {
		var tmp [256]byte
		if len(h) <= len(tmp) {
			l := tmp[:len(h)]
			for i, c := range h {
				if 'A' <= c && c <= 'Z' {
					c += 'a' - 'A'
				}
				l[i] = c
			}
			if a, ok := rt.Hosts[string(l)]; ok {
				return a
			}
		}
	}
	return rt.Default
}
