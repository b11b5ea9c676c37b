// Package scenario runs sentry's experiments from files: a scenario names a
// simulated farm (package farm), the traffic offered to it (package load)
// and the sentry policy fragment to use, and the runner plays it against
// each peer in turn — sentry, sentry with admission off, HAProxy and nginx
// — writing per-second series, plots and a summary (docs/algorithms.md §9:
// goodput, admitted p95 against the target, admission per class,
// rejections).
//
// # Scenario files
//
// YAML, decoded strictly (unknown keys are errors) with FILE:LINE in every
// error, including the semantic ones (a class whose path has no farm
// route, a closed-loop class in capacity units, …):
//
//	name: fig5
//	duration: 85s
//	seed: 5
//	farm: {servers: 4, slots: 8, routes: [{path: /, prefix: true, io: "exp:80ms"}]}
//	load: {timeout: 10s, max_in_flight: 6000}
//	classes:                    # package load's classes, plus unit
//	  - name: gold
//	    sla: 1s
//	    unit: capacity          # rate levels are multiples of capacity
//	    request: {paths: [{path: /checkout/pay}], headers: {X-Tier: gold}}
//	    open: {rate: [{duration: 40s, from: 0.2}, {duration: 20s, from: 0.2, to: 1.2}]}
//	capacity: {note: "…"}       # or rate: N, or mix: [{path, weight}]
//	sentry:                     # app policy keys; the runner adds name, listen, backends
//	  classes: [...]
//	  sla: {targets: [{target: 1s}]}
//	  admission: {mode: batch}
//
// A scenario may change the farm while it runs (events.go): a route's
// costs or its heavy share, a server's speed, a server killed and
// restarted, each at a time from the start of the load; or upgrade the
// peer's binary in place (sentry peers: `sentry upgrade`, the same
// binary; Options.SkipUpgrades leaves these out for the control run):
//
//	events:
//	  - {at: 20s, route: {path: /search, heavy_share: 0.10}}
//	  - {at: 30s, speed: {server: 1, factor: 0.5}}
//	  - {at: 40s, kill: 2}
//	  - {at: 50s, restart: 2}
//	  - {at: 55s, upgrade: true}
//
// Events are validated against the farm at parse time (in time order, a
// route that exists, a valid resulting route, a kill of a running server,
// a restart of a killed one), played by one goroutine per peer run that
// runPeer owns, and listed in the peer's summary notes with the time each
// was applied.
//
// Many equal clients are one entry: `clients: N` with the first
// client's `source` (127.0.0.0/8) expands, at parse time, into classes
// NAME-001 … on consecutive addresses, each with 1/N of the entry's
// open-loop schedule (ExpandClients). Decision: expanded in the loader,
// not in package load, so every class is an ordinary class afterwards
// (series, summaries, the HAProxy per-source limit), and errors still
// name the entry's line. `fairness:` asks the summary for issue 30's
// figures over a span (fairness.go): the spread of the clients'
// admitted requests against their mean, and, for every window of
// `window` seconds a second apart, the share of clients admitted ≥ 95%
// or ≤ 5% of what they sent in it (its worst window, the windows under
// the target of 90%, its mean, and the clients all-or-nothing in every
// window). The span scales with the
// run's time factor; the window does not (it is the target's).
//
// Capacity is servers × slots / mean service time of a request mix
// (farm.Config.Capacity for one path); by default the mix of every
// open-loop class's paths weighted by the class's expected arrivals.
// Levels in unit capacity are multiplied by it, so a scenario keeps its
// shape when the farm changes. The file's scale and the runner's Scaling
// (level and time factors) shrink or stretch a run without editing the
// file; the end-to-end test runs fig5 at 0.1× time.
//
// # The runner
//
// Run takes the peers one at a time. For each it starts a fresh farm (same
// seed) in a process of its own (below), starts the peer in front of it as
// a child process in its own process group (killed with the runner:
// Pdeathsig), waits until a request through it answers, runs the load
// while sampling the farm's stats every second, collects (sentry's
// /metrics), stops the peer (SIGTERM, then SIGKILL to its group) and
// closes the farm. Nothing is left running when Run returns.
//
// # The farm's process
//
// The farm runs as `farm -control` (e2e/cmd/farm, Options.FarmBin; the
// scenario command builds it): the runner writes its configuration, then
// "stats" and "event" requests, as JSON lines on the child's stdin and
// reads one reply line for each (farmproc.go). The child exits when its
// stdin closes, so it cannot outlive the runner. Its log goes to
// OUT/<scenario>/<peer>/farm.log.
//
// Decision: not in the runner's process. The load generator sends one
// goroutine per arrival, and at a flood's start it opens thousands of
// connections; the farm's handlers then wait in the same Go scheduler's
// run queue behind them. Measured on fairshare.yaml cut to 12 s, on 2
// cores: with the farm in process, a request sent straight to a farm
// server took 0.17–1.7 s in the first 3 s of the flood while the runner's
// process used 1.6 cores, and the proxy in front was judged by a farm
// that was not the model (a 10 ms server answering in a second). In its
// own process the same request took 10–57 ms throughout. The
// generator's own lateness is not removed by this: it is in every
// summary's notes (send lag), and a run whose generator p99 send lag is
// hundreds of milliseconds measured the generator's start as much as the
// peer. A farm sample the child does not answer is a gap in the series
// and a note in the summary, as is a child that failed. RunSentries and
// RunAutoscale (below) still hold their farms in process.
//
// Peers:
//
//   - sentry: the sentry binary with a generated policy: the scenario's
//     fragment in an app listening on a free 127.0.0.1 port, the farm's
//     servers as static backends, an admin port for metrics. The policy is
//     checked with `sentry check` first.
//   - off: the same, with the fragment's admission replaced by {mode: off}.
//   - haproxy: maxconn per server = the farm's slots, the excess waits in
//     the backend queue for at most `timeout queue` and then gets a 503;
//     leastconn; keep-alive both sides. `timeout queue` is the smallest
//     class SLA minus the capacity mix's mean service time
//     (HAProxyQueueTimeout): a request still queued then could not be
//     served within the SLA any more, so HAProxy refuses it rather than
//     serving it late. With two or more sentry classes, each request gets
//     `http-request set-priority-class` = its class's index (the most
//     important, listed first, is 0 and is dequeued first), matched by
//     ACLs built from the same rules sentry classifies with
//     (HAProxyClasses): path, path_prefix, path_regexp, path_glob (as a
//     regexp), methods, hosts, headers, cookies, networks. The default
//     class is set first and the others from the least important up, so
//     the last match — the first listed class that matches — wins. This
//     is the baseline an expert HAProxy user would write.
//   - nginx: limit_conn per virtual server = servers × slots, beyond which
//     503 at once; least_conn; upstream keep-alive.
//   - limiter: e2e/cmd/limiter, a Go reverse proxy whose overload control
//     is failsafe-go's adaptive concurrency limiter (it sizes the requests
//     in flight from measured latencies; no SLA, no classes), built from
//     this module with the go tool: initial limit servers × slots,
//     queueing at 2–3× the limit, a wait for a permit of at most half the
//     smallest class SLA (LimiterArgs); least-connections. The adaptive
//     baseline a Go user would reach for.
//   - sentry-noterm: sentry with every class's terminate setting left out
//     (the comparison of the termination scenarios).
//   - sentry-nodegrade: sentry with the app's degradation section left
//     out, so no load header reaches the farm (the comparison of
//     degrade.yaml: routes with a degraded variant then always serve the
//     full one).
//   - sentry-auto, sentry-batch, sentry-adaptive: sentry with the
//     fragment's admission.mode set to auto, batch or adaptive, the rest
//     of its admission section kept, so one run compares every mode.
//   - sentry-shared: adaptive mode with admission.adaptive.shared (one
//     controller for every class, the SEDA paper's baseline).
//   - haproxy-timeout: the haproxy peer with `timeout server` set to the
//     scenario's peers.server_timeout, a static cut hand-tuned to the
//     workload (the plain haproxy peer keeps 30 s).
//
// With peers.per_source_rate the haproxy and nginx peers also get a
// per-client-address rate limit hand-set at that rate (a stick table on
// src; limit_req on $binary_remote_addr), the static rule their users
// write against one flooding client; a class's source address
// (load.Class.Source) makes it a client of its own.
//
// HAProxy, nginx and the limiter mark nothing, so their 503s are counted as rejections
// with reason PeerRejectReason ("peer_503"); sentry's carry
// X-Sentry-Reject. A peer whose binary is missing is skipped with a
// message.
//
// # Outputs
//
// OUT/<scenario>/<peer>/series.csv has one row per second and class (and
// "all"): offered, overflow and admitted counted by arrival second;
// completed, rejected (and rejected_<reason>), errors, goodput (2xx within
// the class SLA) and p50/p95/p99 of admitted latency by completion
// second; the target; and the farm's utilisation in that second with its
// busy slots and queue at the second's end. Three PNG plots (gonum/plot):
// arrival.png (offered vs admitted per class, completed, capacity),
// p95.png (admitted p95 per class against the target, log scale) and
// util.png (farm utilisation and goodput / capacity). summary.json holds
// the numbers of summary.md, which OUT/<scenario>/summary.md shows for
// every peer run with the same file and scaling (so peers can be run
// separately).
//
// # Closed-loop autoscaling and several sentries
//
// Two runs are not scenario files, because the runner's farm is fixed and
// its peer is one process. RunAutoscale (autoscale.go, e2e/cmd/autoscale)
// starts one-server farms on 127.0.0.10, .11, … at one port, a DNS server
// (package sim/dns) whose name lists the ready ones, and sentry with
// backends.dns pointing at it (backends.dns.server); a stand-in HPA polls
// sentry_provision_servers_needed and changes the name after a
// provisioning delay. RunSentries (sentries.go, e2e/cmd/sentries) starts
// one farm and k sentries with partition {index, count: k}, and drives
// them with the load generator (goodput) or wrk (decisions per second,
// optionally each sentry pinned to a core with taskset). e2e/README.md
// gives the figures.
//
// # Concurrency
//
// RunAutoscale owns one autoscaler goroutine (a 100 ms ticker, stopped
// when the load run returns or the context ends) besides the load
// generator; RunSentries one goroutine per wrk or one for the load run,
// each waited for before the next count starts. Run is sequential; during a peer's run it owns one sampler goroutine
// (ticker plus context, bounded by a sample count), one event player
// (bounded by the events list) and, per child process (the peer, the
// farm), one goroutine waiting for it; each exchange with the farm's
// process has a goroutine of its own, bounded by farmTimeout. Both end before runPeer returns. The load
// generator's goroutines are owned by load.Run.
package scenario
