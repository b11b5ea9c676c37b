package adaptive

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sentry-proxy/sentry/admission"
)

// class is one class's token bucket and controller state.
type class struct {
	target float64 // ns

	// bucket is the hot path: tokens and the time they were last refilled.
	bucket struct {
		sync.Mutex
		tokens float64
		last   int64 // unix ns
	}
	rate atomic.Uint64 // float64 bits, requests per second
	// overTarget counts the admissions by the work-conserving rule (also
	// in admitted).
	overTarget atomic.Uint64

	// Guarded by Controller.mu.
	samples []float64 // ns, at most NReq
	// windowMark is len(samples) when the slow start's window began (a
	// step drops the ones before).
	windowMark int
	// recent: the class's completions in the slow start's window with a
	// response time (Observe and ObserveIdle), those over the slow
	// start's bound (1 + err_i)·target, and the sum of their times (ns):
	// the slow start's evidence (slowStart). The window begins anew at
	// the Tick that judges it (slowStartSamples of them).
	recent struct {
		n, over int
		sum     float64
		// at, and the class's refusals and the farm's admissions and
		// completions when the window began: the slow start's tests
		// that the class asks for more and the farm's queue is not
		// growing are measured over the window (beginWindow).
		at                 int64
		refused, adm, done uint64
		// admitted: the class's own admissions when the window began
		// (with a token and by the work-conserving rule): the base of
		// the slow start's step (slowStartStep).
		admitted uint64
	}
	ended    int     // admitted requests ended without a sample since the last run (Ended)
	lastRun  int64   // unix ns
	cur      float64 // smoothed percentile, ns; 0 before the first run
	err      float64
	hasCur   bool
	over     bool  // over target at its last run
	noRaise  int64 // unix ns when a more important class over target flagged it (0: never)
	lc       int   // runs over target with every less important class at RateMin
	runs     uint64
	lastSamp float64
	// admitted+rejected and admitted at the last run (the scaled rule's
	// offered and admission rates since that run).
	seenAt, admAt uint64
	// The farm's admissions and completions (every class) at the last run.
	farmAdmAt, farmDoneAt uint64
	// holdUntil: the scaled rule makes no further cut of this class before
	// it (unix ns): the requests admitted after a cut need about one
	// response time to complete and show its effect.
	holdUntil int64
	// drainUntil: no cut of the class itself before it either (unix ns):
	// one response time after the debt a drain or a cut put on its bucket
	// is paid (owe), at most staleRuns Timeouts away. A cut of it by a
	// more important class does not wait for it.
	drainUntil int64
	// allowed: the in-flight count the class's bucket debt was measured
	// against (owe), while debt is set: a debt is on record (forgive). A
	// separate flag, as allowed is 0 when the farm completed nothing since
	// the class's last run, and such a debt must be forgiven too.
	allowed float64
	debt    bool
	// completed: the class's completions (Observe and Ended); marks: its
	// count at the last limitMarks Ticks (the farm's marks, per class):
	// the backlog rules' longer completion window (doneOver).
	completed uint64
	marks     doneMarks
	// trial: the rate was raised while the farm was not queueing (the
	// slow start or an increase): the first Tick that finds it queueing
	// holds the rate to what the farm completes (capRate; doc.go, "Slow
	// start").
	trial bool

	admitted, rejected atomic.Uint64
}

// Controller is SEDA's adaptive overload controller for one app (Welsh &
// Culler §3.2–3.3): a token bucket per class whose rate follows the
// class's response-time percentile against its target. It implements
// admission.Admitter. See doc.go.
type Controller struct {
	cfg     Config
	classes []*class

	// mu serialises controller runs (Observe's run and Tick); it guards
	// every class's controller state and the scratch slice. Admit never
	// takes it. Lock order: mu, then one class's bucket lock.
	mu      sync.Mutex
	scratch []float64
	done    uint64 // completions observed, every class (guarded by mu)

	// flight is the farm's requests admitted and not completed, every
	// class: Admit adds one, Observe and Ended take one away; Inherit adds
	// those a replaced controller left in flight, and Seed and SetInFlight
	// restart it (they may make it negative for a while: completions of
	// requests admitted before). The backlog rules read it, and so does
	// Admit against limit.
	flight atomic.Int64
	// limit is the in-flight limit (Config.InFlightLimit, Little's law;
	// doc.go, "The in-flight limit"): Admit rejects while flight is at or
	// above it. 0: none. Tick sets it.
	limit atomic.Int64
	// marks: the completion count at the last limitMarks Ticks (guarded
	// by mu), the completion rate the limit is measured on.
	marks doneMarks
	// hungry: the most important class the limit refused since the last
	// Tick ([0]) and in the Tick period before ([1]); MaxClasses: none.
	hungry [2]atomic.Int32
	// queued: the farm was queueing at the last Tick (guarded by mu): an
	// increase at a run is held to what the farm completes while it
	// queues then or at the run (capped).
	queued bool
}

// doneMark is a completion count (the farm's or a class's) at a Tick.
type doneMark struct {
	at   int64 // unix ns; 0: none yet
	done uint64
}

// doneMarks is a ring of the last limitMarks marks; m[next] is the oldest.
type doneMarks struct {
	m    [limitMarks]doneMark
	next int
}

// push records m and returns the oldest mark it replaced.
func (r *doneMarks) push(m doneMark) doneMark {
	old := r.m[r.next]
	r.m[r.next] = m
	r.next = (r.next + 1) % limitMarks
	return old
}

// rateSince is the completion rate per second from the k-th mark, from
// the oldest (0) to the newest (limitMarks − 1), to now, when
// done completions have been counted: false when that mark is missing or
// less than limitWindowMin old.
func (r *doneMarks) rateSince(now int64, done uint64, k int) (float64, bool) {
	m := r.m[(r.next+k)%limitMarks]
	if m.at == 0 || now-m.at < int64(limitWindowMin) || done < m.done {
		return 0, false
	}
	return float64(done-m.done) / (float64(now-m.at) / 1e9), true
}

// reset makes every mark m: a measurement that starts now.
func (r *doneMarks) reset(m doneMark) {
	for i := range r.m {
		r.m[i] = m
	}
}

var _ admission.Admitter = (*Controller)(nil)

// New returns a controller with every class at InitialRate and a full
// bucket.
func New(cfg Config) (*Controller, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Controller{cfg: cfg, scratch: make([]float64, 0, cfg.NReq)}
	c.hungry[0].Store(MaxClasses)
	c.hungry[1].Store(MaxClasses)
	now := cfg.Now().UnixNano()
	targets := cfg.Targets
	if cfg.Shared {
		targets = []time.Duration{slices.Min(cfg.Targets)}
	}
	for _, t := range targets {
		cl := &class{target: float64(t), samples: make([]float64, 0, cfg.NReq), lastRun: now}
		cl.recent.at = now
		cl.rate.Store(math.Float64bits(cfg.InitialRate))
		cl.bucket.tokens = c.depth(cfg.InitialRate)
		cl.bucket.last = now
		c.classes = append(c.classes, cl)
	}
	return c, nil
}

