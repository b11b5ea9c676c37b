package batchac

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sentry-proxy/sentry/admission"
)

// maxVerdicts sizes the per-class decision counters.
const maxVerdicts = 16

func init() {
	if len(admission.Verdicts()) > maxVerdicts {
		panic("batchac: more admission verdicts than counters")
	}
}

// classState is what a class keeps across Reconfigure (keyed by name):
// its schedule, cascade mark and metrics.
type classState struct {
	name string
	// next is when the class's policer is due next. Guarded by Controller.run.
	next time.Time
	// cascadeUntil is the class's cascade mark in clock nanoseconds: while
	// now < cascadeUntil, every less important class is rejected without a
	// test. Zero means no mark.
	cascadeUntil atomic.Int64
	decisions    [maxVerdicts]atomic.Uint64
	// overTarget counts the admissions made by the work-conserving rule
	// (also counted in decisions[Admit]).
	overTarget atomic.Uint64
	wait       waitHist
}

// class is a class as configured in one snapshot.
type class struct {
	*classState
	period time.Duration
	// queues holds one wait queue per bucket; nil when period == 0.
	queues []*queue
	// dAbove is the longest period among the more important classes, ns.
	dAbove float64
	// rho is the reserve share held for the more important classes
	// (float64 bits): their predicted share of the farm, at least the
	// floor; 0 for the most important class or with the reserve off.
	// Written by updateReserve, read per test.
	rho atomic.Uint64
	// slack is how far past one service time a batch of this class may
	// fill the farm under its own budget (float64 ns): d·min(1, 2·(1 − ρ))
	// with ρ the more important classes' demand share (no floor), so 0
	// once they saturate the farm. See model.admits.
	slack atomic.Uint64
	// sref is the largest mean S of the more important classes (float64
	// ns): the size at which they see the load this class leaves.
	sref atomic.Uint64
	// The fair-share tiers' reserve, slack and size (doc.go, Fair share):
	// rho, slack and sref as they are for a request of this class whose
	// client is over its fair share, [0] in its turn (admission.OverShare:
	// the class's within-share demand is held for too) and [1] the
	// marginal one (admission.Marginal: the floor's share of what is left
	// besides, for the turns; boundTier holds more for a rank past 0).
	// dAboveOver is max(dAbove, period): the held-for requests of the
	// class wait its own period.
	rhoT, slackT, srefT [2]atomic.Uint64
	dAboveOver          float64
}

func (cl *class) reserve() float64   { return math.Float64frombits(cl.rho.Load()) }
func (cl *class) fillSlack() float64 { return math.Float64frombits(cl.slack.Load()) }

// bound is what a test of class cl with period d is checked against now.
func (m *model) bound(cl *class, d, dAbove float64) bound {
	own, lim := m.limits(d, dAbove, cl.reserve())
	return bound{own: own, lim: lim, slack: cl.fillSlack(), sref: math.Float64frombits(cl.sref.Load())}
}

// boundTier is bound for a request of fair-share tier 1 or 2
// (admission.Share.Tier; doc.go, Fair share): the class's own budget, and
// a limit that holds room for the class's within-share demand (and, for
// the marginal tier, the floor's share of what is left besides) besides
// the more important classes'. A marginal request of rank k > 0
// (admission.Request.Rank) holds the floor's share again of what each
// rank before it leaves: ρ = 1 − (1 − ρ₂)(1 − floor)^k. dAbove is the
// period the held-for requests wait (cl.dAboveOver in a test that knows
// periods, 0 in Room).
func (m *model) boundTier(cl *class, tier int, rank uint8, d, dAbove float64) bound {
	i := tier - 1
	rho := math.Float64frombits(cl.rhoT[i].Load())
	slack := math.Float64frombits(cl.slackT[i].Load())
	if tier == 2 && rank > 0 {
		free := 1 - min(rho, 1)
		for range min(rank, 64) {
			free *= 1 - m.floor
		}
		rho = 1 - free
		slack = float64(cl.period) * min(1, 2*free)
	}
	own, lim := m.limits(d, dAbove, rho)
	return bound{own: own, lim: lim, slack: slack, sref: math.Float64frombits(cl.srefT[i].Load())}
}

// boundFor is bound or boundTier by the request's tier and rank.
func (m *model) boundFor(cl *class, d float64, tier int, rank uint8) bound {
	if tier > 0 {
		return m.boundTier(cl, tier, rank, d, cl.dAboveOver)
	}
	return m.bound(cl, d, cl.dAbove)
}

func (cl *class) queueLen() int64 {
	var n int64
	for _, q := range cl.queues {
		n += q.length.Load()
	}
	return n
}

// snapshot is an immutable configuration; Admit loads it once per request.
type snapshot struct {
	classes      []*class
	buckets      int
	queueCap     int
	allOrNothing bool
	parallelism  float64
	learn        bool
	reserve      bool
	floor        float64
	strict       bool // Config.StrictPeriods
	impliedQ     bool // !Config.NoImpliedQueue
}

// classIndex maps a request's class to a configured one. Out-of-range
// indexes (a classifier configured with more classes than the admitter)
// count as the least important class.
func (s *snapshot) classIndex(i int) int {
	if i < 0 || i >= len(s.classes) {
		return len(s.classes) - 1
	}
	return i
}

// bucket clamps a request's bucket index to [0, buckets).
func (s *snapshot) bucket(b int) int {
	switch {
	case b < 0:
		return 0
	case b >= s.buckets:
		return s.buckets - 1
	}
	return b
}

// waiting reports whether any request of any of classes waits in a queue.
// It reads every queue's length (one atomic load per bucket); only the
// work-conserving rule calls it, after a test has failed.
func waiting(classes []*class) bool {
	for _, cl := range classes {
		if cl.queueLen() != 0 {
			return true
		}
	}
	return false
}

// cascadeMark returns the latest cascade mark among classes (the classes
// more important than the one being decided).
func cascadeMark(classes []*class) int64 {
	var until int64
	for _, cl := range classes {
		until = max(until, cl.cascadeUntil.Load())
	}
	return until
}

