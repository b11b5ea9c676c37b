package policy

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"path"
	"strconv"
	"strings"
	"time"
)

// This file holds the checks for single values. They know nothing of YAML,
// so the file decoder and FromFlags share them.

// parseDuration parses a Go duration. A bare number is refused with a hint:
// "250" could mean seconds or milliseconds, and guessing is how outages start.
// Plain "0" is accepted, since it needs no unit.
func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "0" {
		return 0, nil
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return 0, fmt.Errorf("duration %q has no unit; use a unit, e.g. 250ms or %ss", s, s)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q; use a Go duration such as 250ms, 5s or 1m30s", s)
	}
	return d, nil
}

// sizeUnits are the byte-size suffixes accepted by parseSize, longest first
// within each family so "KiB" is tried before "B".
var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

// parseSize parses a byte count: an integer, or an integer with one of the
// suffixes B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers
// of 1024), e.g. "16KiB" or "10MB". Case matters: "mb" is refused, since
// "mb" reads as millibits.
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t = strings.TrimSpace(strings.TrimSuffix(t, u.suffix))
			mult = u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid size %q; use a byte count such as 1048576, 64KiB or 10MB", s)
	}
	if n > (1<<63-1)/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n * mult, nil
}

// parseListenAddr checks a listen address host:port. The host may be empty
// (all interfaces), an IP or a name; the port must be 1-65535. It returns the
// address in a canonical form (lower-case host, no leading zeros in the port)
// so that two spellings of one address group into one listener.
func parseListenAddr(s string) (string, error) {
	return parseHostPort(s, false)
}

// parseBackendAddr is parseListenAddr with a mandatory host.
func parseBackendAddr(s string) (string, error) {
	return parseHostPort(s, true)
}

func parseHostPort(s string, needHost bool) (string, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return "", fmt.Errorf("invalid address %q: %s (want host:port, e.g. 127.0.0.1:8080)", s, ae.Err)
		}
		return "", fmt.Errorf("invalid address %q (want host:port, e.g. 127.0.0.1:8080)", s)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return "", fmt.Errorf("invalid address %q: port %q is not a number from 1 to 65535", s, port)
	}
	if host == "" {
		if needHost {
			return "", fmt.Errorf("invalid address %q: missing host", s)
		}
	} else if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.String()
	} else if !validHostname(host) {
		return "", fmt.Errorf("invalid address %q: %q is neither an IP address nor a host name", s, host)
	}
	return net.JoinHostPort(strings.ToLower(host), strconv.Itoa(p)), nil
}

// isWildcardHost reports whether host (from a canonical listen address)
// means "every interface".
func isWildcardHost(host string) bool {
	return host == "" || host == "0.0.0.0" || host == "::"
}

// parseHost normalises an entry of an app's hosts list the way the proxy
// normalises a Host header: lower-case, the port (if any) removed. IPv6
// literals keep their brackets ("[::1]"), as in a Host header.
func parseHost(s string) (string, error) {
	h := strings.ToLower(strings.TrimSpace(s))
	if h == "" {
		return "", errors.New("empty host")
	}
	if strings.Contains(h, "*") {
		return "", fmt.Errorf("host %q: wildcards are not supported; list each host, or give the app no hosts to make it the default", s)
	}
	if strings.Contains(h, "/") {
		return "", fmt.Errorf("host %q: give a host name, not a URL", s)
	}
	if strings.HasPrefix(h, "[") || strings.Count(h, ":") == 1 {
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			// "[::1]" without a port.
			if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
				host = h[1 : len(h)-1]
			} else {
				return "", fmt.Errorf("invalid host %q", s)
			}
		} else if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return "", fmt.Errorf("invalid host %q: bad port %q", s, port)
		}
		h = host
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		if ip.Zone() != "" {
			return "", fmt.Errorf("invalid host %q: zones are not allowed", s)
		}
		if ip.Is6() {
			// As it appears in a Host header: "[::1]:8080" less the port.
			return "[" + ip.String() + "]", nil
		}
		return ip.String(), nil
	}
	if strings.HasSuffix(h, ".") {
		return "", fmt.Errorf("host %q: remove the trailing dot", s)
	}
	if !validHostname(h) {
		return "", fmt.Errorf("invalid host %q: use letters, digits, '-' and '.'", s)
	}
	return h, nil
}

// validHostname accepts DNS names: dot-separated labels of letters, digits,
// '-' and '_' (the latter for SRV-style and k8s names), each 1-63 bytes,
// 253 bytes in all, with no label starting or ending in '-'.
func validHostname(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// parsePrefix accepts a CIDR ("10.0.0.0/8") or a bare IP (taken as a /32 or
// /128). A CIDR with host bits set is refused rather than masked: the author
// meant something, and it is not clear what.
func parsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "/") {
		ip, err := netip.ParseAddr(s)
		if err != nil || ip.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("invalid IP or CIDR %q", s)
		}
		ip = ip.Unmap()
		return netip.PrefixFrom(ip, ip.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("invalid CIDR %q", s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("CIDR %q has host bits set; did you mean %s?", s, p.Masked())
	}
	return p, nil
}