// depth is the bucket's capacity at rate: Burst seconds of tokens, at
// least one.
func (c *Controller) depth(rate float64) float64 {
	return max(1, rate*c.cfg.Burst.Seconds())
}

func (c *Controller) class(i int) *class { return c.classes[c.at(i)] }

// at maps class i to its controller: 0 for every class when Shared; the
// least important for an i out of range.
func (c *Controller) at(i int) int {
	if c.cfg.Shared {
		return 0
	}
	if i < 0 || i >= len(c.classes) {
		return len(c.classes) - 1
	}
	return i
}

// Admit takes a token from the request's class bucket, or rejects with
// RejectAdaptive and a Retry-After of the time until the next token, at
// most Timeout (rounded up to whole seconds, at least 1 s). One short lock per request;
// no allocation.
func (c *Controller) Admit(r *admission.Request) admission.Decision {
	cl := c.class(r.Class)
	if r.Share == admission.SpareOnly {
		// Fair share (docs/algorithms.md §12): a client over its share without a turn
		// gets only what harms nobody; no token is taken.
		if c.idle() {
			c.flight.Add(1)
			cl.admitted.Add(1)
			return admission.Decision{Verdict: admission.Admit}
		}
		return admission.Decision{Verdict: admission.RejectOverShare, RetryAfter: time.Second}
	}
	// held is the rate a request over its share leaves tokens for: the
	// within-share rate, and for the marginal one the turns' too; within
	// is the share of the in-flight limit held (the within-share rate's).
	var held, within float64
	if r.Share != admission.WithinShare && c.cfg.ShareRates != nil {
		w, t := c.cfg.ShareRates(r.Class)
		if w > 0 && !math.IsInf(w, 0) {
			within = w
		}
		held = within
		if r.Share == admission.Marginal && t > 0 && !math.IsInf(t, 0) {
			held += marginalHold * t
		}
	}
	now := c.cfg.Now().UnixNano()
	lim := c.limit.Load()
	if lim > 0 && c.overLimit(c.at(r.Class), lim) {
		// The in-flight limit (doc.go): the farm holds what it finishes
		// within a share of the target; no token is taken.
		if c.idle() {
			return c.admitOver(cl)
		}
		cl.rejected.Add(1)
		return admission.Decision{Verdict: admission.RejectAdaptive, RetryAfter: time.Second}
	}
	rate := math.Float64frombits(cl.rate.Load())
	hold := within / rate // the share of the in-flight limit held
	if r.Share == admission.Marginal {
		hold = 1 - (1-min(hold, 1))*(1-marginalHold) // and a cushion for the turns
	}
	if hold > 0 && lim > 0 && c.overShareLimit(c.at(r.Class), lim, hold) {
		if c.idle() {
			return c.admitOver(cl)
		}
		return admission.Decision{Verdict: admission.RejectOverShare, RetryAfter: time.Second}
	}
	need := 1 + held*c.cfg.Burst.Seconds()
	b := &cl.bucket
	b.Lock()
	if dt := now - b.last; dt > 0 {
		b.tokens = min(c.depth(rate), b.tokens+rate*float64(dt)/1e9)
		b.last = now
	}
	if b.tokens >= need {
		b.tokens--
		b.Unlock()
		c.flight.Add(1)
		cl.admitted.Add(1)
		return admission.Decision{Verdict: admission.Admit}
	}
	inShare := b.tokens >= 1         // a within-share request would have had its token
	wait := (need - b.tokens) / rate // seconds until a token
	b.Unlock()
	if c.idle() {
		return c.admitOver(cl)
	}
	if inShare {
		return admission.Decision{Verdict: admission.RejectOverShare, RetryAfter: c.retryAfter(wait)}
	}
	cl.rejected.Add(1)
	return admission.Decision{Verdict: admission.RejectAdaptive, RetryAfter: c.retryAfter(wait)}
}

// marginalHold is the share of the turns' rate whose tokens a marginal
// request leaves in the bucket, and the share of what is left of the
// in-flight limit it leaves (docs/algorithms.md §12): a cushion for the
// turns' bursts, as batch mode holds its reserve floor's share of the
// room for them; the whole rate would leave the bucket's last tokens,
// the marginal tier's, to overflow.
const marginalHold = 0.25

// overShareLimit is the in-flight limit for a request of the over-share
// tier of class i (docs/algorithms.md §12): the share held of the class's
// rate (the within-share rate over the class's token rate, at most 1) is
// held of the limit too. It marks nothing hungry: the class itself is
// not refused.
func (c *Controller) overShareLimit(i int, lim int64, held float64) bool {
	if !(held > 0) {
		return false
	}
	f, n, ii := c.inFlight(), int64(len(c.classes)), int64(i)
	free := 1 - min(held, 1)
	return float64(f*n) >= free*float64(lim*(2*n-1-ii))
}

// idle tells whether a request refused by its token or the in-flight
// limit harms nobody if admitted (doc.go, "Work conservation"):
// Config.Idle, else nothing admitted is in flight.
func (c *Controller) idle() bool {
	switch {
	case c.cfg.NoIdle:
		return false
	case c.cfg.Idle != nil:
		return c.cfg.Idle()
	}
	return c.inFlight() <= 0
}

// admitOver admits a request by the work-conserving rule: no token is
// taken (the bucket keeps its debt), it counts as admitted and in flight,
// and its completion should come as Ended (no sample).
func (c *Controller) admitOver(cl *class) admission.Decision {
	c.flight.Add(1)
	cl.admitted.Add(1)
	cl.overTarget.Add(1)
	return admission.Decision{Verdict: admission.Admit, OverTarget: true}
}

func (c *Controller) retryAfter(secs float64) time.Duration {
	// Decision: at most the controller's timeout. The rate may change at
	// the class's next run, which comes within Timeout; a client told to
	// stay away for the whole time to the next token at a low rate (20 s
	// at 0.05/s) does not come back when the rate rises, so the offered
	// load collapses and the controller sees no samples to raise it on.
	secs = min(secs, c.cfg.Timeout.Seconds())
	if !(secs > 1) {
		return time.Second
	}
	return time.Duration(math.Ceil(secs)) * time.Second
}

// Observe records the response time of a completed request of class (from
// its arrival at sentry: time spent waiting in sentry counts). After NReq
// samples the class's controller runs.
func (c *Controller) Observe(class int, rt time.Duration) {
	idx := c.at(class)
	now := c.cfg.Now().UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.classes[idx]
	c.done++
	cl.completed++
	c.flight.Add(-1)
	cl.samples = append(cl.samples, float64(max(rt, 0)))
	c.observeRecent(cl, float64(max(rt, 0)))
	if len(cl.samples) >= c.cfg.NReq {
		c.run(idx, now, 0)
	}
}

