package policy

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// Degradation is an app's load signal to its backends (issue 13, item 3):
// on every admitted request sentry sets Header to the farm's load as its
// batch model predicts it, so that a backend can serve a cheaper variant
// when the farm is near its limit (SEDA's degraded service; Cataclysm's
// third lever). The value and its computation are package control's
// (App.Load) and docs/policy.md's "degradation"; the header is removed
// from every client request whether the signal is on or off.
type Degradation struct {
	// Enabled sets the header on admitted requests. Default false.
	Enabled bool
	// Header is the header's name: a token, canonicalised; it may not be a
	// header sentry already manages (framing, hop-by-hop, forwarding,
	// Server-Timing, the request ID). Default Sentry-Load.
	Header string
}

// DefaultLoadHeader is degradation.header's default.
const DefaultLoadHeader = "Sentry-Load"

// reservedHeaders are the headers sentry manages itself (lower case, '_'
// read as '-'); the load header may be none of them.
var reservedHeaders = []string{
	"host", "content-length", "transfer-encoding", "connection", "upgrade", "expect",
	"keep-alive", "proxy-connection", "te", "trailer", "proxy-authorization", "proxy-authenticate",
	"x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "server-timing",
	"traceparent", "tracestate",
}

func (d *decoder) degradationFields(g *Degradation) []field {
	return []field{
		{"enabled", d.boolField(&g.Enabled)},
		{"header", d.textField(&g.Header, false, func(s string) (string, error) {
			h, err := parseHeaderName(s)
			if err != nil {
				return "", err
			}
			if reservedName(h) {
				return "", fmt.Errorf("%s is a header sentry manages itself; choose another name (default %s)", h, DefaultLoadHeader)
			}
			return h, nil
		})},
	}
}

// checkDegradation ties the load header to the request ID header: they
// must differ, also when '_' is read as '-'.
func (d *decoder) checkDegradation(a *App, n *yaml.Node, path string) {
	if sameHeader(a.Degradation.Header, a.RequestIDHeader) {
		d.errorf(n, joinPath(path, "header"), "%s is also the request_id_header", a.Degradation.Header)
	}
}

func reservedName(h string) bool {
	for _, r := range reservedHeaders {
		if sameHeader(h, r) {
			return true
		}
	}
	return false
}

// sameHeader compares header names ignoring case, with '_' read as '-'
// (how CGI-style backends read them).
func sameHeader(a, b string) bool {
	norm := func(s string) string { return strings.ReplaceAll(strings.ToLower(s), "_", "-") }
	return norm(a) == norm(b)
}