// Controller is Cataclysm's batch admission controller for one app. It
// implements admission.Admitter and prometheus.Collector. Create it with New,
// start its policers with Run (or drive Tick yourself), stop it with Close.
type Controller struct {
	st  State
	now func() time.Time
	// share is st's ShareState, nil when it has none (no within-share
	// demand is held for: the over-share tier is tested as its class).
	share ShareState

	snap    atomic.Pointer[snapshot]
	closed  atomic.Bool
	pending atomic.Int64 // admitted by a run; Admit has not returned yet
	// sustained is State.Sustained() as of the last updateReserve, as
	// float64 bits: a floor under P for the queue η implies (model.qAt).
	sustained atomic.Uint64
	par       parEstimate
	waiters   sync.Pool
	parked    sync.Pool     // *Parked
	wake      chan struct{} // Reconfigure → Run: recompute the next due time
	done      chan struct{} // closed by Close
	desc      descs

	// run is the policer's state. Its mutex serialises policer runs,
	// Reconfigure and Close; it is taken before any queue mutex.
	run struct {
		sync.Mutex
		batch  []*waiter
		prefix []float64
		overs  []*waiter // decide's scratch: the over-share waiters of a batch
		heads  []*waiter
		due    []bool
		// nextReserve is when updateReserve is due next.
		nextReserve time.Time
		// wakes are the Wakers of parked requests decided by the run in
		// progress, each once; told after c.run is released (wake).
		wakes []admission.Waker
	}

	// states holds every class's state ever configured, by name, so that a
	// class removed and later restored keeps its counters. Guarded by run.
	states map[string]*classState

	// testHookEnqueued, when set before use, is called (outside any lock)
	// after a request is queued.
	testHookEnqueued func()
}

var _ admission.Admitter = (*Controller)(nil)