// Ended records that an admitted request of class ended without a
// response time a client saw: selective early termination cut it before
// its response head (package sert). It counts as a completion -- its
// slot is free again, so the farm's queue test and the class's completion
// rate (the scaled rule's cuts and hold) see it -- but adds no sample to
// the percentile: the cut is a loss the termination controller accounts
// for, and the time it ran shows in the percentile of the requests that
// waited behind it. Counting it as a sample at its cut time (at least the
// termination threshold) made the controller cut every request's rate
// for the heavy share it cannot change (doc.go, "Terminated requests").
func (c *Controller) Ended(class int) {
	idx := c.at(class)
	c.mu.Lock()
	c.done++
	c.flight.Add(-1)
	c.classes[idx].ended++
	c.classes[idx].completed++
	c.mu.Unlock()
}

// ObserveIdle records the completion of a request of class that the
// work-conserving rule admitted (Decision.OverTarget: it met a farm with
// an idle backend), with its response time rt. Like Ended, it is a
// completion without a sample of the percentile -- such a request met no
// queue, so its time says nothing of what the rate does to the farm's --
// but its time is evidence for the slow start that the farm is fast now
// (doc.go, "Slow start"): when the rate was cut low, such requests are
// most of what completes.
func (c *Controller) ObserveIdle(class int, rt time.Duration) {
	idx := c.at(class)
	c.mu.Lock()
	cl := c.classes[idx]
	c.done++
	c.flight.Add(-1)
	cl.ended++
	cl.completed++
	c.observeRecent(cl, float64(max(rt, 0)))
	c.mu.Unlock()
}

// Tick runs the controller of every class that has at least one sample
// and has not run for Timeout. The owner calls it periodically (Run does,
// every Timeout/4); tests call it on a manual clock.
func (c *Controller) Tick(now time.Time) {
	ns := now.UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLimit(ns)
	c.forgive()
	queueing, capacity := c.queueing(), c.farmCapacity(ns)
	c.queued = queueing
	for i, cl := range c.classes {
		if c.slowStartStep(i, ns, queueing, capacity) {
			continue
		}
		if queueing && cl.trial {
			c.capRate(cl, capacity)
			cl.trial = false
		}
		if ns-cl.lastRun < int64(c.cfg.Timeout) {
			continue
		}
		if len(cl.samples) > 0 {
			c.run(i, ns, 0)
		} else if b := c.borrow(i, ns); b > 0 {
			c.run(i, ns, b)
		}
	}
	// After the runs: a run at this Tick measures over the four Ticks
	// before it (doneOver), and the slow start judges the completions
	// after it once it has enough of them: its window begins anew when
	// it was judged, and a class with fewer keeps counting (a class at
	// 30 requests a second takes about three Ticks).
	for _, cl := range c.classes {
		cl.marks.push(doneMark{at: ns, done: cl.completed})
		if cl.recent.n >= slowStartSamples(c.cfg.Percentile) {
			c.beginWindow(cl, ns)
		}
	}
}

// borrow is the scaled rule's sample for a starved class i (doc.go, "The
// scaled rule"): a class with no completion since its last run, Timeout
// or more ago, that rejected requests meanwhile, takes the last sample of
// the nearest more important class that ran within Timeout (they share
// the farm). 0: none (the paper's rule, the most important class, a
// class that rejected nothing, or no such sample).
func (c *Controller) borrow(i int, now int64) float64 {
	cl := c.classes[i]
	if !c.cfg.Scaled || i == 0 {
		return 0
	}
	adm := cl.admitted.Load()
	if adm+cl.rejected.Load()-cl.seenAt <= adm-cl.admAt { // rejected none since
		return 0
	}
	for j := i - 1; j >= 0; j-- {
		if hi := c.classes[j]; hi.runs > 0 && now-hi.lastRun <= int64(c.cfg.Timeout) {
			return hi.lastSamp
		}
	}
	return 0
}

// staleRuns is how many timeouts without a run make a class's smoothed
// percentile stale (see run).
const staleRuns = 5

