package control

import (
	"context"
	"math"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sentry-proxy/sentry/adaptive"
	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/batchac"
	"github.com/sentry-proxy/sentry/classify"
	"github.com/sentry-proxy/sentry/estimator"
	"github.com/sentry-proxy/sentry/fairshare"
	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/thresholdac"
)

// Pool is what the admission stack reads from the app's backend pool.
type Pool interface {
	Healthy() int
	Inflight() int64
}

// App is one app's admission stack. Its learned state (estimates, learned
// parallelism and capacity, counters) lives as long as the app's name is
// in the policy; a reload reconfigures it in place.
type App struct {
	name string
	log  hclog.Logger
	now  func() time.Time
	pool atomic.Pointer[poolRef]
	// noLoops: the controllers' goroutines are not started (Manager's,
	// for tests on a manual clock).
	noLoops bool

	cfg     atomic.Pointer[appConfig]
	est     *estimator.Estimator
	batch   *batchac.Controller
	thr     atomic.Pointer[thresholdac.Controller]
	learner *thresholdac.Learner
	sw      atomic.Pointer[admission.Switch]
	term    termination                         // selective early termination (termination.go)
	adp     atomic.Pointer[adaptive.Controller] // adaptive mode; rebuilt on reload, rates carried by class name
	fair    atomic.Pointer[fairshare.Table]     // fair share inside each class (fairshare.go); nil: off
	// fairRand is the fair-share table's draw (fairshare.Config.Rand);
	// nil: the runtime's. Set by deterministic simulations.
	fairRand func() uint32

	rsla atomic.Int64 // current R_sla, ns
	// thrCapacity is the configured per-server capacity (float64 bits;
	// admission.threshold.capacity, 0: learn it), for Sustained.
	thrCapacity atomic.Uint64
	lastObs     atomic.Int64 // unix ns of the last observed completion
	// peer is the requests the other process of a binary upgrade in
	// progress has in flight to these backends (learned.go).
	peer atomic.Int64

	// The degradation signal (load.go): the last Load and when (unix ns).
	load   atomic.Uint64 // float64 bits
	loadAt atomic.Int64

	// Per-interval accounting, drained by the monitor.
	lat     window                        // latency of admitted, relayed requests
	classes atomic.Pointer[[]*classStats] // by class index; entries keyed by name across reloads
	work    atomic.Int64                  // Σ S of admitted requests, ns
	rejects atomic.Int64
	probes  atomic.Uint64 // rejections overridden by a probe (estimator.Probe)

	// The fall-back rule's per-window counts (fallback.go), drained by the
	// monitor: completions, those over R_sla, those without a usable
	// service time, admissions, and admissions a probe made; and, over
	// the completions with a Server-Timing service time and an estimate,
	// the sums of both (ns: the service times against the estimates
	// they were admitted with).
	win struct {
		n, over, noTiming, admits, probes atomic.Int64
		estS, gotS                        atomic.Int64
		// spare counts the window's admissions by the work-conserving
		// rule: like a probe's, not admissions by the test.
		spare atomic.Int64
	}
	fb fallbackState // the fall-back rule: the monitor's (lock order: fb, then the Switch's)

	lastQuantile atomic.Int64 // ns, last interval's admitted percentile

	// Provisioning (provision.go): arrivals counts every request offered
	// (one atomic add in Estimate); prov is the monitor's model state.
	arrivals atomic.Uint64
	prov     provState

	parked sync.Pool // *parked, the tickets Park hands out

	mu struct { // guards reconfiguration and the goroutines it starts
		sync.Mutex
		thrCancel context.CancelFunc
		swCancel  context.CancelFunc
		swCfg     policy.ModeSwitch
		thrCfg    policy.ThresholdAdmission
		nClasses  int
		adpCancel context.CancelFunc
		adpCfg    policy.AdaptiveAdmission
		adpNames  []string
		// fairCancel stops the fair-share table's ticker (fairshare.go).
		fairCancel context.CancelFunc
	}
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type poolRef struct{ Pool }

// classStats is a class's per-interval latency window and its last
// percentile; replaced (not resized in place) when the class count grows.
type classStats struct {
	name     string
	met      atomic.Uint64 // completions within the target (revenue, eq. 2)
	lat      window
	quantile atomic.Int64  // ns
	admits   atomic.Int64  // admissions this interval, drained by the monitor
	admRate  atomic.Uint64 // float64 bits: admissions per second over the last interval
	doneRate atomic.Uint64 // float64 bits: completions per second over the last interval
	// over counts the admissions made by the work-conserving rule
	// (admission.Decision.OverTarget), in every mode; overWarned is when
	// the last WARN about them was logged (unix ns) and overLogged the
	// count at that time (overtarget.go).
	over       atomic.Uint64
	overWarned atomic.Int64
	overLogged atomic.Uint64
}

// appConfig is the part of the policy read per request; immutable.
type appConfig struct {
	cls        *classify.Classifier
	names      []string
	sla        policy.SLA
	mode       admission.Mode
	strip      bool
	percentile float64
	revenue    float64
	fallback   policy.Fallback
	// leastLoaded: the pool sends a request to the backend with the
	// fewest in flight, so any backend idle takes the next one (Idle).
	leastLoaded bool
}

// Classes returns the class names, most important first.
func (a *App) Classes() []string { return a.cfg.Load().names }

// Classify returns the request's class index and history key.
func (a *App) Classify(r classify.Request, client netip.Addr) (int, []byte) {
	return a.cfg.Load().cls.Classify(r, client)
}

// Estimate counts the arrival and returns the estimated inherent service
// time and bucket.
func (a *App) Estimate(class int, key []byte, now time.Time) (time.Duration, int) {
	a.est.Arrive(class, now)
	a.termArrive(class)
	a.arrivals.Add(1)
	return a.est.Estimate(class, key)
}

// Admit dispatches on the configured mode, or on the switch in auto mode.
// In batch mode it may block until the class's next policer run.
func (a *App) Admit(r *admission.Request) admission.Decision {
	var d admission.Decision
	mode := a.sw.Load().Mode()
	if mode == admission.ModeOff {
		return admission.Decision{Verdict: admission.Admit, Mode: mode}
	}
	ft, slot := a.share(r)
	switch mode {
	case admission.ModeThreshold:
		d = a.threshold(r)
	case admission.ModeAdaptive:
		d = a.adp.Load().Admit(r)
	default:
		d = a.batch.Admit(r)
	}
	return a.account(mode, r.Class, r.Key, r.S, d, fairRef{ft, slot, r.Share})
}

// Park is Admit for a caller that must not block (the event loop). Mode
// off, threshold and adaptive mode, and in batch mode a class without a period, a
// full queue or no backend, are decided at once (decided true, p nil).
// Otherwise the request waits in its batch queue and p is its ticket: the
// class's next run decides it and then wakes wk (batchac.Controller.Park),
// and the owner takes the decision with p.Result, or calls p.Cancel when
// its client has gone. Either way the decision is accounted once, when it
// is taken. r.Key must stay valid until then (the probe reads it); r
// itself need not. Park does not allocate: p is pooled.
func (a *App) Park(r *admission.Request, wk admission.Waker) (d admission.Decision, p admission.Pending, decided bool) {
	mode := a.sw.Load().Mode()
	if mode == admission.ModeOff {
		return admission.Decision{Verdict: admission.Admit, Mode: mode}, nil, true
	}
	ft, slot := a.share(r)
	fr := fairRef{ft, slot, r.Share}
	switch mode {
	case admission.ModeThreshold:
		d = a.threshold(r)
	case admission.ModeAdaptive:
		d = a.adp.Load().Admit(r)
	default:
		var bp *batchac.Parked
		if d, bp, decided = a.batch.Park(r, wk); !decided {
			t, _ := a.parked.Get().(*parked)
			if t == nil {
				t = new(parked)
			}
			*t = parked{a: a, p: bp, class: r.Class, key: r.Key, s: r.S, fair: fr}
			return admission.Decision{}, t, false
		}
	}
	return a.account(mode, r.Class, r.Key, r.S, d, fr), nil, true
}

// fairRef is where a request's decision is reported in the fair-share
// table (fairshare.go): the table, the client's slot and the standing the
// request was decided with.
type fairRef struct {
	t     *fairshare.Table
	slot  fairshare.Slot
	share admission.Share
}

// parked is an App's ticket for a request parked in batchac: it applies the
// App's per-decision accounting (account) to the decision when it is
// taken, so a parked request counts exactly as a blocking Admit does.
type parked struct {
	a     *App
	p     *batchac.Parked
	class int
	key   []byte
	s     time.Duration
	fair  fairRef
}

var _ admission.Pending = (*parked)(nil)

// Result takes the decision once batchac's run has made it. After ready, t
// is released.
func (t *parked) Result() (admission.Decision, bool) {
	d, ready := t.p.Result()
	if !ready {
		return d, false
	}
	a, class, key, s, fr := t.a, t.class, t.key, t.s, t.fair
	t.release()
	return a.account(admission.ModeBatch, class, key, s, d, fr), true
}

// Cancel withdraws the request (its client has gone); counted as a
// rejection, as a blocking Admit that saw Gone fire. t is released.
func (t *parked) Cancel() {
	t.p.Cancel()
	a, class, fr := t.a, t.class, t.fair
	t.release()
	if fr.t != nil {
		fr.t.Done(fr.slot, fr.share, admission.RejectGone)
	}
	a.rejects.Add(1)
	a.termReject(class)
}

func (t *parked) release() {
	a := t.a
	*t = parked{}
	a.parked.Put(t)
}

// threshold is threshold mode's decision.
func (a *App) threshold(r *admission.Request) admission.Decision {
	// The (i, p) pair follows arrival rates smoothed over seconds and a
	// capacity K that may be off; the batch model's Room guards it both
	// ways. A request needs the room left for its class after the more
	// important classes' demand (on a rising load the pair admits more
	// than K until the rates catch up); with room, a class at or above the
	// threshold class is admitted (a K too low must not shed the most
	// important class while less important ones take free slots), and
	// only the classes below it are shed by the pair; a free slot is
	// filled whatever the pair says, so the farm never idles behind a
	// stale p.
	if a.pool.Load().Healthy() <= 0 {
		return admission.Decision{Verdict: admission.RejectNoBackend}
	}
	//
	// The work-conserving rule (thresholdac's doc.go): a request the room
	// test refuses -- it misses its own target even on a free slot -- is
	// admitted, marked, when admitting it harms nobody (batchac.Spare: a
	// slot free, nothing queued, no mark above). The pair is not asked:
	// it sheds load, and a free slot has none to shed.
	//
	// Fair share (docs/algorithms.md §12): a request of the spare-only
	// tier is admitted only where it slows down nobody (FreeSlot); one over its
	// share in its turn needs room with the class's within-share demand
	// held for too (the marginal one, the floor's share of what is left
	// as well, and more for each rank before its own), and is
	// refused as over_share where a within-share request would have had
	// room.
	thr := a.thr.Load()
	if r.Share == admission.SpareOnly {
		if a.batch.FreeSlot(r.Class, r.S) {
			return admission.Decision{Verdict: admission.Admit}
		}
		return admission.Decision{Verdict: admission.RejectOverShare, RetryAfter: time.Second}
	}
	room, free, inShare := a.batch.Room(r.Class, r.S, r.Share.Tier(), r.Rank)
	switch {
	case free:
		return admission.Decision{Verdict: admission.Admit}
	case !room && a.batch.Spare(r.Class):
		return admission.Decision{Verdict: admission.Admit, OverTarget: true}
	case !room && inShare:
		return admission.Decision{Verdict: admission.RejectOverShare, RetryAfter: thresholdac.RetryAfter(thr.Period())}
	case !room && a.batch.Held(r.Class, r.S):
		// Only the room held for more important classes refuses it: named
		// as batch mode names it (fair sharing's capacity does not
		// follow such refusals down, fairshare.Table.Done).
		return admission.Decision{Verdict: admission.RejectPriority, RetryAfter: thresholdac.RetryAfter(thr.Period())}
	case !room:
		return admission.Decision{Verdict: admission.RejectThreshold, RetryAfter: thresholdac.RetryAfter(thr.Period())}
	case thr.Within(r.Class):
		return admission.Decision{Verdict: admission.Admit}
	}
	return thr.Admit(r)
}

// account is the per-decision accounting of every decision taken in batch
// or threshold mode, once: a probe may turn a rejection that rests on the
// estimate into an admission (estimator.Probe), and the admitted work and
// the rejections feed the capacity learner (tick). The decision is marked
// with mode, the mode that took it (admission.Decision.Mode): the
// request's completion goes back to it (Done).
func (a *App) account(mode admission.Mode, class int, key []byte, s time.Duration, d admission.Decision, fr fairRef) admission.Decision {
	d.Mode = mode
	if probeable(d.Verdict) && a.est.Probe(class, key, a.now()) {
		d = admission.Decision{Verdict: admission.Admit, Mode: mode}
		a.probes.Add(1)
		a.win.probes.Add(1)
	}
	if fr.t != nil {
		fr.t.Done(fr.slot, fr.share, d.Verdict)
	}
	if d.Verdict == admission.Admit {
		a.work.Add(int64(s))
		a.win.admits.Add(1)
		if cs := *a.classes.Load(); uint(class) < uint(len(cs)) {
			cs[class].admits.Add(1)
			if d.OverTarget {
				a.win.spare.Add(1)
				a.overTarget(cs[class], mode, s)
			}
		}
	} else {
		a.rejects.Add(1)
		a.termReject(class)
	}
	return d
}

// probeable tells whether a rejection rests on the class's own estimate,
// so that a probe may override it (estimator.Probe): the batch test only.
// A cascade, the room held for more important classes and threshold mode's
// pair rest on other classes (a probe there would let a less important
// class past a more important one), and a missing backend, a full queue or
// a client gone on nothing the estimate says.
func probeable(v admission.Verdict) bool {
	return v == admission.RejectTest
}

// Probes is the number of rejections a probe has overridden so far.
func (a *App) Probes() uint64 { return a.probes.Load() }

// Done tells a relayed request's ticket its outcome (admission.Result):
// the backend's Server-Timing feeds the estimator, the measured time and
// the in-service count feed batchac's parallelism model (when the ticket
// carries an estimate), and the latency from arrival feeds the SLA
// bookkeeping. It does not allocate and keeps nothing of t or r.
func (a *App) Done(tk *admission.Ticket, r admission.Result) {
	class, now := tk.Class, r.End
	var t estimator.Timing
	if len(r.ServerTiming) > 0 {
		t, _ = estimator.ParseServerTiming(r.ServerTiming)
	}
	latency := r.Latency(tk)
	if r.Terminated {
		// A request cut by selective early termination: its cost (at least
		// the threshold) feeds the estimator and the parallelism model, so
		// S and the batch test see it, but its time is no response time a
		// client saw (the client got a 503): it is not an SLA sample, for
		// adaptive mode's percentile, auto's fall-back window or the
		// admitted percentile (doc.go, "Termination").
		if tk.Mode == admission.ModeAdaptive || a.sw.Load().Mode() == admission.ModeAdaptive {
			a.adp.Load().Ended(class)
		}
		a.est.ObserveTiming(class, tk.Key, estimator.Timing{}, r.Measured, now)
		a.lastObs.Store(now.UnixNano())
		if tk.S > 0 && r.InService > 0 {
			a.batch.ObserveService(r.InService, tk.S, r.Measured)
		}
		return
	}
	// Adaptive mode's feedback: the response time from arrival at sentry
	// (Ticket.Arrival), waiting in sentry included, of the requests the
	// adaptive controller admitted (Ticket.Mode), whatever the mode now.
	// Decision: not the mode in force at completion. After auto's
	// fall-back, batch mode's requests still in flight completed on the
	// controller and drove its count of outstanding requests (Seed
	// restarts it at 0) below zero, so its backlog read short by them
	// until the next Seed; and after a return to batch mode the
	// controller's own requests went uncounted.
	//
	// An over-target admission completes without a sample
	// (ObserveIdle): the controller's percentile measures what its rate
	// does to the queue, and such a request met none (adaptive's doc.go,
	// Work conservation); its time counts only as the slow start's
	// evidence that the farm is fast (adaptive's doc.go, Slow start).
	switch {
	case tk.Mode == admission.ModeAdaptive && tk.OverTarget:
		a.adp.Load().ObserveIdle(class, latency)
	case tk.Mode == admission.ModeAdaptive:
		a.adp.Load().Observe(class, latency)
	case a.sw.Load().Mode() == admission.ModeAdaptive:
		// Another mode's request completing in adaptive mode (auto's
		// fall-back counted it in the controller's in-flight count,
		// SetInFlight): a completion without a sample.
		a.adp.Load().Ended(class)
	}
	// A request the work-conserving rule admitted (Ticket.OverTarget) was
	// known to miss its target when it was admitted, on a farm with a
	// free slot: its time is its own service time, which says nothing of
	// the load. It feeds the estimator, the parallelism model and its
	// class's percentile, not the SLA feedback -- the admitted percentile
	// (the capacity learner) and auto's fall-back window -- or, counted
	// there, a class whose requests are longer than its target would cut
	// the learned capacity, and tip auto into adaptive mode, at no load.
	if !tk.OverTarget {
		a.win.n.Add(1)
		if !t.HasS() && r.Measured <= 0 {
			a.win.noTiming.Add(1)
		}
		if latency > time.Duration(a.rsla.Load()) {
			a.win.over.Add(1)
		}
		if tk.S > 0 && t.HasS() {
			a.win.estS.Add(int64(tk.S))
			a.win.gotS.Add(int64(t.S(a.est.Alpha())))
		}
	}
	a.est.ObserveTiming(class, tk.Key, t, r.Measured, now)
	a.lastObs.Store(now.UnixNano())
	// The parallelism model predicts the whole response time at the
	// backend, waiting for a slot included: max(1, m/P)·S. So it learns
	// from the measured time, not from measured − queue (which is ≈ S
	// whatever the load, and would let P grow without bound).
	switch {
	case tk.S <= 0 || r.InService <= 0:
	case tk.OverTarget:
		// The probe's evidence (batchac's doc.go, The probe): admitted on
		// a backend that was not queueing, its time measures the
		// concurrency it ran at.
		a.batch.ObserveSpare(r.InService, tk.S, r.Measured)
	default:
		a.batch.ObserveService(r.InService, tk.S, r.Measured)
	}
	if !tk.OverTarget {
		a.lat.add(latency)
	}
	if cs := *a.classes.Load(); uint(class) < uint(len(cs)) {
		cs[class].lat.add(latency)
		if latency <= time.Duration(a.rsla.Load()) {
			cs[class].met.Add(1)
		}
	}
}

// StripServerTiming tells whether the proxy removes the timing entries.
func (a *App) StripServerTiming() bool { return a.cfg.Load().strip }

// Mode returns the mode in force now.
func (a *App) Mode() admission.Mode { return a.sw.Load().Mode() }

// batchac.State and thresholdac.Inputs.

// Q is the estimator's queueing delay, corrected for staleness: with
// nothing in flight the backends this sentry owns have no queue, and an
// estimate whose last sample is old decays toward 0 with the queue
// half-life. Without this, a Q above R_sla would reject everything, no
// sample would ever come to lower it, and admission would deadlock.
func (a *App) Q() time.Duration {
	if a.Inflight() == 0 {
		return 0
	}
	q := a.est.Q()
	if q <= 0 {
		return q
	}
	age := a.now().UnixNano() - a.lastObs.Load()
	hl := a.est.Config().QueueHalfLife
	if hl <= 0 || age <= int64(time.Second) {
		return q
	}
	return time.Duration(float64(q) * math.Exp2(-float64(age-int64(time.Second))/float64(hl)))
}

// Inflight is the requests in flight to the app's backends: this
// process's, and, during a binary upgrade, the other process's
// (Manager.SetPeerInflight).
func (a *App) Inflight() int64 { return a.pool.Load().Inflight() + a.peer.Load() }

// QNow is the queueing delay the latest completions met
// (estimator.QNow): whether the backends are queueing now, the
// work-conserving rule's test (Idle, batchac's model.quiet). 0 with
// nothing in flight, as Q.
func (a *App) QNow() time.Duration {
	if a.pool.Load().Inflight() == 0 {
		return 0
	}
	return a.est.QNow()
}

// Idle is adaptive mode's view of "admitting one more request harms
// nobody" (adaptive.Config.Idle; adaptive's doc.go, "Work conservation"):
// a backend has nothing in service and the next request goes to it, and
// the backends are not queueing now (QNow, the queue the latest
// completions met, is at most a tenth of R_sla, as batchac's rule has it:
// the in-flight count sees only sentry's own requests; Q, a mean over
// seconds, still read an overload's queue for seconds after its end, and
// starved adaptive mode's slow start of these admissions). With least-loaded balancing the first is fewer
// requests in flight than healthy backends; with round robin or p2c,
// which may send it to a busy one, only an empty farm. It uses no slot
// count or service time: adaptive mode runs where those may be wrong.
func (a *App) Idle() bool {
	p := a.pool.Load()
	n := p.Healthy()
	if n <= 0 {
		return false
	}
	switch in := a.Inflight(); {
	case a.cfg.Load().leastLoaded && in >= int64(n), !a.cfg.Load().leastLoaded && in > 0:
		return false
	}
	return a.QNow() <= time.Duration(a.rsla.Load())/10
}

// Queueing tells adaptive mode whether the backends are queueing now
// (adaptive.Config.Queueing): QNow, the queue the latest completions
// met, is over a tenth of R_sla -- batchac's quiet test and auto's
// return test, negated. Adaptive mode's slow start climbs only while it
// is false, and ends at the farm's completion rate once it is true.
func (a *App) Queueing() bool {
	return a.QNow() > time.Duration(a.rsla.Load())/10
}

func (a *App) Healthy() int           { return a.pool.Load().Healthy() }
func (a *App) RSLA() time.Duration    { return time.Duration(a.rsla.Load()) }
func (a *App) Rate(class int) float64 { return a.est.Rate(class, a.now()) }
func (a *App) MeanS(class int) time.Duration {
	return a.est.ClassMean(class)
}

// Sustained is the work one backend has been seen to sustain within the
// SLA, in server-seconds per second (batchac.State): threshold mode's
// configured capacity if set, else what the capacity learner has learned
// (0 before it knows). The reserve uses it as a floor under the learned
// parallelism.
func (a *App) Sustained() float64 {
	if c := math.Float64frombits(a.thrCapacity.Load()); c > 0 {
		return c
	}
	if a.learner == nil { // being built: batchac.New reads it before the learner exists
		return 0
	}
	if v, ok := a.learner.PerServer(); ok {
		return v
	}
	return 0
}

// Demand is class's offered work, λ·S in server-seconds per second, with a
// rate that follows a rise within a tenth of a rate window
// (estimator.RecentRate): the reserve batchac holds for more important
// classes is built from it.
func (a *App) Demand(class int) float64 {
	return a.est.RecentRate(class, a.now()) * a.est.ClassMean(class).Seconds()
}

var (
	_ batchac.State      = (*App)(nil)
	_ batchac.ShareState = (*App)(nil)
	_ thresholdac.Inputs = (*App)(nil)
	_ admission.Admitter = (*App)(nil)
)

// monitorInterval is how often R_sla follows the arrival rate and the
// capacity learner is fed.
const monitorInterval = time.Second

// monitor runs once per interval: R_sla from the measured arrival rate
// (QoS table, eq. 1), the admitted percentile, and one observation for the
// capacity learner while batch mode is in force.
func (a *App) monitor() {
	defer a.wg.Done()
	t := time.NewTicker(monitorInterval)
	defer t.Stop()
	last := a.now()
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-t.C:
		}
		now := a.now()
		a.tick(now, now.Sub(last))
		last = now
	}
}