// New builds a controller that reads the farm through st.
func New(st State, cfg Config) (*Controller, error) {
	if st == nil {
		return nil, errors.New("batchac: nil State")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Controller{
		st:     st,
		now:    cfg.Now,
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
		desc:   newDescs(cfg.ConstLabels),
		states: make(map[string]*classState),
	}
	c.share, _ = st.(ShareState)
	c.waiters.New = func() any { return &waiter{ch: make(chan admission.Decision, 1)} }
	c.parked.New = func() any { return new(Parked) }
	c.par.store(cfg.Parallelism)
	now := c.now()
	s, _ := build(cfg, nil, c.states, now)
	c.updateReserve(s, now)
	c.snap.Store(s)
	return c, nil
}

// retiredQueue is a queue Reconfigure dropped, with its class's position in
// the old snapshot.
type retiredQueue struct {
	class int
	q     *queue
}

// build makes the snapshot for cfg, reusing the queues of old where class
// names, bucket indexes and a non-zero period persist, and the class state
// in states by name (adding new ones). It returns the old queues that are not
// reused. The caller holds c.run (or is New).
func build(cfg Config, old *snapshot, states map[string]*classState, now time.Time) (*snapshot, []retiredQueue) {
	s := &snapshot{
		classes:      make([]*class, len(cfg.Classes)),
		buckets:      cfg.Buckets,
		queueCap:     cfg.QueueCap,
		allOrNothing: cfg.AllOrNothing,
		parallelism:  cfg.Parallelism,
		learn:        cfg.LearnParallelism,
		reserve:      !cfg.NoReserve,
		floor:        cfg.ReserveFloor,
		strict:       cfg.StrictPeriods,
		impliedQ:     !cfg.NoImpliedQueue,
	}
	prevByName := make(map[string]*class)
	if old != nil {
		for _, cl := range old.classes {
			prevByName[cl.name] = cl
		}
	}
	kept := make(map[*queue]bool)
	var dAbove time.Duration
	for i, cc := range cfg.Classes {
		prev := prevByName[cc.Name]
		st := states[cc.Name]
		if st == nil {
			st = &classState{name: cc.Name}
			states[cc.Name] = st
		}
		if prev == nil {
			st.cascadeUntil.Store(0) // a restored class starts unmarked
		}
		cl := &class{classState: st, period: cc.Period, dAbove: float64(dAbove)}
		dAbove = max(dAbove, cc.Period)
		cl.dAboveOver = float64(dAbove)
		if prev != nil {
			// Until updateReserve runs on the new snapshot, keep the shares
			// the class had (a new class waits for updateReserve, which New
			// and Reconfigure run before publishing the snapshot).
			cl.rho.Store(prev.rho.Load())
			cl.slack.Store(prev.slack.Load())
			cl.sref.Store(prev.sref.Load())
			for i := range cl.rhoT {
				cl.rhoT[i].Store(prev.rhoT[i].Load())
				cl.slackT[i].Store(prev.slackT[i].Load())
				cl.srefT[i].Store(prev.srefT[i].Load())
			}
		}
		if cc.Period > 0 {
			reuse := prev != nil && prev.period > 0
			cl.queues = make([]*queue, cfg.Buckets)
			for b := range cl.queues {
				if reuse && b < len(prev.queues) {
					q := prev.queues[b]
					q.setCap(cfg.QueueCap)
					kept[q] = true
					cl.queues[b] = q
				} else {
					cl.queues[b] = newQueue(cfg.QueueCap)
				}
			}
			// Keep the schedule, but never wait longer than the new period.
			if first := now.Add(cc.Period); !reuse || cl.next.After(first) {
				cl.next = first
			}
		}
		s.classes[i] = cl
	}
	var retired []retiredQueue
	if old != nil {
		for i, cl := range old.classes {
			for _, q := range cl.queues {
				if !kept[q] {
					retired = append(retired, retiredQueue{class: i, q: q})
				}
			}
		}
	}
	return s, retired
}

// Admit implements admission.Admitter. For a class with a period it queues
// the request and blocks until the class's next policer run decides (at most
// the period plus one run), or until r.Gone fires. For a class with period 0
// it tests the request at once. It does not allocate.
func (c *Controller) Admit(r *admission.Request) admission.Decision {
	for {
		s := c.snap.Load()
		idx := s.classIndex(r.Class)
		cl := s.classes[idx]
		if c.closed.Load() {
			return c.count(cl, admission.Decision{Verdict: admission.RejectNoBackend})
		}
		sNs := float64(max(r.S, 0))
		if r.Share == admission.SpareOnly {
			return c.count(cl, c.spareOnly(s, idx, sNs))
		}
		tier := r.Share.Tier()
		if cl.period == 0 {
			return c.count(cl, c.testNow(s, idx, sNs, tier, r.Rank))
		}
		n := c.st.Healthy()
		if n <= 0 {
			return c.count(cl, admission.Decision{Verdict: admission.RejectNoBackend})
		}
		if ok, ot := c.early(s, idx, n, sNs, tier, r.Rank); ok {
			return c.count(cl, admitDecision(ot))
		}
		q := cl.queues[s.bucket(r.Bucket)]
		w := c.waiters.Get().(*waiter)
		w.fill(r, sNs)
		start := c.now()
		switch q.push(w) {
		case pushRetired: // Reconfigure or Close dropped the queue: reload
			c.waiters.Put(w)
			continue
		case pushFull:
			c.waiters.Put(w)
			m := c.model(s, n)
			return c.count(cl, admission.Decision{
				Verdict:    admission.RejectQueueFull,
				RetryAfter: retryAfter(m.drain(sNs, m.rsla-float64(cl.period))),
			})
		}
		if h := c.testHookEnqueued; h != nil {
			h()
		}
		d := c.await(q, w, r.Gone)
		c.waiters.Put(w)
		cl.wait.observe(c.now().Sub(start))
		return c.count(cl, d)
	}
}

// await parks until w's decision arrives or gone fires.
func (c *Controller) await(q *queue, w *waiter, gone <-chan struct{}) admission.Decision {
	var d admission.Decision
	select {
	case d = <-w.ch:
	case <-gone:
		if q.remove(w) {
			return admission.Decision{Verdict: admission.RejectGone}
		}
		// A run has taken w; its decision is on the way.
		d = <-w.ch
		if d.Verdict == admission.Admit {
			c.pending.Add(-1)
			return admission.Decision{Verdict: admission.RejectGone}
		}
		return d
	}
	if d.Verdict == admission.Admit {
		c.pending.Add(-1)
	}
	return d
}

func (c *Controller) count(cl *class, d admission.Decision) admission.Decision {
	cl.decisions[d.Verdict].Add(1)
	if d.OverTarget {
		cl.overTarget.Add(1)
	}
	return d
}

// model reads the State for one test; n > 0.
func (c *Controller) model(s *snapshot, n int) model {
	m := model{
		n:     n,
		load:  max(c.st.Inflight(), 0) + c.pending.Load(),
		q:     float64(c.st.Q()),
		qNow:  float64(c.st.QNow()),
		rsla:  float64(c.st.RSLA()),
		p:     c.parallelism(s),
		floor: s.floor,
	}
	if s.impliedQ {
		m.qp = max(m.p, math.Float64frombits(c.sustained.Load()))
	}
	return m
}

func (c *Controller) parallelism(s *snapshot) float64 {
	if s.learn {
		return c.par.load()
	}
	return s.parallelism
}

// testNow is the immediate test of a period-0 class: a batch of one,
// Q + max(1, (η + 1)/P)·S ≤ lim, where lim is R_sla less the room held for
// more important classes (model.limits).
func (c *Controller) testNow(s *snapshot, idx int, sNs float64, tier int, rank uint8) admission.Decision {
	n := c.st.Healthy()
	if n <= 0 {
		return admission.Decision{Verdict: admission.RejectNoBackend}
	}
	now := c.now().UnixNano()
	m := c.model(s, n)
	cl := s.classes[idx]
	b := m.bound(cl, 0, cl.dAbove)
	own, lim := b.own, b.lim
	if until := cascadeMark(s.classes[:idx]); until > now {
		return admission.Decision{
			Verdict:    admission.RejectCascade,
			RetryAfter: retryAfter(max(float64(until-now), m.drain(sNs, lim))),
		}
	}
	if tier > 0 {
		// A fair-share tier (doc.go, Fair share): room is held for the
		// class's within-share demand too (and the turns'). Refused where
		// a within-share request would pass, it is over_share: not a
		// failure of the class, no mark, and the class's own mark is left
		// alone.
		bo := m.boundTier(cl, tier, rank, 0, cl.dAboveOver)
		if m.admits(1, sNs, bo) {
			return admission.Decision{Verdict: admission.Admit}
		}
		if m.admits(1, sNs, b) {
			return admission.Decision{Verdict: admission.RejectOverShare, RetryAfter: retryAfter(m.drain(sNs, bo.lim))}
		}
	} else if m.admits(1, sNs, b) {
		if cl.cascadeUntil.Load() != 0 {
			cl.cascadeUntil.Store(0)
		}
		return admission.Decision{Verdict: admission.Admit}
	}
	// The work-conserving rule (doc.go, Work conservation): a slot is
	// free, the backends are not queueing and nothing of any class waits,
	// so admitting the request slows down nobody; it only misses its own
	// target. No mark: nothing failed that the load explains.
	if m.quiet(own) && !waiting(s.classes) && c.spare(s.learn && cl.reserve() <= 0, &m, 1, now) {
		return admittedOver
	}
	wait := m.drain(sNs, lim)
	if lim < own && m.fits(1, sNs, own) {
		// It fits the class's own budget: the room is held for more
		// important classes. Not a failure of this class: no mark.
		return admission.Decision{Verdict: admission.RejectPriority, RetryAfter: retryAfter(wait)}
	}
	// An immediate class has no next run: its mark holds less important
	// classes back until its next passing test, so that the load drains
	// until it gets in (strict priority; a drain-time mark let a flood of
	// small, less important requests refill the farm between its tests).
	// Every failure renews the mark, for immediateMarkHold: while the
	// class keeps failing the mark holds; if its traffic stops (or the
	// farm goes idle) it lapses within the hold. A request that would fail
	// even on an idle farm (S > R_sla − Q, with nothing in service) says
	// nothing about load and sets no mark.
	if idle := (model{n: m.n, q: 0, rsla: m.rsla, p: m.p}); idle.fits(1, sNs, own) {
		cl.cascadeUntil.Store(now + int64(immediateMarkHold))
	}
	return admission.Decision{Verdict: admission.RejectTest, RetryAfter: retryAfter(wait)}
}

// early reports whether an arrival of periodic class idx (n healthy
// backends, service time sNs) is admitted at once, without waiting for its
// run (doc.go, Early admission): nothing of its class waits (so it
// overtakes no one), no more important class holds a cascade mark, and a
// batch of one passes the test its run would apply now (budget R_sla − d_i
// and the reserve) -- or fails it only for its own size while a slot is
// free and nothing of any class waits (over: the work-conserving rule,
// doc.go, Work conservation). A failing arrival is not rejected here: it
// queues and its run decides, as with StrictPeriods. It allocates nothing
// and counts nothing.
func (c *Controller) early(s *snapshot, idx, n int, sNs float64, tier int, rank uint8) (ok, over bool) {
	cl := s.classes[idx]
	if s.strict || cl.queueLen() != 0 {
		return false, false
	}
	// The clock is read only when a mark is set (most arrivals find none).
	if until := cascadeMark(s.classes[:idx]); until != 0 && until > c.now().UnixNano() {
		return false, false
	}
	m := c.model(s, n)
	b := m.boundFor(cl, float64(cl.period), tier, rank)
	if m.admits(1, sNs, b) {
		return true, false
	}
	if m.quiet(b.own) && !waiting(s.classes) && c.spare(s.learn && cl.reserve() <= 0, &m, 1, c.now().UnixNano()) {
		return true, true
	}
	return false, false
}

// Spare tells whether one more request of class class would harm nobody
// now (doc.go, Work conservation): a backend slot is free for it
// (η + 1 ≤ P), the queue now (State.QNow) is at most a tenth of R_sla (the
// budget of a class without a period), no request of any class waits in
// a queue, and no more important class holds a cascade mark. It looks at no service time: a
// request admitted there slows down no request in service, whatever its
// own size. It decides nothing and counts nothing; threshold mode admits
// a request the room test refuses when Spare holds (package control). It
// does not allocate.
func (c *Controller) Spare(class int) bool {
	s := c.snap.Load()
	n := c.st.Healthy()
	if n <= 0 {
		return false
	}
	idx := s.classIndex(class)
	if until := cascadeMark(s.classes[:idx]); until != 0 && until > c.now().UnixNano() {
		return false
	}
	if waiting(s.classes) {
		return false
	}
	m := c.model(s, n)
	return m.quiet(m.rsla) && c.spare(s.learn && s.classes[idx].reserve() <= 0, &m, 1, c.now().UnixNano())
}

// spare reports whether k more requests fit the slots the work-conserving
// rule may fill (doc.go, Work conservation): a slot each, η + ⌈k/n⌉ ≤ P
// (model.free), or, when probe, up to the probe's cap (doc.go, The
// probe). probe: P is learned and no room is held for a more important
// class (its reserve, which a free slot passes and a probe need not).
// now is unix ns.
func (c *Controller) spare(probe bool, m *model, k int, now int64) bool {
	if m.free(k) {
		return true
	}
	return probe && m.fill(k) <= c.par.probeCap(m.p, now)
}

// spareOnly decides a request of the spare-only tier (admission.SpareOnly;
// doc.go, Fair share): its client is over its fair share and has no turn,
// so it is admitted only where admitting it slows down nobody (FreeSlot),
// and refused as over_share otherwise. No mark.
func (c *Controller) spareOnly(s *snapshot, idx int, sNs float64) admission.Decision {
	if c.st.Healthy() <= 0 {
		return admission.Decision{Verdict: admission.RejectNoBackend}
	}
	if c.freeSlot(s, idx, sNs) {
		return admitted
	}
	return admission.Decision{Verdict: admission.RejectOverShare, RetryAfter: minRetryAfter}
}

// FreeSlot tells whether a request of class class and estimated service
// time sz would slow down nobody now: a backend slot is free for it
// (η + 1 ≤ P), no request of any class waits in a queue, no more
// important class holds a cascade mark, and it fits its class's own
// budget there (Q + S ≤ R_sla). Unlike Spare it allows a measured queue:
// the request is one its class's test would take on that slot, not one
// that misses its own target. Fair sharing's spare-only tier is decided
// by it (threshold mode asks it through package control). It decides
// nothing, counts nothing and does not allocate.
func (c *Controller) FreeSlot(class int, sz time.Duration) bool {
	s := c.snap.Load()
	return c.freeSlot(s, s.classIndex(class), float64(max(sz, 0)))
}

func (c *Controller) freeSlot(s *snapshot, idx int, sNs float64) bool {
	n := c.st.Healthy()
	if n <= 0 {
		return false
	}
	if until := cascadeMark(s.classes[:idx]); until != 0 && until > c.now().UnixNano() {
		return false
	}
	if waiting(s.classes) {
		return false
	}
	m := c.model(s, n)
	return m.free(1) && m.fits(1, sNs, m.rsla)
}

// Room tells, for one request of class class and estimated service time sz,
// whether it would pass the immediate test now with the room held for more
// important classes (room), and whether a free slot is waiting for it
// within its class's own budget (free; see model.admits), ignoring periods
// and cascade marks. It decides nothing and counts nothing: threshold mode
// admits a request its (i, p) draw lets through only with room, and one
// the draw rejects when a slot is free, so that the farm never idles
// behind a stale probability (package control). It does not allocate.
//
// For a request of a fair-share tier (tier 1 or 2, admission.Share.Tier;
// doc.go, Fair share) room also holds the class's within-share demand
// (and, for the marginal tier, the floor's share of what is left, more
// for its rank: admission.Request.Rank); inShare then tells whether a within-share request of
// the same size would have room, so that the caller can name a refusal
// over_share.
func (c *Controller) Room(class int, sz time.Duration, tier int, rank uint8) (room, free, inShare bool) {
	s := c.snap.Load()
	n := c.st.Healthy()
	if n <= 0 {
		return false, false, false
	}
	cl := s.classes[s.classIndex(class)]
	m := c.model(s, n)
	b := m.bound(cl, 0, 0)
	sNs := float64(max(sz, 0))
	free = m.slowdown(1) <= 1 && m.fits(1, sNs, b.own)
	if tier > 0 {
		inShare = free || m.admits(1, sNs, b)
		b = m.boundTier(cl, tier, rank, 0, 0)
		return free || m.admits(1, sNs, b), free, inShare
	}
	room = free || m.admits(1, sNs, b)
	return room, free, room
}

// Held tells whether a request of class class and estimated service time
// sz that Room refuses for its tier 0 fits its class's own budget, so that
// only the room held for more important classes refuses it (what batch
// mode names RejectPriority). It decides nothing, counts nothing and does
// not allocate; threshold mode names such a refusal as batch mode does.
func (c *Controller) Held(class int, sz time.Duration) bool {
	s := c.snap.Load()
	n := c.st.Healthy()
	if n <= 0 {
		return false
	}
	cl := s.classes[s.classIndex(class)]
	m := c.model(s, n)
	b := m.bound(cl, 0, 0)
	return b.lim < b.own && m.fits(1, float64(max(sz, 0)), b.own)
}

// updateReserve recomputes every class's reserve share from State.Demand:
// class j holds ρ_j = Σ_{i<j} Demand(i) / (n·max(P, Sustained)) for the
// classes above it,
// at least the floor (j > 0). Called by New, Reconfigure and tick (every
// ReservePeriod); serialised by c.run (or before the controller is shared).
func (c *Controller) updateReserve(s *snapshot, now time.Time) {
	c.run.nextReserve = now.Add(ReservePeriod)
	if v := c.st.Sustained(); v > 0 && !math.IsInf(v, 0) { // NaN fails v > 0
		c.sustained.Store(math.Float64bits(v))
	} else {
		c.sustained.Store(0)
	}
	if !s.reserve {
		for _, cl := range s.classes {
			cl.rho.Store(0)
			cl.slack.Store(math.Float64bits(float64(cl.period)))
		}
	}
	n := c.st.Healthy()
	if n <= 0 {
		return // nothing is admitted; keep the last shares
	}
	capacity := float64(n) * max(c.parallelism(s), c.st.Sustained())
	var above, sref float64
	for j, cl := range s.classes {
		ms := float64(c.st.MeanS(j))
		srefJ := sref
		rho := 0.0
		if s.reserve {
			cl.sref.Store(math.Float64bits(sref))
			if j > 0 {
				rho = max(above/capacity, s.floor)
			}
			cl.rho.Store(math.Float64bits(rho))
			idle := min(1, 2*max(0, 1-above/capacity))
			cl.slack.Store(math.Float64bits(float64(cl.period) * idle))
		} else {
			srefJ = 0
		}
		// The fair-share tiers (doc.go, Fair share): the over-share tier
		// holds room for the class's own within-share demand too, judged
		// at the larger of the sizes (without the reserve, for that
		// demand alone); the marginal tier holds the floor's share of
		// what is left besides, for the turns.
		held := 0.0
		if s.reserve {
			held = above
		}
		var within float64
		if c.share != nil {
			within = usable(c.share.WithinShareDemand(j))
		}
		rhoOver := max(rho, (held+within)/capacity)
		rhoMarg := 1 - (1-min(rhoOver, 1))*(1-s.floor)
		sr := srefJ
		if within > 0 {
			sr = max(sr, ms)
		}
		for i, r := range [2]float64{rhoOver, rhoMarg} {
			cl.rhoT[i].Store(math.Float64bits(r))
			cl.slackT[i].Store(math.Float64bits(float64(cl.period) * min(1, 2*max(0, 1-r))))
			cl.srefT[i].Store(math.Float64bits(sr))
		}
		if s.reserve {
			if ms > sref {
				sref = ms
			}
			if d := c.st.Demand(j); d > 0 { // NaN and negatives add nothing
				above += d
			}
		}
	}
}

// byRank orders a batch's marginal tier by its clients' ranks
// (admission.Request.Rank), lowest first, keeping arrival order within a
// rank. In place, no allocation.
func byRank(ws []*waiter) {
	slices.SortStableFunc(ws, func(a, b *waiter) int { return cmp.Compare(a.rank, b.rank) })
}

// usable is a demand as the reserve takes it: NaN, ±Inf and negatives
// add nothing.
func usable(d float64) float64 {
	if d > 0 && !math.IsInf(d, 0) {
		return d
	}
	return 0
}

// immediateMarkHold is how long a failing period-0 class keeps blocking
// less important classes after its last failed test, if no test passes.
const immediateMarkHold = time.Second

// runCtx is the state of one policer run.
type runCtx struct {
	m            model
	now          int64 // clock nanoseconds
	noBackend    bool
	allOrNothing bool
	learn        bool // P is learned: the work-conserving rule may probe (spare)
}

// newRun reads the State once for a run. Called with c.run held.
func (c *Controller) newRun(s *snapshot, now time.Time) runCtx {
	rc := runCtx{now: now.UnixNano(), allOrNothing: s.allOrNothing, learn: s.learn}
	n := c.st.Healthy()
	if n <= 0 {
		rc.noBackend = true
		return rc
	}
	rc.m = c.model(s, n)
	return rc
}

// Tick runs, in one policer run, every class whose policer is due at now,
// in importance order. Run calls it; tests call it directly with a manual
// clock. Safe for concurrent use (runs are serialised).
func (c *Controller) Tick(now time.Time) { c.tick(now) }

// tick is Tick; it returns which classes ran (valid until the next tick;
// for tests).
func (c *Controller) tick(now time.Time) []bool {
	c.run.Lock()
	defer c.unlockAndWake()
	if c.closed.Load() {
		return nil
	}
	s := c.snap.Load()
	if !now.Before(c.run.nextReserve) {
		c.updateReserve(s, now)
	}
	due := c.run.due[:0]
	anyDue := false
	for _, cl := range s.classes {
		isDue := cl.period > 0 && !now.Before(cl.next)
		due = append(due, isDue)
		if isDue {
			anyDue = true
			// Stay on the period grid so classes with commensurate periods
			// keep firing in the same tick; skip periods missed entirely.
			cl.next = cl.next.Add(cl.period)
			if !cl.next.After(now) {
				cl.next = now.Add(cl.period)
			}
		}
	}
	c.run.due = due
	if !anyDue {
		return due
	}
	rc := c.newRun(s, now)
	for i, cl := range s.classes {
		if !due[i] {
			continue
		}
		heads := c.run.heads[:0]
		for _, q := range cl.queues {
			heads = append(heads, q.take(false))
		}
		c.police(&rc, s.classes, i, heads)
		clear(heads)
		c.run.heads = heads[:0]
	}
	return due
}

// police decides the taken lists (one per bucket, smallest bucket first) of
// class order[i] and updates its cascade mark. Called with c.run held.
func (c *Controller) police(rc *runCtx, order []*class, i int, heads []*waiter) {
	cl := order[i]
	until := cascadeMark(order[:i])
	cascaded := until > rc.now
	failed := false
	for j, h := range heads {
		if h == nil {
			continue
		}
		// Anything else waiting -- a later bucket of this run, or a
		// queued request of any class -- rules out the work-conserving
		// rule for this batch.
		others := slices.ContainsFunc(heads[j+1:], func(w *waiter) bool { return w != nil }) || waiting(order)
		if c.decide(rc, cl, h, cascaded, until, others) {
			failed = true
		}
	}
	switch {
	case rc.noBackend || cascaded:
		// Not tested: the class's own mark is left to expire.
	case failed:
		cl.cascadeUntil.Store(rc.now + int64(cl.period))
	case cl.cascadeUntil.Load() != 0:
		cl.cascadeUntil.Store(0)
	}
}

var (
	admitted = admission.Decision{Verdict: admission.Admit}
	// admittedOver is an admission by the work-conserving rule: the
	// request fails its class's own budget, but admitting it harms nobody.
	admittedOver = admission.Decision{Verdict: admission.Admit, OverTarget: true}
)

func admitDecision(over bool) admission.Decision {
	if over {
		return admittedOver
	}
	return admitted
}

// decide tests one bucket's batch (the list from head) of class cl and
// sends every waiter its decision. It reports whether the class's own test
// rejected anything (a rejection only for the reserve held for more
// important classes, or for the class's fair-share tiers, is not a
// failure of cl). others tells that something else waits (a later bucket
// of the run, a queued request of any class): then the work-conserving
// rule does not apply. Called with c.run held and no queue lock.
//
// Fair share (doc.go): the batch is taken in tiers (within share, over
// share in turn, marginal), each FIFO but the marginal tier, which goes
// by rank (each rank tested on its own bound); a tier is tested, as a batch of its
// own against its bound on the load the tiers before it leave, only when
// every request of those tiers passed. A request of tier 1 or 2 refused
// where the class's own bound would have taken it is over_share.
func (c *Controller) decide(rc *runCtx, cl *class, head *waiter, cascaded bool, until int64, others bool) bool {
	batch, prefix := c.run.batch[:0], c.run.prefix[:0]
	// Read every link before the first send: a waiter that got its
	// decision may be reused at once.
	var cnt [3]int
	for w := head; w != nil; w = w.next {
		batch = append(batch, w)
		cnt[w.tier]++
	}
	beta := len(batch)
	if cnt[0] < beta {
		// Stable partition by tier.
		tmp := append(c.run.overs[:0], batch...)
		at := [3]int{0, cnt[0], cnt[0] + cnt[1]}
		for _, w := range tmp {
			batch[at[w.tier]] = w
			at[w.tier]++
		}
		clear(tmp)
		c.run.overs = tmp[:0]
		byRank(batch[cnt[0]+cnt[1]:])
	}
	// Each tier's prefix sums start afresh, and each rank's of the
	// marginal tier; start[g] is tier g's first index.
	start := [4]int{0, cnt[0], cnt[0] + cnt[1], beta}
	var sum, total float64
	for j, w := range batch {
		if j == start[1] || j == start[2] || j > start[2] && w.rank != batch[j-1].rank {
			sum = 0
		}
		sum += w.s
		total += w.s
		prefix = append(prefix, sum)
	}
	var got [3]int // admitted by the test: batch[start[g]:start[g]+got[g]]
	wc := false    // the work-conserving rule admitted every other request
	var reject [3]admission.Decision
	var b bound
	if !rc.noBackend {
		b = rc.m.bound(cl, float64(cl.period), cl.dAbove)
	}
	own, lim := b.own, b.lim
	test := func(m *model, pre []float64, bd bound) int {
		if len(pre) == 0 {
			return 0
		}
		if rc.allOrNothing {
			if m.admits(len(pre), pre[len(pre)-1], bd) {
				return len(pre)
			}
			return 0
		}
		return m.largestPrefix(pre, bd)
	}
	sumOf := func(g, from int) float64 { // tier g's service times from its from-th request on
		var x float64
		for _, w := range batch[start[g]+from : start[g+1]] {
			x += w.s
		}
		return x
	}
	switch {
	case rc.noBackend:
		reject[0].Verdict = admission.RejectNoBackend
		reject[1], reject[2] = reject[0], reject[0]
	case cascaded:
		reject[0].Verdict = admission.RejectCascade
		reject[0].RetryAfter = retryAfter(max(float64(until-rc.now), rc.m.drain(total/float64(beta), lim)))
		reject[1], reject[2] = reject[0], reject[0]
	default:
		m := rc.m
		for g := range 2 {
			bd := b
			if g > 0 {
				bd = m.boundTier(cl, g, 0, float64(cl.period), cl.dAboveOver)
			}
			got[g] = test(&m, prefix[start[g]:start[g+1]], bd)
			m.load += int64(got[g])
			if got[g] < cnt[g] {
				break
			}
		}
		// The marginal tier, rank by rank (lowest first), each against
		// its own bound on the load the ranks before it leave.
		for lo := start[2]; got[0]+got[1] == start[2] && lo < beta; {
			hi := lo + 1
			for hi < beta && batch[hi].rank == batch[lo].rank {
				hi++
			}
			k := test(&m, prefix[lo:hi], m.boundTier(cl, 2, batch[lo].rank, float64(cl.period), cl.dAboveOver))
			got[2] += k
			m.load += int64(k)
			if k < hi-lo {
				break
			}
			lo = hi
		}
		k := got[0] + got[1] + got[2]
		if k < beta && !others && rc.m.quiet(own) && c.spare(rc.learn && cl.reserve() <= 0, &rc.m, beta, rc.now) {
			// The work-conserving rule (doc.go, Work conservation): the
			// whole batch finds free slots and nothing else waits; the
			// rest fails only its own budget. Admit it, marked.
			wc = true
			rc.m.load += int64(beta)
			break
		}
		// m.load now counts every admission of the batch.
		for g := range 3 {
			if got[g] == cnt[g] {
				continue
			}
			rest := cnt[g] - got[g]
			mean := sumOf(g, got[g]) / float64(rest)
			switch {
			case g > 0 && m.admits(1, mean, b):
				// A within-share request would have passed: the room
				// left is held for the class's clients within their
				// share (or in their turn).
				reject[g].Verdict = admission.RejectOverShare
				rank := batch[start[g]+got[g]].rank // the first refused (0 but in the marginal tier)
				reject[g].RetryAfter = retryAfter(m.drain(mean, m.boundTier(cl, g, rank, float64(cl.period), cl.dAboveOver).lim))
				continue
			case g == 0 && lim < own && rc.m.fits(cnt[0], sumOf(0, 0), own),
				g > 0 && lim < own && m.fits(1, mean, own):
				// The class's own test would have taken them: only the
				// reserve for more important classes turned them away.
				reject[g].Verdict = admission.RejectPriority
			default:
				reject[g].Verdict = admission.RejectTest
			}
			reject[g].RetryAfter = retryAfter(m.drain(mean, lim))
		}
		rc.m.load = m.load // η grows by β'/n
	}
	if n := got[0] + got[1] + got[2]; wc {
		c.pending.Add(int64(beta))
	} else if n > 0 {
		c.pending.Add(int64(n))
	}
	g := 0
	for j, w := range batch {
		wk := w.wk // read before the send: the waiter may be reused at once
		for j >= start[g+1] {
			g++
		}
		switch {
		case j-start[g] < got[g]:
			w.ch <- admitted
		case wc:
			w.ch <- admittedOver
		default:
			w.ch <- reject[g]
		}
		if wk != nil {
			c.noteWake(wk)
		}
		batch[j] = nil
	}
	c.run.batch, c.run.prefix = batch[:0], prefix[:0]
	return reject[0].Verdict == admission.RejectTest || reject[1].Verdict == admission.RejectTest || reject[2].Verdict == admission.RejectTest
}

// Run drives the policers until ctx is done or Close is called: it sleeps
// until the next class is due (by the injected clock) and calls Tick. It
// returns ctx.Err(), or nil after Close. Run one Run per controller.
func (c *Controller) Run(ctx context.Context) error {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		t.Reset(c.untilDue())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.done:
			return nil
		case <-c.wake:
		case <-t.C:
			c.Tick(c.now())
		}
	}
}