// run is one controller iteration for class i (§3.2, with §3.3's rules),
// on its samples, or on borrowed when it has none (Tick, the scaled
// rule). Called with c.mu held.
func (c *Controller) run(i int, now int64, borrowed float64) {
	cfg := &c.cfg
	cl := c.classes[i]
	// Decision (beyond the paper): a class whose previous run is more than
	// staleRuns timeouts old was starved (a rate near the minimum admits a
	// request every few seconds); its cur describes an overload long gone,
	// so this run restarts the average from samp, as the first run does.
	stale := now-cl.lastRun > staleRuns*int64(cfg.Timeout)
	// samp: the Percentile-th of the samples, by sorting (the paper takes
	// the (0.9·nreq)-th).
	s := append(c.scratch[:0], cl.samples...)
	if len(s) == 0 {
		s = append(s, borrowed) // Tick's borrowed sample (scaled rule)
	}
	slices.Sort(s)
	samp := c.percentile(s)
	c.scratch = s[:0]
	offered, _, done := c.measured(cl, now)
	// capDone: the class's completion rate the backlog rules hold and cut
	// it to (doneOver).
	capDone := c.doneOver(cl, now, done)
	cl.mark()
	farmAdm := c.farmAdmitted()
	// The farm's queue grows when, since this class's last run, every
	// class together admitted more than QueueGrowth times what completed.
	farmIn, farmOut := float64(farmAdm-cl.farmAdmAt), float64(c.done-cl.farmDoneAt)
	growing := farmIn > QueueGrowth*farmOut
	// farmDone: what the farm (every class) completed per second since
	// this class's last run; the backlog is measured against it.
	farmDone := 0.0
	if secs := float64(now-cl.lastRun) / 1e9; secs > 0 {
		farmDone = farmOut / secs
	}
	cl.farmAdmAt, cl.farmDoneAt = farmAdm, c.done
	elapsed := float64(now-cl.lastRun) / float64(cfg.Timeout)
	cl.lastRun = now
	cl.runs++
	cl.samples, cl.windowMark = cl.samples[:0], 0
	cl.ended = 0
	cl.lastSamp = samp
	if cl.hasCur && !stale {
		cl.cur = cfg.Alpha*cl.cur + (1-cfg.Alpha)*samp
	} else {
		cl.cur, cl.hasCur = samp, true
	}
	cl.err = (cl.cur - cl.target) / cl.target
	// §3.3: no increase while a more important class is over target (its
	// last run was), nor at the first run after one flagged this class.
	// Decision: a flag older than Timeout has expired -- the "next run" it
	// meant has passed, and a class starved near RateMin may not run
	// again for many seconds.
	noRaise := cl.noRaise != 0 && now-cl.noRaise <= int64(cfg.Timeout)
	cl.noRaise = 0
	for _, hi := range c.classes[:i] {
		noRaise = noRaise || hi.over
	}
	rate := math.Float64frombits(cl.rate.Load())
	ceil := max(cfg.RateMin, Headroom*offered+HeadroomMin)
	if cfg.Scaled && rate > ceil {
		// The scaled rule's ceiling holds at every run (a fresh
		// controller's RateMax comes down at its first run).
		c.setRate(cl, ceil, false)
		rate = ceil
	}
	// sErr is the last sample's own error. Decision (scaled rule): the
	// class counts as over target only when the sample is over too; the
	// smoothed percentile lags a drained queue by several runs (from 4×
	// the target, α = 0.7 takes eight), and each of those runs cut a
	// rate that was already right (doc.go, "The scaled rule").
	sErr := (samp - cl.target) / cl.target
	switch {
	case cl.err > cfg.ErrD && (!cfg.Scaled || sErr > cfg.ErrD):
		cl.over = true
		// §3.3: cut the less important classes first; only when they are
		// all at the minimum for LCThresh runs is this class itself cut.
		// Decision (see doc.go): by default one class per run, the least
		// important still above the minimum, so that a class is cut only
		// once every class below it is at the minimum; CutAllLower is the
		// paper's rule, every less important class at once.
		lower := c.classes[i+1:]
		cut := false
		for j := len(lower) - 1; j >= 0; j-- {
			lo := lower[j]
			lo.noRaise = now
			if cut && !cfg.CutAllLower {
				continue
			}
			if lr := math.Float64frombits(lo.rate.Load()); lr > cfg.RateMin {
				if cfg.Scaled {
					// The scaled rule: by adj_lo from what the class
					// completes, at most once per its response time or
					// Timeout: doc.go, "The scaled rule".
					if now >= lo.holdUntil {
						_, _, loDone := c.measured(lo, now)
						c.setRate(lo, min(lr, max(loDone, cfg.RateMin))/cfg.AdjLo, true)
						lo.holdUntil = now + min(int64(lo.lastSamp), int64(cfg.Timeout))
					}
				} else {
					c.setRate(lo, lr/cfg.AdjLo, true)
				}
				cut = true
			}
		}
		if !cut {
			cl.lc++
		}
		if len(lower) == 0 || cl.lc > cfg.LCThresh {
			switch {
			case !cfg.Scaled:
				c.setRate(cl, rate/cfg.AdjD, true)
			case now >= cl.holdUntil && now >= cl.drainUntil:
				// From what it completes while the farm holds a backlog
				// (its completions are then the farm's capacity), and
				// the backlog owed; otherwise from the rate, as the
				// paper cuts: a class its bucket limits completes what
				// it admits, and cutting from that ratchets the rate
				// down with every noisy second.
				// The hold lasts one response time (and, after a debt,
				// drainUntil: the requests admitted after the cut show
				// it only once the debt is paid).
				hold := samp
				if bl := c.backlog(farmDone, cl.target); bl > 0 {
					r := min(rate, max(capDone, cfg.RateMin)) / cfg.AdjD
					c.setRate(cl, r, true)
					cl.drainUntil = now + int64(samp) + int64(c.owe(cl, bl, c.allowed(farmDone, cl.target), r))
				} else {
					c.setRate(cl, rate/cfg.AdjD, true)
				}
				cl.holdUntil = now + int64(hold)
			}
			cl.lc = 0
		}
	case cl.err <= cfg.ErrI: // decision: the boundary raises (see doc.go)
		cl.over = false
		cl.lc = 0
		x := -(cl.err - cfg.CI)
		switch {
		case cfg.Scaled && (sErr > cfg.ErrI || farmIn > Surge*farmOut) && c.lowerAtMin(i) && c.drain(cl, now, rate, capDone, farmDone, samp):
			// The percentile is low, but the farm already holds a
			// backlog the samples will show only a response time later
			// (a step in the load): held and drained as between the
			// thresholds.
		case noRaise:
		case !cfg.Scaled:
			c.setRate(cl, rate+cfg.AdjI*x, false)
		default:
			// The paper's increase plus one proportional to the rate and
			// to the room left under the raise threshold, per Timeout of
			// time (not per run), and only while the last sample, not
			// only its average, is under the threshold; never above what
			// the class offers with headroom, and a rate above that
			// ceiling comes down to it (doc.go, "The scaled rule").
			y := min(cfg.ErrI-cl.err, cfg.ErrI-sErr) / (1 + cfg.ErrI)
			inc := cfg.AdjI * x
			if y > 0 && !growing {
				inc += ScaledGain * y * rate * min(elapsed, 1)
			}
			c.setRate(cl, c.capped(now, rate, min(rate+inc, ceil)), false)
		}
	default:
		cl.over = false
		cl.lc = 0
		// The scaled rule (doc.go): between the thresholds the rate is
		// held, but never above what the class completes, since admitting
		// more than the farm finishes only grows its queue until the
		// percentile catches up; while the farm's queue grows, the class
		// gives up the whole excess at once. As with a cut (§3.3), a class
		// is held so only once every less important class is at the
		// minimum: the queue is theirs to give up first. (A class run on
		// a borrowed sample completed nothing: it stays at the minimum.)
		if !cfg.Scaled {
			break
		}
		switch {
		case c.lowerAtMin(i) && c.drain(cl, now, rate, capDone, farmDone, samp):
			// The farm holds more than it finishes within half the
			// target: held to what it completes (the farm's capacity
			// while it has a backlog), and the backlog owed, so it
			// drains at once and admissions resume at that rate.
			// Decision: this replaced giving up the farm's whole excess
			// of admissions over completions as a rate, which took a
			// class fed 4× the farm's rate to RateMin (where it admits
			// too few requests to measure its way back), and holding
			// to the completions whatever the backlog, which ratcheted
			// the rate down with Poisson noise (issue 13's capacity
			// shift: 55/s to 5/s in 20 s).
		case !noRaise:
			// The band increase (doc.go, "The scaled rule"): while the
			// farm holds no backlog, the rate creeps up by
			// BandGain·y·rate per Timeout, y the room the last sample
			// leaves under the target, (err_d − sErr)/(err_d − err_i)
			// (the sample's, not the smoothed error's: that one lags a
			// drained queue by several runs, and the backlog test is
			// the brake). Without it a farm
			// whose service time alone puts the percentile above
			// err_i (3× slower: p95 of the service 0.72× the target)
			// could never be raised back to its capacity after a cut.
			if y := (cfg.ErrD - sErr) / (cfg.ErrD - cfg.ErrI); y > 0 && done > 0 {
				c.setRate(cl, c.capped(now, rate, min(rate+BandGain*y*rate*min(elapsed, 1), max(ceil, rate))), false)
			}
		}
	}
}

// capRate holds class cl's rate, at a Tick that finds the farm
// queueing, to no more than what the farm completes per second (every
// class; farmCapacity), RateMin at least (doc.go, "Slow start"): a full
// farm completes its capacity, and a rate above it only fills the queue
// up to the in-flight limit. The bucket keeps its tokens (at most its
// new depth): this is a ceiling, not a cut. TCP's ssthresh is the same
// idea: the window at the first loss. Called with c.mu held.
func (c *Controller) capRate(cl *class, capacity float64) {
	if capacity <= 0 {
		return
	}
	if rate := math.Float64frombits(cl.rate.Load()); rate > max(capacity, c.cfg.RateMin) {
		c.setRate(cl, capacity, false)
	}
}

// queueing tells whether the farm's backends are queueing now
// (Config.Queueing; false without it). Called with c.mu held.
func (c *Controller) queueing() bool {
	q := c.cfg.Queueing
	return q != nil && q()
}

