// Package pipeline is the part of sentry's request path that does not
// depend on how a request was read: both HTTP/1.1 engines (the fasthttp
// front end in package proxy and the event loops) and the HTTP/2 front end
// use it, so a rule written here is written once.
//
// It holds, each in its own file:
//
//   - headers.go: the header policy's one table of names (FieldKind: hop-by-hop,
//     forwarding headers and their underscore aliases, the request ID),
//     ScanHead over a raw head, ValidHost, and the forwarding plan
//     (PlanForwarding, TrustedFwd, Forwarding);
//   - forwarded.go: trusted_proxies and the client address from a trusted
//     X-Forwarded-For (Trusted, ClientFromXFF);
//   - requestid.go: request IDs (IDSource);
//   - status.go: the outcome of an exchange (Outcome) and the one map from
//     outcome to status (StatusOf);
//   - retry.go: the one retry policy (TryAgain, Failure, MaxAttempts);
//   - rawhead.go: the strict raw head parsers the event loops use
//     (ParseRequestHead, ParseResponseHead, ChunkTracker).
//
// # Decisions
//
// Only what both engines need is here. What reads fasthttp's own types --
// fasthttp's request and response headers (dropping listed and hop-by-hop
// headers), its HostClient's errors (the failure kind of an error, the
// outcome of a relay error) -- stays in package proxy
// (proxy/fasthttp_adapt.go), so that this package does not import
// fasthttp at all; the status codes and method names it needs are
// net/http's constants (the same values).
//
// The package imports nothing of package proxy or package proxy/evloop
// (pinned by proxy's TestImportGraph).
package pipeline
