// Package conformance proves sentry's HTTP/2 and TLS with tools nobody
// here wrote. sentry's own tests check what its authors thought of; these
// suites check what the protocols' implementers and users think of: a
// conformance suite (h2spec), a reference implementation's own interop
// tests (grpc-go), the clients many real clients are built on (nghttp2,
// curl, OpenSSL) and a TLS scanner (testssl). It has tests only and
// ships nothing.
//
// # What runs, and what each proves
//
// Every test starts the real binary (built once by TestMain from
// cmd/sentry, without -race, as it ships) on loopback, with one app in
// front of a backend of the test's own, and points the tool at it. The
// h2 suites run on each front end (fronts): h2 over TLS on the event
// loops (Linux's default), h2 over TLS on the goroutine driver, and h2c
// (cleartext, prior knowledge, apps[].h2c) on a plain listener.
//
//   - TestH2Spec: h2spec v2.2.1 in strict mode (-S: every case, the
//     SHOULDs too), over TLS on both drivers and over h2c, several runs in
//     a row. Every case passes in every run. Proves the h2 server's
//     framing, stream states, flow control, HPACK and error handling
//     against RFC 9113 and RFC 7541 as h2spec reads them; repeating finds
//     what fails only sometimes (a case that timed out in one run of
//     three is a finding).
//   - TestGRPCInterop: grpc-go's own interop client through sentry to
//     grpc-go's own interop server, at the grpc-go version go.mod
//     requires, sentry relaying over h2c (backends.protocol: h2c), on each
//     front end. Every case the server supports passes: unary, streaming
//     both ways, deadlines, cancellation, status codes and messages,
//     metadata echoed in headers and trailers, unimplemented methods and
//     services, ORCA load reports (per call, in trailers, and out of band,
//     on a long-lived stream) and the soak cases (many calls, and a new
//     channel per call). The cases that need Google credentials or
//     several server addresses are skipped with their reasons
//     (interopSkipped); TestInteropCasesListed reads the client's source
//     in the module cache, so a grpc-go upgrade that adds a case fails
//     until the case is run or skipped with a reason. The test also checks
//     sentry relayed at least one request per case: a client that
//     reached the server some other way would not pass.
//   - TestH2loadHeaderTableSize: h2load with --header-table-size 0, 1024
//     and 4095, 200 requests each: all succeed. The client lowers the
//     HPACK table sentry's encoder may use, so sentry's next header block
//     must open with a dynamic table size update (RFC 7541 §4.2); nghttp2
//     enforces it, and so does every client built on it. And 65536, more
//     than the default, where there is nothing to signal.
//   - TestNghttpSmallWindow: nghttp with 1 KiB stream and connection
//     windows: three responses at once (1 B to 256 KiB) share the
//     connection's window and every byte of each arrives; a 256 KiB
//     response arrives whole and in order; a 128 KiB upload arrives whole.
//     Proves sentry's flow control as a sender.
//   - TestH2Bodies: request bodies from 1 byte to 128 KiB, closely around
//     every 16 KiB boundary (a TLS record's largest plaintext and h2's
//     default largest frame: there HEADERS, frame headers and DATA
//     straddle records) and spread between, from nghttp (a connection per
//     body; at each boundary's edge also without a content-length) and
//     from curl (the client that found bodies stuck; over TLS, many bodies
//     one after another on one connection). The backend answers each
//     body's length and SHA-256, so an answer proves the body arrived
//     whole, not merely that something was answered.
//   - TestOpenSSL: OpenSSL's s_client, HTTP/1.1 by ALPN (on TLS 1.3 the
//     event loops run the record layer): TLS 1.3 and TLS 1.2; a KeyUpdate
//     in the middle of a request body, asking for the server's
//     (update_requested: the server must send one) and not; session
//     resumption from a saved session on both versions (s_client says
//     Reused and the server sent no certificate); a HelloRetryRequest
//     (the client's only key share is X448, which Go lacks). Each is
//     followed by a request that must be answered. TestOpenSSLKeyUpdateH2
//     does the KeyUpdate between two DATA frames of an h2 request on both
//     drivers, the frames written with x/net's framer and carried by
//     s_client. Proves the record layer sentry runs itself after crypto/tls's
//     handshake follows every handshake shape and key change.
//   - TestTestssl: testssl against a TLS listener with the default TLS
//     settings: no finding rated MEDIUM or worse. It runs offline: no DNS
//     lookups (--nodns none), no CRL or OCSP fetching (no --phone-out), so
//     the revocation and CAA checks, which need the internet, are skipped;
//     and for time without the client simulations (-c) and the cipher by
//     cipher scan (-e), which rate nothing the other checks do not.
//
// # Structure
//
// startSentry writes the policy of one app (and, on a TLS front, a second
// app, the probe) and runs the binary; h2Driver is the one place that
// says how a front end's driver is chosen (today the environment variable
// SENTRY_H2LOOP=0 for the goroutine driver; when that becomes a policy
// key, h2Driver returns the key's line and nothing else changes).
// checkDriver proves the choice took: an h2 GET over TLS 1.3 to the
// probe, whose backend speaks HTTP/1.1 so a loop may run the stream
// itself, moves sentry_evloop_requests_total by one on the loop driver
// and by none on the goroutine driver. The driver is the process's, so
// the probe speaks for the app under test (whose gRPC backend's streams
// never run on a loop).
//
// The backend (echoBackend) is an HTTP/1.1 server in the test process. It
// answers the length and SHA-256 of the body it read, or N bytes of a
// pattern (/bytes/N) or of one letter (/fill/C/N), with the security
// headers a web app sends (they are the app's business, and testssl
// rates their absence).
//
// Admission is off in every policy: these suites prove protocols, and a
// 503 from an admission decision on a busy CI machine would be noise, not
// a finding. Everything listens on loopback, except grpc-go's interop
// server, which has no flag for its host and listens on every interface
// for the test's length. The TLS certificate (internal/testpki) is signed
// by a test CA that every client is given, is valid for 90 days and
// names a CRL, as a public CA's would, so a scanner rating it has nothing
// to say about the test PKI's shortcuts.
//
// Every assertion names the case: the h2spec case and the runs it failed
// in, the interop case, the body size and client, the s_client step. Each
// tool has a time bound (run), so a hung case fails and the suite goes on.
//
// # Tools, and what CI does
//
// A tool is looked up on PATH (h2load, nghttp, curl, openssl, testssl
// under either of its names, h2spec) or taken from an environment
// variable (SENTRY_H2SPEC; SENTRY_GRPC_INTEROP_CLIENT and
// SENTRY_GRPC_INTEROP_SERVER, which must be built from go.mod's grpc-go
// version). When one is missing the test
// skips and says how to install it -- unless SENTRY_SUITES_REQUIRED=1,
// when it fails. .ci/run installs every tool on a clean Debian machine
// (the Debian packages nghttp2-client, openssl, curl and testssl's;
// h2spec and the interop client and server with go install, pinned, each
// in its own directory), exports SENTRY_SUITES_REQUIRED=1 and the tools'
// paths, and runs the README's test command.
//
// h2spec runs SENTRY_H2SPEC_RUNS times per front end: 3 by default, what
// CI runs (a run of the three front ends takes a few seconds; a hung case
// costs 5). The target is 10 consecutive runs; run it by hand with
//
//	SENTRY_H2SPEC_RUNS=10 go test -run TestH2Spec -v ./e2e/conformance/
package conformance