// farmCapacity is what the farm completes per second, every class: the
// cap of a rate while it queues (capRate, capped, the slow start's step).
// It is the larger of its completion rates since the two oldest of the
// last limitMarks marks (capacityMarks; with Run's Ticks every Timeout/4,
// ¾ and ½ of a Timeout back), 0 when there is none. Decision: the
// larger, as doneOver takes it: a queueing farm completes no more than
// its capacity, so each window's rate is a lower bound on it, and the
// shorter window holds less of the time before the farm filled; but not
// the last Tick's alone: on a farm with a heavy tail (0.5% of 500 ms
// requests), a quarter of a second without a slow request reads 1.5×
// the capacity, and a rate held to the largest of the four windows sat
// at 2,000–3,000/s on a farm of 1,605 (control's
// TestSizeShiftEndPerSecond). Called with c.mu held.
func (c *Controller) farmCapacity(now int64) float64 {
	best := 0.0
	for k := range capacityMarks {
		if x, ok := c.marks.rateSince(now, c.done, k); ok {
			best = max(best, x)
		}
	}
	return best
}

// capped is rate raised to up by an increase at a run, held, while the
// farm queues now or did at the last Tick, to no more than what it
// completes (farmCapacity), unless rate is already above that (an
// increase never cuts). Called with c.mu held.
func (c *Controller) capped(now int64, rate, up float64) float64 {
	if up <= rate {
		return up
	}
	if !c.queued && !c.queueing() {
		return up
	}
	if x := c.farmCapacity(now); x > 0 {
		return min(up, max(rate, x))
	}
	return up
}

// slowStartStep is the slow start at a Tick for class i (doc.go, "Slow
// start"): when it applies (slowStart), the class's rate rises to ×g what
// it was admitted at over the window (or its rate, if higher), at most to
// its ceiling, and, when the farm is queueing, to capacity (what it
// completes; the rate stays if already above): a step taken while the
// farm is not queueing is a trial, which the first Tick that finds it
// queueing holds to what the farm completes. Its smoothed percentile
// restarts at no more than the raise threshold, the samples that predate
// the window it judged are dropped (after an overload, those of the
// requests in flight when it ended), and a new window begins. The class's run marks stay: its next
// run measures since its last. It reports whether it stepped. Called
// with c.mu held.
func (c *Controller) slowStartStep(i int, now int64, queueing bool, capacity float64) bool {
	g := c.slowStart(i, now)
	if g <= 0 {
		return false
	}
	cfg := &c.cfg
	cl := c.classes[i]
	offered, _, _ := c.measured(cl, now)
	rate := math.Float64frombits(cl.rate.Load())
	ceil := max(cfg.RateMin, Headroom*offered+HeadroomMin, rate)
	// The step multiplies what the class was admitted at over the window
	// -- its tokens' and the work-conserving rule's admissions: the rate
	// the farm's in-flight count was measured at -- or its rate if higher.
	// With a rate cut low the work-conserving rule admits most of what
	// gets through, and the rate alone would take a step for each factor
	// of ten.
	base := rate
	if secs := float64(now-cl.recent.at) / 1e9; secs > 0 {
		base = max(base, float64(cl.admitted.Load()-cl.recent.admitted)/secs)
	}
	up := min(base*g, ceil)
	switch {
	case !queueing:
		cl.trial = true
	case capacity > 0:
		up = min(up, max(rate, capacity))
	}
	c.setRate(cl, up, false)
	bound := (1 + cfg.ErrI) * cl.target
	if !cl.hasCur || cl.cur > bound {
		cl.cur, cl.hasCur = bound, true
	}
	cl.err = (cl.cur - cl.target) / cl.target
	cl.samples = append(cl.samples[:0], cl.samples[min(cl.windowMark, len(cl.samples)):]...)
	c.beginWindow(cl, now)
	return true
}

// slowStart is the slow start's step for class i at a Tick at now
// (doc.go, "Slow start"): the factor by which its rate may rise, or 0
// when the rule does not apply. It applies under the scaled rule with the
// in-flight limit in force, when
//
//   - the class completed at least slowStartSamples requests in the
//     window (since the Tick that last judged one), with a token or by
//     the work-conserving rule, and their p-th percentile is at most
//     (1 + err_i)·target: far under it;
//   - the class was refused something in the window (its bucket or the
//     limit turned a request away, or the work-conserving rule admitted
//     one over its rate): it asks for more than its rate;
//   - no more important class is over its target (§3.3);
//   - the farm's queue is not growing: in the window every class
//     together admitted at most QueueGrowth times what completed;
//   - the in-flight limit is more than SlowStartRoom times the farm's
//     in-flight count: the larger of the count now and, by Little's law,
//     its completion rate (over the window, or the last Tick if higher)
//     times the mean time of the window's completions (at least one
//     request).
//
// The step is that ratio, limit/in flight: the rise the in-flight limit
// would let through at the measured response times. Decision: the tests
// over the window, not since the class's last run: a class runs every
// NReq completions, every 60 ms at 1,600/s, and over so short a span a
// dozen admissions against nine completions read as a growing queue, or
// no refusal at all, and held a step back for most of a second after a
// size shift's end. Called with c.mu held.
func (c *Controller) slowStart(i int, now int64) float64 {
	cfg := &c.cfg
	cl := c.classes[i]
	lim := c.limit.Load()
	r := cl.recent
	secs := float64(now-r.at) / 1e9
	if !cfg.Scaled || lim <= 0 || secs <= 0 || r.n < slowStartSamples(cfg.Percentile) || c.raiseBlocked(i, now) {
		return 0
	}
	// The p-th percentile by rank (as a run takes it) is at most the
	// bound when at least ⌈p/100·n⌉ of the n times are.
	if r.n-r.over < int(math.Ceil(cfg.Percentile/100*float64(r.n))) {
		return 0
	}
	if cl.rejected.Load()+cl.overTarget.Load() == r.refused {
		return 0 // refused nothing in the window
	}
	in, out := float64(c.farmAdmitted()-r.adm), float64(c.done-r.done)
	if in > QueueGrowth*out {
		return 0
	}
	// X: the farm's completion rate over the window, or over the last
	// Tick when higher (a window carried over several Ticks of a rising
	// load reads its start's lower rate).
	x := out / secs
	if last, ok := c.marks.rateSince(now, c.done, limitMarks-2); ok {
		x = max(x, last)
	}
	g := float64(lim) / max(1, x*r.sum/float64(r.n)/1e9, float64(c.inFlight()))
	if g <= SlowStartRoom {
		return 0
	}
	return g
}

// raiseBlocked tells whether §3.3 forbids class i an increase at now: a
// more important class is over its target, or flagged i within Timeout.
// Called with c.mu held.
func (c *Controller) raiseBlocked(i int, now int64) bool {
	cl := c.classes[i]
	if cl.noRaise != 0 && now-cl.noRaise <= int64(c.cfg.Timeout) {
		return true
	}
	for _, hi := range c.classes[:i] {
		if hi.over {
			return true
		}
	}
	return false
}

