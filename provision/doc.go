// Package provision tells the autoscaler how many servers an app needs
// (Cataclysm §4–6; docs/algorithms.md, "Provisioning"). It is a pure
// library: no goroutine but the webhook's, no clock of its own (every call
// takes now), no metrics. Package control owns one model, predictor and
// trigger per app and calls them once per monitor tick.
//
// # The model (eq. 8–9)
//
// One server is a G/G/1 queue. Eq. 8 bounds its mean response time,
//
//	E[R] ≤ E[S] + λ·(σ_a² + σ_b²)/(2·(1 − ρ)),   ρ = λ·E[S],
//
// and eq. 9 solves it for λ_in, the rate one server takes while E[R] stays
// within the target:
//
//	λ_in = [E[S] + (σ_a² + σ_b²)/(2·(E[R] − E[S]))]⁻¹.
//
// Decision: σ_a² is not a constant. The sentry measures the inter-arrival
// variance of the whole app at rate λ; a server sees a share of those
// arrivals, at its own rate. What survives the split is the squared
// coefficient of variation c_a² = σ_a²·λ² (exact for Poisson arrivals split
// at random, 1 for them). We plug in σ_a² = c_a²·E[S]², the variance at the
// server's own saturation rate. Eq. 8 then becomes Kingman's approximation
// E[W] ≈ ρ/(1−ρ)·(c_a² + c_s²)/2·E[S], which is exact for M/M/1, for M/G/1
// (Pollaczek–Khinchine) and for D/D/1, where the literal bound with
// σ_a² = 1/λ² is loose (for M/M/1 it grows without bound as λ → 0 and
// under-counts a server's capacity). TestMM1, TestMD1 and TestDD1 check the
// closed forms.
//
// c_a² is measured by Dispersion: the index of dispersion of the arrival
// counts per tick, Var(N)/E[N] over exponentially decayed rate samples
// (60 s time constant), which is c_a² for a renewal process (1 for
// Poisson, 0 for evenly spaced arrivals; TestDispersion). Until 10 ticks
// have been seen it reads 1. Decision: the variance comes from successive
// differences of the per-tick rates, so a change of the rate level is not
// read as burstiness (read that way, a 1× → 3× step reads as c_a² ≈ 37
// and keeps servers needed high for minutes after the load falls;
// TestDispersionLevelShift).
//
// Decision, parallelism: a backend runs P requests at full speed (the batch
// test's model, batchac's "Parallelism"; P is that app's configured or
// learned P). Past P slots requests wait, so one server is a G/G/P queue and
// the wait is Allen–Cunneen's
//
//	W = C(P, λ·E[S]) / (P/E[S] − λ) · (c_a² + c_s²)/2,
//
// with C the Erlang C probability of waiting. For P = 1, C = ρ and this is
// the eq. 9 form above, solved in closed form; for P > 1, λ_in solves
// E[S] + W = E[R] by bisection (E[R] grows with λ). It is exact for
// exponential service (M/M/P) and, on the accuracy sweep, within 1.5% of a
// simulated M/D/P queue (TestAccuracySweep: fixed and exponential service,
// P = 1, 2, 4, 8, targets 2 and 5 × E[S], 0.5–4 × the load of 4 servers;
// every count within ±1 of the true one).
//
// Decision, target: the model keeps the mean response time within the
// target, as eq. 9 does. The target is the QoS table's row for λ_pred
// (§4.1: "the response time target E[R] is read from the entry in the QoS
// table ... corresponding to λ_pred") unless provisioning.target sets one;
// an SLA at p95 is thus read as a mean target, which errs toward fewer
// servers. Set provisioning.target lower for headroom.
//
// Servers needed: ⌈λ_pred/λ_in⌉, bounded by min_servers and max_servers
// (Needed). When the target cannot be met (target ≤ E[S]) λ_in is 0 and the
// count is the ceiling.
//
// # The predictor
//
// Decision: λ_pred is the offered rate (admitted plus rejected, so the
// count does not shrink because admission turned people away), smoothed by
// Holt's linear method: a level with a 30 s time constant and a slope with
// a 60 s time constant, both decayed by elapsed time so irregular ticks are
// fine, forecast 30 s ahead and never below 0 (Predictor). 30 s is about
// how long a new backend takes to come up; a longer horizon over-reacts to
// noise in the slope.
//
// # The reactive trigger (Cataclysm §5)
//
// Trigger keeps the app's cumulative offered and dropped counts, one sample
// per tick (at most 4096 kept), and computes the drop fraction over the
// last window (default 5 min). Decision: it asks only once its history
// covers a whole window, as the paper's sentry did ("more than 50% of the
// requests being dropped over the last 5 min"). It asks when the fraction
// exceeds f_drop (default 0.5, strictly), at least spacing (δ, default
// 5 min) after its last ask, for max(1, needed − current) servers capped at
// max_step (Δ, default 1) and at max_servers − current. Decision: at least
// one, since persistent drops are evidence even when the model disagrees.
// A counter that goes backwards (the app was rebuilt) restarts the history.
//
// An ask is a metric (sentry_provision_requests_total), a log line, and, if
// a webhook is configured, a JSON POST (Request) from Notifier: a bounded
// queue (default 16) and one goroutine. Notify never blocks; when the queue
// is full the ask is dropped and counted. Each attempt has a timeout
// (default 5 s); a transport error or a non-2xx status is retried (default
// 2 retries, backoff 1 s doubling), then counted as failed.
//
// # Utility (eq. 10–11)
//
// U(a, n) = n·λ_in·r·T_prov for n·λ_in up to λ_pred (eq. 11's range), and
// flat beyond: servers past the predicted demand earn nothing. So the gain
// of the next server is λ_in·r·T_prov while the app is short, the remainder
// of the demand for the last partial server, and 0 after. Allocate hands out
// spare servers greedily to the largest positive gain (ties: the first app),
// stopping when the spares run out, every app is at its ceiling or no app
// gains. With these linear curves the greedy answer is optimal (§4.1).
//
// # Concurrency
//
// Predictor and Trigger are owned by one goroutine (not safe for concurrent
// use, no locks). Inputs, Needed, Allocate are pure. Notifier is safe for
// concurrent Notify; Run is its one goroutine, which its owner starts and
// stops by its context.
//
// Usage:
//
//	in := provision.Inputs{MeanS: 0.010, VarS: 1e-4, VarA: va, Rate: lam, Target: 0.050, Slots: 4}
//	pred.Observe(now, offeredPerSecond)
//	need := provision.Needed(pred.Predict(), in.LambdaIn(), 1, 20)
//	trig.Observe(now, offered, dropped)
//	if ask := trig.Ask(now, healthy, need, 20); ask > 0 { notifier.Notify(...) }
package provision
