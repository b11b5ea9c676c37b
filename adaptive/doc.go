// Package adaptive is SEDA's adaptive overload controller (Welsh & Culler,
// "Adaptive Overload Control for Busy Internet Servers", §3.2–3.3; the
// project's own account is docs/algorithms.md §7) as a pure library: the
// clock injected, no sockets, no goroutine of its own but the optional Run.
// A *Controller implements admission.Admitter.
//
// It needs no service-time model, only measured response times against a
// target, which makes it the right tool when estimates are poor: backends
// that send no Server-Timing, costs one URL cannot predict, capacity that
// changes under sentry's feet.
//
// # Per request
//
// Each class has a token bucket. Admit takes a token, or rejects with
// RejectAdaptive and a Retry-After of the time to the next token, at most
// Timeout (whole seconds, at least 1 s). Decision: capped by Timeout
// because the rate may change at the next run; a flash-crowd run with the
// uncapped wait (20 s at the minimum rate) sent the rejected clients away
// for so long that the farm idled at 12% while the rate stayed low. The bucket refills at the class's rate and holds at
// most Burst seconds of it (at least one token). Decision: Burst defaults
// to 100 ms; the paper does not give a depth.
//
// # The controller (§3.2)
//
// Observe records a completed request's response time, measured from its
// arrival at sentry, so time spent waiting in sentry counts. After NReq
// (100) samples of a class, or after Timeout (1 s) with at least one
// (Tick), the class's controller runs:
//
//	samp = the Percentile-th (90th) of the samples, by sorting
//	cur  = α·cur + (1−α)·samp                 (α = 0.7; the first run takes samp)
//	err  = (cur − target)/target
//	err > err_d (0)     → rate = rate/adj_d (1.2), and the bucket is emptied
//	err ≤ err_i (−0.5)  → rate = rate + adj_i·(−(err − c_i))   (adj_i = 2, c_i = −0.1)
//	rate is clamped to [RateMin, RateMax] = [0.05, 5000] per second
//
// Decisions beyond the paper, each pinned by a script in testdata:
//
//   - The boundary err = err_i raises (the paper writes err < err_i), so
//     a percentile at exactly half the target counts as well under it.
//     The increase there is 2·(0.5 − 0.1) = 0.8 per second: c_i = −0.1
//     makes it zero at err = c_i, as the paper says (issue 13's example
//     "2·(0.5 + 0.1)" does not follow its own formula; the formula wins).
//   - Stale average: a class whose previous run is more than 5 timeouts
//     old restarts cur from samp. A class held near RateMin admits one
//     request every few seconds, and with α = 0.7 it would need about 8
//     such samples -- minutes -- to forget an overload long gone.
//   - Targets may change (SetTargets): sentry's R_sla follows the arrival
//     rate through the QoS table. SetRate seeds a class's rate (auto's
//     fall-back starts from what batch mode admitted), and Carry copies a
//     class's learned rate and cur into a rebuilt controller (reload).
//
// # Several classes (§3.3)
//
// While class c is over target (err > err_d at its last run), no less
// important class may increase, nor at its first run after c flagged it
// (decision: a flag older than Timeout has expired, since a class starved
// near RateMin may not run again for many seconds, and its "next run"
// would otherwise come long after the overload). Less important classes are cut
// by adj_lo (10), their buckets emptied (decision: the paper empties the
// bucket on a decrease; we treat this cut the same). Decision: by default
// one class per run is cut, the least important still above RateMin, so
// that a class is cut only once every class below it is at the minimum
// and the rejections fall in priority order; CutAllLower restores the
// paper's rule (every less important class at once). Only when every less
// important class is already at RateMin does a counter run; after
// lc_thresh (20) such runs class c's own rate is cut by adj_d (and the
// counter restarts). The least important class, having none below it, is
// cut at once.
//
// TestPriorityGuarantee simulates the paper's comparison, three classes
// at 3× a farm's capacity: gold keeps its target and is admitted whole,
// and bronze absorbs the rejections. It also shows what the paper's
// constants cost: the lower classes' rates cycle over tens of seconds (a
// cut by 10 per run while the smoothed percentile lags the drained queue,
// then an additive climb of about 1.6 requests/s per run), and the farm
// ran at about two thirds of its capacity.
//
// # Concurrency and lock order
//
// Admit takes one short per-class bucket lock and allocates nothing.
// Controller.mu serialises controller runs (Observe after NReq samples,
// Tick) and guards their state; lock order: Controller.mu, then a bucket
// lock. Nothing calls back out.
//
// # Usage
//
//	c, err := adaptive.New(adaptive.Config{Targets: []time.Duration{100 * time.Millisecond, time.Second}})
//	go c.Run(ctx)
//	reg.MustRegister(adaptive.NewCollector(c, []string{"gold", "bronze"}, prometheus.Labels{"app": "shop"}))
//	if d := c.Admit(&admission.Request{Class: 1}); d.Verdict == admission.Admit {
//		// relay; when the response is done:
//		c.Observe(1, time.Since(arrival))
//	}
//
// sentry runs it as `admission.mode: adaptive`, and `auto` falls back to
// it (package control wires both; docs/policy.md, admission.adaptive and
// admission.fallback).
package adaptive