// slowStartSamples is the fewest completions the slow start judges for
// the percentile p: 1/(1 − p/100) (20 at the 95th), the fewest whose p-th
// percentile is not their largest, so that one straggler does not stand
// for it.
func slowStartSamples(p float64) int {
	return int(math.Ceil(1/(1-p/100) - 1e-9))
}

// beginWindow begins class cl's slow start window at now: no completion
// counted yet, the samples waiting for its run from before it marked, and
// the counts its tests measure from. Called with c.mu held.
func (c *Controller) beginWindow(cl *class, now int64) {
	cl.windowMark = len(cl.samples)
	cl.recent.n, cl.recent.over, cl.recent.sum = 0, 0, 0
	cl.recent.at = now
	cl.recent.refused = cl.rejected.Load() + cl.overTarget.Load()
	cl.recent.adm, cl.recent.done = c.farmAdmitted(), c.done
	cl.recent.admitted = cl.admitted.Load()
}

// observeRecent counts a completion of class cl with the response time
// rt (ns) for the slow start. Called with c.mu held.
func (c *Controller) observeRecent(cl *class, rt float64) {
	cl.recent.n++
	cl.recent.sum += rt
	if rt > (1+c.cfg.ErrI)*cl.target {
		cl.recent.over++
	}
}

// percentile is the Percentile-th of the sorted samples s (not empty),
// by rank (the paper takes the (0.9·nreq)-th).
func (c *Controller) percentile(s []float64) float64 {
	k := int(math.Ceil(c.cfg.Percentile/100*float64(len(s)))) - 1
	return s[max(0, min(k, len(s)-1))]
}

// farmAdmitted is every class's admissions so far.
func (c *Controller) farmAdmitted() uint64 {
	var n uint64
	for _, x := range c.classes {
		n += x.admitted.Load()
	}
	return n
}

// mark records the class's counts at a run (or a Seed): what its offered,
// admission and refusal rates since then are measured from.
func (cl *class) mark() {
	cl.admAt = cl.admitted.Load()
	cl.seenAt = cl.admAt + cl.rejected.Load()
}

// backlog is how many requests the farm holds beyond what it finishes
// within BacklogShare (half) of the target at its completion rate done
// (per second, every class): the requests admitted and not completed
// (every class; Observe and Ended complete them) less
// done·target·BacklogShare, by Little's law the in-flight count of a mean
// response time of half the target. 0 when there is no excess.
// Called with c.mu held.
func (c *Controller) backlog(done, target float64) float64 {
	return max(0, c.outstanding()-c.allowed(done, target))
}

// outstanding is the farm's requests admitted and not completed, every
// class, those inherited included (may be negative: completions of
// requests another mode admitted). Called with c.mu held.
func (c *Controller) outstanding() float64 {
	return float64(c.inFlight())
}

// Inherit takes over the requests from, the controller this one replaces
// (a rebuild on reload, control), admitted and has not completed: their
// completions are observed here, and without them in its count the farm's
// backlog would read that many requests short for this controller's
// whole life (the backlog rule blinded). With the in-flight limit, c
// keeps from's limit until it has measured its own (a second of Ticks),
// rather than none. Call it before c is shared.
func (c *Controller) Inherit(from *Controller) {
	if from == nil || from == c {
		return
	}
	c.flight.Add(max(from.flight.Load(), 0))
	if c.cfg.InFlightLimit {
		c.limit.Store(from.limit.Load())
	}
}

// allowed is the in-flight count a farm completing done per second may
// hold for a class of target (ns): done·target·BacklogShare.
func (c *Controller) allowed(done, target float64) float64 {
	return done * target * BacklogShare / 1e9
}

// drain is the scaled rule's backlog hold for class cl at rate, which
// completed done per second since its last run (the farm farmDone): when
// the farm holds a
// backlog (backlog > 0), the class is held to what it completes -- the
// farm's capacity while it has a backlog -- owes the backlog (owe), and is
// not cut again until one response time (samp) after the debt is paid.
// It reports whether there was one. Called with c.mu held.
func (c *Controller) drain(cl *class, now int64, rate, done, farmDone, samp float64) bool {
	bl := c.backlog(farmDone, cl.target)
	if bl <= 0 {
		return false
	}
	if done < rate {
		rate = max(done, c.cfg.RateMin)
		c.setRate(cl, rate, false)
	}
	// No cut of the class until the requests admitted after the debt
	// is paid can show in the percentile.
	cl.drainUntil = max(cl.drainUntil, now+int64(samp)+int64(c.owe(cl, bl, c.allowed(farmDone, cl.target), rate)))
	return true
}

// owe puts class cl's bucket in debt by the backlog bl (the scaled
// rule's drain, doc.go): it admits nothing until the farm has finished
// the backlog its admissions built, at the new rate, and then admits at
// that rate: a cut drains the queue without leaving the rate below the
// farm's completion rate. allowed is the in-flight count the backlog was
// measured against (outstanding − allowed = bl): Tick forgives what of
// the debt the farm has finished sooner (forgive). It returns how long
// the debt takes at rate, at most staleRuns Timeouts. Called with c.mu
// held.
func (c *Controller) owe(cl *class, bl, allowed, rate float64) time.Duration {
	if bl <= 0 {
		return 0
	}
	cl.allowed, cl.debt = allowed, true
	cl.bucket.Lock()
	cl.bucket.tokens = min(cl.bucket.tokens, -bl) // the backlog now, not added to a debt not yet paid
	cl.bucket.Unlock()
	// In float64: bl/rate overflows a Duration for a rate near zero
	// (rate_min has no lower bound but 0), and the conversion of an
	// out-of-range float is not the limit (amd64 gives math.MinInt64).
	limit := staleRuns * c.cfg.Timeout
	if d := bl / rate * 1e9; d < float64(limit) { // false for NaN
		return time.Duration(d)
	}
	return limit
}

// forgive keeps every class's debt no larger than the farm's backlog now
// (the requests admitted and not completed, less what was allowed when
// the debt was set), and clears the record once a debt is paid.
//
// Decision: nothing else re-examines a debt while it is paid (the class
// admits nothing, so it has no samples to run on), and the backlog may
// vanish sooner than the rate pays it: on sert-shift.yaml termination cut
// the farm's whole queue of 1,770 within two seconds, and the debt of
// that backlog at the cut rate kept the class at zero for 18 s.
// Called with c.mu held.
func (c *Controller) forgive() {
	out := c.outstanding()
	for _, cl := range c.classes {
		if !cl.debt {
			continue
		}
		bl := max(0, out-cl.allowed)
		cl.bucket.Lock()
		switch {
		case cl.bucket.tokens >= 0:
			cl.allowed, cl.debt = 0, false
		case bl == 0:
			cl.bucket.tokens = 0
		case -cl.bucket.tokens > bl:
			cl.bucket.tokens = -bl
		}
		cl.bucket.Unlock()
	}
}

