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
//     makes it zero at err = c_i, as the paper's formula says.
//   - Stale average: a class whose previous run is more than 5 timeouts
//     old restarts cur from samp. A class held near RateMin admits one
//     request every few seconds, and with α = 0.7 it would need about 8
//     such samples -- minutes -- to forget an overload long gone.
//   - Targets may change (SetTargets): sentry's R_sla follows the arrival
//     rate through the QoS table. SetRate seeds a class's rate (auto's
//     fall-back starts from what batch mode admitted), and Carry copies a
//     class's learned rate and cur into a rebuilt controller (reload).
//
// # The scaled rule (Config.Scaled; sentry's default)
//
// The paper's constants are absolute: an increase of at most about 1.6
// requests/s per run, a lower class divided by 10, and an initial rate of
// RateMax. With them, a flash crowd on a farm of 320 requests/s
// (e2e/scenarios/flash-adaptive.yaml) gets 0.06× capacity as goodput: the
// crowd arrives to a class still at RateMax (p95 near 3 s), is cut to the
// minimum, and climbs back for minutes. Scaled keeps the
// paper's structure (the percentile, α, err, err_d, err_i, the bucket
// emptied on a cut, the multiclass order and its no-increase rule) and
// changes what each step is measured against, so that one setting serves
// a farm of 300 requests/s and one of 30,000:
//
//   - Increase (err ≤ err_i): the paper's adj_i·x, x = −(err − c_i), plus
//     ScaledGain (0.5)·y·rate per Timeout elapsed since the class's last
//     run (not per run, which comes more often at higher rates), where
//     y = (err_i − e)/(1 + err_i) is the room left under the raise
//     threshold, e the larger of the smoothed and the last sample's
//     error: at most ×1.5 a second while the farm is empty, and nothing
//     as the percentile nears err_i. The proportional part is skipped
//     while the farm (every class together) admitted more than
//     QueueGrowth (1.1) times what completed since the class's last run:
//     its queue is growing, and the percentile shows it only a response
//     time later.
//   - Slow start: see its own section below; it acts at Ticks, between
//     runs, when the farm has room.
//   - Ceiling, at every run: the rate is never above Headroom (4) × the
//     class's offered rate since its last run + HeadroomMin (10/s). This
//     replaces the initial rate of RateMax: a quiet class holds a rate
//     near what it is offered, not 5000/s, so a crowd that arrives is
//     admitted from there (a fresh controller's RateMax comes down at its
//     first run).
//   - Over target means the smoothed error and the last sample's own
//     error both above err_d: the smoothed percentile lags a drained
//     queue by several runs (from 4× the target, α = 0.7 takes eight),
//     and each of those runs cut a rate that was already right.
//   - The backlog (BacklogShare): the requests admitted and not completed,
//     every class together, beyond what the farm completes in half the
//     target at its measured completion rate (Little's law: a mean
//     response time of half the target). It is what the percentile will
//     show one response time later.
//   - Cut of the class itself (over target): while the farm holds a
//     backlog, from what the class completes -- the farm's capacity then
//     -- rate = min(rate, completions/s)/adj_d, and its bucket owes the
//     backlog (tokens set to minus it: it admits nothing until the farm
//     has finished the excess, then admits at the new rate; a debt is
//     never larger than the backlog now: Tick lowers it when the farm
//     finishes the excess sooner, as when termination cuts its queue);
//     without a
//     backlog, from its rate, as the paper cuts (a class its bucket
//     limits completes what it admits, and cutting from that ratchets
//     the rate down with every noisy second). Then no further cut of it
//     for one response time (the last sample), and after a debt until
//     one response time after the debt is paid (at most 5 Timeouts), so
//     that the requests admitted after the cut can show its effect.
//   - What the class completes, for the cut and the hold below, is the
//     larger of its completion rate since its last run and over its last
//     four Ticks (about one Timeout), when these reach further back.
//     Decision: a farm completes no more than its capacity, so each rate
//     is a lower bound on it (up to a short window's noise, below) and
//     the larger is the closer. A class runs every NReq (100)
//     completions, a fraction of a second at hundreds of requests a
//     second, and over so short a window a burst of slow requests reads
//     as the farm's capacity, so the hold would shed at 1× load; the
//     longer window alone reads low on a ramp, whose completions grow. A
//     class that runs on its Timeout (a slow farm) is measured since that
//     run; testdata/window.txt pins the rule.
//   - Cut of a less important class (§3.3, same order: least important
//     above the minimum first, one per run): by adj_lo from its
//     completions, min(rate, completions/s)/adj_lo, at most once per its
//     last sample or Timeout, whichever is shorter.
//   - Between the thresholds, and under err_i when the last sample is
//     above err_i or the farm was admitted more than Surge (2) times what
//     it completed since the class's last run (a step in the load, which
//     the percentile shows only a response time later): a
//     class with every less important class at the minimum and a backlog
//     in the farm is held to what it completes, and its bucket owes the
//     backlog (as above). Decision: not on a backlog alone: a ramp's
//     admissions outrun its completions and look
//     like a backlog by Little's law, and held to its completions there a
//     flash crowd's class would be pinned at a few requests a second
//     (flash-adaptive.yaml: 0.29× capacity; 0.40× without the drain). Otherwise, between the thresholds, the band increase: the
//     rate rises by BandGain (0.25)·y·rate per Timeout, y = (err_d −
//     sErr)/(err_d − err_i) the room the last sample leaves under the
//     target, within the ceiling, unless a more important class is over
//     target. The paper holds the rate there; but when the service time
//     alone puts the percentile above err_i (a farm 3× slower, p95 of the
//     service 0.72× the target), a held rate can never come back to the
//     farm's capacity after a cut, and the backlog test is the brake.
//   - A class starved near the minimum sees no completion and would never
//     run again: when Timeout has passed, it rejected requests meanwhile
//     and has no sample, it runs on the last sample of the nearest more
//     important class that ran within Timeout (they share the farm). The
//     most important class borrows nothing.
//
// Decision (the capacity shift; testdata/scaled.txt and
// TestCapacityShift): the backlog drain and the band increase, not two
// simpler rules that ratchet the rate down. Holding a class to what it
// completes whatever the backlog, and giving up the farm's whole excess
// of admissions over completions as a rate, takes e2e/scenarios/shift.yaml
// (2,000 req/s offered to a farm of 200, then 66.7 after every backend
// becomes 3× slower) to RateMin within seconds, where a class admits too
// few requests to measure its way back: 0.00× the new capacity as
// goodput. With the drain and the band the simulated shift is back within a 2 s target
// for good in 3 s or less in 15 of 20 seeded runs (median 2 s) at 0.95×
// the new capacity on average; with a 1 s target (the new service's p95
// alone is 0.72 s) a rate reaches about 0.86×, and a concurrency
// limit does better: the in-flight limit below (0.95× in the simulation,
// TestCapacityShiftInFlightLimit).
//
// A limit of the backlog and queue tests: on the controller's own count
// (admissions less Observe and Ended) admitted requests that never
// complete (a backend error, a client gone) look like backlog. Config.
// InFlight lifts it for the in-flight count: sentry passes the load
// balancer's, which every end of an exchange releases (the queue test's
// admissions against completions still counts them).
//
// # The in-flight limit (Config.InFlightLimit; sentry's default)
//
// A rule beyond the paper, separate from both rules above: besides its
// class's token, a request needs the farm to hold fewer requests
// admitted and not completed (every class: the owner's count,
// Config.InFlight, when given; else one atomic count, Admit adds,
// Observe and Ended take away) than
//
//	limit = max(InFlightMin, ⌈InFlightShare(p) × X × target⌉)
//
// X the farm's completion rate over the last four Ticks (Run ticks every
// Timeout/4: the last second), target the smallest class target, and
// InFlightShare(p) = 1/(−ln(1 − p/100)): by Little's law the in-flight
// count of a mean response time whose p-th percentile is the target,
// were response times exponential (0.33 at p95, 0.43 at p90). Beyond it
// the request is rejected (RejectAdaptive, Retry-After 1 s) without
// taking a token. InFlightMin (10) keeps an idle or starting farm from
// admitting one request at a time; the limit grows with what completes,
// as a slow start. Before four Ticks there is none.
//
// Why: the percentile sees a request only when it completes. When the
// farm slows down (e2e/scenarios/shift.yaml: every backend 3× slower at
// 10× load), the token bucket alone keeps admitting at the old rate for
// the response time it takes the slowed requests to show, and the queue
// that builds then (166 requests waiting in the farm a second after the
// shift, p95 2.9 s three seconds later) takes the controller seconds to
// drain: back within the 1 s target 6 s after the shift, at 0.85× the
// new capacity. The completion rate drops at once, so the limit follows
// the shift within a second, and nothing the old capacity allowed is
// admitted meanwhile: back in 2 s, at 1.02× the new capacity
// (docs/algorithms.md §7, docs/performance.md). It is the same idea as a
// concurrency limit (nginx's limit_conn) without knowing the farm's
// slots.
//
// Several classes: the limit alone would undo §3.3's order. It holds the
// percentile under the target, so nothing cuts a less important class's
// rate, and a shared limit admits in arrival order. So class i of L is
// refused at limit·(1 + (L − 1 − i)/L): the least important at the
// limit, each more important class a further limit/L that no less
// important one can take (with one limit for all, on flash-adaptive.yaml
// the crowd fills it and 23 of the members' 864 requests are refused);
// and once a class is refused at its own, for two
// Ticks a less important class i is refused already at (L − i)/L of the
// limit, so that what the farm frees goes to the more important classes
// first. A lone class fills the whole limit.
// TestPriorityGuaranteeInFlightLimit, TestInFlightLimitPriority and
// testdata/limit.txt pin it.
//
// Decisions on other ideas for the capacity shift:
//
//   - Censored samples (an in-flight request already older than the
//     target counted as an over-target sample before it completes): not
//     built. With the limit the queue cannot build while the percentile
//     lags, and the seconds still missed are those of the requests in
//     flight at the shift, which no earlier cut can speed up.
//   - The limit from the in-flight count when the percentile was last
//     within the target: not taken. That count is the old capacity's
//     (about 70 at 200 req/s), three times what the slowed farm finishes
//     within the target; the completion rate follows the shift at once.
//   - Completions go to the controller that admitted the request: the
//     owner marks each decision with its mode (admission.Decision.Mode,
//     Ticket.Mode). After auto's fall-back, Seed restarts the count and
//     the owner sets it to what the other mode left in flight
//     (SetInFlight); their completions come as Ended (no sample: they
//     say nothing of this controller's rate), and the controller's own
//     give samples whatever the mode at their completion.
//
// # Slow start
//
// A rule beyond the paper, for the end of an overload: the farm's
// capacity is back (a size shift or a slowdown is over, a backend
// returned), the class's rate is still where the overload cut it, and
// the increase above climbs back at most ×1.5 a second, on samples that
// for a while still include the requests the overload left in flight.
// TCP's answer is a slow start: a window that doubles each round trip
// until loss. Here the in-flight limit plays the window's ceiling, and
// the step is as large as the limit allows.
//
// Each class's completions with a response time (Observe, and
// ObserveIdle: no sample, but a time) are counted in a window: n, those
// over the bound (1 + err_i)·target, and the sum of their times. At each
// Tick a window of at least 1/(1 − p/100) of them (20 at the 95th: the
// fewest whose p-th percentile is not their largest) is judged and a new
// one begins; a smaller one carries over. The rate becomes
//
//	r' = min(max(r, a)·g, ceil),   g = L / max(1, X·R̄, F)
//
// r the rate, a what the class was admitted at over the window (tokens
// and the work-conserving rule), ceil the ceiling (Headroom × offered +
// HeadroomMin, or r), L the in-flight limit, X the farm's completion rate
// over the window (or the last Tick, if higher), R̄ the window's mean
// time, F the in-flight count now (X·R̄ the mean one by Little's law),
// when all of: the window's p-th percentile by rank is at most the bound;
// g > SlowStartRoom (2); the class was refused something in the window
// (an admission over target counts); the farm's queue did not grow over
// it (QueueGrowth); no more important class is over its target (§3.3).
// Its smoothed percentile then restarts at no more than the bound, the
// samples from before the window are dropped (the requests in flight
// when the overload ended), and it makes no run at that Tick.
//
// The climb stops where the backends start queueing (Config.Queueing;
// sentry: QNow over a tenth of the target). With C what the farm
// completes per second (the larger of its rates over the last ¾ and ½
// Timeout), a step taken while they do not queue is a trial that the
// first Tick finding them queueing holds to C (r = min(r, C), tokens
// kept: TCP's ssthresh); a step taken while they queue, and a run's
// increase while they queue, goes no higher than max(r, C).
//
// Why g: a step to L/F is what the limit would let through anyway at the
// measured response times, so the rate never outruns the brake, and L
// grows with the completions. Why from a: F was measured at a, not r,
// and with r cut low the work-conserving rule admits most of what gets
// through (a·g ≈ L/R̄ for one class; r·g took three or four Ticks). Why
// the window for the tests: a class runs every NReq completions (60 ms
// at 1,600/s), and over that span noise read as a growing queue. Why C:
// a queueing farm is full, so C bounds its capacity from below, and a
// rate above it only fills the queue to the limit (unbounded, the rate
// sat at RateMax after a size shift's end, and a second of more slow
// requests put the p95 over). Decisions (docs/algorithms.md §11): no
// ceiling at C on every rate whenever the backends queue (it held a
// capacity shift's undoing at the old capacity and cost the fair share's
// flood goodput); without Config.Queueing no hold (a busy farm is not a
// queueing one, and the controller knows no slots). Why the
// work-conserving rule's completions count: with the rate cut low they
// are most of what completes; such a request met no queue (no sample),
// but its time says the farm is fast. Why the percentile by rank: it is
// the controller's own test; a stricter count refused the window after a
// size shift's end on a couple of stray heavy requests.
//
// The rule acts only with the scaled rule and the in-flight limit:
// without a limit nothing brakes a step. testdata/slowstart.txt pins it;
// TestSizeShiftEnd, control/testdata/recovery-size.txt and control's
// TestSizeShiftEndPerSecond check a size shift's end, the last second by
// second (utilisation, p95, the rate while the backends queue).
//
// # Terminated requests
//
// A request cut by selective early termination (package sert) before its
// response head is reported with Ended, not Observe: a completion (its
// slot is free, and the backlog and completion rates count it) without a
// sample. Decision: its time is no response time a client saw (the client
// got a 503, counted by the termination controller's loss fraction), and
// the time it ran already shows in the percentile of the requests that
// waited behind it. Counted as a sample at its cut time (at least the
// termination threshold), the heavy share the controller cannot change
// keeps the percentile over the target and every class's rate is cut
// for it; testdata/ended.txt pins both.
//
// Config.Scaled false is the paper's rule exactly (pinned by the scripts
// in testdata with hand-computed numbers; testdata/scaled.txt pins the
// scaled rule); admission.adaptive.rule picks (scaled by default).
// TestPriorityGuaranteeScaled's hard case (gold and silver alone offer
// exactly the farm's capacity) keeps the farm full with gold's p90
// within its target in every second.
//
// # Work conservation
//
// Principle (docs/algorithms.md §10): a request is never refused while
// admitting it harms nobody. Decision: a request the empty bucket or the
// in-flight limit refuses is admitted anyway, marked
// admission.Decision.OverTarget, when the farm is idle for it:
// Config.Idle, which the owner answers (sentry: a backend has nothing in
// service and the next request goes to it -- in flight < healthy backends
// with least-loaded balancing, an empty farm otherwise -- and the queue
// its latest completions met is under a tenth of the target); without one, the
// farm holds nothing admitted (the in-flight count ≤ 0). The condition
// uses no slot count and no service time, which adaptive mode cannot
// trust. No token is taken and no debt added: the rate keeps governing
// the load the farm queues. The request counts as admitted and in flight
// (State.OverTarget counts it apart), and its completion should come as
// ObserveIdle, without a sample: the percentile measures what the rate
// does to the farm's queue, and a request that met no queue says nothing
// of it (counted, a class longer than its target would also flag itself
// over target, and cut every less important class, at no load); its
// time is only the slow start's evidence that the farm is fast. Under
// load no backend is idle, so every verdict is the bucket's and the
// limit's; testdata/idle.txt pins the rule (NoIdle turns it off).
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
// runs at about two thirds of its capacity.
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
// sentry runs it as `admission.mode: adaptive` and as `auto`'s fall-back
// (package control wires both).
package adaptive