// untilDue is the time until the next policer is due.
func (c *Controller) untilDue() time.Duration {
	c.run.Lock()
	var next time.Time
	found := false
	for _, cl := range c.snap.Load().classes {
		if cl.period > 0 && (!found || cl.next.Before(next)) {
			next, found = cl.next, true
		}
	}
	if !found || c.run.nextReserve.Before(next) {
		next, found = c.run.nextReserve, true
	}
	c.run.Unlock()
	return max(next.Sub(c.now()), 0)
}

// ErrClosed is returned by Reconfigure after Close.
var ErrClosed = errors.New("batchac: controller closed")

// Reconfigure swaps in cfg (cfg.Now and cfg.ConstLabels are ignored). Classes
// are matched by name: a class that persists keeps its counters, cascade mark
// and, when its period stays non-zero, its queued requests (bucket by bucket;
// the new QueueCap applies to further arrivals only). Requests in queues that
// go away (class removed, bucket removed, period set to 0) are decided at
// once in a final run, in the old importance order. A learned P restarts from
// cfg.Parallelism when that changes.
func (c *Controller) Reconfigure(cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	now := c.now()
	c.run.Lock()
	defer c.unlockAndWake()
	if c.closed.Load() {
		return ErrClosed
	}
	old := c.snap.Load()
	s, retired := build(cfg, old, c.states, now)
	if cfg.Parallelism != old.parallelism || (cfg.LearnParallelism && !old.learn) {
		c.par.store(cfg.Parallelism)
		c.par.ceil.Store(0) // the probe's ceiling restarts with it
	}
	c.updateReserve(s, now)
	c.snap.Store(s)
	select {
	case c.wake <- struct{}{}:
	default:
	}
	if len(retired) == 0 {
		return nil
	}
	// Retire after the swap: a pusher that still holds the old snapshot sees
	// the retired flag, reloads, and finds the new one.
	heads := make([][]*waiter, len(old.classes))
	for _, rq := range retired {
		if h := rq.q.take(true); h != nil {
			heads[rq.class] = append(heads[rq.class], h)
		}
	}
	rc := c.newRun(s, now)
	for i, hs := range heads {
		if len(hs) > 0 {
			c.police(&rc, old.classes, i, hs)
		}
	}
	return nil
}

