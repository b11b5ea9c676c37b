// Package batchac is Cataclysm's batch admission control (Urgaonkar &
// Shenoy, §3.1–3.2; docs/algorithms.md §2) as a pure library: no sockets, the
// clock injected, the farm read through the small State interface. A
// *Controller implements admission.Admitter and prometheus.Collector.
//
// # How a request is decided
//
// Admit puts the request in the wait queue of its class and bucket
// (Request.Class, Request.Bucket; out-of-range classes count as the least
// important class, buckets are clamped) and parks on a pooled waiter with a
// one-slot channel. Each class i has a policer that runs every d_i (its
// Period). A run takes every queue of each due class whole (O(1) under the
// queue's lock) and tests each bucket as one batch, smallest bucket first,
// classes in importance order (C1 first). When several classes are due at
// the same instant they are decided in one run, in that order. A class with
// Period 0 has no queue: Admit runs the test for that one request at once.
//
// The test for a batch of β requests (Cataclysm eq. 5, with P slots per
// backend, see below; Q is at least the queue η implies, see The queue at
// a load step) is
//
//	Q + max(1, (η + ⌈β/n⌉)/P) · S  ≤  R_sla − d_i
//
// S is the batch's actual mean of the requests' estimates (Request.S), not
// the bucket midpoint. n = State.Healthy(); n = 0 rejects with
// RejectNoBackend (at arrival, and in a run). η = load/n where load is
// State.Inflight() plus the requests a run admitted whose Admit call has not
// returned yet (the proxy only counts a request in flight once the load
// balancer picks a backend, after Admit returns), plus the requests admitted
// earlier in the same run, so η grows by exactly β'/n per admitted batch, as
// the paper specifies. Q, R_sla and the in-flight count are read once per run.
//
// Outcome rule: by default the largest FIFO prefix β' ≤ β whose own test
// passes (with that prefix's mean S) is admitted and the rest rejected with
// RejectTest. The prefix test is not monotone in β' (the prefix mean moves),
// so when the whole batch fails every shorter prefix is tried; when it
// passes, that is the only test. Config.AllOrNothing keeps the paper's rule:
// the batch is admitted or rejected as a whole. Either way later buckets of
// the same class are still tested; delivering the decisions is O(β), the
// tests O(b·L) per run when batches pass.
//
// # Early admission
//
// Decision: by default (Config.StrictPeriods false) an arrival of a class
// with a period does not always wait for its run. It is admitted at once
// when three things hold: nothing of its class is waiting (it overtakes no
// one), no more important class holds a cascade mark, and a batch of one
// passes the test its run would apply now, with the same budget
// R_sla − d_i and the same reserve. Otherwise it queues and its run decides
// it, as the paper has it; it is never rejected on arrival. Why: a period
// exists to make admission cheap and orderly under load, by deciding many
// requests per test; below overload it would only add up to d_i of latency
// to every request (and, with closed-loop clients, cut throughput by as
// much), with nothing to decide. Under overload the first arrival that
// fails queues, every later one finds the queue non-empty and queues
// behind it, and the class runs on its period grid again until a run
// empties its queue. Every request admitted early would also pass a run
// at that instant (a run's β ≥ 1 only adds to the load), so the SLA
// bound holds. The cost is a few atomic loads per arrival.
// testdata/early.txt walks through it; StrictPeriods restores the rule
// that every request waits.
//
// # Parallelism
//
// The paper models each backend as one processor shared by the requests on
// it: with η in service plus ⌈β/n⌉ new ones, the last request of the batch
// takes (η + ⌈β/n⌉)·S. Our backends have P worker slots (cores, threads)
// and serve up to P requests at full speed. We model a backend as P
// processors shared by its m = η + ⌈β/n⌉ requests: each request gets
// min(1, P/m) of a processor, so it takes S·max(1, m/P). For m ≤ P the
// batch costs only its inherent time; above, the stretch grows linearly with
// slope 1/P. With P = 1 and β ≥ 1, m ≥ 1, so max(1, m) = m and the test is the
// paper's formula exactly (TestPaperFormula and the hand-computed scripts
// in testdata/ check this). Q stays unscaled: it is a measured backend
// queueing delay, already the effect of whatever parallelism the backend has.
//
// P is Config.Parallelism (default 1). With Config.LearnParallelism the
// controller refines it online from ObserveService(inService, S, service):
// under the same model service ≈ max(1, inService/P)·S, so a sample that
// took ≥ 1.25·S came from a saturated backend and estimates
// P ≈ inService·S/service, and a sample that took ≤ 1.05·S with inService
// above the current estimate shows P ≥ inService. Everything else carries no
// information about P and is ignored; estimates are clamped to [1, 4096] and
// smoothed (EWMA, weight 1/32). The estimator is simple and trusts S; it is
// off by default.
//
// # The probe
//
// A learned P rises only from a completion that ran at full speed beside
// more than P others. For requests the test refuses beside one other at
// P = 1 (2S > R_sla − d; 3S with the implied queue) only the
// work-conserving rule admits beyond the first, one per free slot, so P
// never grew: quick mode (P from 1, target 1 s) before a 1.5 s backend
// with 8 workers answered one of 8 concurrent requests, for good.
// Decision, after TCP's slow start: while P is learned the rule fills up
// to probeFactor (2) · P per backend, its other conditions unchanged,
// for a class with no room held for the classes above it (reserve 0: the
// most important, or any with reserve_floor 0 and nothing above asking;
// a free slot passes the reserve's fill test, a probe need not, and the
// room is theirs). P is shared: what one class's probes learn, all use.
// Its completions come back through ObserveSpare: one that took at most
// 1.05·S beside m requests raises P to m at once (admitted onto backends
// not queueing, its time measures that concurrency: a bound proven, not
// a sample to average), so P doubles per service time; one that took
// 1.25·S or more feeds the EWMA and makes m the ceiling, under which the
// rule fills for probeHold (30 s) before it probes again. Only the
// rule's completions jump: a completion the test admitted under load may
// have met a worker just freed, and jumping on those overshot P
// (priority_test.go's learned-P case, step_test.go's gold). A configured
// P is never probed. Harm is bounded: only requests that miss their own
// target anyway, only while the queue now is quiet, at most P more per
// backend, for one service time on a backend that shares its workers
// (docs/algorithms.md §10, The probe; testdata/probe.txt).
//
// # The queue at a load step
//
// Decision (Config.NoImpliedQueue turns it off): the test for a batch of β
// charges
//
//	Q' = max(Q, max(0, η + ⌈β/n⌉ − P')/P'·S),   P' = max(P, State.Sustained())
//
// in place of Q (model.qAt; η includes this run's admissions, S is the
// batch's mean). Why: State.Q is measured from finished requests, a
// decayed mean of the queueing they met, so after a load step it still
// reads the light load before it for a second or more (a queued request
// reports only when it finishes, and the mean has a half-life of
// seconds). η fills at once, and with that Q alone the test admits up to
// η = P·(R_sla − d)/S − 1 per backend: a queue whose wait alone is the
// budget, so the admitted p95 overshoots R_sla in the step's first
// seconds (the closed-loop autoscaling run, 2 × 4 slots, 40 ms, 0.65× →
// 1.95×: 515 and 759 ms for 500 ms). Requests in flight beyond P' are waiting
// and drain at P' per S, so that queue exists now, whatever Q says yet.
// When sentry is its backends' only client Q settles to about the same
// value once the load holds, so this changes the transient; Q alone still
// counts queueing that others cause. The queue is taken with the batch
// in: the test is then one increasing function of the load after
// admission for every class, only the budget differs, so a large batch of
// a less important class filled to its budget leaves a more important
// class its margin (taken before the batch, a bronze batch raises the
// queue for gold's next test by its own size, which the bronze test never
// charged: in e2e/scenarios/step10x.yaml gold is then admitted 97.3%, 63
// rejected by test, most in the step's first seconds; taken after, 100%
// in the simulation). The price: a batch pays for its own
// queue twice, as it would with a settled Q. P' uses the work a backend
// has been seen to sustain (cached every ReservePeriod) as a floor, so a
// learned P that starts low does not overcharge. Room, early admission
// and Retry-After use the same Q'. Tests: testdata/implied.txt
// (hand-computed) and step_test.go, the simulated farm with Q from the
// real estimator: TestStepOvershootWithoutImpliedQueue reproduces the
// overshoot with the paper's Q; TestStepAdmittedP95 holds every second's
// p95 within R_sla at goodput ≥ 0.9× capacity (the autoscaling run's step
// and step10x's); TestStepKeepsGold keeps gold ≥ 99% beside a periodic class
// that steps to 9.8×.
//
// # Priority: the reserve
//
// The paper's test looks only at the farm's present load, so requests of
// different classes that are tested one by one (period 0) or in runs that
// fall between the more important class's runs are served first come,
// first served: a flood of a less important class refills every slot the
// instant it frees, and a steady important class finds the farm full as
// often as not. The cascade cannot fix this: it reacts only after the
// important class has failed, and lapses at its next pass. (The simulation
// in priority_test.go reproduces it: 3 × 4 slots, 10 ms, gold at 0.8×
// capacity beside bronze at 9.2× → gold admitted 20%.)
//
// Decision: each class is tested against what the predicted demand of the
// more important classes leaves of their budget. For class j,
//
//	own_j = R_sla − d_j
//	lim_j = min(own_j, (1 − ρ_j)·(R_sla − dAbove_j))
//	ρ_j   = max(floor, Σ_{i<j} Demand(i) / (n·P)),  ρ_0 = 0
//
// where Demand(i) = λ_i·S_i is class i's offered work in server-seconds per
// second (State.Demand: arrivals including rejected ones, times the class's
// mean S), n·P the farm's work capacity, and dAbove_j the longest period of
// the more important classes. Read: over any window, the more important
// classes need the share ρ_j of the farm's time; the backlog a less important
// class leaves must drain within the rest of their budget (R_sla − d, since
// their batches wait d), so that their next requests still pass. A request
// that passes own_j but not lim_j is rejected with RejectPriority, which is
// not a failure of its class and sets no cascade mark.
//
// Two refinements make this safe to have on by default:
//
//   - Work conservation. A batch that only fills the farm for one service
//     time plus a slack, max(1, (η + ⌈β/n⌉)/P)·S' ≤ S' + slack_j, is tested
//     against own_j whatever the reserve (model.admits). For d = 0 the slack
//     is 0: a free slot waits for it. For a class with period d_j it is
//     d_j·min(1, 2·(1 − ρ_j)) with ρ_j the more important classes' demand
//     share without the floor: the part of the time until the class's next
//     run their demand leaves idle, doubled for burstiness, and 0 once they
//     saturate the farm, so a long period never lets a class fill past a
//     more important one (TestPriorityNestedPeriods). Refusing such a batch
//     would leave slots idle. So the reserve bounds how deep less important
//     classes queue, not the farm's throughput.
//   - Sizes. The test counts requests in service (η), each at the size of
//     the request being tested. A more important class sees the same η at
//     its own size, so the reserve tests are judged at S' = max(S, sref_j),
//     sref_j the largest mean S of the more important classes (State.MeanS).
//     Judged at the small request's own size, a flood of 2 ms bronze
//     requests fills the farm with a count 20 ms gold requests cannot
//     pass: gold admitted 15–24% (TestPriorityMixedSizes: 100% at S').
//   - A floor (Config.ReserveFloor; the policy's default 0.25): a quiet
//     more important class still has a quarter of its budget held, so its
//     first requests after a pause do not meet a farm queued to the brim.
//
// The demand is read every ReservePeriod (50 ms) by tick (Run wakes for it),
// never per request: a test loads ρ_j with one atomic load. State.Demand
// should follow a rise within a fraction of a second (control uses the
// estimator's RecentRate: within 100 ms), so an important class that rises
// takes its room back at once; it gives it back as its smoothed rate falls.
// Gold alone above capacity makes ρ > 1: every less important class is
// refused, except for a slot idle at the instant it asks.
//
// Room exposes the same test (d = 0, no marks, nothing counted) for
// threshold mode's guard, so threshold mode keeps the same guarantee
// (package control). Config.NoReserve turns the reserve off.
//
// Tests: testdata/reserve.txt (hand-computed limits and verdicts) and
// priority_test.go, a discrete-event simulation of a farm on a manual clock
// with the real estimator: gold ≥ 99% admitted and goodput ≥ 0.95×
// capacity beside bronze at 3× and 10× (fixed and exponential service, gold
// at 0.8× and 0.9×, a bronze period, batch and threshold mode), three classes
// admitted in order every second, gold alone above capacity, and gold
// rising from 0 to 0.9× in one step.
//
// # Work conservation
//
// Principle (docs/algorithms.md §10): never refuse a request whose
// admission would cost no admitted request its SLA. The test refuses a
// request that misses its own budget even on an idle farm (S > R_sla − d,
// or Q + S > R_sla − d); admitted there, it would only miss its own target.
// Decision: k requests of class i that fail only the class's own budget
// are admitted, marked admission.Decision.OverTarget, when all of
//
//	η + ⌈k/n⌉ ≤ P                  (model.free: a slot each; the stretch stays 1;
//	                                up to 2P while P is learned: The probe)
//	QNow ≤ (R_sla − d_i)/10        (model.quiet: the backends are not queueing now)
//	no queue of any class holds a request
//	no class more important than i holds a cascade mark
//
// hold. With a slot each, no request in service is slowed (the model's
// stretch max(1, m/P) stays 1) and the queue η implies stays empty; with
// nothing queued it overtakes no one; a mark means a more important class
// failed under load and has a claim on the room. A free slot already
// passes the reserve's fill test (slack ≥ 0), so only RejectTest becomes
// an admission. Where: early admission and testNow (k = 1), and a run's
// decide for the rest of a batch, only when the whole batch fits
// (η + ⌈β/n⌉ ≤ P, or the probe's cap, before it) and no later bucket of
// the run waits; the prefix the test passes stays a plain admission. An admission by the
// rule sets and clears no mark. A measured queue is in the condition
// because η counts only sentry's own requests: a queue means the backends
// are queueing for a reason the slot count cannot see (another client or
// sentry, a P set too high), and a request on a "free" slot would delay
// the requests waiting there; a tenth of the budget counts as none, since
// Server-Timing's service time leaves out the network and the backend's
// overhead. Decision: the queue now (State.QNow, the latest
// completions'), not Q, a mean over seconds that after an overload cut
// low reads its queue long after the backends stopped queueing (it
// starved adaptive mode's slow start too; docs/algorithms.md §10).
// testdata/overtarget.txt has the cases: a queue now refuses, a stale Q
// does not. Spare exposes the condition (k = 1) for threshold mode.
// Under overload η ≥ P (2P while probing) or something queues, so every
// verdict is the test's: the existing scripts are unchanged, and
// testdata/overtarget.txt and overtarget_run.txt pin the rule. Counted per class (classState.overTarget, beside the admitted
// count); package control exports sentry_admitted_over_target_total and
// logs the WARN.
//
// # The cascade
//
// When class i fails — any of its buckets rejects anything by test — every
// less important class is rejected without a test (RejectCascade) while i's
// cascade mark lasts. Decision for policers that fire at different times:
// a failing run of a periodic class i sets its mark until now + d_i, the
// instant of i's next run. Every run of a less important class j (and every
// immediate test of one) is cascaded while any more important class has an
// active mark (now < mark). At i's next run, i is processed before any less
// important class of the same run (classes with commensurate periods fire in
// the same run because schedules stay on their period grid), and that run
// re-sets the mark if i fails again or clears it if i passes (an empty queue
// passes). So the mark lasts exactly until the failing class's next run
// passes. A cascaded class is not tested, so it neither sets nor clears its
// own mark; an n = 0 run sets none. An immediate (d = 0) class has no next
// run: a failed test marks it until its next passing test, at most 1 s
// after its last failure (every failure renews it). Decision: not a mark
// for the predicted drain only: under a flood of small less important
// requests that lets them refill the farm between two tests of the more
// important class, which then never gets in (priority inversion). A request that would fail even
// on an idle farm (S > R_sla − d_i) sets no mark: its size, not the load,
// is the cause. A late tick changes nothing: the failing class is due as
// well and goes first.
//
// # Retry-After
//
// A rejection carries the predicted time until the farm has room for one
// request of the batch's mean size S in its class: with budget
// B = R_sla − d_i − Q, if S ≤ B the request passes once η has fallen to
// η_max = P·B/S − 1, and the excess drains at P requests per S per backend,
// so the wait is max(0, η − η_max)·S/P (η including this run's admissions).
// If S > B no fall in η helps, and the prediction is that the whole backlog
// drains, Q + η·S/P. A cascaded request waits at least until the mark that
// cascaded it expires. The result is rounded up to whole seconds and clamped
// to [1s, 60s]. RejectNoBackend and RejectGone carry 0 (the proxy's default).
//
// # Bounds
//
// A request waits at most d_i plus one run: a run decides everything it
// takes, and Run ticks when the next class is due by the injected clock; a
// late tick is one run, and the schedule stays on its grid. Each queue has a
// cap (QueueCap); an arrival beyond it is rejected at once with
// RejectQueueFull. When Request.Gone fires, the waiter unlinks itself (O(1))
// and Admit returns RejectGone; if a run already took it, Admit takes the
// run's decision, turning an admission into RejectGone. Close rejects every
// waiter and later arrival with RejectNoBackend and makes Run return.
//
// # Parking: waiting without blocking
//
// Park is Admit for a caller that must not block, such as an event loop
// serving many connections on one goroutine. What Admit decides at once
// (a class without a period, a full queue, no backend, a closed
// controller), Park decides at once too. Otherwise the request is queued
// exactly as Admit queues it, and Park returns a Parked handle; the run
// that decides it tells the caller's Waker (once per run per distinct
// Waker, after the run's locks are released), and the caller takes the
// decision with Parked.Result, which counts it, or withdraws with
// Parked.Cancel when its client has gone (counted as RejectGone; an
// admission already made is given back). Handles are pooled: Park, the
// run and Result allocate nothing (TestParkAllocs).
//
// # Reconfigure
//
// Classes are matched by name. A class keeps its counters, histogram and
// cascade mark across any Reconfigure (also when removed and restored);
// its queued requests stay, bucket by bucket, while its period stays
// non-zero. Queues that go away (class or bucket removed, period set to 0)
// are decided at once in a final run, in the old order. A kept schedule is
// shortened to the new period when needed; Run is woken to notice.
//
// # Concurrency and lock order
//
// Locks, in the order they may be taken: Controller.run (serialises runs,
// Reconfigure and Close; never taken by Admit), then one queue's mu (short:
// link, unlink, or detach the whole list; never two queue locks at once).
// Admit takes only its queue's lock, and only for O(1) work; time.Now and
// every channel operation happen outside queue locks; nothing calls a
// callback under a lock. A run sends decisions while holding Controller.run,
// but those sends cannot block (one-slot channel, empty by construction);
// the Wakers of parked requests (Park) are told only after Controller.run
// is released. The State's methods (Demand, every ReservePeriod, included)
// are called with Controller.run held, so they must not call back into the
// controller; control's take only the estimator's leaf locks.
// Waiter structs are pooled (sync.Pool), so Admit does not allocate
// (TestAdmitAllocs, benchmarks). Counters and the wait histogram are atomics
// observed per request; everything else is read at scrape time.
//
// # Fair share
//
// A request carries its client's standing in its class (admission.Share,
// set by package fairshare; docs/algorithms.md §12). A batch is tested in
// tiers, within share first, each on the load the tiers before it leave;
// the over-share tier's reserve adds the class's own within-share demand
// (ShareState) to the classes above, the marginal tier holds the floor's
// share of what is left besides, and its rank k (admission.Request.Rank)
// that again k times, ρ_k = 1 − (1 − ρ₂)(1 − floor)^k, tested rank by
// rank: the mode's refusals of the tier fall on its last clients
// (fairshare_rank.txt). A tier-1 or -2 request refused where a
// within-share one would pass is over_share; a spare-only one is admitted
// only on a free slot with nothing waiting (FreeSlot). Classes keep their
// order (fairshare.txt).
//
// # Metrics
//
// All with Config.ConstLabels: sentry_batch_decisions_total{class,verdict},
// sentry_batch_queue_length{class}, sentry_batch_wait_seconds{class}
// (histogram), sentry_batch_eta, sentry_batch_queue_delay_seconds (Q),
// sentry_batch_rsla_seconds, sentry_batch_parallelism (P in use),
// sentry_batch_admitted_pending, sentry_batch_reserve_ratio{class} (ρ_j).
// Class labels come from the configuration.
//
// # Usage
//
//	ctl, err := batchac.New(farm, batchac.Config{ // farm implements batchac.State
//		Classes: []batchac.ClassConfig{{Name: "gold", Period: 50 * time.Millisecond},
//			{Name: "bronze", Period: 200 * time.Millisecond}},
//		Parallelism: 8, ConstLabels: prometheus.Labels{"app": "shop"},
//	})
//	if err != nil {
//		return err
//	}
//	reg.MustRegister(ctl)
//	go ctl.Run(ctx) // owned: returns on ctx.Done() or Close
//	defer ctl.Close()
//	var a admission.Admitter = ctl
//	d := a.Admit(&admission.Request{Class: 0, Bucket: 2, S: 12 * time.Millisecond, Gone: gone})
//
// Tests drive Tick(now) directly on a manual clock; see testdata/*.txt.
package batchac
