// Package pipeline is the part of sentry's request path that does not
// depend on how a request was read: both HTTP/1.1 engines (the fasthttp
// front end in package proxy and the event loops) and the HTTP/2 front end
// use it, so a rule written here is written once.
//
// It holds, each in its own file:
//
//   - pipeline.go: the steps every engine runs after routing, in this
//     order -- App.Decide (classify, estimate, Park), App.Admitted (count
//     the verdict), App.Observe (tell the admission Ticket its outcome);
//     the engine supplies a view of the request, the client address, its
//     own way to wait, and its header writing;
//   - app.go: the per-app runtime (App: policy, pool, Controller, trust,
//     request-ID header, prebuilt rejection, body cap), the backends it
//     relays to (Upstream, lb.Backend's Attachment) and the per-app series
//     both engines count (AppMetrics); an Upstream also carries what the
//     event loops keep per backend (their connection count, its resolved
//     address: LoopSockaddr in loopaddr_linux.go), since it is the one
//     record both engines find through the pool;
//   - route.go: a listener's route table, Host to App (Route.Lookup),
//     which a front end holds in an atomic pointer swapped by a reload;
//   - reply.go: the one decision of what sentry answers itself (ReplyFor:
//     the rejection or the failure table's error); each engine serialises
//     the Reply its own way;
//   - grpc.go: gRPC's form of those answers (IsGRPC, see "gRPC" below);
//   - headers.go: the header policy's one table of names (FieldKind: hop-by-hop,
//     forwarding headers and their underscore aliases, the request ID),
//     ScanHead over a raw head, ValidHost, and the forwarding plan
//     (PlanForwarding, TrustedFwd, Forwarding);
//   - load.go: the degradation signal's header (docs/policy.md
//     "degradation"): App.LoadHeader is dropped from client input in any
//     spelling (DropIncoming, and ScanHead/H2Skip count its underscore
//     spelling), and each engine writes AppendLoad's value on admitted
//     requests only, from App.Load (package control's App.Load, an atomic
//     read; nil when the signal is off);
//   - forwarded.go: trusted_proxies and the client address from a trusted
//     X-Forwarded-For (Trusted, ClientFromXFF);
//   - requestid.go: request IDs, random (IDGen, one per holder; IDPool
//     for goroutines);
//   - trace.go: W3C trace context (Trace: a request's traceparent read,
//     or a trace started; TraceMode, an app's trace_context);
//   - access.go: what an access-log line says about an exchange
//     (AccessEntry: its Reason, verdict and class names), filled the same
//     way by every engine and written by package proxy's one writer;
//   - status.go: the outcome of an exchange (Outcome), the one map from
//     outcome to status (StatusOf) and its reason as metrics and access
//     log name it (OutcomeReason);
//   - retry.go: the one retry policy (TryAgain, Failure, MaxAttempts);
//   - rawhead.go: the strict raw head parsers the event loops use
//     (ParseRequestHead, ParseResponseHead, ChunkTracker).
//
// # Decisions
//
// Only what both engines need is here. What reads fasthttp's own types --
// fasthttp's request and response headers (dropping listed and hop-by-hop
// headers), its HostClient's errors (the failure kind of an error, the
// outcome of a relay error), writing a Reply into a fasthttp.Response --
// stays in package proxy (proxy/fasthttp_adapt.go), so that this package
// does not import fasthttp at all; the status codes and method names it
// needs are net/http's constants (the same values). Two consequences:
//
//   - Upstream.Client holds the fasthttp front end's *fasthttp.HostClient
//     as an any; package proxy reads it with a type assertion to that
//     concrete type (no interface call, no allocation).
//   - The event loops' raw serialisation of a Reply (appendReply, in
//     package proxy/evloop) stays with the loops: its status line must
//     read byte for byte as fasthttp's (fasthttp.StatusMessage), and
//     net/http's StatusText differs for some codes.
//
// Metrics registration (the Prometheus vectors, the access log) stays in
// package proxy, which resolves an AppMetrics per app once; the request
// path here only does atomic adds on it.
//
// # gRPC
//
// A request is gRPC when its Content-Type is application/grpc, alone or
// followed by '+' or ';' (IsGRPC: the media type without regard to ASCII
// case, surrounding spaces ignored; grpc-web is not gRPC). Every engine
// passes that to ReplyFor, which alone decides the form of the answer, so
// the event loops, fasthttp and h2 cannot disagree.
//
// Decision: which answers take gRPC's form. The 503-class ones -- those
// that say "sentry or its farm is overloaded, come back": an admission
// rejection, no healthy backend, the backend connection cap (busy),
// request_buffer_total full, and selective early termination. A gRPC
// client reads an HTTP 503 as UNAVAILABLE anyway, but with no message and,
// above all, no pushback, so its retry policy would retry at once, into
// the overload. Answers that are not overload keep their HTTP status
// (502, 504, 400, 404, 405, 408, 411, 413): a gRPC client maps them by
// gRPC's HTTP-to-status table, and they carry no wait to give.
//
// The form: HTTP 200, content-type application/grpc, no body, grpc-status,
// grpc-message (percent-encoded; a fixed text per outcome -- a rejection
// says "sentry: overloaded, retry later" -- never the app's reject.body,
// which is for browsers), grpc-retry-pushback-ms, and X-Sentry-Reject as
// on the plain answer. Retry-After is left out (it means nothing on a
// 200). On h2 the fields go out as a Trailers-Only answer: one HEADERS
// frame with END_STREAM, which grpc-go and the gRPC spec accept; on
// HTTP/1.1 they are in the head.
//
// Decision: the codes. An admission rejection carries the app's
// reject.grpc_status: unavailable (14, the default) or resource_exhausted
// (8). UNAVAILABLE is the default because the rejection is the server's
// transient overload, not the client's quota, and it is the code gRPC
// clients are told to retry (and gRPC's own HTTP table maps both 503 and
// 429 to it); RESOURCE_EXHAUSTED is for an operator whose clients treat
// sentry as a rate limit (as 429 does for HTTP). Every other overload
// answer, and a rejection whose verdict is no_backend, is always 14: it
// is not the client's rate, as it is never 429.
//
// Decision: the pushback is the same wait as Retry-After -- the
// admission algorithm's predicted drain, else reject.retry_after; 1 s for
// busy and buffer full; reject.retry_after for termination -- in
// milliseconds rounded up (PushbackMs), where Retry-After rounds it up to
// whole seconds. So a 250 ms drain is "Retry-After: 1" to HTTP and
// "grpc-retry-pushback-ms: 250" to gRPC. grpc-go waits exactly that long
// before its next attempt when its retry policy lists the code
// (proxy's TestGRPCRetryHonoursPushback).
//
// The package imports nothing of package proxy or package proxy/evloop
// (pinned by proxy's TestImportGraph).
package pipeline