// Close stops the controller: every waiting request and every later arrival
// is rejected with RejectNoBackend (RetryAfter 0: the proxy's default), and
// Run returns. Close is idempotent.
func (c *Controller) Close() {
	c.run.Lock()
	defer c.unlockAndWake()
	if c.closed.Swap(true) {
		return
	}
	close(c.done)
	reject := admission.Decision{Verdict: admission.RejectNoBackend}
	for _, cl := range c.snap.Load().classes {
		for _, q := range cl.queues {
			for w := q.take(true); w != nil; {
				next, wk := w.next, w.wk
				w.ch <- reject
				if wk != nil {
					c.noteWake(wk)
				}
				w = next
			}
		}
	}
}

// QueueLen returns the number of requests waiting in class i's queues (i is
// clamped like a request's class).
func (c *Controller) QueueLen(i int) int {
	s := c.snap.Load()
	return int(s.classes[s.classIndex(i)].queueLen())
}

// noteWake records wk for the end of the run. Called with c.run held.
func (c *Controller) noteWake(wk admission.Waker) {
	for _, w := range c.run.wakes {
		if w == wk {
			return
		}
	}
	c.run.wakes = append(c.run.wakes, wk)
}

// maxWakers bounds the Wakers a run keeps a buffer for; more is fine, the
// buffer is just not kept.
const maxWakers = 64