// checkName checks an app name: 1-63 bytes of [a-z0-9_-]. Names become
// metric labels and log fields, so they are kept plain.
func checkName(s string) error {
	if s == "" {
		return errors.New("name is empty")
	}
	if len(s) > 63 {
		return fmt.Errorf("name %q is longer than 63 characters", s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("name %q: use only a-z, 0-9, '_' and '-'", s)
		}
	}
	return nil
}

// parseHeaderName checks an HTTP header field name (an RFC 9110 token) and
// returns its canonical form.
func parseHeaderName(s string) (string, error) {
	if s == "" {
		return "", errors.New("header name is empty")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return "", fmt.Errorf("invalid header name %q", s)
		}
	}
	return http.CanonicalHeaderKey(s), nil
}

// checkDNSName checks a name to resolve for DNS backends.
func checkDNSName(s string) error {
	n := strings.TrimSuffix(s, ".")
	if _, err := netip.ParseAddr(n); err == nil {
		return fmt.Errorf("dns name %q is an IP address; use static backends for fixed addresses", s)
	}
	if !validHostname(n) {
		return fmt.Errorf("invalid dns name %q", s)
	}
	return nil
}

// parseDNSServer checks the address of a DNS server for DNS backends: an
// IP address and a port (a name would need a resolver to find the
// resolver).
func parseDNSServer(s string) (string, error) {
	a, err := parseBackendAddr(s)
	if err != nil {
		return "", err
	}
	host, _, _ := net.SplitHostPort(a)
	if _, err := netip.ParseAddr(host); err != nil {
		return "", fmt.Errorf("dns server %q: want an IP address and a port (e.g. 127.0.0.1:53), not a name", s)
	}
	return a, nil
}

// editDistance is the Levenshtein distance, for "did you mean" hints.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// checkProbePath checks an active health check path: absolute, printable,
// no spaces (it goes into a request line as is).
func checkProbePath(s string) error {
	if !strings.HasPrefix(s, "/") {
		return fmt.Errorf("path %q must start with /", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f {
			return fmt.Errorf("path %q has a space or control character; percent-encode it", s)
		}
	}
	return nil
}

// isToken reports whether s is a non-empty RFC 9110 token (a method or
// cookie name).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// parseRuleHost normalises an entry of a class rule's hosts: a host name,
// "*.domain" (any subdomain of domain, not domain itself) or an IP address,
// without a port. It is lower-cased; IPv6 literals are kept in brackets.
func parseRuleHost(s string) (string, error) {
	h := strings.ToLower(strings.TrimSpace(s))
	switch {
	case h == "":
		return "", errors.New("empty host")
	case strings.Contains(h, "/"):
		return "", fmt.Errorf("host %q: give a host name, not a URL", s)
	case strings.HasSuffix(h, "."):
		return "", fmt.Errorf("host %q: remove the trailing dot", s)
	}
	if ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")); err == nil {
		if ip.Zone() != "" {
			return "", fmt.Errorf("invalid host %q: zones are not allowed", s)
		}
		if ip.Is6() {
			return "[" + ip.String() + "]", nil
		}
		return ip.String(), nil
	}
	name, wild := strings.CutPrefix(h, "*.")
	switch {
	case strings.Contains(name, "*"):
		return "", fmt.Errorf("host %q: the only wildcard is a leading *. (*.example.com)", s)
	case strings.Contains(name, ":"):
		return "", fmt.Errorf("host %q: give the host without a port (the request's port is ignored)", s)
	case wild && name == "":
		return "", fmt.Errorf("host %q has an empty domain", s)
	case !validHostname(name):
		return "", fmt.Errorf("invalid host %q: use letters, digits, '-' and '.', or *.domain", s)
	}
	return h, nil
}

// checkRulePath checks a path, path_prefix or (glob) path_glob of a class
// rule: it starts with / and holds nothing a request path (without its
// query) cannot, so that it can match.
func checkRulePath(s string, glob bool) error {
	switch {
	case s == "":
		return errors.New("empty path")
	case !strings.HasPrefix(s, "/"):
		return fmt.Errorf("%q must start with /", s)
	case !glob && strings.Contains(s, "?"):
		return fmt.Errorf("%q has a query (?); paths are matched without the query string", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f || s[i] == '#' {
			return fmt.Errorf("%q has a space, control character or #; write the path percent-encoded, as requests carry it", s)
		}
	}
	if glob {
		return checkGlob(s)
	}
	return nil
}

// checkGlob checks a path_glob the way classify compiles it: each
// '/'-separated segment is "**" or a path.Match pattern.
func checkGlob(s string) error {
	for _, seg := range strings.Split(s, "/") {
		if seg == "**" {
			continue
		}
		if _, err := path.Match(seg, ""); err != nil {
			return fmt.Errorf("%q: syntax error in segment %q (see Go's path.Match)", s, seg)
		}
	}
	return nil
}
