package classify

import (
	"net/netip"
	"time"
)

// ClassConfig is one request class of an app, as the policy package hands it
// over. Classes are given most important first; their order is their index.
type ClassConfig struct {
	// Name is the class's label value in metrics and logs. Required, unique
	// within the app.
	Name string
	// Period is the class's policer period d_i (docs/algorithms.md §2).
	// Zero means the admission test runs for each request on arrival.
	// Negative is an error.
	// The classifier only carries it; batchac uses it.
	Period time.Duration
	// Default marks the class that takes every request no class matched. At
	// most one class may set it. When none does, the last class is the default.
	Default bool
	// Rules: the class matches when any rule matches (OR). A class without
	// rules must be the default class.
	Rules []Rule
}

// Rule is a set of conditions joined by AND. Every non-empty field is one
// condition; a list field (Methods, Hosts, Networks) is satisfied by any of
// its entries, while every entry of Headers and Cookies must hold. A rule
// must have at least one condition.
type Rule struct {
	// At most one path condition. The path is the request path without its
	// query string, compared byte for byte (case-sensitive).

	// Path matches the exact path.
	Path string
	// PathPrefix matches paths that start with it (a plain byte prefix:
	// "/api" also matches "/apix"; write "/api/" to stop at a segment).
	PathPrefix string
	// PathGlob is a path.Match pattern applied per '/'-separated segment, with
	// "**" as a whole segment matching zero or more segments
	// ("/static/**/*.css"). A character class never matches '/'.
	PathGlob string
	// PathRegexp is a Go regexp (RE2) searched in the path; anchor it with ^
	// and $ to match the whole path.
	PathRegexp string

	// Methods: any of these methods (upper-cased at compile time; compared
	// case-sensitively as RFC 9110 requires).
	Methods []string
	// Hosts: any of these host names, compared case-insensitively after the
	// port and a trailing dot are removed. "*.example.com" matches any
	// subdomain of example.com but not example.com itself.
	Hosts []string
	// Headers: every entry must hold.
	Headers []HeaderMatch
	// Cookies: every entry must hold.
	Cookies []CookieMatch
	// Networks: the client address (given by the caller, already resolved
	// from trusted X-Forwarded-For) is in any of these prefixes. IPv4-mapped
	// IPv6 addresses are compared as IPv4.
	Networks []netip.Prefix

	// GRPCService and GRPCMethod match a gRPC call's service and method,
	// read from the path "/pkg.Service/Method" (SplitGRPCPath): the full
	// service name "pkg.Service", and the bare method name. Each is an
	// exact name, or a path.Match pattern when it has *, ?, [ or 	// ("pkg.*", "Get*"); it must not contain '/'. A path that is not of
	// that form matches neither. Only the path is read, not the
	// content-type (add a headers condition for that).
	GRPCService string
	GRPCMethod  string

	// Key, when set, is the history key for requests this rule matches (for
	// example "/search" for every "/search/…"). Empty means the default key:
	// the path without its query.
	Key string
}

// HeaderMatch is one header condition. With Value and Regexp both empty the
// header must be present; a header with an empty value counts as absent.
type HeaderMatch struct {
	// Name of the header (case-insensitive, as the Request implementation
	// looks it up). Required.
	Name string
	// Value, when set, must equal the header's (first) value exactly.
	Value string
	// Regexp, when set, is searched in the header's (first) value. Setting
	// both Value and Regexp is an error.
	Regexp string
}

// CookieMatch is one cookie condition. With Value empty the cookie must be
// present with a non-empty value; otherwise its value must equal Value.
type CookieMatch struct {
	// Name of the cookie (case-sensitive). Required.
	Name  string
	Value string
}