// overLimit tells whether the in-flight limit lim refuses a request of
// class i of L (doc.go, "The in-flight limit"): the farm holds
// lim·(1 + (L − 1 − i)/L) requests or more (the least important class
// lim, each more important one a further lim/L: room kept for it that a
// less important class cannot take); or a more important class was
// refused so within the last two Ticks and the farm holds (L − i)/L of
// lim or more, so that the slots the farm frees go to the more important
// classes first. A refusal at its own limit marks class i refused
// (hungry).
func (c *Controller) overLimit(i int, lim int64) bool {
	f, n, ii := c.inFlight(), int64(len(c.classes)), int64(i)
	if f*n >= lim*(2*n-1-ii) {
		for h := c.hungry[0].Load(); int(h) > i && !c.hungry[0].CompareAndSwap(h, int32(i)); h = c.hungry[0].Load() {
		}
		return true
	}
	if h := min(c.hungry[0].Load(), c.hungry[1].Load()); int(h) < i {
		return f*n >= lim*(n-ii)
	}
	return false
}

// limitMarks is how many Ticks back the in-flight limit's completion rate
// is measured: Run ticks every Timeout/4, so about one Timeout.
// limitWindowMin is the shortest time it is measured over (after
// SetInFlight restarts it): the limit in force stays until then.
// capacityMarks: farmCapacity measures from the oldest capacityMarks of
// those marks.
const (
	capacityMarks  = 2
	limitMarks     = 4
	limitWindowMin = 100 * time.Millisecond
)

// setLimit sets the in-flight limit at a Tick (Config.InFlightLimit;
// doc.go, "The in-flight limit"): InFlightShare × the farm's completion
// rate over the last limitMarks Ticks × the smallest target, at least
// InFlightMin; none (0) before limitMarks Ticks or without the rule;
// unchanged while the marks span less than limitWindowMin.
// Called with c.mu held.
func (c *Controller) setLimit(now int64) {
	c.hungry[1].Store(c.hungry[0].Swap(MaxClasses))
	old := c.marks.push(doneMark{at: now, done: c.done})
	if !c.cfg.InFlightLimit || old.at == 0 || now-old.at < int64(limitWindowMin) {
		return
	}
	x := float64(c.done-old.done) / (float64(now-old.at) / 1e9) // per second
	lim := InFlightShare(c.cfg.Percentile) * x * c.minTarget() / 1e9
	c.limit.Store(max(InFlightMin, int64(math.Ceil(lim))))
}

// SetInFlight sets the farm's count of requests admitted and not
// completed to n: the owner's count at a hand-over (auto's fall-back),
// after Seed, of the requests another mode admitted whose completions it
// then reports with Ended. Without them the backlog and the in-flight
// limit would read the farm short by them until they completed.
//
// done is the farm's completion rate per second the owner measured
// before (NaN or ≤ 0: unknown). With the in-flight limit, the limit is
// set from it at once and its measurement restarts now: this
// controller saw none of the other mode's completions, and its last
// second of them (none) would hold the limit at InFlightMin until a
// second of them had come.
func (c *Controller) SetInFlight(n int64, done float64) {
	c.flight.Store(max(n, 0))
	if !c.cfg.InFlightLimit {
		return
	}
	now := c.cfg.Now().UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.marks.reset(doneMark{at: now, done: c.done})
	if done > 0 { // false for NaN
		c.limit.Store(max(InFlightMin, int64(math.Ceil(InFlightShare(c.cfg.Percentile)*done*c.minTarget()/1e9))))
	}
}

// minTarget is the smallest class target, ns. Called with c.mu held.
func (c *Controller) minTarget() float64 {
	target := c.classes[0].target
	for _, cl := range c.classes[1:] {
		target = min(target, cl.target)
	}
	return target
}

// Limit returns the in-flight limit in force (0: none) and the farm's
// count of requests admitted and not completed.
func (c *Controller) Limit() (limit, inFlight int64) {
	return c.limit.Load(), c.inFlight()
}

// inFlight is the farm's requests admitted and not completed: the
// owner's count (Config.InFlight) when it gives one, else the
// controller's own.
func (c *Controller) inFlight() int64 {
	if f := c.cfg.InFlight; f != nil {
		return f()
	}
	return c.flight.Load()
}

// lowerAtMin reports whether every class less important than i is at
// RateMin (true for the least important). Called with c.mu held.
func (c *Controller) lowerAtMin(i int) bool {
	for _, lo := range c.classes[i+1:] {
		if math.Float64frombits(lo.rate.Load()) > c.cfg.RateMin {
			return false
		}
	}
	return true
}

// measured returns class cl's offered rate (admitted and rejected),
// admission rate and completion rate (samples) per second since its last
// run. Called with c.mu held.
func (c *Controller) measured(cl *class, now int64) (offered, admitted, done float64) {
	secs := float64(now-cl.lastRun) / 1e9
	if secs <= 0 {
		return math.Inf(1), 0, math.Inf(1)
	}
	adm := cl.admitted.Load()
	seen := adm + cl.rejected.Load()
	return float64(seen-cl.seenAt) / secs, float64(adm-cl.admAt) / secs, float64(len(cl.samples)+cl.ended) / secs
}

// doneOver is class cl's completion rate per second for the backlog
// rules (the drain's hold and the cut): the larger of short, its rate
// since its last run, and its rate since its oldest mark at most one
// Timeout old (with Run's Ticks every Timeout/4, the fourth-last Tick: ¾
// to 1 Timeout back), when that mark is older than the last run. Called
// with c.mu held, before the run moves lastRun.
//
// Decision: a farm completes no more than its capacity, so each window's
// rate is a lower bound on it (up to a short window's noise, below) and
// the larger is the closer. At NReq = 100 samples a class runs every 100
// completions, about 140 ms on sert-sweep.yaml's farm, and there a
// Poisson burst of its 500 ms requests, which holds every slot for a few
// hundred milliseconds, read as the farm's capacity: the hold took the
// class to 293 req/s of about 730 and the band increase needed two
// seconds to climb back, shedding 40–46% of those seconds' arrivals at 1×
// load (doc.go, "The scaled rule"). The longer window alone reads low on
// a ramp, whose completions grow: the last run's window is the latest of
// them (testdata/window.txt). A short window of light requests can read
// above the capacity (1,023/s over 140 ms on that farm of about 805);
// the rule is then the short window's, as before, and the debt still
// drains the backlog. A class that runs on its Timeout (a slow farm, as
// the capacity shift's 66/s) is measured since that run, as before.
func (c *Controller) doneOver(cl *class, now int64, short float64) float64 {
	var old doneMark
	for _, m := range cl.marks.m {
		if m.at > 0 && now-m.at <= int64(c.cfg.Timeout) && (old.at == 0 || m.at < old.at) {
			old = m
		}
	}
	if old.at == 0 || now-old.at < int64(limitWindowMin) || now-old.at <= now-cl.lastRun {
		return short
	}
	return max(short, float64(cl.completed-old.done)/(float64(now-old.at)/1e9))
}