// unlockAndWake releases c.run and then tells the Wakers the run recorded.
func (c *Controller) unlockAndWake() {
	if len(c.run.wakes) == 0 {
		c.run.Unlock()
		return
	}
	var buf [maxWakers]admission.Waker
	wakes := buf[:0]
	if len(c.run.wakes) > maxWakers {
		wakes = make([]admission.Waker, 0, len(c.run.wakes))
	}
	wakes = append(wakes, c.run.wakes...)
	clear(c.run.wakes)
	c.run.wakes = c.run.wakes[:0]
	c.run.Unlock()
	for _, wk := range wakes {
		wk.Wake()
	}
}

// Parked is a request waiting in its class's queue for a caller that must
// not block (an event loop). It is pooled: after Result returns ready, or
// after Cancel, the caller must not use it again.
type Parked struct {
	c     *Controller
	cl    *class
	q     *queue
	w     *waiter
	start time.Time
}

// Park is Admit for a caller that must not block. When r can be decided at
// once (a class without a period, a full queue, no backend, a closed
// controller) it returns the decision with decided true. Otherwise it queues
// r and returns a Parked: the class's next run decides it and then tells wk,
// and the caller takes the decision with Parked.Result. Like Admit, the
// decision is counted once, when the caller takes it. Park does not
// allocate.
func (c *Controller) Park(r *admission.Request, wk admission.Waker) (d admission.Decision, p *Parked, decided bool) {
	for {
		s := c.snap.Load()
		idx := s.classIndex(r.Class)
		cl := s.classes[idx]
		if c.closed.Load() {
			return c.count(cl, admission.Decision{Verdict: admission.RejectNoBackend}), nil, true
		}
		sNs := float64(max(r.S, 0))
		if r.Share == admission.SpareOnly {
			return c.count(cl, c.spareOnly(s, idx, sNs)), nil, true
		}
		tier := r.Share.Tier()
		if cl.period == 0 {
			return c.count(cl, c.testNow(s, idx, sNs, tier, r.Rank)), nil, true
		}
		n := c.st.Healthy()
		if n <= 0 {
			return c.count(cl, admission.Decision{Verdict: admission.RejectNoBackend}), nil, true
		}
		if ok, ot := c.early(s, idx, n, sNs, tier, r.Rank); ok {
			return c.count(cl, admitDecision(ot)), nil, true
		}
		q := cl.queues[s.bucket(r.Bucket)]
		w := c.waiters.Get().(*waiter)
		w.fill(r, sNs)
		w.wk = wk
		start := c.now()
		switch q.push(w) {
		case pushRetired:
			w.wk = nil
			c.waiters.Put(w)
			continue
		case pushFull:
			w.wk = nil
			c.waiters.Put(w)
			m := c.model(s, n)
			return c.count(cl, admission.Decision{
				Verdict:    admission.RejectQueueFull,
				RetryAfter: retryAfter(m.drain(sNs, m.rsla-float64(cl.period))),
			}), nil, true
		}
		if h := c.testHookEnqueued; h != nil {
			h()
		}
		p := c.parked.Get().(*Parked)
		*p = Parked{c: c, cl: cl, q: q, w: w, start: start}
		return admission.Decision{}, p, false
	}
}

