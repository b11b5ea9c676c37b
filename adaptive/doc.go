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
// RejectAdaptive and a Retry-After of the time to the next token (whole
// seconds, 1–60 s). The bucket refills at the class's rate and holds at
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
//	err > err_d (0)    → rate = rate/adj_d (1.2), and the bucket is emptied
//	err < err_i (−0.5) → rate = rate + adj_i·(−(err − c_i))   (adj_i = 2, c_i = −0.1)
//	rate is clamped to [RateMin, RateMax] = [0.05, 5000] per second
//
// # Several classes (§3.3)
//
// When class c is over target (err > err_d), the rate of every less
// important class is divided by adj_lo (10) and their buckets emptied
// (decision: the paper empties the bucket on a decrease; we treat this cut
// the same), and they may not increase at their next run. Only when every
// less important class is already at RateMin does a counter run; after
// lc_thresh (20) such runs class c's own rate is cut by adj_d (and the
// counter restarts). The least important class, having none below it, is
// cut at once.
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
// Not yet wired into the request path: the admission mode `adaptive` and
// `auto`'s fall-back to it are open (issue 13).
package adaptive
