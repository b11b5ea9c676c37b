package status

import (
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/sentry-proxy/sentry/policy"
)

// AllowHosts guards the admin listener against DNS rebinding: a web page
// whose name an attacker re-points at 127.0.0.1 can make a browser send it
// requests, but they carry the attacker's name in Host. A request is
// served when its Host (port removed, case ignored, a trailing dot
// removed) is
//
//   - empty (HTTP/1.0) or an IP literal: never a rebinding request, and
//     what scrapers and probes that dial an address send;
//   - one of allowed(): the policy's admin.allowed_hosts, read on every
//     request so that a reload applies at once; nil means the default,
//     "localhost" and hostname (this machine's name, and its first label),
//     and policy.AnyHost turns the check off.
//
// Anything else gets 421 Misdirected Request: the name belongs to some
// other server. Decision: 421, not 403, since nothing is wrong with who
// asks, only with the name asked for; no page content, no redirect.
func AllowHosts(allowed func() []string, hostname string, next http.Handler) http.Handler {
	defaults := []string{"localhost"}
	if h := strings.TrimSuffix(strings.ToLower(hostname), "."); h != "" {
		defaults = append(defaults, h)
		if short, _, ok := strings.Cut(h, "."); ok && short != "" {
			defaults = append(defaults, short)
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hostAllowed(r.Host, allowed(), defaults) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusMisdirectedRequest)
		_, _ = w.Write([]byte("421 misdirected request: this host name is not served here (admin.allowed_hosts)\n"))
	})
}

// hostAllowed applies AllowHosts' rule to a Host header value.
func hostAllowed(host string, allowed, defaults []string) bool {
	h := strings.ToLower(host)
	if hh, _, err := net.SplitHostPort(h); err == nil {
		h = hh
	} else if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	h = strings.TrimSuffix(h, ".")
	if h == "" {
		return true
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	if allowed == nil {
		allowed = defaults
	}
	for _, a := range allowed {
		if a == policy.AnyHost || a == h {
			return true
		}
	}
	return false
}
