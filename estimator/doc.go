// Package estimator learns what the admission controller needs to know about
// an app (Cataclysm §3.4, ALGORITHMS §1): each key's inherent service time S
// and its variance, the queueing delay Q at the backends, each class's
// arrival rate λ, and the bucket a request falls in. η comes from the
// proxy's exact in-flight count through Eta.
//
// # Observations
//
// A backend reports S in a Server-Timing response header: cpu;dur=, io;dur=
// (or db;dur=) and queue;dur=, in milliseconds. ParseServerTiming reads them
// (S = cpu + α·io, eq. 3) and StripServerTiming removes exactly those
// entries, keeping every other one, into a caller buffer without allocating;
// ParseStripServerTiming does both in one pass. ObserveTiming feeds a
// response in. When the backend reports nothing, ObserveMeasured takes the
// proxy-measured time: S = measured − Q, clamped at 0.
//
// Q is the decayed mean of reported queue;dur samples while backends send
// them; otherwise of fallback samples measured − Ŝ(key), taken for keys that
// already have an estimate. Decision: Q has its own, shorter half-life
// (default 5 s, S has 30 s): Q follows load and S is a property of the URL,
// so with no reports a load increase moves mostly into Q. Without any
// reported queue the split of measured time between S and Q cannot be
// identified exactly; about a sixth of a sustained rise in queueing lands
// in S with the default half-lives.
//
// # Averaging
//
// Every average is time-decayed: a sample of age a has weight 2^(-a/H), so
// rare keys do not freeze. Per key the update is West's weighted incremental
// mean and variance with the earlier weight scaled by the decay factor
// (2^-x is a 6-term polynomial plus an exponent-bit shift, exact at whole
// half-lives). Per class and for Q, Observe only adds the sample to
// per-shard pending sums; every Config.Refresh (100 ms) the pending sums are
// folded into decayed statistics and combined across shards (Chan's
// parallel formula) into atomics, which is what ClassMean, ClassStats, Q and
// the prior of unseen keys read. Optionally (FitAlpha) α is fitted online by
// least squares of measured − queue − cpu = c + α·io.
//
// # Key table
//
// Keys are (class, key bytes), hashed with hash/maphash into up to 64 shards;
// the cap (default 10,000) is split evenly among them. Eviction is CLOCK per
// shard: a hit sets an entry's reference bit, a new key starts with it clear,
// and the hand clears bits until it finds a clear one. One-off keys (URL
// explosion) are therefore evicted first, memory stays bounded, and a key
// never seen gets its class's mean S as prior (the app's mean while the
// class has none; 0, the smallest bucket, before any sample).
//
// # Buckets
//
// See Buckets: b edges give b+1 buckets; s_i < S ≤ s_(i+1) is bucket i,
// S ≤ s_1 (including 0) is bucket 0 and S > s_b is bucket b. The mapping is
// one table load on S's exponent and three mantissa bits.
//
// # Arrival rate
//
// Arrive is one atomic add on the class's counter. When a window (1 s) has
// passed, the first caller closes it under a small lock and folds its rate
// into an exponential average with time constant 5 s; empty windows count
// as zero. Rate lags by at most one window.
//
// # Learned state survives reloads
//
// Class state is keyed by class name, not index, and a Registry keeps one
// Estimator per app name: Registry.Get returns the same *Estimator and calls
// Reconfigure, which swaps an immutable configuration snapshot atomically.
// Reordered classes keep their state; a lowered MaxKeys evicts at once.
//
// # Concurrency and lock order
//
// Every method is safe for concurrent use. Estimate and Observe take one
// shard mutex for a few map and float operations; Arrive takes none. Locks,
// outermost first — no path takes two shard locks at once, and no callback
// runs under a lock:
//
//	Registry.mu → Estimator.mu (Reconfigure) → one shard.mu at a time
//	Estimator.agg (refresh)                  → one shard.mu at a time
//	rateState.mu                               (leaf)
//
// # Metrics
//
// Snapshot copies the state for a status page; package
// estimator/collector exports it to Prometheus at scrape time.
//
// # Usage
//
//	ests := estimator.NewRegistry()
//	est, err := ests.Get(app.Name, estimator.Config{}, classifier.Names())
//	// per request:
//	est.Arrive(class, now)
//	s, bucket := est.Estimate(class, key)
//	// … admitted, relayed …
//	t, _, hdr := estimator.ParseStripServerTiming(buf[:0], resp.Peek("Server-Timing"))
//	est.ObserveTiming(class, key, t, lastByte.Sub(written), time.Now())
//	// η for the admission test:
//	eta := estimator.Eta(inflight.Load(), healthyBackends)
package estimator
