// Package control assembles one app's admission stack from the policy and
// keeps it across reloads: the classifier (classify), the service-time
// estimator (estimator), batch admission (batchac), threshold admission
// (thresholdac), the CPU-driven mode switch (admission.Switch), and the SLA
// bookkeeping that ties them together. The proxy sees an App only through
// its own Controller interface. Package control does not import package
// proxy: the adapter and the compile-time guards that tie *App to that
// interface live in the wiring (cmd/sentry/wire.go), and
// TestNoProxyDependency keeps it that way.
//
// # Per request
//
//	Classify(req, client) → class, key        classify, first match wins
//	Estimate(class, key)  → S, bucket         estimator; counts the arrival
//	Park(&admission.Request, waker)            switch.Mode(): batch | threshold | adaptive | off
//	  decided at once → decision              off, threshold, adaptive, and in batch mode a period-0
//	                                          class, a full queue, no backend
//	  else → admission.Pending                batchac.Controller.Park queued it; its run
//	                                          wakes the waker; Result takes the decision,
//	                                          Cancel withdraws it (client gone)
//	  rejected on the estimate? estimator.Probe may admit it anyway
//	(Admit is the blocking form, for callers that may wait)
//	Done(&ticket, result)                   the relayed request's outcome: ticket = class,
//	                                          key, S, arrival; result = Server-Timing,
//	                                          measured, in-service, end
//
// Nothing here allocates per request; the mode dispatch is one atomic load.
// A parked request's ticket (parked) is pooled per App.
//
// Decision: the per-decision accounting -- the probe override, the
// admitted work Σ S and the rejection count the learner reads -- is done
// by account, once per request, when its decision is taken: at once for a
// decided request, in Pending.Result for a parked one (which wraps
// batchac's Parked for that purpose), and a Cancel counts one rejection,
// as a blocking Admit that saw its client go. So a request counts the same
// whichever front end asked and whether it waited.
//
// # Work conservation (overtarget.go)
//
// Every mode admits a request that misses only its own target when
// admitting it harms nobody (docs/algorithms.md §10): batchac does so
// itself, threshold mode's guard asks batchac.Spare, adaptive mode asks
// App.Idle (a backend with nothing in service, and the queue the latest
// completions met, App.QNow, ≤ R_sla/10). account sees the mark
// (Decision.OverTarget) once per request and counts it per class,
// sentry_admitted_over_target_total{app,class}, and logs one WARN per
// class at most once a minute (a compare-and-swap on the last time picks
// the one caller that logs) with the count since the last. Done keeps such
// a completion (Ticket.OverTarget) out of the SLA feedback -- the admitted
// percentile the capacity learner reads, auto's fall-back window, adaptive
// mode's percentile (ObserveIdle: a completion without a sample) -- and
// the fall-back rule does not count it as an admission by the test: its
// time is its own service time, known to be over the target when it was
// admitted, so it says nothing of the load, and counted it would cut the
// learned capacity and tip auto into adaptive mode with the farm idle.
// It still feeds the estimator, the parallelism model (through
// batchac.ObserveSpare: the probe's evidence, batchac's doc.go), its
// class's own percentile gauge, and adaptive mode's slow start, as
// evidence that the farm is fast.
//
// # Once per second (monitor)
//
//   - R_sla follows the app's measured arrival rate through the QoS table
//     (Cataclysm eq. 1), and batchac reads it through batchac.State.
//   - The admitted requests' percentile (the SLA's, default p95) over the
//     interval is computed from a lock-free log histogram (window.go; it
//     errs at most 25% high, never low).
//   - While batch or threshold mode is in force and the interval had at
//     least 20 completions, the capacity learner gets one observation: the
//     admitted work rate Σ S/interval, whether the percentile met R_sla, n,
//     and whether anything was rejected (docs/algorithms.md §3, learned K).
//     Decision: threshold intervals count too, so that a K too high comes
//     down after SLA misses; before the learner knows anything, threshold
//     mode uses 0.9 × the batch test's P per backend.
//
// # Provisioning (provision.go)
//
// Each tick also runs the app's provisioning advice (package provision,
// Cataclysm §4–5; docs/policy.md, provisioning):
//
//   - Inputs, none measured per request under a lock: E[S] and σ_b² are the
//     mixture of the estimator's per-class means and deviations
//     (estimator.ClassStats), weighted by the classes' arrival rates; the
//     arrival rate is the estimator's smoothed one; c_a² (σ_a² = c_a²/λ²) is
//     the index of dispersion of the per-tick arrival counts
//     (provision.Dispersion), from App.arrivals, one atomic add per request in
//     Estimate; P is batchac's parallelism in use (configured or learned);
//     the target is provisioning.target or the QoS table's row for λ_pred.
//   - λ_pred follows the offered rate (arrivals, rejected ones included);
//     the trigger's dropped count is the interval's rejections (the same
//     count the capacity learner reads: test, cascade, threshold, no backend,
//     full queue, and parked requests whose client left).
//   - current servers = the pool's healthy backends, i.e. this sentry's
//     partition. With several sentries each exports its own share: the
//     autoscaler sums sentry_provision_servers_needed over them.
//   - An ask is logged (warn), counted and, with a webhook, queued for its
//     goroutine (provision.Notifier), which the App owns: a.wg waits for it,
//     and a reload that changes the webhook stops the old one and starts a
//     new one (its delivery counters restart).
//   - The state sits behind provState.mu, a leaf lock taken by the monitor,
//     the collector and the /provisioning handler (Manager.ProvisioningHandler,
//     mounted on the admin listener), never by a request.
//
// # Adaptive mode and auto's fall-back (fallback.go)
//
// Each app has an adaptive.Controller (SEDA's, docs/algorithms.md §7)
// whatever its mode, so that auto can fall back to it. In adaptive mode
// Admit and Park take a token from the class's bucket (decided at once),
// and Done feeds the controller the latency from Ticket.Arrival -- when
// the request became ready to admit, so its wait in sentry counts -- to
// the response head, for the requests adaptive mode admitted: every
// decision carries the mode that took it (admission.Decision.Mode, copied
// into Ticket.Mode by the pipeline), whatever mode is in force at the
// completion. Decision: not the mode in force at completion: after the
// fall-back, batch mode's requests still in flight completed on the
// controller and drove its count of outstanding requests below zero (its
// backlog read short until the next Seed). At the fall-back the
// controller is told what batch mode left in flight and the completion
// rate (adaptive.Controller.SetInFlight, for its backlog and in-flight
// limit), and those requests' completions come to it as Ended, without
// a sample. The in-flight count the controller reads is the pool's
// (adaptive.Config.InFlight = App.Inflight): every end of an exchange
// releases it, where Done comes only for a response, so a request that
// fails (502, 504, client gone) does not stay counted and hold the
// in-flight limit shut. Every class's target
// is the R_sla in force, set once per window; the percentile is the SLA's.
// The controller's goroutine (Run: Tick every timeout/4) is the App's.
// Metrics: sentry_adaptive_* by app and class (adaptiveMetrics, at scrape
// time), and the mode gauge and switch counter gain "adaptive".
//
// "The batch model is known to be wrong", the decision: a one-second
// window in batch mode counts against it when it had at least 20
// completions and either (a) more than 100 − p percent of them (p =
// sla.percentile) were over R_sla -- the admitted percentile missed it,
// counted exactly, not from the histogram -- while batch mode admitted
// requests by its test in that window (probe overrides excluded), or (b)
// more than fallback.no_timing_share of the responses carried no usable
// service time: no cpu/io in Server-Timing and no measured time, or (c)
// the service times the backends reported in Server-Timing add up to
// more than jumpRatio (2) times the estimates their requests were
// admitted with (Ticket.S). Decision (c), the capacity shift: when
// every backend becomes 3× slower, batch mode's percentile hovers at
// R_sla (its test admits less as the estimator's averages rise over tens
// of seconds), missing one window and meeting the next, so a rule on
// the percentile alone falls back only 14 s after the shift on
// e2e/scenarios/shift.yaml; the reported times say at once that the
// estimates are a third of the truth. A sum over a window's completions,
// not a share of them over 2×: a 3× slower exponential service puts only
// e^(−2/3) ≈ 51% of single times over twice the old mean. In auto,
// fig10.yaml (a Pareto size mix) and flash.yaml never fall back. After
// fallback.miss_windows (3) such windows in a row, auto switches to
// adaptive (Switch.Fallback, logged at info with reason
// percentile_missed, service_time_jump or no_service_time) and seeds each class
// (adaptive.Controller.Seed) with the larger of what batch mode admitted
// and what completed per second in the last window, its measurement
// restarted and its cuts held for one response time (the window's
// percentile), so the controller cuts from there rather than from
// rate_max, and not for the late responses of batch's queue. (Seeded with
// the admissions alone, after a capacity drop batch has already cut
// below what the farm finishes, and the controller takes 10 s to climb
// back: e2e/scenarios/shift.yaml.) A window whose
// mode changed, or with too few completions, breaks the run.
//
// The return, once the fall-back's reasons have cleared. A window in
// adaptive mode is calm when it had fewer than 20 completions, or its
// admitted percentile (histogram, which errs high) is within
// return_ratio (0.8) × R_sla, its responses carry usable service times,
// and the service times the backends reported add up to no more than
// jumpRatio (2) times the estimates their requests were admitted with:
// the estimator has caught up with a slower farm, or the farm is fast
// again; and the backends are not queueing at the window's end (QNow at
// most R_sla/10, batchac's quiet test). Decision: batch mode does not
// take over a queue. Adaptive mode, after an event's end, lifts its rate
// by its slow start and then holds the farm with a queue under a lasting
// overload; batch, entering with that queue and its own estimates, keeps
// admitting into it and misses the SLA for seconds where adaptive mode
// alone misses none (e2e/scenarios/recover-size.yaml; TestRecoveryEveryMode
// holds auto to adaptive mode's misses). So auto returns when the load
// has fallen under the capacity, and under a lasting overload it stays
// in adaptive mode, which holds the target there. Auto returns to batch after fallback.return_windows (3) calm
// windows in a row (reason model_usable). A fall-back less than
// relapseWithin (1 min) after the last return is a relapse: it doubles
// the calm windows the next return needs, up to maxReturnFactor (16) ×
// return_windows (logged as return_windows with the fall-back); one
// after a longer calm restarts from return_windows. Decision: the
// return is prompt, as the end of an overload asks (a fixed ten windows
// held auto in adaptive mode for ten seconds after a size shift's end
// while batch was fit again), and the backoff bounds what
// a model still wrong under a lasting overload costs: miss_windows
// seconds of misses per relapse, at most one relapse per 3, 6, 12, ...,
// 48 calm windows, where a fixed wait of 10 windows costs 3 in every 13
// s. The estimates' agreement keeps auto in adaptive mode while the
// estimator lags a slower farm (its averages follow over tens of
// seconds): without it, after a capacity shift, the percentile adaptive
// mode holds would read calm and batch would admit three times what the
// farm finishes (TestReturnNeedsAgreeingEstimates,
// TestReturnRelapseBackoff). Threshold mode is the CPU rule's alone: the
// fall-back starts only from batch mode, and the CPU rule does not act
// in adaptive mode (a token bucket is cheaper than threshold mode's
// draw).
//
// # The end of an event (recovery)
//
// When an overload event ends -- a size shift, a slowdown, a backend
// out -- every mode must give the farm its goodput back within a
// second. Batch and threshold mode admit from the farm's present load
// (η, n, Q), so they follow at once: n when the balancer takes a
// backend back, η as the farm drains. Adaptive mode's rate, cut during
// the event, climbs back by its slow start (package adaptive), which
// counts the completions the work-conserving rule admitted (Done reports
// them as ObserveIdle) as evidence that the farm is fast, and stops
// climbing where the backends start queueing: App.Queueing
// (adaptive.Config.Queueing) is QNow over R_sla/10, the negation of the
// quiet test batch mode and auto's return use, and a rate the slow start
// raised comes back to what the farm completes once it is true. Auto
// returns to batch as above. recsim_test.go simulates the whole App on a
// manual clock in front of a farm through an event and its end, with the
// farm's utilisation per second; testdata/recovery-*.txt print the climb
// second by second for every mode, TestRecoveryEveryMode holds the
// second after the end at about the capacity, with no more seconds over
// the target than the same run without the event, and
// TestSizeShiftEndPerSecond checks the size shift's end second by second:
// the farm full, the p95 against the run without the event, adaptive
// mode's rate while the backends queue.
//
// # Decisions
//
//   - One mode switch per app. CPU is process-wide, so every app's switch
//     sees the same utilisation and they move together; per-app switches
//     keep the policy's per-app switch settings meaningful. A reload that
//     changes an app's switch settings or mode rebuilds its switch (its
//     episode state and switch counters restart); any other reload keeps it.
//   - Learned state survives reloads keyed by app name: the estimator's
//     history (estimator.Registry, keyed further by class name and key),
//     batchac's queues and learned parallelism (Reconfigure), the
//     capacity learner, and the adaptive controller: a reload that leaves
//     admission.adaptive, the classes and sla.percentile alone keeps it;
//     one that changes them builds a new one into which each class's rate
//     and smoothed percentile are carried by class name (adaptive.Carry). The threshold controller is rebuilt when the class
//     count or its settings change; its state is recomputed every period.
//   - Probes. A rejection that rests on the estimate (rejected_test,
//     rejected_cascade, rejected_threshold) is turned into an admission
//     when estimator.Probe grants one: at most one request per class per
//     estimator.probe_interval, for a key without a recent sample
//     (Request.Key; nil looks at the class). Rejected requests give no
//     samples, so without probes an estimate too high would never come
//     down. batchac's own decision counter still records the test's
//     verdict; App.Probes counts the overrides.
//   - The SLA "met" counter and revenue (eq. 2) count admitted, relayed
//     requests whose latency from arrival at sentry to response head was
//     within the R_sla in force.
//
// # Termination
//
// Each App has one selective early termination controller (package sert,
// termination.go), built from the policy's classes[].terminate and
// termination, reconfigured in place on reload (state kept by class
// name), ticking every termination.interval on its own goroutine, with
// its metrics registered per app. Terminator(class) hands the proxy the
// class's *sert.Class, or nil when the class declares no range. The App
// counts the class's arrivals (in Estimate) and rejections (in account
// and Cancel) for the loss fraction; the proxy counts terminations.
//
// A terminated request's ticket is told the cut (admission.Result with
// Terminated): Done feeds the estimator and batchac's parallelism model
// its cost (at least the threshold: S and the batch test see it), and
// nothing else. Decision: it is no SLA sample -- not for adaptive mode's
// percentile (the controller is told Ended, a completion without a
// sample), not for auto's fall-back window, not for the admitted
// percentile and the learner. The client got a 503, counted by the
// termination controller's loss fraction; the time the request ran shows
// in the response times of the requests that waited behind it. Counted as
// a response time, the heavy share termination exists for would make auto
// fall back to adaptive on sert-shift.yaml, and adaptive cut every
// request's rate for it (0.20× capacity during the shift).
//
// # The degradation signal (load.go)
//
// App.Load(now) is the farm's load for the degradation header
// (docs/policy.md "degradation"): batch mode's predicted response time of
// one more request of the classes' mean S (weighted by arrival rates)
// over R_sla, (Q + max(1, (η+1)/P)·S̄)/R_sla, capped at 99.99, 0 without a
// healthy backend or anything learned. Decision: recomputed at most every
// 5 ms by the request that finds it stale (compare-and-swap on its time);
// every other request does two atomic loads. No lock.
//
// # Learned state across processes (learned.go)
//
// What an App has learned lives as long as its name is in the policy, so a
// reload keeps it. Export and Restore carry it further, as plain values
// (AppState, each part its package's own), to the next process of a
// binary upgrade and through a state file (package learned). Restore
// matches by name and checks each part in its own package: a class the
// policy lacks, a value out of range, a learned P against a configured
// one, a mode switch state against a forced mode -- each is left out and
// returned as a line for the caller to log; nothing is an error that
// stops a start. Decision: restore replaces, it does not merge: it runs
// on a stack that has not served, so there is nothing of its own to keep.
//
// During an upgrade two processes serve one farm. App.Inflight, which
// every admission test reads as the farm's load, is the pool's count plus
// the other process's as it reports it (Manager.SetPeerInflight): without
// it each would admit as if it had the farm alone.
//
// # Forced modes (force.go)
//
// The operator may hold an app in batch, threshold, adaptive or off mode
// at run time (App.Force; the admin API, docs/operations.md "Runtime
// control"), whatever the policy says, until App.Unforce or a reload
// that rebuilds the mode switch; the admin API unforces on every reload.
// The Switch does the holding (admission.Switch.Force): one atomic load
// per request as before, the CPU rule and the fall-back wait, and the
// fall-back's window restarts on either side. Forced into adaptive mode,
// the controller is seeded as the fall-back seeds it. An app whose
// policy mode is off still has its whole stack -- classifier, estimator,
// the three controllers -- and the request path asks it for every
// decision (off answers at once), so a forced mode reaches it too.
//
// # Fair share (fairshare.go)
//
// With admission.fair_share on (the default) each app has a
// fairshare.Table, built with its classes and ticked every 100 ms by a
// goroutine the app owns (kept across a reload that changes neither the
// classes nor the table's size and rotation). Before the mode decides,
// Admit and Park give the request its client's standing (Table.Share);
// every mode reads it (docs/algorithms.md §12). account tells the table
// the decision, once per request, after a probe may have turned it; a
// parked request's Cancel tells it client_gone. Batch mode asks the
// within-share demand through batchac.ShareState, adaptive mode the rates
// through adaptive.Config.ShareRates; threshold mode holds the same room
// through batchac.Room and FreeSlot. Metrics are per app and class
// (sentry_fairshare_*); the top talkers go to the status page only.
//
// # Lock order
//
// Manager.mu, then App.mu, then provState.mu (a leaf). None is taken on
// the request path. The fall-back state's lock (App.fb) is taken by the
// monitor and by Force and Unforce, then the Switch's inside
// Switch.Fallback, Force or Unforce. In adaptive
// mode, Done takes the adaptive controller's lock (one short section per
// completion). One
// callback runs under Manager.mu: a reload's batchac.Reconfigure decides the
// requests of queues that went away and tells their Wakers
// (admission.Waker) on return, still inside Build. The Wakers sentry uses
// (an event loop's eventfd write, the fasthttp path's one-slot channel)
// never block and never call back into control, so this cannot deadlock.
//
// Usage:
//
//	m, _ := control.NewManager(control.Options{Logger: log, Registerer: reg})
//	app, err := m.Build(snap.Apps[0], pool)   // again on reload: same *App
//	m.Retain(names)                            // drop apps no longer in the policy
package control