// minSamples is the fewest completions an interval needs before its
// percentile says anything about the SLA.
const minSamples = 20

func (a *App) tick(now time.Time, interval time.Duration) {
	cfg := a.cfg.Load()
	var rate float64
	for c := range cfg.names {
		rate += a.est.Rate(c, now)
	}
	a.rsla.Store(int64(cfg.sla.Target(rate)))
	n, q := a.lat.drain(cfg.percentile / 100)
	work := a.work.Swap(0)
	rejected := a.rejects.Swap(0)
	a.provisionTick(now, interval, rate, rejected) // provision.go
	if n > 0 {
		a.lastQuantile.Store(int64(q))
	}
	for _, cs := range *a.classes.Load() {
		cn, cq := cs.lat.drain(cfg.percentile / 100)
		cs.quantile.Store(int64(cq)) // 0 without completions
		d := 0.0
		if secs := interval.Seconds(); secs > 0 {
			d = float64(cn) / secs
		}
		cs.doneRate.Store(math.Float64bits(d))
	}
	// The learner takes intervals of batch and threshold mode alike: an
	// interval that met R_sla shows its admitted work is sustainable, one
	// that missed cuts the estimate (thresholdac.Learner). Threshold mode
	// needs this to back off; it admits what K says, so without feedback
	// a K too high would never come down.
	secs := interval.Seconds()
	for _, cs := range *a.classes.Load() {
		r := 0.0
		if k := cs.admits.Swap(0); secs > 0 {
			r = float64(k) / secs
		}
		cs.admRate.Store(math.Float64bits(r))
	}
	a.adaptiveTargets()
	a.fallbackWindow(now, cfg, n, q)
	if m := a.sw.Load().Mode(); interval <= 0 || n < minSamples || m == admission.ModeOff || m == admission.ModeAdaptive {
		return
	}
	a.learner.Observe(thresholdac.Observation{
		Work:    float64(work) / float64(interval),
		SLAMet:  q <= time.Duration(a.rsla.Load()),
		Healthy: a.pool.Load().Healthy(),
		Limited: rejected > 0,
	})
}
