// Package proxy is sentry's request path: the listeners and their reloads,
// the front ends that serve clients, TLS, the relay to backends (HTTP/1.1,
// TLS, HTTP/2), the access log and the request metrics. It knows admission
// through the Controller interface (package admission), not the algorithms
// behind it.
//
// # The request path
//
//	plain listener ─> event loops (Linux, package proxy/evloop)
//	  ├─ a head the loops' strict parser takes ─> served on the loop
//	  ├─ an HTTP/2 preface, with apps[].h2c ─> sentry's h2 server (h2c.go)
//	  └─ anything else, with the bytes read ─> fasthttp front end (handler.go)
//	TLS listener ─> tlsListener: crypto/tls handshake, ALPN (tlslisten.go)
//	  ├─ TLS 1.3, HTTP/1.1 ─> adopted by the event loops (tlsloop_linux.go)
//	  ├─ TLS 1.3, h2 ─> adopted by the event loops, which drive the h2 core
//	  │    (h2loop_linux.go): a stream whose request ended with its head is
//	  │    a loop exchange; the others run on h2 worker goroutines
//	  └─ TLS 1.2, or what the loops refuse ─> fasthttp (HTTP/1.1) or sentry's
//	       h2 server on goroutines (h2own.go, core in package proxy/h2srv)
//
//	every front end: route by listener and Host ─> the header policy ─>
//	  decide (classify, estimate, Controller.Park) ─> wait for a batch run
//	  if the class has one ─> rejected: the prebuilt reply, no backend
//	  touched | admitted: lb.Pool.Pick ─> relay, with the one retry policy
//	  ─> complete (the ticket told the outcome, metrics, access line)
//
// The steps after routing are written once, in package proxy/pipeline
// (decide, admitted, the forwarding plan, TryAgain, ReplyFor, observe,
// record). Their order is the exchange core's (package proxy/exchange: a
// sans-IO state machine, events in and actions out, with the one writer
// of a backend's request and the response header policy); the event
// loops -- plain, TLS and h2 streams -- are its drivers, and so is a
// blocking goroutine driver (gdrive.go) for the h2 workers' streams to
// apps with plain HTTP/1.1 backends whose body, if any, is held whole or
// refused by max_body_bytes. fasthttp's
// handle and serve, and the rest of the workers' streams, still call the
// pipeline's steps in their own order (the exchange package's doc lists
// what is left). Package
// evloop never imports this package, the core imports no driver, and
// pipeline imports neither engine nor fasthttp: TestImportGraph in each
// pins it.
//
// # Engine decision
//
// fasthttp alone, a goroutine per connection, reached 0.67–0.83× nginx's
// relay on the project's benchmark machine, and the cost was in the kernel:
// Go's netpoller parking and waking a goroutine per message and an extra
// EAGAIN read each time (docs/performance.md). So plain HTTP/1.1 on Linux is
// served by event loops: one per GOMAXPROCS, each a goroutine around its own
// epoll set, sharing the listening socket (EPOLLEXCLUSIVE). A loop serves
// the common request itself, client and backend sockets alike, with raw
// non-blocking reads and writes: one read and one write per message, no
// goroutine per connection. It polls epoll without blocking first, blocks
// in epoll_wait only when nothing is ready, and yields once a millisecond
// when it always finds work.
//
// The loops' parser (pipeline's raw head parser) is strict and narrow: an
// HTTP/1.1 origin-form request whose path needs no normalisation, one Host,
// at most one Content-Length with the whole body in the first read, and no
// Connection token but close and keep-alive. A head it takes is one every
// HTTP/1.1 parser reads alike (fuzzed against fasthttp's). Everything else
// -- partial heads from slow clients, chunked or streamed bodies,
// Expect: 100-continue, Upgrade, HTTP/1.0, heads it is unsure of -- goes,
// with the bytes read, to the fasthttp server of the same front end, which
// serves that connection from then on with its full hardening. The hand-off
// queue is bounded; when it is full the loop waits (backpressure) and never
// closes a connection it accepted.
//
// A request of a class that waits for its batch run parks on the loop: the
// head stays in the connection's buffer, the batch run wakes the loop
// through its eventfd, and the loop resumes the exchange. A client that
// hangs up meanwhile cancels it (client_gone). Where an exchange is, is one
// exchange.State, changed only through a checked transition; the loop reaches
// the kernel through evloop.Sys and the time through evloop.Clock, so its
// logic is tested by scripts on a manual clock (proxy/evloop/testdata).
//
// At max_conns_per_backend an exchange waits for a connection, up to
// timeouts.connect, as fasthttp's HostClient does, then gets 503
// (backend_busy). The cap counts the loops' connections and fasthttp's
// together. A connection given back goes to the loop's first waiter; a loop
// whose connections other loops wait for keeps none idle, and one holding
// more than its share of the cap gives the rest back.
//
// # Engines
//
// The policy key server.engine picks the engine, one for the process
// (engine.go): loops, the default, as above, or portable, goroutines for
// every connection -- fasthttp for HTTP/1.1, crypto/tls, and sentry's h2
// server on its goroutine driver. Portable is the only engine of systems
// without the loops (elsewhere than Linux, loops runs portable, with a
// warning). The key is read when the Proxy is made (Proxy.Engine) and
// shown in /config and in sentry_build_info's engine label; the loops
// hold listening sockets and adopted connections, so a reload that
// changes it applies after a restart or an upgrade (the daemon warns).
//
// Decision: one key, and no switch per protocol. At most one front-end
// path per protocol per platform: on Linux the loops are that path for
// HTTP/1.1, HTTP/1.1 over TLS 1.3 and h2 over TLS 1.3, each with the
// portable path behind it for what the loops do not take; portable is
// the one path of other systems, kept selectable on Linux as the escape
// hatch and the reference the table below compares with. A value that
// kept TLS or h2 on goroutines while HTTP/1.1 ran on the loops would be a
// third combination to test, and buys nothing the two do not: it is not
// offered. No environment variable chooses the engine.
//
// One request table runs on every engine (engines_test.go, whole and with
// the request line split, which forces a hand-off). The differences a client
// can see are listed in knownDifferences, each with the test that pins it: a
// client that half-closes during a relay is taken as gone (499, as nginx); a
// relayed response's latency runs to its last byte on the loops; a drain
// that runs out of time cancels a parked request. Apps whose backends need
// TLS, HTTP/2 or a name lookup are served by fasthttp (pipeline.App.LoopOK):
// the loops neither resolve names nor speak TLS or HTTP/2 to backends.
//
// # TLS and HTTP/2
//
// A TLS listener's handshakes run in tlsListener, a goroutine each, within
// read_header_timeout and under server.max_conns. tlsconf.go: the
// certificate is served through GetCertificate and read again by every
// reload; TLS 1.2 offers ECDHE with AEAD suites only; session tickets use a
// key made at start and rotated every 24 hours; an OCSP response from a file
// is stapled (apps[].tls.ocsp, checked by policy.LoadCertificate).
//
// HTTP/1.1 over TLS 1.3 runs on the event loops (tlsloop_linux.go, package
// internal/tls13). Profiles of the goroutine path put its cost in the
// parking and waking around the system calls, not in the crypto, which is
// what the loops remove. The handshake runs over a tls13.Tap, a net.Conn
// under crypto/tls that gives it what it reads a record at a time (so it
// stops at the client's Finished, and what the Tap read past it is the
// leftover) and keeps the protected records both ways; the traffic secrets
// come from Config.KeyLogWriter (a Config copy per TLS 1.3 handshake,
// tls13.TapConfig), and Take opens each kept record to learn which key
// sealed it, so the write sequence number is proved record by record.
// Decision: documented APIs only, no reflection into crypto/tls (the
// tls13 package doc says why); what Take cannot prove stays on crypto/tls.
// tls13.SelfTest runs once per process over every handshake shape (full,
// resumed, HelloRetryRequest, client certificate); on failure every
// connection stays on crypto/tls. A read error ends a connection with the
// fatal alert RFC 8446 §6.2 names, and at most 16 records without data in
// a row (empty ones, KeyUpdates) are taken, as crypto/tls does. The
// connection's socket is duplicated for a loop and Go's copy closed without
// close_notify (adoptTLS). A TLS listener gets loops of its own with no
// listening socket (evloop.Front.Adopt), so drain, metrics and max_conns
// stay its listener's. Kernel TLS was not available on the machines
// sentry was built on, so the record layer is sentry's.
//
// HTTP/2 is served by sentry's own server: a sans-IO core (package
// proxy/h2srv: bytes in, events and frames out, no goroutine, no lock) and
// two drivers. On goroutines (h2own.go), one reader feeds the core and
// hands each request to a pooled worker, and one writer writes whatever is
// ready in one TLS record and one write. Decision: not x/net/http2's
// server, whose goroutine per stream and per flush cost about half the
// requests per CPU second; x/net is the HTTP/2 backends' transport only
// (h2backend.go). A worker runs a stream for an app with plain HTTP/1.1
// backends, without a body, with one of a declared length that
// request_buffer holds (read whole first) or with one max_body_bytes
// refuses (413, 411: the core's Refuse, nothing of the body read), on
// the exchange core's goroutine driver (gdrive.go: the core's events and actions with
// blocking I/O between them, the backend connections kept in a gpool
// counted against max_conns_per_backend with the loops' and fasthttp's,
// the response into the h2 core as HEADERS and DATA, h2core.go, and
// buffered under response_buffer for a client slower than its backend).
// Every other stream still runs the fasthttp path's serve() on a pooled
// fasthttp request built from the stream's head (serveCtx, h2.go).
//
// # HTTP/2 over TLS on the event loops
//
// A TLS 1.3 connection that negotiated h2 is adopted by the loops too
// (Front.AdoptH2), with an ownConn in loop mode as its shared side
// (evloop.H2Conn: the core under a lock, and the workers). The loop opens
// the records, feeds the core and writes its output, sealed, once per loop
// round for every stream that answered in it. A stream whose request ended
// with its head, for an app the loops serve, on a connection not suspect of
// rapid reset, becomes a stream connection: a loop connection with no
// socket whose request is a neutral head (exchange.Head) over the
// stream's decoded fields, never written as HTTP/1.1 text. Its exchange is
// the plain path's, unchanged -- admission, parking, relay, retries,
// termination, the access log; the backend gets the request from the same
// writer (exchange.AppendRequest, by the header table's rules, cookies
// joined) -- and the response head goes into the h2 core as HEADERS, the
// body as DATA. Decision: a stream connection, not a second relay, because
// the exchange reaches its client through the connection's transport
// (evloop's xprt); only the transport looks at the stream. Every other stream
// (a request body, h2 or gRPC backends, an app the loops do not serve, a
// suspect connection's) runs on the workers through the same h2 core, and
// a worker that leaves output wakes the loop. Bodies stay on the workers
// because their buffering, timeouts and minimum rate live there. TLS 1.2,
// h2c and the portable engine stay on the goroutine h2 server.
//
// # h2c on plain listeners
//
// With apps[].h2c, a listener without TLS gets a tlsListener with no TLS
// config in front of fasthttp (h2c.go): each connection fasthttp would
// serve is read until its bytes leave or complete the 24-byte preface. A
// preface goes to the h2 server with the bytes replayed
// (internal/replayconn); anything else to fasthttp, except a first line
// that is neither the preface nor an HTTP/1.x request line, an invalid
// preface (RFC 9113 §3.4), which is closed without an answer
// (TestH2CNeitherProtocol). The loops hand a preface off like any head
// they do not take. The HTTP/1.1 Upgrade: h2c handshake is not answered by
// sentry.
//
// # The header policy
//
// One table (pipeline.FieldKind, in proxy/pipeline/headers.go) names the
// hop-by-hop headers, the framing headers and sentry's forwarding headers
// (X-Forwarded-For, -Host, -Proto and the app's request ID). In order:
//
//  1. The request line: CONNECT is 405; PRI on a listener without h2 is
//     400; an absolute-form target sets Host and is forwarded in origin
//     form; an https:// target on a plain listener, another scheme or
//     userinfo is 400.
//  2. The head: repeated Host, obs-fold, a Host that is not uri-host[:port],
//     a missing Host, HTTP/1.0 with Transfer-Encoding, Transfer-Encoding
//     with Content-Length and an Upgrade with a body are 400, and the
//     connection closes.
//  3. The client's Connection list: one naming a framing, Host or
//     forwarding header is 400 (honouring it would desync framing or strip
//     sentry's headers); other named headers are removed, then every
//     hop-by-hop header.
//  4. Forwarding headers: every incoming copy, repeated lines and
//     underscore spellings included, is removed and one of each set. The
//     values are decided once (pipeline.PlanForwarding): from a
//     trusted_proxies peer, its lines merged and extended; from anyone
//     else, sentry's own.
//  5. Trailers of a chunked request body are dropped, as nginx does.
//  6. The response: hop-by-hop headers removed, the request ID the
//     request's.
//
// Trace context (traceparent, tracestate) is not a forwarding header:
// it passes as the client sent it unless the app's trace_context is
// generate and the request has no valid traceparent; then every incoming
// copy of both goes and sentry's traceparent is set (step 4's place).
//
// The loops take only heads that need nothing of steps 1–3 and hand the
// rest to fasthttp, whose handle does them (headcheck.go); h2 streams apply
// the same table to their fields (h2.go on the workers, the exchange
// core's request writer on the loops). Only the underscore spellings of
// sentry's own headers are dropped: other names with '_' are legal. An h2
// field value with SP or HTAB at either end makes the request malformed
// (RFC 9113 §8.2.1): the h2 server resets the stream with PROTOCOL_ERROR
// (proxy/h2srv; TestH2SpacedValuesEveryFront).
//
// # Request bodies (body.go)
//
// A body that did not come with its head is read into sentry before the
// request is classified, admitted or counted in flight: whole up to
// server.request_buffer, else its first request_buffer bytes, after which
// the rest streams. So a slow upload costs sentry memory, never a backend
// connection. server.request_buffer_total bounds the process's buffered
// bytes, charged as they arrive, never by a declared Content-Length; a
// body that would pass it gets 503 and the connection closes. Decision:
// refuse rather than stream past the cap, since streaming is what lets slow
// clients pin backends. server.body_min_rate is enforced read by read from
// the request's first byte (drainConn). Response bodies over 64 KiB, or
// chunked, stream; memory per request is bounded by the buffers. A body
// sentry did not read to its end closes the connection after the answer.
//
// # Backends over TLS
//
// backends.tls makes every backend connection a TLS client connection. The
// handshake is done in the dialer, inside timeouts.connect, so to
// fasthttp's HostClient it is an ordinary connection (backendtls.go,
// conn.go). A failed handshake is a failed connect: retried elsewhere, the
// backend ejected, the cause logged once. Active probes and upgrades dial
// the same way, so nothing goes in plaintext to a backend reached over TLS.
// idleConn turns fasthttp's per-exchange deadlines into idle timeouts
// (timeouts.response between reads and writes), so a long download that
// moves is never cut.
//
// # Backends over HTTP/2
//
// backends.protocol h2c or h2 sends each request as one stream through the
// app's x/net/http2 Transport, which multiplexes the app's streams over a
// connection per backend (h2backend.go). The relay is relayH2, called from
// the same serve, so admission and balancing are per stream. For gRPC the
// request body streams from the start (no buffering: a stream sends while
// it receives), the response is flushed as it comes, a Trailers-Only
// answer goes out as one HEADERS frame, the backend's trailers follow the
// body, and a body cut short ends the client's stream with a reset. What
// differs from HTTP/1.1 backends: timeouts.response bounds only the wait
// for the response head, from when the request was sent whole; only a
// failed connect is retried; termination and max_conns_per_backend do not
// apply; an Upgrade is relayed without it.
//
// # Selective early termination
//
// A request of a class with terminate is cut once it has run past the
// class's threshold (package sert) before its first response byte: the
// backend connection is closed, the client gets 503 with X-Sentry-Reject:
// terminated, and the request is never retried. The rules are pipeline.Term's,
// once for every engine. The loops check it in the sweep that already runs
// the response timeout (no timer, no allocation); fasthttp and h2 arm one
// pooled timer per exchange and cut through abort.go, which binds the
// backend connection to the exchange. The first byte of the answer
// disarms the cut.
//
// # Failures to statuses
//
// One map (pipeline/status.go) and one reply decision (pipeline.ReplyFor):
// a connect failure is 502 after trying other backends; an idempotent
// request whose connection broke before any response byte is retried
// (pipeline.TryAgain, one budget of attempts per request; a reused
// connection found closed is not an attempt); a response timeout is 504; a
// rejection 503 or 429 with Retry-After; no healthy backend 503. A gRPC
// request gets the gRPC form of each overload answer. Passive health counts
// connect failures, timeouts and broken responses; a 5xx is an answer.
//
// # HTTP/2 limits
//
// server.max_conns is one cap per listener over every holder: tlsListener
// (handshakes, h2, sniffing h2c), fasthttp and the loops. A connection the
// loops adopt is counted by them (evloop.Front.Expect) before it leaves
// the listener's count, so the cap never misses it in passing; the
// hand-over to fasthttp, which counts a connection only after its Accept,
// still may for that instant. 128 streams per
// connection. Rapid reset: a stream reset before dispatch never reaches a
// backend; a connection past 100 recent resets that make more than a
// quarter of its recent streams gets GOAWAY (ENHANCE_YOUR_CALM); on a
// connection where more than one recent stream in eight was reset, new
// streams wait 10 ms so that a reset right behind them is seen. Recent:
// the counts decay with a 10 s time constant (h2srv.ResetMeter), so a
// burst or a flood faster than 10 a second is cut and a long-lived
// connection cancelling at a steady modest rate (a typeahead search) never
// is. A stream reset after dispatch cuts its backend exchange (abort.go).
// The h2srv core keeps these counts; the drivers add the suspect delay.
//
// # Request IDs and trace context (docs/tracing.md)
//
// A request ID is 128 random bits (pipeline.IDGen, ChaCha8 seeded from
// crypto/rand), never a counter: an ID tells a client nothing of the
// request volume. Each event loop has its generator (in its
// exchange.Scratch); the goroutine paths take one from Proxy.ids
// (pipeline.IDPool). Neither locks or allocates.
//
// A request's traceparent is read once, where the exchange starts
// (exchange.Start on the loops, serve on the goroutine paths), so a
// rejection's access line names the trace too; a trace is started
// (trace_context generate) only where the backend's request is written
// (exchange.AppendRequest; serve's header setting), since only a backend
// can record it. Decision: sentry makes no span of its own for a trace
// it forwards. It exports none, and a parent-id naming its hop would
// leave the backend's spans under a span no collector has; when it starts
// a trace, the parent-id it sends is its hop's span, logged as span_id.
// The access line carries trace_id and span_id on every engine
// (TestTraceContextEveryEngine), and the log lines of a failed relay
// carry request_id and trace_id (pipeline.LogRequest).
//
// # Draining (Shutdown)
//
// On a stop, an upgrade or a removed listener: fasthttp stops accepting and
// answers in-flight requests with Connection: close; every HTTP/1.1
// connection is a drainConn, whose close while idle is put off for a
// second (a request then is still served) and is a lingering close. h2
// connections, kept out of fasthttp's sight, get GOAWAY and close when
// their streams end. The loops drain the same way and hand nothing off.
//
// # A backend the operator drains
//
// The admin API's drain and disable set the backend's lb.State (lb's
// doc.go, "Operator state"); every engine picks from the one pool, so
// none sends it a new request from then on. Its connections: the pool's
// Quiesce marks the Upstream (Quiesced) and closes fasthttp's idle ones;
// the event loops close theirs at their next sweep (10 ms) and close,
// rather than keep, one an exchange gives back; an exchange in flight at
// the drain closes the connection it gives back once its response is
// whole (quiescedEnd). HTTP/2 backends share one x/net transport per
// app, which can close only all of its idle connections: the other
// backends' are redialled. Test: TestBackendDrainEveryEngine.
//
// # The access log (accesslog.go)
//
// Every engine fills one pipeline.AccessEntry per exchange and hands it to
// one writer, only when the route logs access: with the log off nothing of
// it runs. The writer formats text or JSON under its mutex, after two
// token buckets (rate and reject_rate) so that a flood of rejections
// cannot grow the log with it, and copies the line into a bounded buffer
// (internal/logwriter) that one goroutine writes out in whole lines.
// Decision: writing never blocks serving; when the reader is stuck the
// buffer fills and lines are dropped and counted (docs/operations.md,
// Logs).
//
// # Concurrency
//
// The snapshot-derived state is immutable and swapped atomically by Apply;
// each front end holds an atomic pointer to its route. Proxy.mu guards the
// front-end map and is never taken on the request path. State that
// outlives a reload lives in pipeline.AppShared, keyed by app name, and in
// lb.Registry, keyed by backend address.
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
