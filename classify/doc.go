// Package classify maps a request to its class (C1 most important first) and
// to the key its service-time history is kept under (docs/algorithms.md
// §0; Cataclysm §3.1 for classes, §3.4 for stripping script arguments from
// the key).
//
// # Model
//
// An app has an ordered list of classes. Each class has a name, its policer
// period d_i (carried for batchac) and rules. A rule is a set of conditions
// joined by AND: one path condition (exact, prefix, glob or regexp), method,
// host, headers (present, equal, regexp), cookies (present, equal) and client
// networks (CIDR), and gRPC's service and method (grpc.go: the path
// "/pkg.Service/Method" split by SplitGRPCPath; exact or path.Match
// patterns, checked by CheckGRPCPattern). A class matches when any of its rules does; the first
// class that matches wins; the class marked Default, or else the last class,
// takes the rest. A class without rules must be that default class, and a
// rule without conditions is an error, so nothing in a policy is dead.
//
// The key is the matching rule's Key when it has one (e.g. "/search" for
// every "/search/…"), otherwise the path without its query.
//
// # Design
//
// Compile validates everything once per policy snapshot and returns an
// immutable Classifier; errors name the class and rule
// (`class "gold" rules[1]: path_regexp: …`). Within a rule the conditions are
// sorted cheapest first: exact path and prefix, network, method, host, then
// headers, cookies, gRPC service and method (the path is split once, on
// first use), globs and regexps.
//
// Classify first runs a prefilter: each rule's first condition, when it is a
// path or network one, sits in a compact array (a path as its first 8 bytes,
// a mask and a length range; a network as a 128-bit mask with IPv4 as
// ::ffff:a.b.c.d). Two tight loops set a bit for every rule whose first
// condition can hold; rules with another first condition are always set.
// The set rules are then tested in precedence order with their full
// conditions, and the first that matches wins. With more than 256 rules
// Classify skips the prefilter and scans the rules linearly; both paths are
// checked against each other by tests and FuzzClassify. Method and host are
// read from the request at most once, and only if a rule needs them.
// Classify allocates nothing (regexps use the regexp package's pooled
// matchers).
//
// The caller owns the edges of trust: it passes the client address already
// resolved from X-Forwarded-For by trusted proxies, and adapts its request
// type to Request (for fasthttp: Method, Host, Peek and Cookie of
// *fasthttp.RequestHeader, and the path of the URI without the query).
// Header and cookie values that are empty count as absent. Globs are
// path.Match patterns per '/'-separated segment, plus "**" as a whole segment
// for any number of segments; they are matched segment-wise without
// backtracking blow-up.
//
// # Concurrency
//
// A Classifier is immutable; share it across goroutines freely. There are no
// locks. A policy reload compiles a new Classifier and swaps it with the rest
// of the snapshot.
//
// # Usage
//
//	c, err := classify.Compile([]classify.ClassConfig{
//		{Name: "gold", Period: 10 * time.Millisecond, Rules: []classify.Rule{
//			{Cookies: []classify.CookieMatch{{Name: "tier", Value: "gold"}}},
//			{PathPrefix: "/search/", Key: "/search"},
//		}},
//		{Name: "bronze", Period: 100 * time.Millisecond},
//	})
//	if err != nil { … }
//	class, key := c.Classify(req, clientAddr) // key aliases the request's path or c's memory
//	s, bucket := est.Estimate(class, key)
package classify
