// Package load is sentry's load generator: per-class open-loop and
// closed-loop traffic in one run, with every request recorded and
// aggregated into per-second series and a summary (docs/algorithms.md §9).
//
// # Open loop
//
// An open-loop class sends requests at the times its rate Schedule says,
// whatever the responses do: offered load can exceed capacity without the
// clients slowing down, which is how overload is measured (a closed loop
// hides overload by waiting). A Schedule is a list of segments {duration,
// from, to} whose level moves linearly, so constant loads, steps, ramps
// and spikes are all lists of segments (Constant, Steps, Ramp, Spike,
// Scale help in Go). Arrivals are Poisson (default) or uniform, computed
// by time rescaling: the k-th arrival is where the integral of the rate
// reaches E1+…+Ek, with Ek ~ Exp(1) for Poisson and Ek = 1 for uniform.
// Arrival times are therefore a pure function of the seed and the
// schedule, and TestNextPoisson checks their statistics without a clock.
//
// Each arrival is sent by its own goroutine. In-flight requests are capped
// by MaxInFlight (default 10000); an arrival that finds the cap full is
// not sent but recorded as generator overflow (ErrOverflow), so a
// saturated generator is visible rather than silently lowering the offered
// load. Result.Lag records how late each send was.
//
// # Closed loop
//
// A closed-loop class keeps round(Users.At(t)) users alive (a schedule
// like 3 → 1000 makes a flash crowd). Each user sends a request, waits for
// the answer and thinks for an exponential time with mean Think. After a
// 503 or 429 it backs off for the response's Retry-After, or for
// Config.RetryAfter (default 5 s, as in SEDA) when there is none.
//
// # Bounds
//
// Every run is bounded in count and time: MaxRequests arrivals over all
// classes, MaxDuration of wall time (drain included; then in-flight
// requests are cancelled), each request's Timeout, and the caller's
// context. Every loop in the package is bounded by a count as well as by
// its context.
//
// # Results
//
// Each arrival yields a Result: class, path, scheduled start, lag,
// latency (send to last body byte), status, bytes, and whether sentry
// rejected it: a 503 or 429 carrying X-Sentry-Reject is "rejected" (with
// its reason and Retry-After); any other error status, timeout or
// connection error is a failure; connection errors have status 0 and an
// ErrKind. Report.Series buckets results per second (or any step) and per
// class plus an "all" row: offered and overflow by scheduled arrival,
// sent by actual send, and completed, rejected, errors, goodput (2xx
// within the class's SLA) and p50/p95/p99 of admitted latency by
// completion time, so the completed column is the throughput. WriteCSV
// writes a series; Report.Summary gives whole-run totals, rates,
// percentiles, lag, and counts by status, error kind and reject reason.
//
// # Why not vegeta, wrk or hey
//
// vegeta is not in go.mod, and none of them does what the experiments
// need in one tool: several classes with their own time-varying rate
// schedules and request templates, open and closed loop side by side,
// Retry-After back-off, and sentry's reject header counted apart from
// failures. The generator is small, and writing it keeps the definitions
// (offered, goodput, admitted latency) in one place next to the tests
// that pin them down.
//
// # The client
//
// Client is the generator's own HTTP/1.1 client (client.go): per target a
// LIFO pool of keep-alive connections (as many idle as MaxInFlight; a
// class with a Source has a Client of its own, every connection bound to
// that address), each request written from bytes prepared once per class,
// path and target with http.Request.Write (so the server sees what
// net/http's Transport would send), and its response read with
// http.ReadResponse on the arrival's goroutine, the body discarded and
// counted (past any interim 1xx). The request's timeout and the run's
// cancellation are connection deadlines. A GET, HEAD, OPTIONS or TRACE
// that a reused connection lost before any response byte because the
// server had closed it (EOF, reset; a timeout is no loss) is sent once
// more on a newly dialled connection, as the Transport does; a POST is
// not. A connection idle 25 s in the pool is closed (under the peers' own
// idle timeouts). https targets get a TLS client with the system's roots.
// Unlike the Transport, the response head's size is not capped and a
// body a server sends after a bodiless answer (HEAD, 204, 304) is not
// detected unless it has arrived when the answer is read.
//
// Decision: not net/http's Transport. Per request the Transport runs two
// goroutines per connection and hands the request and the response
// between them through channels; measured on fairshare.yaml cut to 12 s
// (5× a 1,200 req/s farm, about 6,600 req/s offered) on 2 cores, the
// runner's process spent 0.65 of a core on it, and at a flood's start its
// sends ran up to a second late, so in-flight requests and connections
// grew into the thousands and the farm and the proxy were measured
// through a generator that was behind. This client spends 0.30-0.32 of a
// core on the same run, with no late sends. Not fasthttp's client either:
// errors must stay net errors (classify tells refused, reset, timeout and
// EOF apart with errors.Is), and the framing must be net/http's, which the
// peers' responses are judged by.
//
// # Configuration
//
// Config is plain data with yaml tags so a scenario file can embed it;
// ParseConfig decodes strictly. Targets may be left out of the YAML and
// filled in by the runner:
//
//	load:
//	  seed: 1
//	  classes:
//	    - name: gold
//	      sla: 500ms
//	      request: {paths: [{path: /checkout}], headers: {X-Class: gold}}
//	      open: {rate: [{duration: 30s, from: 100, to: 400}]}
//	    - name: crowd
//	      closed:
//	        think: 1s
//	        users: [{duration: 10s, from: 3}, {duration: 20s, from: 1000}]
//
// # Concurrency
//
// One goroutine per class loop, per closed-loop user and per request,
// all owned by Run, which returns only when every one has returned. The
// recorder's mutex guards only an append; counters are atomics.
//
// # Usage
//
//	rep, err := load.Run(ctx, load.Config{
//		Targets: []string{"http://127.0.0.1:8080"},
//		Classes: []load.Class{{Name: "c", Open: &load.Open{Rate: load.Constant(500, 10*time.Second)}}},
//	})
//	if err != nil { ... } // invalid config only
//	err = load.WriteCSV(w, rep.Series(time.Second))
//	sum := rep.Summary()
//
// Used by `sentry demo` (cmd/sentry/demo.go) and by the scenarios in
// e2e/scenario; it lives outside e2e/ so the binary does not depend on a
// test folder.
package load
