// Package lb picks the backend for each admitted request: the least-loaded
// healthy backend of the app's pool (docs/algorithms.md §5, Cataclysm §3 and
// §6.1), with round robin and power of two choices as alternatives. It is a
// pure library: the clock, the random source, the health probe and the
// address resolver are injected, and it opens no sockets.
//
// # Design
//
// A Pool holds two immutable snapshots behind atomic.Pointer: the
// membership (every backend, in the order given) and the available set (the
// members neither marked down by active checks nor within a passive
// ejection). Pick loads both lock-free, chooses from the available set and
// increments the backend's in-flight count; Release decrements it. Both are
// a handful of atomic operations and allocate nothing:
//
//   - least_loaded (default) scans the available set from a rotating start
//     index for the fewest in flight, stopping at the first idle backend, so
//     idle backends take turns. Cost is O(1) at low load and O(n) under
//     load (about 2 ns per backend); for large pools prefer p2c.
//   - round_robin takes available[counter mod len]; it shares exactly evenly
//     among the healthy backends whichever ones are out.
//   - p2c draws two distinct available backends (one 64-bit random value,
//     multiply-shift reduced) and takes the less loaded. O(1).
//
// The available set is rebuilt, under a mutex the request path never
// waits for, after every transition: membership change, ejection, rejoin,
// active up/down, Reconfigure. Cooldowns end by time, not by event, so the
// set records the earliest end of the ejections it left out; the first
// Pick (or Healthy) after that moment rebuilds it (TryLock: one goroutine
// rebuilds, the others go on with the old set). While no ejection is
// running Pick never reads the clock. The backend Pick chooses is checked
// once more; if a transition has not reached the set yet, Pick falls back
// to a least-loaded scan that checks every member, so a down or ejected
// backend is never returned.
//
// Each Backend keeps everything a pick touches (in-flight, counters,
// health) on one 64-byte line and is sized to whole lines, so a scan reads
// one line per backend and neighbours never false-share. The pool's total
// in flight (Inflight, the η numerator of the admission test) is its own
// counter on its own line: exact, including requests on backends removed
// since they were picked. Healthy (the n of the admission test) is the
// length of the available set: O(1).
//
// # Health
//
// Passive: Failures consecutive Release(b, false) eject b (an atomic int64
// of unix nanoseconds, ejectedUntil). A success resets the count. The
// count is not reset by the ejection, so once tried again the backend is
// half-open: pickable, its next failure ejects it again at once and its
// next success ends the ejection ("backend rejoined"). Results of
// requests picked before the ejection that land while it lasts neither
// extend nor end it. Eject is a failed Release that ejects at once, for
// failures that are unambiguous (connection refused), and leaves the
// backend half-open like any ejection. Active: Run probes every member
// each Interval, each probe bounded by Timeout; Fall failures in a row
// mark a backend down, Rise successes mark it up. A backend is pickable
// only if neither says otherwise. New backends start up: with active
// checks they go down after Fall failed probes, and Run probes at once
// when it starts. Turning a check off in Reconfigure clears the state it
// had set.
//
// The return of an ejected backend. A backend is ejected because it
// failed; what matters next is how soon a backend that answers again
// gets its share back, and what a backend that keeps failing costs the
// clients whose requests try it. Each ejection has a trial wait:
// TrialWait (1 s) after a first ejection, twice the last wait after each
// failed trial (a half-open backend ejected again), at most Cooldown; a
// rejoin restarts it. Within the wait the backend is never tried. After
// it:
//
//   - with Reach (the proxy's: a connection as relaying makes one, TLS
//     included) or active checks, the backend stays out until a test
//     says it answers: Run calls Reach every ReachInterval (1 s) for each
//     ejected backend whose wait is over, and the first success, or the
//     first passing active probe, makes it half-open (endWait, "backend
//     half-open"); at the latest it is half-open when Cooldown ends;
//   - with neither, it is half-open when the wait ends, and its next
//     request is the trial.
//
// A backend in active checks' transition -- its rise count started while
// down, or its fall count while up -- is probed again every
// Interval/FastDivisor (HAProxy's fastinter) until it changes state or
// the count breaks, so with Rise 2 a returning backend is up a tenth of
// an interval after its first passing probe, not an interval later.
//
// Decision, against the references: HAProxy has no health state without
// checks (its `observe layer4|layer7` needs `check`: errors mark a server
// down, and only checks bring it back), and gives a returning server
// traffic when its rise checks pass. Envoy's outlier detection ejects for
// base_ejection_time times the number of ejections and returns the host
// when the time is up, or at the first passing active check
// (successful_active_health_check_uneject_host, true by default). nginx
// (max_fails, fail_timeout) sends one client request after fail_timeout.
// A fixed cooldown, as nginx's, makes a backend that returns wait for
// the cooldown's end: with a 10 s cooldown, a killed backend restarted
// was used again 4 s after it answered, a third of the farm idle while
// clients were turned away. A trial by a client request
// after a short wait is free when the connection is refused (the proxy
// retries a failed connect on another backend) but costs a client the
// connect timeout when a host is gone without a reset. So the test is a
// connection of sentry's own, every second, which costs no client
// anything whatever the failure; the request that follows it is the
// trial, and the wait that doubles after each failed trial (Envoy's
// multiplied ejection time) bounds what a backend that accepts
// connections but fails requests costs: one request at 1, 3, 7, 15, ...
// s and then one per cooldown. With active checks the probe is the test
// too, as Envoy's uneject rule. Tests: TestPassiveEjectionAndTrialWait,
// TestReachEndsEjection, TestProbeEndsEjection, TestTransitionProbes,
// TestRunProbesTransitionsFast.
//
// # Operator state
//
// Apart from health, each backend has the operator's State (the admin
// API's drain, disable and enable; SetState): Enabled, the default;
// Draining, out of rotation while its requests in flight finish, its
// health checks going on; Disabled, out of rotation and out of the
// health checks (maintenance: no probe, no Reach, so a backend stopped
// on purpose is not reported down). Both take it out of the available
// set at once, and so out of Healthy's count: the admission test's n
// counts only backends that take new requests. A pick reads the state
// on the backend's hot line (one more atomic load, in the line it reads
// anyway), so every engine -- they all pick from the pool -- sees the
// change on its next pick; a pick that raced the change and chose from
// the old set is caught by the check every pick makes.
//
// The owner keeps no idle connection to a backend out of rotation:
// Options.Quiesce is called when the state is set, and again each time
// the last request in flight to it is released (Release sees it from
// the count it decrements, one load more only when that count reaches
// 0); the pool logs "backend drained" once per drain. Leaving Disabled
// with active checks on, the backend's health is unknown, so it comes
// back down, one passing probe short of its rise, and Run probes it at
// once (HAProxy's checks do the same for a server leaving maintenance).
// The state belongs to the member: it lasts across Reconfigure, and an
// address that leaves and joins again is Enabled. Decision: no timer
// and no state outside the backend: the drain ends when the count says
// so, and what turns a state back (a policy reload, for the admin API)
// is the caller's.
//
// # Membership
//
// SetAddrs (and DNS re-resolution, and Partition) build a new membership
// copy-on-write; a backend whose address stays is the same *Backend and
// keeps all its state. Attach runs for each new address before its backend
// is published, Detach for each removed one after it is unpublished (it may
// still have requests in flight; releasing them is fine). Both run outside
// every lock: SetAddrs attaches the missing addresses unlocked and retries,
// so concurrent SetAddrs calls converge on the last one, and any backend
// attached but not published is detached: Attach and Detach are always
// paired. When several sentries split one app, Options.Partition keeps the
// addresses this sentry owns by rendezvous hashing with a quota per
// sentry, so the split is disjoint, even (shares differ by at most one),
// needs no coordination and moves few backends on a change.
//
// A Registry keeps one Pool per app name across policy reloads: Pool
// returns the existing pool reconfigured and moved to the new addresses
// (a DNS pool keeps its resolved set and re-resolves at once), Retain
// closes the pools of apps that are gone.
//
// # Goroutines
//
// Pool.Run owns three loops (active checks, the Reach of ejected
// backends, DNS) that run on a timer plus a wake-up from Reconfigure, and
// the probe goroutines of each round (at most 32 at a time). It returns only once all of them have stopped; a round
// cut short by cancellation changes no health state. Probe and Resolve
// must honour their context. Registry.Run owns the Run of every pool in
// the registry, including pools added later, and stops a pool's Run when
// Retain drops it. Nothing else in the package starts a goroutine.
//
// # Locks
//
// No lock is taken by Pick or Release on their common path. The locks,
// each guarding the fields grouped with it:
//
//	Registry.mu   pools map; leaf (pool methods run after it is released)
//	Pool.checkMu  serialises probe rounds; held while Probe runs
//	Pool.mu       membership bookkeeping and the reconfigure signal; leaf
//	Pool.availMu  serialises rebuilds of the available set; leaf
//	Backend.mu    health transitions, rise/fall counts and SetState; leaf
//
// Order: Pool.checkMu before Backend.mu and Pool.availMu; no other lock is
// ever held while taking another. Attach, Detach, Resolve and Now are never
// called with a lock held except that a probe round (under checkMu) reads
// the clock; Attach and Detach must not call back into the same pool's
// SetAddrs, Reconfigure or Close.
//
// # Usage
//
//	var reg lb.Registry
//	go reg.Run(ctx) // health checks and DNS for every pool
//
//	// On every policy load, for each app:
//	pool := reg.Pool(app.Name, lb.Options{
//		Algorithm: lb.LeastLoaded,
//		Failures:  3, Cooldown: 10 * time.Second,
//		Reach:     func(ctx context.Context, addr string) error { return dialAndClose(ctx, addr) },
//		Active:    &lb.Active{Interval: 5 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3, Probe: probe},
//		Attach:    func(addr string) any { return newBackendClient(addr) },
//		Detach:    func(addr string, c any) { c.(*backendClient).CloseIdleConnections() },
//		Logger:    logger,
//	}, app.Backends.Static)
//	reg.Retain(appNames)
//
//	// Per request:
//	b := pool.Pick()
//	if b == nil {
//		// no healthy backend: 503
//	}
//	err := relay(b.Attachment.(*backendClient), req)
//	pool.Release(b, err == nil)
package lb
