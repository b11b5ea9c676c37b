// Package exchange is sentry's exchange core: one request and its
// response, from the admission decision to the access record, without
// I/O. A driver feeds it events and carries out the actions it returns.
//
// # Goal
//
// A request goes through the same steps whatever protocol it came in and
// whatever engine serves it: decide, park or not, pick a backend, get a
// connection, send, retry, cut, read the response head, apply the header
// policy, frame the body, measure, complete, record. Those steps, their
// order and their rules are written here once, as a sans-IO state machine
// in the style of package proxy/h2srv: no socket, no goroutine, no system
// call, no clock read (time is an argument of every event). What is left
// to a driver is what touches the world: sockets, TLS records, HTTP/2
// framing, buffers, the connection pool, timers. The core is therefore
// tested alone, by scripts on a manual clock (testdata/exchange), and a
// rule about, say, when a retry is allowed or what a backend's Server-
// Timing feeds the estimator changes in one place for every driver.
//
// # Layers
//
//	drivers   proxy/evloop (plain, TLS, h2 streams)      own: sockets, epoll,
//	          proxy's gdriver (h2 worker streams)          TLS, h2 framing,
//	             │ events ▲ actions                        buffers, pool,
//	             ▼        │                                wait queue, timers
//	core      proxy/exchange: Exchange, Head, Scratch, State
//	             │ calls (concrete types, no interface on the hot path)
//	             ▼
//	steps     proxy/pipeline: App.Decide, Admitted, PlanForwarding,
//	          TryAgain, ReplyFor, Observe, Complete, AccessEntry; lb, sert
//
// The relay -- the bytes to and from a backend -- is the driver's: the
// core hands it the request to send (Unsent) and is told what came back
// (Read, Body, Closed, Broke). Today every backend the core serves speaks
// HTTP/1.1; a backend over h2 or TLS stays on package proxy's clients.
//
// The core imports no driver (proxy, proxy/evloop), not the h2 codec
// (proxy/h2srv), not fasthttp, not golang.org/x/net and not
// golang.org/x/sys/unix: TestImportGraph (deps_test.go) pins it. The
// drivers import the core.
//
// # Events and actions
//
// An Exchange is kept by the driver per client connection or stream and
// reused; Init ties it to the driver's Env (log, access writer, the
// illegal-transition rule) and Scratch (the parse of a response head,
// the forwarding plan's buffers, the classifier's view, the generator of
// request IDs and trace ids: one per loop or goroutine, so making an ID
// takes no lock). Every event is a method that returns an
// Action:
//
//	events (driver -> core)              actions (core -> driver)
//	Start(app, head)  a head arrived     Park       keep it; Resume on wake
//	Refuse(app, head, o)  refused first
//	Resume(decision)  a batch run woke   Connect    get a conn to Upstream()
//	Bound, Capped, ConnectFailed         Wait       queue at max_conns
//	Connected         connect finished   Send       write Unsent()
//	Wrote(n)          request bytes out  WriteHead  write the response head
//	Read(data)        backend bytes      Forward    pass body bytes on
//	Body(data)        more body bytes    Finish     last body bytes; Done
//	Closed, Broke     backend ended      Reply      sentry's own answer
//	Expire, Tick      a deadline passed  Abort      cut the client; Done
//	Abort(outcome)    client went        Cut        close backend; Terminate
//
// A driver runs one small loop over them (evloop's act): take the action,
// do its part, feed the next event, until an action leaves the exchange
// waiting for the world (Park, Wait, Send, an unfinished connect).
// Deadline and TermAt say when the driver owes the core an Expire or a
// Tick; the driver owns the timers and only asks. A blocking driver on a
// goroutine (package proxy's gdriver, gdrive.go) runs the same loop,
// blocking between events: a dial, a write or a read under a socket
// deadline at the earlier of Deadline and TermAt, a wait on its Waker (a
// channel) while Parked; no timer goroutine.
//
// Who decides what:
//
//   - Routing is the driver's: it holds the listener's route table and
//     gives Start the app. Whether a driver takes a request at all (the
//     strict parser's heads, the body all here) is the driver's too.
//   - The decide step, the forwarding plan (X-Forwarded-*, the request
//     ID, the load header), picking a backend, retries (pipeline.TryAgain,
//     stale kept connections), SERT's arming and cutting (pipeline.Term),
//     the response head's rules (1xx skipped, 101 and malformed heads
//     refused, never retried), its framing (Content-Length, chunked,
//     close-delimited, none), the response header policy (RespField), the
//     measured time (Relay: dispatch to head is what Observe gets, and in
//     flight ends there), and the complete step (metrics, the access
//     record filled once, in Done) are the core's.
//   - The connection pool and the wait at max_conns_per_backend are the
//     driver's: the core says "a connection to U" (Connect) and is told
//     Bound, Capped or ConnectFailed; at Finish it says whether the
//     connection may be kept (Reusable). Response buffering for a slow
//     client is the driver's (MayBuffer says whether the response allows
//     it).
//
// # The neutral heads
//
// Head is a request head as byte spans (pipeline.RawHead) over a buffer
// the driver owns -- an HTTP/1.1 driver's read buffer, or an h2 stream's
// arena (h2srv.Stream.Arena) -- plus the facts the core needs: HTTP/2 or
// not, TLS, the body (whole: the drivers take no other), the size the
// access log counts. It is not HTTP/1.1 text and not a fasthttp type.
// AppendRequest is the one writer of the request an HTTP/1.1 backend
// gets, from either kind of head: the request line, the fields the header
// policy keeps (an HTTP/1.1 head's own lines, byte for byte; an h2 head's
// fields as "name: value", Host from :authority, cookies joined), one of
// each forwarding header, the request ID, the load header, and the
// traceparent of a trace sentry starts (docs/tracing.md: Start reads the
// head's traceparent once, so a rejection's access record names the
// trace; AppendRequest starts one, under trace_context generate, only for
// a request that goes to a backend).
//
// The response head is the backend's bytes and their parse (Response)
// with the policy applied field by field (RespField: drop, keep, or a
// replacement value such as Server-Timing stripped); the driver adds the
// request ID and, on HTTP/1.1, Connection: close when it closes. An
// HTTP/1.1 driver writes the kept lines as they came; an h2 driver turns
// the same fields into HEADERS directly and the body into DATA (chunked
// decoded), never parsing text it wrote itself.
//
// # State and invariants
//
// Where an exchange is, is one State (state.go), changed only by the
// core (setState), which checks every change with Legal:
//
//	idle ──start──> admitting ──park──> parked
//	 ^                │    ^                 │
//	 │                │    └─────resume──────┤
//	 │                │ bound                │ client gone (abort)
//	 │                v                      v
//	 │         connecting ⇄ sending         idle
//	 │           (connected; retry: bound again, another backend)
//	 │       waiting ──bound──> connecting, sending
//	 │        (max_conns_per_backend reached: from admitting, or a retry)
//	 │                         │ response head (Relay)
//	 │                         v
//	 │                      relaying
//	 │                         │
//	 └── reply (reject, 502, 504), abort, finish ── from any busy state
//
// Decision: an illegal transition is a bug. Under test (Env.Strict) it
// panics, so the bug is found where it happens; in production it is
// counted (Env.Illegal: sentry_evloop_illegal_transitions_total for the
// loops) and the new state taken, so that one wrong exchange does not
// take down a loop and every connection on it. The drivers' own states
// (evloop's streamState) follow the same rule.
//
// Invariants:
//
//   - Every exchange that starts ends in exactly one Done, after exactly
//     one ending action (Finish, Reply or Abort), and Done is where the
//     metrics and the access record are written; nothing else writes
//     them.
//   - The balancer's in-flight count for the picked backend is released
//     exactly once per attempt (release), at the response head when the
//     attempt succeeded, with a passive-health failure only when the
//     backend was at fault.
//   - The core never blocks and never reads a clock: the same events at
//     the same times give the same actions, so a script is a proof.
//   - Nothing of the response reaches the client before WriteHead: a
//     failure before it is answered (Reply), after it is cut (Abort).
//   - A response is never retried; a request is retried only before any
//     byte of its response came, and only as pipeline.TryAgain allows.
//
// # The request's path (an HTTP/1.1 request on the event loop)
//
//	client bytes ─> evloop: read, parse (pipeline.ParseRequestHead), route
//	  ─> exchange.Head ─> Start: Decide ─┬─ rejected ─> Reply ─> write, Done
//	                                     ├─ parked ─> Park ... Resume
//	                                     └─ admitted: AppendRequest, Pick
//	  ─> Connect ─> evloop: pool, cap, dial ─> Bound ─> Send ─> write
//	  ─> backend bytes ─> Read: head parsed, framed ─> WriteHead
//	  ─> evloop: Relay (Observe), head from RespField ─> client
//	  ─> Body ─> Forward ... Finish ─> evloop: keep or close the backend
//	  ─> Done: Complete (metrics), AccessEntry ─> idle
//
// An h2 stream on the loop takes the same path: its head is a Head over
// the stream's arena, its response head goes into the h2 core as HEADERS
// and its body as DATA. A TLS connection differs only in how bytes reach
// the socket (evloop's transport, xprt_linux.go).
//
// # What is on the core, and what is not yet
//
// On the core: every exchange of the event loops (plain, TLS, h2 stream
// connections), and the h2 workers' streams for an app with plain
// HTTP/1.1 backends at IP:port (LoopOK), with a head StreamHead takes and
// no body, one of a declared length that server.request_buffer holds
// (read whole before the decision; a body that cannot be read is the
// Refuse event), or one max_body_bytes refuses (413 over it, 411 without
// a content-length: Refuse, before anything of the body is read; the
// access record counts the declared length in bytes in) -- on every h2
// connection, the goroutine
// server's (TLS 1.2, h2c, the portable engine) and the loops' (the
// streams a loop leaves to the workers: a suspect connection's, a head
// larger than a loop buffer). StreamHead is the one reader of a stream's
// head for both.
//
// Not yet on it, and so still carrying their own copy of the steps:
//
//   - h2 worker streams whose body streams (no content-length, larger
//     than request_buffer, buffering off), and those of apps with
//     HTTP/2, TLS or named backends: serveCtx (proxy/h2.go) copies them
//     into a pooled fake fasthttp.RequestCtx and runs Proxy.serve
//     (proxy/handler.go). Next, a streamed body on the goroutine
//     driver. No driver streams a request body through the core yet
//     (the loops hand such a request to fasthttp; Body is the
//     response's), so it needs a new event, request body bytes after
//     Start, and with it: the framing AppendRequest writes (the
//     declared content-length; a body without one that ends within
//     request_buffer gets one, as h2Body gives it; else chunked, each
//     piece framed by the core); the first request_buffer bytes read
//     before the decision and sent with the head (Head.Body); a failed
//     connect retried as now, but a connection that broke never (not
//     replayable, pipeline.TryAgain: the fasthttp relay replays only a
//     body held whole, not even on a stale kept connection); a client's read
//     failure while it streams answered as clientBody.outcome answers
//     it (408 body_timeout, or gone); no measured sample for
//     Observe (the upload's time is the client's; only Server-Timing
//     counts, as serve's observe, relay.go); no early termination (TermClass
//     is never asked for a body that streams, as serve asks it only
//     for a body held whole); the backend's idle deadline not
//     running while the driver waits for the client (body_timeout is the
//     driver's); and a response head before the body's end ending the
//     upload (the rest refused, RST_STREAM NO_ERROR; the connection not
//     kept). Scripts in testdata/exchange for each; the driver copies the
//     DATA to the backend connection under both deadlines. Then one
//     relay interface for HTTP/1.1, TLS and h2 backends, after which the
//     fake RequestCtx goes.
//   - fasthttp's front end (handle and serve, with proxy/headcheck.go and
//     proxy/body.go): the portable engine's HTTP/1.1 and what the loops
//     hand off. Then fasthttp's duplicates go (its HostClient relay where
//     the core's does the same); what stays is kept only where a
//     measurement says it earns its place, written in package proxy's
//     doc.
//   - Idle memory per connection on the goroutine drivers: the loops
//     take an Exchange and buffers per request and give them back when
//     it ends (proxy/evloop's doc, "Memory"). The h2 goroutine driver
//     now waits on a 1 KiB read buffer and gives its output and
//     partial-frame buffers back with no stream (proxy's doc,
//     Invariants); what an idle h2 connection still holds is its
//     reader's goroutine stack, crypto/tls's record and handshake
//     buffers and its h2 core. fasthttp gives back its write buffer
//     (ReduceMemoryUsage) but keeps its read buffer, 16 KiB by default,
//     while an HTTP/1.1 connection waits, since request bodies stream:
//     the portable engine's HTTP/1.1 stays far above 1.5 KiB per idle
//     connection until a driver of its own, on the core, reads into a
//     buffer taken when bytes arrive. e2e/bench/idle.sh measures both
//     engines (the peer sentry-portable).
package exchange
