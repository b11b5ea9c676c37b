// Package sert is selective early termination, after Zhou and Yang,
// "Selective Early Request Termination for Busy Internet Services" (WWW
// 2006; docs/algorithms.md §8): a request of a class that
// declares a termination range is cut once it has run longer than the
// class's current threshold at the backend, before any response byte has
// gone to the client, so that under overload the long requests whose
// cost nobody could predict stop holding the backends' slots.
//
// This package is the pure part: the threshold controller (the paper's
// §3.2), the per-class counters it reads, the termination latch and the
// metrics. The proxy's exchange does the cutting (§3.1's timer and
// cancellation, here a timer per request and a compare-and-swap).
//
// # Threshold (§3.2)
//
// Each class that declares a range [LB, UB] gets a threshold recomputed
// every Params.Interval (default 10 s, the paper's) from the loss fraction
// of that interval,
//
//	p = (rejected + terminated) / arrived
//	T = LB + F(p)·(UB − LB)
//	F(p) = 1 for p ≤ LW, ((HW − p)/(HW − LW))^α for LW < p < HW, 0 for p ≥ HW
//
// with the paper's α = 4, LW = 5 %, HW = 15 % by default. So with no
// overload (p ≤ LW) T = UB and nothing is cut that a client would still
// want; at p ≥ HW, T = LB. Examples (tests in testdata/paper.txt): F(6 %)
// = 0.6561, F(8 %) = 0.2401, F(10 %) = 0.0625, F(12 %) = 0.0081, and a
// range [0.5 s, 15 s] at p = 8 % gives T = 3.98 s.
//
// Decisions:
//
//   - Counting. Arrive counts every request of the class that reaches
//     admission, Reject each one admission rejects, Terminate each one
//     cut. Counters are cumulative atomics (they are also the metrics);
//     Tick takes differences. p is capped at 1 (a request terminated in
//     the interval after it arrived can push the ratio over).
//   - Start. A new class starts at T = UB (F = 1): no evidence of
//     overload yet, so nothing is cut before the first update.
//   - Small samples. A tick that saw fewer than MinArrivals (default 100)
//     arrivals of a class keeps its threshold, and those arrivals and
//     losses carry over to the next tick, so a quiet class is judged on a
//     longer window rather than never. Why 100: p is compared with a band
//     10 points wide (LW 5 % to HW 15 %); with 100 arrivals one loss
//     moves p by one point, and the binomial standard error at p = 10 %
//     is 3 points, below which T would swing between UB and LB on noise.
//     At the default interval that is 10 requests/s; a class slower than
//     that is updated less often, not on fewer samples.
//   - Rise (Params.MaxRise; the policy's default 2, DefaultParams' 0).
//     A fall is taken at once; a rise to at most MaxRise × the threshold
//     in force per update: T = min(LB + F(p)·(UB − LB), MaxRise·T). Zero
//     is the paper's memoryless rule. Why: p counts the terminations, so
//     once termination frees the slots the loss is little more than the
//     share it cuts -- below LW -- and the paper's rule puts T back at UB
//     at the next update, where the overload that lowered it returns:
//     with a 2 s interval, sert-shift.yaml's threshold alternated between
//     LB and UB every interval at 1.2× load, and during the shift (10%
//     heavy, p ≈ 11% when they are all cut: T = 481 ms, then 1 s) it
//     rose to where the 500 ms requests ran again, two seconds of p95
//     misses each time. Bounded, it climbs back over a few updates (LB
//     100 ms to UB 15 s: 8 at ×2), each of which sees the loss the
//     higher threshold causes before the next. It never starts
//     terminating (the bound only slows a rise), so a load that never
//     lowered T is not affected, and a lasting calm brings T to UB.
//     F and P of an update stay the paper's F(p) and p; a reload keeps
//     the F the threshold in force stands for, (T − LB)/(UB − LB).
//   - Early look (Controller.Look; Run calls it LooksPerInterval − 1 = 7
//     times between ticks). A class whose losses since its window began
//     already make the window's p at least HW -- lost ≥ HW × the arrivals
//     the window will hold at the rate so far -- gets T = LB at once
//     instead of at the next tick, which would set it anyway (F = 0 at
//     p ≥ HW). The counts are not consumed: the tick judges the whole
//     window as the paper's rule does; Look only brings forward a fall
//     that rule makes, given a steady arrival rate, and never moves T on
//     a loss that leaves the window's p below HW, however bursty. Why: a
//     shift that begins while T is high ran up to one interval with the
//     slots held by heavy requests (sert-shift.yaml with the shift 2 s
//     later: its first two seconds missed the p95). A plain sub-interval
//     p was rejected: at sert-sweep.yaml's 1× (the paper's capacity)
//     admission alone already loses 15–24% over some 3 s spans and
//     14–17% over 5 s (auto's fall-back on a burst of heavy requests)
//     while its 10 s windows stay under 10%, so any shorter window would
//     cut at or below capacity.
//   - In flight. A new threshold applies to requests already running:
//     Threshold is read again when a request's timer fires, and Remaining
//     tells the timer to re-arm when T has risen since it was armed.
//   - Methods. Only GET and HEAD are terminable unless the class lists
//     methods (ClassConfig.Methods): a cut POST may have done half its
//     writes. Upgrades, streamed request bodies and responses already
//     started are never terminated; that is the exchange's rule.
//   - Reloads. Reconfigure keeps each class's counters, p and F by name;
//     a class whose range changed gets T = LB + F·(UB − LB) at once with
//     the F it had. A class that no longer declares a range is forgotten.
//   - Estimation. A terminated request's true service time is unknown but
//     at least the threshold it was cut at; Sample turns (elapsed,
//     threshold, terminated) into the time to report as its measured
//     time, so the estimator's S and the batch test see the cost such
//     requests cause instead of forgetting them.
//
// # Hot path
//
// Class returns a class's state with one atomic load (nil when the class
// does not terminate); Threshold is one atomic load; Arrive, Reject,
// Terminate and Reclaim are one atomic add; Terminable compares the method
// with the class's list (two entries by default). None allocates
// (BenchmarkRequestPath). Latch is the per-exchange compare-and-swap that
// decides between the termination timer and the first response byte.
//
// # Concurrency and lock order
//
// Controller.mu serialises Tick, Look and Reconfigure and guards the
// classes' tick state; it is a leaf and the request path never takes it. Run is
// the only goroutine; the caller owns it and stops it by cancelling ctx.
//
// # Usage
//
//	c, err := sert.New(sert.Config{Params: sert.DefaultParams(), Classes: []*sert.ClassConfig{
//		{Name: "search", Lower: 500 * time.Millisecond, Upper: 15 * time.Second}, nil}})
//	go c.Run(ctx)
//	reg.MustRegister(sert.NewCollector(c, prometheus.Labels{"app": "shop"}))
//	// per request of class i:
//	if cl := c.Class(i); cl != nil {
//		cl.Arrive()
//		if rejected { cl.Reject() }
//		if cl.Terminable(method) { arm a timer for cl.Threshold() from dispatch }
//	}
//	// timer: if cl.Remaining(elapsed) > 0 { re-arm } else if latch.Terminate() { cut, 503, cl.Terminate() }
//	// first response byte: if !latch.Disarm() { drop it: already terminated }
//	// completion: measured = sert.Sample(elapsed, armedThreshold, latch.Terminated())
package sert
