// Package evloop is sentry's event-loop front end on Linux for HTTP/1.1,
// plain or over TLS 1.3, and for HTTP/2 over TLS 1.3, after a handshake
// done elsewhere: a few loops, each one goroutine around its own epoll set, that
// serve the common request themselves -- accept, read, parse, admission
// (parking an exchange that waits for its batch run), relay to a backend
// with retries, timers, drain -- and hand every other connection, with the
// bytes read so far, to package proxy's fasthttp front end. What the
// loops share with that front end (the per-app runtime, routing, the
// pipeline's steps, the header table, the status map, the retry policy,
// the raw head parsers) is package proxy/pipeline. The order of an
// exchange's steps and its state machine are the exchange core's (package
// proxy/exchange): the loops are its first driver. The loop's interface to
// the kernel (Sys, RawSys) and to time (Clock) are here.
//
// # Place in the import graph
//
// Package proxy imports evloop and starts it (Start) with a Config: the
// listening socket, the server limits, the route table (an
// atomic.Pointer[pipeline.Route] swapped by a reload), the request-ID
// source, the logger, and four calls back into proxy, none on the common
// path: BackendConns (fasthttp's connections to a backend, asked when the
// loop dials: max_conns_per_backend counts both), OtherConns (the
// listener's client connections the loops do not hold: fasthttp's, and
// TLS handshakes, h2 and h2c ones; asked on accept or adoption when
// max_conns is set), TooManyConns (a refused connection's metric) and
// Access (an access-log line, only when the route logs access). Decision: func fields, not an
// interface, because there are four and each is filled by one closure;
// the request path itself (parse, decide, relay, complete) calls only
// concrete types -- pipeline.App's methods, AppMetrics.Observe on
// pre-resolved series -- so the move added no interface call and no
// allocation per request. evloop never imports proxy (an import cycle,
// and the loop would reach past Config into the fasthttp front end):
// TestImportGraph pins it. It imports fasthttp for one thing,
// fasthttp.StatusMessage, so that a reply the loop writes (appendReply)
// has fasthttp's status line byte for byte.
//
// # Design
//
// A loop is one goroutine around its own epoll set. It owns every
// connection it accepted and every backend connection it dialled, and
// never blocks: each socket is non-blocking, and RawSys makes its reads
// and writes as raw system calls (the Go scheduler is not told), polls
// epoll without blocking first and blocks in epoll_wait only when nothing
// is ready.
//
// A loop is a driver of the exchange core (package proxy/exchange, whose
// doc draws the request's path): it routes a head the strict parser took,
// makes it an exchange.Head over its read buffer (or a stream's arena),
// and calls the core's events; act carries out the actions that come back
// -- park, connect from the pool or dial, wait at max_conns_per_backend,
// send, write the head, forward, finish, reply, abort, cut -- until one
// leaves the exchange waiting. The loop keeps what touches the world:
// sockets, TLS records, the h2 connection, buffers, response buffering,
// the backend pool and the wait queue, dialling, and the sweep that asks
// the core when a Deadline or TermAt passed. Where an exchange is, is the
// core's exchange.State; the loop never sets it.
//
// How bytes reach a client is one xprt (xprt_linux.go), as HAProxy's
// xprt_ops: plain, TLS, an h2 connection, or an h2 stream. read, flush,
// after, cut and close switch on it in that one file; the rest of the loop
// does not ask which transport a connection has. Decision: a switch on a
// small enum, not an interface call per request.
//
// # Locks
//
// A loop's state is its goroutine's alone; the one thing other goroutines
// touch is its eventfd (a batch run's wake-up), guarded by the loop's
// efdMu, which is never held while the loop takes another lock. Front's
// counters and flags (served, handed, draining, closing) are atomics.
//
// # TLS (tls_linux.go)
//
// A Front started with no listening socket (Config.LFD -1) serves a TLS
// listener's HTTP/1.1 connections: package proxy does the handshake with
// crypto/tls in its own goroutine, takes the record state from the
// tls13.Tap the handshake ran over (package internal/tls13) and calls
// Front.Adopt with a
// duplicate of the socket; the loops take adopted connections in turn,
// from a queue each loop drains when its eventfd wakes it. Conns counts a
// connection from the caller's Expect, before Adopt queues it, to its
// close, so that proxy can drop it from its own count in between and a
// reader of both never finds it in neither. Such a
// connection carries a tlsConn: readTLS reads ciphertext and opens every
// whole record into c.in (including what crypto/tls had read past the
// handshake, opened at adoption since epoll will not report it again),
// and flush seals c.out into records as it writes them (flushTLS). c.out
// keeps its plaintext until the records are written, so "len(c.out) > 0"
// means the same thing everywhere -- backpressure on the backend, the
// write timeout, drain -- and nothing else in the loop knows about TLS,
// except the forwarding plan (X-Forwarded-Proto: https), the hand-off (a
// tls13.Conn over the same record state, the plaintext already opened
// replayed first), the refusals written at adoption or hand-off (sealed)
// and the closes (close_notify before a close or a lingering close; after
// a record failure the fatal alert it calls for instead, tlsAlert). A
// KeyUpdate the client asks for is sent at once; records the client sent
// while an exchange was in progress and c.in was full wait in the record
// state and are opened when the exchange ends (pullTLS, from process and
// after). Invariant: the loop never waits for the socket while the record
// state holds plaintext or a whole record (tls13.State.Buffered counts
// both): bytes already read are never reported by epoll again. readTLS
// acts on whatever its first open yields, h2Read opens until only part of
// a record is left, and pullTLS runs before the next request is looked
// for. The system calls per
// request are the plain path's: one read, one write on each side.
//
// # HTTP/2 (h2_linux.go)
//
// An adopted TLS connection that negotiated h2 (Front.AdoptH2) carries an
// h2Link: its records are opened as above, and the plaintext goes to the
// connection's sans-IO core (package proxy/h2srv) through H2Conn, the
// shared side package proxy implements (a lock around the core, and the
// worker goroutines that run the streams the loop does not take). A
// stream whose request ended with its head, for an app the loops serve,
// is taken (takeStream, stream_linux.go): it becomes a stream connection,
// a cconn without a socket (xpStream), whose request is an exchange.Head
// over the stream's h2srv arena (streamReqHead: no HTTP/1.1 text is
// written or parsed), and its exchange is the plain one above, states and
// all. Only the client side differs, in the transport: the response head
// goes into the h2 core as HEADERS from the core's response policy
// (streamHead; sentry's own answers from the reply's field list,
// streamReply), the body as DATA (flushStream, a chunked body decoded,
// END_STREAM at the end), a cut is RST_STREAM instead of a close, and the
// sweep's write timeout runs from the stream's last progress. Where a
// stream is, as its connection sees it (taken, refused, running, head,
// ended, tail), is one checked streamState, under the core's rule for
// illegal transitions. A stream waiting for the client's
// window or for the connection's output has a backlog (cconn.backlog), as
// a plain client with c.out unwritten has: its backend is not read. When
// its exchange ends the stream is released (streamEnd); the core sends
// what still waits for window on its own. The connection's output is
// written once per loop round (flushDirty), however many streams answered
// in it. Workers wake the loop through a queue of connections (h2Wake,
// under h2mu) and the eventfd. Lock order: the connection's lock (held by
// the loop only around core calls), then h2mu, then efdMu.
//
// # Response buffering (buffer_linux.go)
//
// A response whose client is slower than its backend does not pace the
// backend (docs/buffering.md): once a write to the client has had to
// wait, each backend read goes into the connection's respbuf.Buffer
// (cconn.rb), behind c.out -- memory, then an unlinked temporary file,
// under the process's budget (Config.Resp, the one every front end
// charges). The loop lets the backend be read again only after reserving
// room in the buffer for a whole read (room), so a read is always taken
// whole (hold); when no room can be had it pauses the backend as it always
// did, and resumeBackend lets it read again once the client has taken
// enough. flush refills c.out from the buffer as the client takes it, so
// "len(c.out) > 0" still means "the client has not taken the response"
// everywhere; a stream connection feeds its core from the buffer as the
// window opens (flushStream). The body's end releases the backend
// connection (finish: the pool, or a waiter) while the client may still
// have it all to take; the exchange ends there (done), and the
// connection keeps its buffer until it is written (after drops it, as
// closeClient, abort and streamEnd do). The exchange states do not change:
// a response being written from a buffer belongs to an idle connection.
// Decisions: in flight (the balancer, the admission ticket, the
// estimator's sample) still ends at the response head, the one point that
// never depends on the client (docs/buffering.md says why); the
// temporary file's reads and writes are made on the loop, as nginx's
// workers make theirs. Streams (respbuf.Streams: server-sent events, gRPC,
// X-Accel-Buffering: no) and apps with response_buffering off are never
// held back. The Sys interface includes the file calls, so the scripts
// drive buffering too (testdata/evloop/buffer*.txt).
//
// # Memory (mem_linux.go)
//
// A connection holds buffers only while bytes pass. Its read buffer is
// taken when bytes arrive (readClient, readRecords), its exchange and
// output buffer when a request starts (serve), a TLS connection's record
// buffer when it reads and its sealed-bytes buffer when it writes; when
// the exchange is done and nothing is buffered -- no request bytes, no
// response bytes unwritten, no record half read -- they all go back to
// the loop (putEx at done, idleBufs when the connection is idle again),
// as nginx frees a keep-alive connection's header buffers. An h2
// connection gives back its read and record buffers after each read
// that leaves nothing buffered, and its core's output buffer once that
// is empty; its core (HPACK tables, settings) stays, as nginx keeps its
// h2 connection state. An idle connection therefore holds its cconn (no
// exchange: the loop's noEx stands for it, so c.ex is never nil) and,
// with TLS, its record state; TestIdleConnHeap bounds its heap, and
// e2e/bench/idle.sh measures its RSS against nginx and HAProxy.
// Decisions: each loop keeps what is given back in free lists of its
// own (no lock, no allocation per request once warm), bounded
// (maxPooled each) and trimmed at every idle sweep by half of what no
// exchange took since the last (a burst's buffers leave a loop that went
// quiet within seconds); an exchange is a pointer taken per request, not
// a field of the connection (840 bytes an idle connection would carry);
// an output buffer that grew past maxOutPooled is left to the collector.
//
// # Usage
//
// Package proxy (proxy/evloop_start_linux.go) builds a Config per plain
// listener, and one without a socket per TLS listener
// (proxy/tlsloop_linux.go), and calls Start, which starts Config.Loops loops, each with
// RawSys{} and time.Now; the returned Front's Handed listener is what
// fasthttp serves, and Front.Shutdown drains the loops. The tests replace
// Sys and Clock with scripted ones and drive the loop through the scripts
// in testdata/evloop (TestEvloopScripts, on the app package
// proxy/exchange/exchangetest builds), printing each syscall, each
// exchange.State transition and each access-log record (the core alone
// has its own scripts); package proxy's tests run the loops through
// the policy's server.engine, one table for both engines (engines_test.go).
//
// The files: front_linux.go starts and stops the loops and hands
// connections off; conn_linux.go is the loop, its connection types and
// its timers; client_linux.go the client side (reading, parsing, the
// neutral head, serve); xprt_linux.go the client transports;
// backend_linux.go the backend side (pool, dialling, the wait queue);
// response_linux.go the response relay and act, which carries out the
// core's actions; buffer_linux.go response buffering; mem_linux.go what
// a connection holds and the loop's free lists; reply_linux.go the
// answers sentry writes itself; tls_linux.go adopted TLS connections;
// h2_linux.go HTTP/2 connections; stream_linux.go the streams the loop
// runs; sys_linux.go the kernel.
package evloop
