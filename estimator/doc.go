// Package estimator learns what the admission controller needs to know about
// an app (Cataclysm §3.4, docs/algorithms.md §1): each key's inherent service time S
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
// proxy-measured time: S = measured − Q, clamped at 0 (and the fallback
// queueing sample winsorised against Q + Ŝ(key), see Outliers).
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
// # The queue now
//
// QNow is the same queue samples (from the same source as Q: reported
// while they arrive, else fallback) as an exponential average over
// completions: each completion a step of gain 1/8 (RFC 6298's gain for
// the smoothed round-trip time), and the old mean's weight also halves
// every 250 ms, so about the last eight completions or those of the last
// fraction of a second, whichever are fewer (at a completion every 1.5 s
// the latest one is most of it). It answers whether the backends are
// queueing now; admission's work-conserving rule reads it (a request that
// misses only its own target is admitted on a free slot only while the
// backends are not queueing, docs/algorithms.md §10). Decision: not Q for
// that. Q weights each second by its completions: after five seconds of a
// 200 ms queue at 1,000 completions a second and then no queue at 50 a
// second (adaptive mode's cut during an overload), Q still reads more
// than 25 ms three seconds later, and a time half-life of 250 ms alone
// would take 1.8 s; QNow is under 25 ms within 16 completions. Both
// memories, because at one completion every 1.5 s the steps alone kept a
// queue of seconds ago for 16 completions (24 s); QNow forgets it in one
// or two (TestQueueNow).
// The refresh folds each batch of completions in as equal steps (a sample
// still pending from before the last refresh counts as new: at very low
// rates QNow can lag by one completion).
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
// # Outliers
//
// A client can stretch what sentry measures (a trickled upload counts as
// service time until the proxy times the backend alone), and a backend can
// have a bad second. Without a bound, 3 samples of 12 s after 20 of 10 ms
// take a key's and its class's mean past 1 s; the class is then rejected,
// rejected requests give no samples, and the time decay alone never
// corrects it: decay lowers a statistic's weight, never its mean, so with
// no samples a mean stays where it is. Three mechanisms, with Rho = 2,
// Tail = 50, Z = 3, Floor = 1 ms, YoungSamples = 8 and YoungTime = 500 ms
// (constants, robust.go):
//
//  1. Winsorising. A young key (below) counts each sample as at most
//     Rho·m + Floor against its mean m, a grown-up key as at most
//     Tail·m + Floor (tailClamp), and the class gets each sample as the key
//     counted it, or a new key's first sample clamped at Rho·prior +
//     Floor; the key itself takes its first sample as is (a new slow URL
//     must not be under-estimated for minutes; a client that makes up URLs
//     only hurts its own). The fallback queueing sample (no Server-Timing)
//     is the measured time winsorised at Rho·(Q + Ŝ(key)) + Floor, less
//     Ŝ(key): Q has no rise limit, so this clamp is its only bound. Falls
//     are never clamped: a too low estimate admits, and is corrected by
//     the samples that admits.
//
//     Decision: what a grown-up key's sample may count for. Clamped at
//     m + max((Rho−1)·m, 3σ) + Floor with σ of the samples as clamped, a
//     heavy tail would never widen σ: one URL whose requests take 5 ms,
//     or 500 ms for 2% of them (sert-sweep.yaml's mix), settles at 5.1 ms
//     against a true mean of 14.9 ms, and batch admission lets in three
//     times what the farm can serve. A σ of the
//     raw samples does not fix that (3σ covers a tail 100× the mode only
//     at a share of 10% or more). No clamp at all would learn the tail,
//     but the ceiling (2.) bounds only the pace of a sustained stream, not
//     where it ends: a steady 1% of 12 s samples among 10 ms ones would
//     take a key to 130 ms in 5 minutes, one a second of 1 h samples to
//     35 s. Tail·m + Floor sits between: a sustained share s
//     of requests costing c·m is learned in full when s·Tail ≥ 1 (2% and
//     more: then it is the key's real cost, and termination, not the
//     estimate, is the tool against it; docs/termination.md), and a
//     smaller share moves the mean to about m/(1 − s·Tail) at most,
//     however long it lasts and however large its samples (1%: 19.7 ms for
//     10 ms after 5 minutes, of 12 s or of 1 h samples;
//     TestSustainedOutliersBounded). The sweep's URL is within 10% of
//     14.9 ms from the first minute on, reported or measured
//     (TestHeavyTailLearned), and the burst bounds of TestPoisoning and
//     poison.txt are unchanged. What a share of 2% or more buys an
//     attacker who pays for real backend work: the mean of that work, at
//     the rise limit's pace; and its σ, which widens the key's headroom
//     (a key that had such a stream takes a later burst of 300 to 3.2×,
//     where a key with σ ≈ 0 takes it to 1.17×).
//
//  2. Rise limit, on a ceiling. Once a key is grown up (YoungSamples
//     samples, and YoungTime since its first), its mean is held under a
//     ceiling c (ceiling): c rises from c_prev to at most
//     (c_prev + Floor)·4^(Δt/H) − Floor, Δt the time since the previous
//     sample counted up to H/2 (riseLimit), and sits at most Z standard
//     errors of the mean (Z·σ/√w, headroom) above the mean. So c + Floor
//     doubles at most every half of a half-life (15 s by default), after
//     any idle period a burst can at most double it, and a burst of
//     outliers lifts the mean at most to the headroom it had, then at the
//     rise limit; but an honest mean wanders below c by its standard
//     errors without meeting it. A sample that would push the mean past c
//     counts as the value that lands it there (dstat.addUpTo). The class
//     prior (what unseen keys get; ClassMean, ClassStats) is a decayed mean
//     fed each refresh's new samples and held the same way, over the time
//     since the class's previous samples, so it does not creep up to a
//     stale mean when samples stop either. Whatever the number of samples,
//     one key's history or a burst of fresh keys moves a grown-up key or
//     its class's prior by at most its headroom and ×4^(t/H) (+Floor) in
//     t seconds: 300 outliers within 3 s leave a key of 20 samples of
//     10 ms within 17%, spread over 12 s within 1.8×.
//
//     Decision: the rise limit holds a ceiling, not each step of the
//     mean. Held per step (from m over the time since the previous
//     sample), it would cut every honest upward step that comes soon
//     after the previous sample (or with an earlier timestamp, as
//     concurrent completions do) and never a downward one: a key with
//     exponential service times of mean 80 ms would be estimated at 45 ms
//     after a minute and 66 ms at steady state (TestSkewedUnbiased); with
//     the cold start below, step10x's bronze key would sit at 12 ms, the
//     parallelism learned from it (batchac: P ≈ inService·Ŝ/T) fall from
//     7.5 to 2.2, and gold, whose estimate is less wrong, fail its test at
//     1× capacity.
//
//     A young key may rise freely up to Rho·prior + Floor of a class that
//     is itself grown up (a path attacked after only 3 samples of 10 ms
//     ends near 2.4×, poison.txt), and its clamp is Rho·m + Floor, so
//     that outliers it let in cannot widen it. While its
//     class is young too (a cold start), nothing but that clamp holds it:
//     growth is at most the ratio of the weights, and the same attack 300
//     ms after the class's first sample ends near 10× (poison.txt). That
//     is the price of cold starts: the first completions are the shortest
//     of everything dispatched together (a batch class's first run sends
//     dozens at once): a key held from its 8th sample of 1–30 ms, for a
//     mean of 80 ms, would still be at 9 ms after 30 s; young for
//     YoungTime, it is at 70 ms (TestColdStartBatch).
//
//  3. Probes. Probe grants at most one request per class per
//     Config.ProbeInterval (1 s) admission in place of a rejection, for a
//     key (or, unseen, its class) without a sample for that long; control
//     calls it when a rejection rests on the estimate. So learning never
//     stops while a class is rejected, even after a sustained attack got
//     past the bounds.
//
// A real, lasting change is still learned. Under steady traffic the mean
// converges like any decayed mean (the gap halves every half-life) while
// its ceiling lets it, and the ceiling's m + Floor doubles every half of a
// half-life, twice the decayed mean's pace. A lasting rise by r ≥ 2 is
// within 10% after at most about H·log2(2.5·r): 10 ms → 50 ms with
// H = 30 s in ≤ 109 s (TestStepChangeLearned: 95 s, for the key and the
// class prior alike). The same pace holds a cold start's heavy tail: the
// tail's first samples come after the key is grown up when the tail takes
// longer than YoungTime, and the 5 ms / 500 ms URL above, at 6 ms when it
// grows up, is at 8.4 ms after 10 s, 12.7 ms after 30 s and within 10%
// after about a minute. Falls are learned at the decayed mean's pace: 90% of the way in
// H·log2(10) ≈ 100 s. The price: for noisy keys in their first minute the
// asymmetric limit biases the mean low (TestAccuracy's fallback case,
// S ± 100% noise: worst error 8%, 3% without the limit).
//
// The 5 s bound after an attack (TestPoisoning and testdata/poison.txt:
// 3, 30 and 300 outliers of 12 s after 20 samples of 10 ms, at once or
// spread over 12 s, on the key or on fresh keys, reported or measured)
// holds because the estimates never rose past 2×: nothing has to decay,
// and when ordinary samples come back the mean falls from there. A
// poisoned state that got past the bounds (an attack sustained for minutes
// looks like a real change) is undone by probes and by the ordinary
// requests admitted as the estimate falls: its gap to the truth halves
// about every half-life once samples flow (one probe per second is a
// steady weight of ≈ 1.44·H/1 s samples). A key pushed to 12 s over a true
// 10 ms is back within 2× after about H·log2(600) ≈ 5 min of probes alone,
// longer by H·log2(attack rate / probe rate) if the attack sent more
// samples per second.
//
// Decision: an estimate does not decay toward the class prior by itself
// while no samples come. Quiet keys are most keys; such a decay would
// forget that a rare report takes 2 s and admit it as a cheap request.
// The probe asks the backend instead of forgetting.
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
// Everything learned is kept as it is: means, ceilings and first-sample
// times (so the bounds above hold across a reload; it neither resets nor
// re-inflates a ceiling, nor makes a key young again), last-sample times and the probe budget. A new HalfLife applies
// from the next sample on, to decay and to the rise limit alike. A
// poisoned state therefore decays across a reload exactly as it would
// without one (see Outliers).
//
// # Concurrency and lock order
//
// Every method is safe for concurrent use. Estimate and Observe take one
// shard mutex for a few map and float operations; Arrive takes none, nor
// does Probe until a probe is due (then one shard mutex). Locks,
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
//	// rejected because of s? est.Probe(class, key, now) may admit it anyway
//	// … admitted, relayed …
//	t, _, hdr := estimator.ParseStripServerTiming(buf[:0], resp.Peek("Server-Timing"))
//	est.ObserveTiming(class, key, t, lastByte.Sub(written), time.Now())
//	// η for the admission test:
//	eta := estimator.Eta(inflight.Load(), healthyBackends)
package estimator