// Result returns the parked request's decision once its run has made it
// (ready true), counting it; ready is false while it still waits. After
// ready, p is released.
func (p *Parked) Result() (d admission.Decision, ready bool) {
	select {
	case d = <-p.w.ch:
	default:
		return admission.Decision{}, false
	}
	c, cl := p.c, p.cl
	if d.Verdict == admission.Admit {
		c.pending.Add(-1)
	}
	p.finish()
	return c.count(cl, d), true
}

// Cancel withdraws a parked request whose client has gone: it leaves its
// queue, or, if a run has already decided it, the decision is dropped (an
// admission is given back). It is counted as RejectGone. p is released.
// If a run has taken the request but not yet sent its decision, Cancel
// waits for the rest of that run (O(b·L) tests, no I/O): a bounded wait,
// the only one in Park's API.
func (p *Parked) Cancel() {
	if !p.q.remove(p.w) {
		// A run has taken it; its decision is in the channel or on the way.
		if d := <-p.w.ch; d.Verdict == admission.Admit {
			p.c.pending.Add(-1)
		}
	}
	c, cl := p.c, p.cl
	p.finish()
	c.count(cl, admission.Decision{Verdict: admission.RejectGone})
}

var _ admission.Pending = (*Parked)(nil)

func (p *Parked) finish() {
	c := p.c
	p.cl.wait.observe(c.now().Sub(p.start))
	p.w.wk = nil
	c.waiters.Put(p.w)
	*p = Parked{}
	c.parked.Put(p)
}
