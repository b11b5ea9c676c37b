// Package thresholdac is threshold admission control, Cataclysm §3.3
// (docs/algorithms.md §3): the cheap mode the sentry falls back to when batch
// admission would saturate its own CPU.
//
// # Design
//
// Every recompute period (Config.Period, default 1s; the paper used 15–30s)
// Recompute reads each class's arrival rate λ_j and mean inherent service
// time s_j from Inputs, and the number of healthy backends n, and computes
// the threshold pair (i, p) against the capacity K = n × per-server
// capacity, all in server-seconds per second:
//
//	Σ_{j<i} λ_j·s_j ≤ K  and  Σ_{j≤i} λ_j·s_j > K   ⇒   p = (K − Σ_{j<i} λ_j·s_j) / (λ_i·s_i)
//
// Classes more important than i are admitted, class i is admitted with
// probability p, less important classes are rejected; when every class fits
// all are admitted. p is the ADMIT probability (the paper's "p_drop" is
// used as an admit fraction; docs/algorithms.md §3 records the decision). Compute is
// the pure rule; the paper's examples (K = 100, s = 1: λ = 75, 50 → all of
// C1 and half of C2; λ = 150, 75 → two-thirds of C1, none of C2) are tests.
//
// Edge cases, decided: n = 0 rejects every request (no capacity); a class
// with λ = 0 or unknown s (MeanS = 0) adds no work; negative or NaN inputs
// count as zero; a request class outside [0, Classes) is treated as least
// important (admitted only when every class fits). While a learned
// capacity has no data yet, every request is admitted: there is nothing to
// enforce, and threshold mode normally starts after batch mode has fed the
// Learner.
//
// # Hot path
//
// Admit does one atomic load of a packed uint64 — the threshold class in
// the high 32 bits and p as a 32-bit fixed-point admit threshold in the low
// 32 bits — and, for requests of class i only, one random draw. It takes no
// lock and does not allocate. The default draw is the runtime's per-thread
// wyrand (runtime.cheaprand, linked by name; see fastrand.go for why not
// math/rand/v2); tests inject a seeded source through Config.Rand, such as
// CounterRand. Recompute publishes the word with one store, so a request
// sees either the old or the new pair, never a mix. Current returns the
// full last Threshold (K, offered work, n) for status pages and the
// Collector, published separately through an atomic.Pointer.
//
// # Rejections
//
// A rejection carries RejectThreshold and RetryAfter = the recompute period
// rounded up to whole seconds, at least 1s: the pair cannot change before
// the next recompute, and Retry-After has one-second resolution.
//
// # Work conservation
//
// Principle (docs/algorithms.md §10): a request is never refused while
// admitting it harms nobody. The pair (i, p) sheds load; on a free slot
// there is none to shed. Threshold mode in sentry runs behind the batch
// model's guard (package control, App.threshold), which decides, in order:
//
//	free slot within the class's own budget   → admit (batchac Room: free)
//	no room, and batchac Spare                → admit, Decision.OverTarget
//	no room                                   → RejectThreshold
//	class within the threshold class          → admit
//	otherwise                                 → this package's draw
//
// Spare is batch mode's condition for k = 1: η + 1 ≤ P (a slot free, no
// request in service slowed), the queue the latest completions met
// QNow ≤ R_sla/10 (the backends are not queueing), no batch queue holds a request, and no more
// important class holds a cascade mark. So a class whose requests are
// longer than the target is admitted one free slot at a time, counted and
// warned about by the owner, and refused as soon as the farm's slots are
// taken -- exactly where the room test refused it before; every verdict
// under load is unchanged. This package's own Admit knows no farm state
// and is not changed.
//
// # Capacity
//
// Per-server capacity is either configured (Config.PerServer) or learned
// (Config.Learned, normally a *Learner) from per-interval observations of
// the admitted work rate Σ λ_admitted·s, whether R_sla was met, and n. The
// Learner raises its estimate toward work that was sustained within the
// SLA, cuts it below work at which the SLA was missed, and probes slowly
// upward while admission is the binding limit — see Learner for the rule
// and why a time-decayed maximum was not used.
//
// # Concurrency and lock order
//
// Admit is lock-free. Controller.mu serialises Recompute calls (it guards
// the scratch slice); Inputs and the capacity source are called under it,
// so they must not call back into the Controller. Lock order:
// Controller.mu, then Learner.mu (Recompute calls Learner.PerServer);
// Learner.mu is a leaf. Run is the only goroutine; the
// caller owns it and stops it by cancelling ctx.
//
// # Usage
//
//	learner, _ := thresholdac.NewLearner(thresholdac.LearnerConfig{})
//	tac, err := thresholdac.New(thresholdac.Config{
//		Classes: len(app.Classes),
//		Inputs:  inputs, // Rate/MeanS from the estimator, Healthy from lb
//		Learned: learner,
//	})
//	if err != nil { ... }
//	go tac.Run(ctx)
//	reg.MustRegister(thresholdac.NewCollector(tac, prometheus.Labels{"app": app.Name}))
//	// each interval, from batch mode's accounting:
//	learner.Observe(thresholdac.Observation{Work: w, SLAMet: met, Healthy: n, Limited: rejected > 0})
//	// per request:
//	if d := tac.Admit(&req); d.Verdict != admission.Admit { ... }
package thresholdac