// setRate clamps and stores a class's rate; a decrease empties its bucket
// (§3.2: "the bucket's tokens are emptied").
func (c *Controller) setRate(cl *class, rate float64, empty bool) {
	rate = min(max(rate, c.cfg.RateMin), c.cfg.RateMax)
	cl.rate.Store(math.Float64bits(rate))
	cl.bucket.Lock()
	if empty {
		cl.bucket.tokens = 0
	} else {
		cl.bucket.tokens = min(cl.bucket.tokens, c.depth(rate))
	}
	cl.bucket.Unlock()
}

// ClassState is one class's controller state, for metrics and tests.
type ClassState struct {
	Rate     float64       // requests per second
	Tokens   float64       // in the bucket at the last Admit
	Cur      time.Duration // smoothed percentile
	Sample   time.Duration // the last run's percentile sample
	Err      float64       // (cur − target)/target at the last run
	Samples  int           // waiting for the next run
	Runs     uint64
	LC       int
	Admitted uint64
	Rejected uint64
	// OverTarget counts the admissions by the work-conserving rule (doc.go,
	// "Work conservation"); they are in Admitted too.
	OverTarget uint64
}

// State returns class i's state.
func (c *Controller) State(i int) ClassState {
	cl := c.class(i)
	c.mu.Lock()
	st := ClassState{
		Rate: math.Float64frombits(cl.rate.Load()), Cur: time.Duration(cl.cur), Sample: time.Duration(cl.lastSamp),
		Err: cl.err, Samples: len(cl.samples), Runs: cl.runs, LC: cl.lc,
		Admitted: cl.admitted.Load(), Rejected: cl.rejected.Load(), OverTarget: cl.overTarget.Load(),
	}
	c.mu.Unlock()
	cl.bucket.Lock()
	st.Tokens = cl.bucket.tokens
	cl.bucket.Unlock()
	return st
}

// Classes is the number of classes.
func (c *Controller) Classes() int { return len(c.cfg.Targets) }

// SetTargets replaces the classes' targets, most important first (one per
// class, each > 0; the owner's target may follow load, as sentry's R_sla
// follows the QoS table). A class's next run compares with the new target.
func (c *Controller) SetTargets(ts []time.Duration) error {
	if len(ts) != len(c.cfg.Targets) {
		return fmt.Errorf("adaptive: %d targets for %d classes", len(ts), len(c.cfg.Targets))
	}
	for i, t := range ts {
		if t <= 0 {
			return fmt.Errorf("adaptive: class %d: target %v must be positive", i, t)
		}
	}
	c.mu.Lock()
	if c.cfg.Shared {
		c.classes[0].target = float64(slices.Min(ts))
	} else {
		for i, t := range ts {
			c.classes[i].target = float64(t)
		}
	}
	// In place: the slice header is never written after New, so Classes
	// reads its length without the lock (a scrape, the owner's monitor).
	copy(c.cfg.Targets, ts)
	c.mu.Unlock()
	return nil
}

// SetRate sets class i's rate, clamped to [RateMin, RateMax], leaving its
// bucket as it is (at most its new depth). The owner seeds a controller
// with it: the rate another mode was admitting at, when it takes over.
func (c *Controller) SetRate(i int, rate float64) {
	if i < 0 || i >= c.Classes() || math.IsNaN(rate) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setRate(c.class(i), rate, false)
}

// Seed starts class i afresh at rate, as another admission mode hands
// over to this controller (auto's fall-back): its measurement restarts
// now (offered and completion rates, the farm's counts: the requests the
// other mode admitted are not this controller's backlog), its waiting
// samples and smoothed percentile are dropped (the first run takes its
// sample as is), and it is not cut for hold: the responses that arrive
// meanwhile are of requests the other mode admitted, and say nothing of
// this rate. A NaN rate is ignored.
func (c *Controller) Seed(i int, rate float64, hold time.Duration) {
	if i < 0 || i >= c.Classes() || math.IsNaN(rate) {
		return
	}
	now := c.cfg.Now().UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	adm := c.farmAdmitted()
	// The count of outstanding requests restarts at 0 (c.done itself
	// stays monotonic: the classes' farmDoneAt are marks on it); the
	// owner may then set it to what the other mode left in flight
	// (SetInFlight).
	c.flight.Store(0)
	cl := c.class(i)
	cl.samples, cl.ended = cl.samples[:0], 0
	c.beginWindow(cl, now)
	cl.hasCur, cl.cur, cl.err, cl.over, cl.lc = false, 0, 0, false, 0
	cl.trial = false
	cl.lastRun = now
	cl.mark()
	cl.farmAdmAt, cl.farmDoneAt = adm, c.done
	cl.holdUntil, cl.drainUntil = now+int64(max(hold, 0)), 0
	cl.marks.reset(doneMark{at: now, done: cl.completed}) // this controller's completions of the class start now
	c.setRate(cl, rate, false)
}

// Carry copies what class j of from has learned -- its rate, smoothed
// percentile and last error -- into class i of c, so that a controller
// rebuilt on reload (new settings, classes added or moved) starts where
// the old one was; the caller matches classes by name. The rate is
// clamped to c's bounds. Samples waiting in from are not carried.
func (c *Controller) Carry(i int, from *Controller, j int) {
	if i < 0 || i >= c.Classes() || from == nil || j < 0 || j >= from.Classes() || from == c {
		return
	}
	from.mu.Lock()
	src := from.class(j)
	rate := math.Float64frombits(src.rate.Load())
	cur, hasCur, e := src.cur, src.hasCur, src.err
	from.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	dst := c.class(i)
	dst.cur, dst.hasCur, dst.err = cur, hasCur, e
	c.setRate(dst, rate, false)
}

// Config returns the controller's configuration with defaults filled in
// and the targets in force.
func (c *Controller) Config() Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	cfg := c.cfg
	cfg.Targets = append([]time.Duration(nil), cfg.Targets...)
	return cfg
}

// Learned is what one class's controller has learned, as Carry copies it
// within a process: to carry it to another (a binary upgrade, a state
// file). Rate is in requests per second, Cur (the smoothed percentile) in
// nanoseconds; HasCur is false before the first run.
type Learned struct {
	Rate   float64 `json:"rate"`
	Cur    int64   `json:"percentile"`
	HasCur bool    `json:"has_percentile"`
	Err    float64 `json:"err"`
}

// Learned returns class i's learned state.
func (c *Controller) Learned(i int) Learned {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.class(i)
	return Learned{Rate: math.Float64frombits(cl.rate.Load()), Cur: int64(cl.cur), HasCur: cl.hasCur, Err: cl.err}
}

// Restore gives class i what another process's controller had learned
// (Learned), as Carry does within a process: the rate, clamped to this
// controller's bounds, the smoothed percentile and the last error. It
// reports false, and changes nothing, for an i out of range or a value
// that is not finite (or negative, for the rate and percentile).
func (c *Controller) Restore(i int, l Learned) bool {
	if i < 0 || i >= c.Classes() || !(l.Rate >= 0) || math.IsInf(l.Rate, 0) || l.Cur < 0 || math.IsNaN(l.Err) || math.IsInf(l.Err, 0) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.class(i)
	cl.cur, cl.hasCur, cl.err = float64(l.Cur), l.HasCur, l.Err
	c.setRate(cl, l.Rate, false)
	return true
}
