// Package proxy is sentry's request path: the listeners and their
// reloads, the front ends that serve clients (HTTP/1.1, TLS, HTTP/2), the
// relay to backends, the access log and the request metrics.
//
// # Goal
//
// Every request is classified, given an estimated service time, admitted
// or turned away, and relayed to the least-loaded healthy backend, with
// one set of rules whatever protocol it came in on. What it costs is
// sentry's, never the farm's: a rejection touches no backend, a slow
// client holds sentry's memory and not a backend worker, and a stuck log
// reader or a bad policy costs a counter, not the service. It must also
// be at least as fast as nginx at relaying, since an admission proxy
// that is slower than the proxy it replaces is not deployed.
//
// The rules, one by one (headers, bodies, backends over TLS and HTTP/2,
// early termination, the statuses of failures, the HTTP/2 limits, request
// IDs, draining, the access log), are in docs/request-path.md; response
// and request buffering in docs/buffering.md. This essay is the design.
//
// # Layers
//
//	listeners     plain (event loops' shared socket) and TLS (tlsListener:
//	              handshake, ALPN, server.max_conns)
//	                 │ connections
//	                 ▼
//	drivers       proxy/evloop: plain, TLS 1.3 and h2 stream connections
//	              on event loops; the goroutine driver (gdrive.go) for the
//	              h2 workers' streams
//	                 │ events ▲ actions
//	                 ▼        │
//	core          proxy/exchange: one exchange's order of steps, sans-IO
//	                 │ calls
//	                 ▼
//	steps         proxy/pipeline: route, header policy, Decide (classify,
//	              estimate, Controller.Park), PlanForwarding, TryAgain,
//	              ReplyFor, Observe, Complete, AccessEntry; lb, sert
//	                 │
//	                 ▼
//	relay         the loops' raw sockets and the goroutine driver's gpool
//	              (HTTP/1.1 to IP:port); fasthttp's HostClient; x/net's
//	              Transport (HTTP/2 backends)
//
// Not yet a driver of the core: fasthttp's handle and serve (handler.go:
// what the loops hand off, and the portable engine's HTTP/1.1) and
// serveCtx (h2.go: the h2 worker streams the goroutine driver does not
// take). They call the pipeline's steps in their own order and relay
// through fasthttp's HostClient (relay.go), the only client for backends
// over TLS or by name; package proxy/exchange's doc lists what is left.
//
// A request's path, on Linux with the default engine:
//
//	plain listener ─> event loops
//	  ├─ a head the loops' strict parser takes ─> served on the loop
//	  ├─ an HTTP/2 preface, with apps[].h2c ─> sentry's h2 server (h2c.go)
//	  └─ anything else, with the bytes read ─> fasthttp front end
//	TLS listener ─> tlsListener: crypto/tls handshake, ALPN (tlslisten.go)
//	  ├─ TLS 1.3, HTTP/1.1 ─> adopted by the event loops (tlsloop_linux.go)
//	  ├─ TLS 1.3, h2 ─> adopted by the event loops, which drive the h2 core
//	  │    (h2loop_linux.go): a stream whose request ended with its head is
//	  │    a loop exchange; the others run on h2 worker goroutines
//	  └─ TLS 1.2, or what the loops refuse ─> fasthttp (HTTP/1.1) or the h2
//	       server on goroutines (h2own.go, its core in package proxy/h2srv)
//
//	every driver: route by listener and Host ─> the header policy ─>
//	  decide ─> wait for a batch run if the class has one ─> rejected:
//	  the prebuilt reply, no backend touched | admitted: lb.Pool.Pick ─>
//	  relay, with the one retry policy ─> complete (the ticket told the
//	  outcome, metrics, the access line)
//
// # Interfaces
//
//   - pipeline.Controller (proxy.Controller), which package control
//     implements: the only way the request path knows the algorithms
//     (batch, threshold, adaptive, auto, off). Park returns a decision or
//     a Pending that a Waker resumes; a driver never blocks a loop on it.
//   - exchange.Exchange: events in (Start, Refuse, Resume, Bound, Capped,
//     ConnectFailed, Connected, Wrote, Read, Body, Closed, Broke, Expire,
//     Tick, Abort) and actions out (Park, Connect, Wait, Send, WriteHead,
//     Forward, Finish, Reply, Abort, Cut), as package proxy/exchange's doc
//     tabulates them. Time is an argument, never read, so the core's rules
//     are script tests on a manual clock (proxy/exchange/testdata).
//   - evloop.Sys and evloop.Clock: the loops reach the kernel and the
//     time only through them, so the loops' logic is script-tested too
//     (proxy/evloop/testdata).
//   - The client transport of a loop connection (evloop's xprt: plain,
//     TLS, h2, h2 stream), which read, flush, after, cut and closeClient
//     switch on (xprt_linux.go). Only they know what the bytes ride on.
//   - lb.Pool: Pick, Release, Eject and the health and operator state,
//     one pool per app that every driver picks from.
//
// # Engines
//
// fasthttp alone, a goroutine per connection, reached 0.67–0.83× nginx's
// relay on the machines sentry was built on, and the cost was in the
// kernel: Go's netpoller parking and waking a goroutine per message and
// an extra EAGAIN read each time (docs/performance.md). So on Linux the
// common request is served by event loops: one per GOMAXPROCS, each a
// goroutine around its own epoll set, sharing the listening socket
// (EPOLLEXCLUSIVE), with raw non-blocking reads and writes on client and
// backend sockets: one read and one write per message. The loops' parser
// (pipeline's raw head parser) is strict and narrow, and takes only heads
// every HTTP/1.1 parser reads alike (fuzzed against fasthttp's);
// everything else -- partial heads, chunked or streamed bodies, Expect:
// 100-continue, Upgrade, HTTP/1.0 -- goes, with the bytes read, to the
// fasthttp server of the same front end, over a bounded queue that waits
// (backpressure) rather than close a connection it accepted.
//
// The policy key server.engine picks the engine for the process
// (engine.go): loops, the default, or portable, goroutines for every
// connection (fasthttp, crypto/tls, the h2 server on goroutines).
// Portable is the only engine elsewhere than Linux; on Linux it is the
// escape hatch and the reference the engines' table compares with. It is
// shown in /config and in sentry_build_info; a reload that changes it
// applies at the next restart or upgrade. Decision: one key, no switch
// per protocol, no environment variable: at most one front-end path per
// protocol per platform, with the portable path behind the loops for
// what they do not take. One request table runs on every engine
// (engines_test.go); the differences a client can see are listed in its
// knownDifferences, each with the test that pins it.
//
// TLS 1.3 runs on the loops with sentry's own record layer (package
// internal/tls13): crypto/tls does the handshake over a tap that keeps
// the records, and the loops take the traffic secrets from KeyLogWriter
// and prove them on the kept records. Decision: documented APIs only, no
// reflection into crypto/tls; what cannot be proved stays on crypto/tls,
// and tls13.SelfTest runs once per process over every handshake shape
// (on failure every connection stays on crypto/tls). Kernel TLS was not
// available where sentry was built.
//
// HTTP/2 is sentry's own server: a sans-IO core (package proxy/h2srv:
// bytes in, events and frames out, no goroutine, no lock) with two
// drivers, the loops (h2 over TLS 1.3) and goroutines (h2own.go: one
// reader, pooled workers, one writer; TLS 1.2, h2c and the portable
// engine). Decision: not x/net/http2's server, whose goroutine per stream
// and per flush cost about half the requests per CPU second; x/net is
// the HTTP/2 backends' transport only (h2backend.go). On the loops, a
// stream whose request ended with its head becomes a stream connection:
// a loop connection with no socket whose exchange is the plain path's,
// unchanged, with the response going into the h2 core as HEADERS and
// DATA; only the transport looks at the stream. Decision: a stream
// connection, not a second relay, because the exchange reaches its
// client through the connection's transport. That is so for an app the
// loops serve (pipeline.App.LoopOK: plain HTTP/1.1 backends at IP:port)
// on a connection not suspect of rapid reset. Other streams run on the
// h2 workers, on the goroutine driver when their app has plain HTTP/1.1
// backends and their body, if any, is held whole or refused by
// max_body_bytes (413, 411: the core's Refuse, nothing of the body
// read); the rest still run fasthttp's serve on a pooled fasthttp
// request built from the stream (serveCtx, h2.go). Request bodies stay on the workers because
// their buffering, timeouts and minimum rate live there.
//
// # Invariants
//
//   - A loop never waits on admission (a request parks and its batch run
//     wakes the loop through an eventfd), on a backend (an exchange at
//     max_conns_per_backend waits in the loop's queue, up to
//     timeouts.connect, then 503 backend_busy) or on the access log. It
//     stalls only when fasthttp's hand-off queue is full (backpressure)
//     and for the temporary-file reads and writes of response buffering.
//   - Every exchange ends exactly once (exchange.State's checked
//     transitions; an h2 stream's streamPhase likewise): one outcome to
//     the controller's ticket, one access entry, one set of metrics.
//   - The header policy is one table (pipeline.FieldKind), applied once
//     per request by whichever driver serves it; forwarding values are
//     decided once (pipeline.PlanForwarding).
//   - Memory is bounded by configuration, not by clients: request and
//     response buffers under their process-wide totals, an idle loop
//     connection holding no buffer and no exchange (proxy/evloop's doc,
//     Memory), streams per h2 connection capped at 128.
//   - An idle connection on goroutines holds as little as its library
//     lets it. An h2 connection (h2own.go) waits on its reader's 1 KiB
//     buffer; the 16 KiB one is pooled and taken for one read after a
//     read that filled the small one, and with no stream and nothing to
//     write the output buffers go back to a pool and the partial-frame
//     one to the collector (h2srv's ShedBuffers). Its cost: pool gets
//     and puts per request on a connection that idles between requests,
//     and a read of more than 1 KiB is two reads. fasthttp runs with
//     ReduceMemoryUsage: its write buffer and the bodies' go back to
//     their pools when a response is written (a pool get and put per
//     request, and a flush per response on a client that pipelines),
//     but it keeps its read buffer (server.max_header_bytes) while a
//     connection waits, as it does whenever request bodies stream
//     (StreamRequestBody).
//   - server.max_conns counts every holder of a listener's connections:
//     a connection the loops adopt is counted by them before it leaves the
//     listener's count; the hand-off to fasthttp, which counts a
//     connection only after its Accept, may miss it for that instant.
//     max_conns_per_backend: the loops and the goroutine driver count
//     each other's and fasthttp's connections to a backend; fasthttp's
//     HostClient caps only its own.
//   - Imports run down only: package evloop never imports this package,
//     the core imports no driver, and pipeline imports neither engine nor
//     fasthttp (TestImportGraph in each).
//
// # Decisions
//
//   - A request's body is read before it is admitted (docs/buffering.md):
//     whole up to request_buffer, a larger one's first request_buffer
//     bytes before the rest streams (gRPC and request_buffering: off
//     stream from the start); a body past request_buffer_total is
//     refused, not streamed.
//   - A response is read at the backend's speed and held for a slow
//     client, under response_buffer and its total, as nginx's
//     proxy_buffering does.
//   - A rejection is a prebuilt reply: no backend, no allocation, and a
//     gRPC request gets the gRPC form of it.
//   - Writing the access log never blocks serving: lines go into a
//     bounded buffer that one goroutine writes out; when the reader is
//     stuck, lines are dropped and counted.
//   - Rapid reset is measured as a rate, not over a connection's life,
//     so a long-lived connection that cancels at a modest rate is never
//     cut (h2srv.ResetMeter).
//
// # Concurrency
//
// The snapshot-derived state is immutable and swapped atomically by
// Apply; each front end holds an atomic pointer to its route. Proxy.mu
// guards the front-end map and is never taken on the request path. State
// that outlives a reload lives in pipeline.AppShared, keyed by app name,
// and in lb.Registry, keyed by backend address. Each event loop owns its
// connections, buffers and exchanges without a lock; an h2 connection the
// loops and the workers share keeps its core under one lock.
//
// Usage:
//
//	p, err := proxy.New(proxy.Options{Logger: log, Registerer: reg}, snap)
//	ln, _ := net.Listen("tcp", snap.Listeners[0].Addr)
//	err = p.Serve(snap.Listeners[0].Addr, ln)
//	...
//	err = p.Apply(newSnap)   // reload
//	err = p.ShutdownAll(ctx) // drain
package proxy
