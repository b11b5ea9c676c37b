package estimator

import (
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// Estimator holds one app's learned service times, queueing delay and
// arrival rates. It is safe for concurrent use. Learned state is keyed by
// class name and key, so Reconfigure (a policy reload) keeps it.
type Estimator struct {
	snap   atomic.Pointer[snapshot]
	seed   maphash.Seed
	shards []shard
	shift  uint // shard index = hash >> shift

	size      atomic.Int64
	evictions atomic.Uint64

	// Results of the last refresh, float64 bits.
	q       atomic.Uint64 // ns
	qNow    atomic.Uint64 // ns: QNow
	appMean atomic.Uint64 // ns, all classes together
	appW    atomic.Uint64
	alpha   atomic.Uint64

	lastRefresh atomic.Int64 // unix ns

	agg struct { // refresh; lock order: agg.Mutex, then one shard at a time
		sync.Mutex
		// qRepNow, qFbNow: QNow's means of the reported and fallback
		// queue samples, each completion a step (queueNowFold).
		qRepNow, qFbNow dstat
		scratch         []dstat
		fresh           []dstat // by class id: the S samples new since the last refresh
	}

	mu struct { // Reconfigure; lock order: mu, then one shard at a time
		sync.Mutex
		all    []*classState // by id
		byName map[string]*classState
	}
}

// classState is one class's learned state. It lives as long as the
// estimator, whatever the class's index in the current configuration.
type classState struct {
	id   int32
	name string
	// Results of the last refresh, float64 bits.
	variance, weight atomic.Uint64
	// prior is the class's mean S (ns, float64 bits) that unseen keys get:
	// pst's mean. pst is the decayed mean of the class's samples, fed the
	// new ones at each refresh and its mean then held to its ceiling ceil
	// once it is no longer young (see doc.go, Outliers); pst, ceil guarded
	// by Estimator.agg.
	prior atomic.Uint64
	pst   dstat
	ceil  float64 // the highest pst.mean may reach as of lastSample
	// first is the unix ns of the first refresh that found S samples of
	// the class: the prior is young (not held) for YoungTime after it.
	first atomic.Int64
	// lastSample is the unix ns of the last refresh that found S samples of
	// the class (so at most Refresh late); nextProbe is when the next probe
	// may be granted (see Probe).
	lastSample atomic.Int64
	nextProbe  atomic.Int64
	rate       rateState
}

// snapshot is the immutable configuration in force, swapped on Reconfigure.
type snapshot struct {
	cfg       Config
	invHalf   float64 // 1/HalfLife in 1/ns
	invQHalf  float64
	buckets   *Buckets
	classes   []*classState // by current class index
	names     []string
	all       []*classState // by id, every class ever configured
	refresh   int64
	win       int64
	rateAlpha float64 // weight of a new window's rate
}

type entry struct {
	key   string
	hash  uint64
	class int32
	live  bool
	ref   bool // CLOCK reference bit
	// st is the key's decayed mean of its samples as counted (winsorised
	// while young), its mean held to its ceiling once the key is no longer
	// young (see doc.go, Outliers).
	st dstat
	// ceil is the highest st.mean may reach as of ceilAt (see ceiling).
	ceil   float64
	ceilAt int64
	first  int64  // unix ns of the first sample
	n      uint32 // samples so far, saturating
}

type shard struct {
	mu struct {
		sync.Mutex
		idx  map[uint64]int32 // hash -> index in ents
		ents []entry
		free []int32
		hand int
		size int
		cap  int
		cls  []batched // per class id: every S sample of the class in this shard
		qRep batched   // reported queue;dur samples
		qFb  batched   // fallback queueing samples: measured − Ŝ(key)
		// The same samples for QNow: only their pending sums, which
		// the refresh takes (batched.take).
		qRepNow, qFbNow batched
		fit             fitState
	}
	_ [64]byte // keep neighbouring shards' locks off one cache line
}

// New returns an estimator for an app with the given classes (most important
// first, as classify.Classifier.Names returns them).
func New(cfg Config, classes []string) (*Estimator, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	n := 1
	for n < 64 && n*2*64 <= c.MaxKeys {
		n *= 2
	}
	e := &Estimator{seed: maphash.MakeSeed(), shards: make([]shard, n)}
	e.shift = uint(64 - bits.TrailingZeros(uint(n))) // the top log2(n) bits pick the shard
	if n == 1 {
		e.shift = 63 // masked to 0 in shardOf
	}
	for i := range e.shards {
		e.shards[i].mu.idx = make(map[uint64]int32)
	}
	e.mu.byName = make(map[string]*classState)
	if err := e.Reconfigure(cfg, classes); err != nil {
		return nil, err
	}
	return e, nil
}

// Reconfigure applies a new configuration and class list. Classes are
// matched by name: a renamed class starts afresh, a reordered one keeps its
// state, a removed one keeps its state (until its keys are evicted) in case
// it comes back. Lowering MaxKeys evicts at once.
func (e *Estimator) Reconfigure(cfg Config, classes []string) error {
	c, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	if err := checkClasses(classes); err != nil {
		return err
	}
	b, err := NewBuckets(c.Edges)
	if err != nil {
		return fmt.Errorf("estimator: %w", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	sn := &snapshot{
		cfg:       c,
		invHalf:   1 / float64(c.HalfLife),
		invQHalf:  1 / float64(c.QueueHalfLife),
		buckets:   b,
		names:     append([]string(nil), classes...),
		refresh:   int64(c.Refresh),
		win:       int64(c.RateWindow),
		rateAlpha: -math.Expm1(-float64(c.RateWindow) / float64(c.RateSmoothing)),
	}
	for _, name := range classes {
		cs := e.mu.byName[name]
		if cs == nil {
			cs = &classState{id: int32(len(e.mu.all)), name: name}
			e.mu.all = append(e.mu.all, cs)
			e.mu.byName[name] = cs
		}
		sn.classes = append(sn.classes, cs)
	}
	sn.all = e.mu.all[:len(e.mu.all):len(e.mu.all)]
	old := e.snap.Load()
	if old == nil || !c.FitAlpha || !old.cfg.FitAlpha {
		e.alpha.Store(math.Float64bits(c.Alpha))
	}
	for i := range e.shards {
		sh := &e.shards[i]
		capacity := c.MaxKeys / len(e.shards)
		if i < c.MaxKeys%len(e.shards) {
			capacity++
		}
		sh.mu.Lock()
		sh.mu.cap = capacity
		for sh.mu.size > sh.mu.cap {
			e.evictOne(sh)
		}
		sh.mu.Unlock()
	}
	e.snap.Store(sn)
	return nil
}

func (e *Estimator) hash(id int32, key []byte) uint64 {
	return maphash.Bytes(e.seed, key) ^ (uint64(id)+1)*0x9E3779B97F4A7C15
}

func (e *Estimator) shardOf(h uint64) *shard {
	return &e.shards[(h>>e.shift)&uint64(len(e.shards)-1)]
}

// Estimate returns the key's estimated inherent service time S and its
// bucket. A key never seen gets its class's mean S (or, while the class has
// no samples, the app's mean; with no samples at all, 0, the smallest
// bucket). An out-of-range class is treated like an unseen key of an empty
// class. Estimate does not allocate.
func (e *Estimator) Estimate(class int, key []byte) (s time.Duration, bucket int) {
	sn := e.snap.Load()
	if uint(class) < uint(len(sn.classes)) {
		cs := sn.classes[class]
		h := e.hash(cs.id, key)
		sh := e.shardOf(h)
		sh.mu.Lock()
		if i, ok := sh.mu.idx[h]; ok {
			en := &sh.mu.ents[i]
			if en.class == cs.id && en.key == string(key) {
				en.ref = true
				m := en.st.mean
				sh.mu.Unlock()
				s = time.Duration(m)
				return s, sn.buckets.Bucket(s)
			}
		}
		sh.mu.Unlock()
		if math.Float64frombits(cs.weight.Load()) > 0 {
			s = time.Duration(math.Float64frombits(cs.prior.Load()))
			return s, sn.buckets.Bucket(s)
		}
	}
	s = time.Duration(math.Float64frombits(e.appMean.Load()))
	return s, sn.buckets.Bucket(s)
}

// Observe records one finished request whose inherent service time s is
// known (reported by the backend), and its queueing delay when queue ≥ 0.
// A negative s records only the queue sample. Observe does not allocate for
// a key already in the table.
func (e *Estimator) Observe(class int, key []byte, s, queue time.Duration, now time.Time) {
	o := obs{s: float64(s), hasS: s >= 0}
	if queue >= 0 {
		o.q, o.hasQ = float64(queue), true
	}
	e.observe(class, key, &o, now.UnixNano())
}

// ObserveMeasured records a request whose backend reported nothing, from the
// proxy-measured time (request written to last response byte):
// S = measured − Q clamped at 0 (docs/algorithms.md §1), and, when the key already
// has an estimate Ŝ, a fallback queueing sample measured − Ŝ clamped at 0.
// Fallback queueing samples drive Q only while no backend reports queue;dur.
func (e *Estimator) ObserveMeasured(class int, key []byte, measured time.Duration, now time.Time) {
	if measured < 0 {
		return
	}
	q := math.Float64frombits(e.q.Load())
	o := obs{s: max(0, float64(measured)-q), q: q, hasS: true, fallback: true, measured: float64(measured)}
	e.observe(class, key, &o, now.UnixNano())
}

// ObserveTiming records a finished request from its parsed Server-Timing
// (see ParseServerTiming; the zero Timing when there was none) and the
// proxy-measured time (≤ 0 when unknown):
//
//   - cpu and/or io reported: S = cpu + α·io; Q sample = queue if reported;
//   - only queue reported: Q sample = queue, and S = measured − queue;
//   - nothing reported: ObserveMeasured.
func (e *Estimator) ObserveTiming(class int, key []byte, t Timing, measured time.Duration, now time.Time) {
	switch {
	case t.HasS():
		alpha := e.Alpha()
		o := obs{s: float64(t.S(alpha)), hasS: true}
		if t.HasQueue {
			o.q, o.hasQ = float64(t.Queue), true
		}
		if t.HasCPU && t.HasIO && measured > 0 && e.snap.Load().cfg.FitAlpha {
			o.fit, o.fx, o.fy = true, float64(t.IO), float64(measured-t.Queue-t.CPU)
		}
		e.observe(class, key, &o, now.UnixNano())
	case t.HasQueue:
		o := obs{q: float64(t.Queue), hasQ: true}
		if measured > 0 {
			o.s, o.hasS = max(0, float64(measured-t.Queue)), true
		}
		e.observe(class, key, &o, now.UnixNano())
	case measured > 0:
		e.ObserveMeasured(class, key, measured, now)
	}
}

type obs struct {
	s        float64
	q        float64 // the queue sample when hasQ; for a fallback, the Q in force
	hasS     bool
	hasQ     bool
	fallback bool
	measured float64
	fit      bool
	fx, fy   float64
}

func (e *Estimator) observe(class int, key []byte, o *obs, now int64) {
	sn := e.snap.Load()
	if uint(class) >= uint(len(sn.classes)) {
		return
	}
	cs := sn.classes[class]
	h := e.hash(cs.id, key)
	sh := e.shardOf(h)
	sh.mu.Lock()
	if o.hasQ {
		sh.mu.qRep.add(o.q)
		sh.mu.qRepNow.add(o.q)
	}
	if o.fit {
		sh.mu.fit.pend.add(o.fx, o.fy)
	}
	if o.hasS {
		i, ok := sh.mu.idx[h]
		if ok {
			if en := &sh.mu.ents[i]; en.class != cs.id || en.key != string(key) {
				e.drop(sh, i) // 64-bit hash collision: the newcomer replaces it
				ok = false
			}
		}
		if ok {
			sh.mu.ents[i].ref = true
		} else {
			// A new key starts with its reference bit clear, so one-off keys
			// (URL explosion) are the first to go.
			i = e.insert(sh, h, cs.id, key)
		}
		// cx is the class's sample: winsorised against the key's confirmed
		// level, or for a key without one against the class's prior.
		cx, priorCap := o.s, math.Inf(1)
		if !young(math.Float64frombits(cs.weight.Load()), cs.first.Load(), now) {
			priorCap = winsorise(math.Inf(1), math.Float64frombits(cs.prior.Load()))
			cx = min(o.s, priorCap)
		}
		if i >= 0 {
			en := &sh.mu.ents[i]
			if o.fallback && en.st.w > 0 {
				// The fallback queueing sample is the measured time
				// winsorised against what was expected, Q + Ŝ(key), less
				// Ŝ(key): Q has no rise limit, so this clamp is its only
				// bound. The S sample is clamped below as a reported one
				// is, not here: a heavy tail must reach S (see
				// "Outliers" in doc.go).
				m := winsorise(o.measured, o.q+en.st.mean)
				sh.mu.qFb.add(max(0, m-en.st.mean))
				sh.mu.qFbNow.add(max(0, m-en.st.mean))
			}
			if en.st.w > 0 {
				// A grown-up key's sample counts as at most Tail·mean +
				// Floor, loose enough for a heavy tail's real cost, and
				// its mean is held to its ceiling (see ceiling), which
				// bounds the pace of any rise (see "Outliers" in doc.go).
				// A young key may also rise freely up to what a new key's
				// sample counts for in its class (Rho·prior + Floor;
				// unbounded while the class is young too), and each of
				// its samples is winsorised at Rho·mean + Floor: growth is
				// then at most the ratio of weights (see YoungSamples).
				lim := ceiling(en.ceil, en.ceilAt, &en.st, now, sn.invHalf)
				x := tailClamp(o.s, en.st.mean)
				if young(float64(en.n), en.first, now) {
					lim = max(lim, priorCap)
					x = winsorise(o.s, en.st.mean)
				}
				cx = en.st.addUpTo(x, now, sn.invHalf, lim)
				// The ceiling in force, or with no cap in force (a young
				// key of a young class) mean + headroom.
				en.ceil = min(lim, max(en.st.mean+en.st.headroom(), en.ceil))
				en.ceilAt = max(en.ceilAt, now)
			} else {
				// A key's first sample is taken as is: it is the best
				// there is about the key, and a new slow URL must not be
				// under-estimated for minutes. The class gets it clamped.
				en.st.add(o.s, now, sn.invHalf)
				en.ceil, en.ceilAt, en.first = en.st.mean, now, now
			}
			if en.n < math.MaxUint32 {
				en.n++
			}
		}
		if int(cs.id) >= len(sh.mu.cls) {
			sh.mu.cls = append(sh.mu.cls, make([]batched, len(sn.all)-len(sh.mu.cls))...)
		}
		sh.mu.cls[cs.id].add(cx)
	}
	sh.mu.Unlock()
	if now-e.lastRefresh.Load() >= sn.refresh {
		e.maybeRefresh(sn, now)
	}
}

// insert adds a key, evicting first when the shard is full. It returns -1
// when the shard has no capacity at all. Called with sh.mu held.
func (e *Estimator) insert(sh *shard, h uint64, id int32, key []byte) int32 {
	if sh.mu.cap <= 0 {
		return -1
	}
	for sh.mu.size >= sh.mu.cap {
		e.evictOne(sh)
	}
	var i int32
	if n := len(sh.mu.free); n > 0 {
		i = sh.mu.free[n-1]
		sh.mu.free = sh.mu.free[:n-1]
	} else {
		sh.mu.ents = append(sh.mu.ents, entry{})
		i = int32(len(sh.mu.ents) - 1)
	}
	sh.mu.ents[i] = entry{key: string(key), hash: h, class: id, live: true}
	sh.mu.idx[h] = i
	sh.mu.size++
	e.size.Add(1)
	return i
}

// evictOne runs the CLOCK hand to the first live entry whose reference bit
// is clear, clearing bits on the way, and evicts it. Called with sh.mu held
// and sh.mu.size > 0; it ends within two sweeps.
func (e *Estimator) evictOne(sh *shard) {
	for {
		if sh.mu.hand >= len(sh.mu.ents) {
			sh.mu.hand = 0
		}
		i := sh.mu.hand
		sh.mu.hand++
		en := &sh.mu.ents[i]
		if !en.live {
			continue
		}
		if en.ref {
			en.ref = false
			continue
		}
		e.drop(sh, int32(i))
		e.evictions.Add(1)
		return
	}
}

func (e *Estimator) drop(sh *shard, i int32) {
	delete(sh.mu.idx, sh.mu.ents[i].hash)
	sh.mu.ents[i] = entry{}
	sh.mu.free = append(sh.mu.free, i)
	sh.mu.size--
	e.size.Add(-1)
}

func (e *Estimator) maybeRefresh(sn *snapshot, now int64) {
	last := e.lastRefresh.Load()
	if now-last < sn.refresh || !e.lastRefresh.CompareAndSwap(last, now) {
		return
	}
	e.refresh(sn, now)
}

// Refresh recombines the per-class means, Q and the α fit from the shards
// now. Observe does this by itself every Config.Refresh; call Refresh to
// read exact values at a given instant (tests, a status page).
func (e *Estimator) Refresh(now time.Time) {
	n := now.UnixNano()
	e.lastRefresh.Store(n)
	e.refresh(e.snap.Load(), n)
}

func (e *Estimator) refresh(sn *snapshot, now int64) {
	e.agg.Lock()
	defer e.agg.Unlock()
	if cap(e.agg.scratch) < len(sn.all) {
		e.agg.scratch = make([]dstat, len(sn.all))
		e.agg.fresh = make([]dstat, len(sn.all))
	}
	acc := e.agg.scratch[:len(sn.all)]
	fresh := e.agg.fresh[:len(sn.all)]
	clear(acc)
	clear(fresh)
	var qRep, qFb, newRep, newFb dstat
	var fit fitAcc
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		for id := range min(len(sh.mu.cls), len(acc)) {
			fresh[id].merge(sh.mu.cls[id].pending(now))
			acc[id].merge(sh.mu.cls[id].fold(now, sn.invHalf))
		}
		qRep.merge(sh.mu.qRep.fold(now, sn.invQHalf))
		qFb.merge(sh.mu.qFb.fold(now, sn.invQHalf))
		newRep.merge(sh.mu.qRepNow.take(now))
		newFb.merge(sh.mu.qFbNow.take(now))
		sh.mu.fit.acc.fold(&sh.mu.fit.pend, now, sn.invHalf)
		fit.mergeAt(sh.mu.fit.acc, now, sn.invHalf)
		sh.mu.Unlock()
	}
	var appW, appSum float64
	for id, cs := range sn.all {
		d := acc[id]
		if f := fresh[id]; f.w > 0 {
			// The prior takes the new samples like any decayed mean, and
			// its mean is then held to its ceiling (risen by riseLimit
			// over the time since the class's previous samples), unless
			// the prior is young.
			if cs.first.Load() == 0 {
				cs.first.Store(now)
			}
			lim := math.Inf(1)
			if !young(cs.pst.w, cs.first.Load(), now) {
				lim = ceiling(cs.ceil, cs.lastSample.Load(), &cs.pst, now, sn.invHalf)
			}
			cs.pst = cs.pst.at(now, sn.invHalf)
			cs.pst.merge(f)
			cs.pst.mean = min(cs.pst.mean, lim)
			cs.ceil = min(lim, max(cs.pst.mean+cs.pst.headroom(), cs.ceil))
			cs.prior.Store(math.Float64bits(cs.pst.mean))
			cs.lastSample.Store(now)
		}
		if d.w > 0 {
			appW += d.w
			appSum += d.w * cs.pst.mean
		}
		cs.variance.Store(math.Float64bits(d.variance()))
		cs.weight.Store(math.Float64bits(d.w))
	}
	if appW > 0 {
		e.appMean.Store(math.Float64bits(appSum / appW))
	}
	e.appW.Store(math.Float64bits(appW))
	e.agg.qRepNow.queueNowFold(newRep, now)
	e.agg.qFbNow.queueNowFold(newFb, now)
	// QNow takes its samples from the same source as Q: reported queues
	// while they arrive (Q's weight decides, so that QNow's short memory
	// does not flip between the two sources), else the fallback samples.
	var q, qNow float64
	switch {
	case qRep.w >= 1:
		q, qNow = qRep.mean, e.agg.qRepNow.mean
	case qFb.w > 0:
		q, qNow = qFb.mean, e.agg.qFbNow.mean
	default:
		q, qNow = qRep.mean, e.agg.qRepNow.mean
	}
	e.q.Store(math.Float64bits(q))
	e.qNow.Store(math.Float64bits(qNow))
	if sn.cfg.FitAlpha {
		if a, ok := fit.slope(20); ok {
			e.alpha.Store(math.Float64bits(max(0, a)))
		}
	}
}

// Q returns the estimated queueing delay at the backends: the decayed mean
// of reported queue;dur samples while they arrive (decayed weight ≥ 1),
// otherwise of fallback queueing samples. It is as of the last refresh.
func (e *Estimator) Q() time.Duration {
	return time.Duration(math.Float64frombits(e.q.Load()))
}

// QNow's memory (doc.go, "The queue now"): each completion is a step of
// gain QueueNowGain (RFC 6298's gain for the smoothed round-trip time),
// and the old mean's weight also halves every QueueNowHalfLife, so that
// QNow is about the last eight completions or the last fraction of a
// second of them, whichever is fewer.
const (
	QueueNowGain     = 1.0 / 8
	QueueNowHalfLife = 250 * time.Millisecond
)

// queueNowFold folds a refresh's new queue samples b (every shard's, as
// one batch of b.w completions, at now) into d, QNow's mean: the old mean
// keeps (1 − g)^n of its weight for the n completions and 2^(−Δt/H) for
// the time since its last update, and the batch, its samples taken as
// equal, gets the weight of n steps of gain g, (1 − (1 − g)^n)/g; so d's
// weight stays at most 1/g. Called with e.agg held.
func (d *dstat) queueNowFold(b dstat, now int64) {
	if b.w <= 0 {
		return
	}
	steps := math.Pow(1-QueueNowGain, b.w)
	keep := steps * decay(d.last, now, 1/float64(QueueNowHalfLife))
	w := (1 - steps) / QueueNowGain
	b.m2 *= w / b.w
	b.w = w
	d.w *= keep
	d.m2 *= keep
	d.merge(b)
	d.last = now
}

// QNow returns the queueing delay the latest completions met: the same
// samples as Q (reported queue;dur while they arrive, else the fallback
// samples), as a mean over about the last 1/QueueNowGain (8) completions
// or the last few QueueNowHalfLife (250 ms) of them, whichever is fewer,
// as of the last refresh (doc.go, "The queue now").
// Q answers what queue a request should expect over the next seconds,
// and is the batch test's; QNow answers whether the backends are queueing
// now, and is the work-conserving rule's.
func (e *Estimator) QNow() time.Duration {
	return time.Duration(math.Float64frombits(e.qNow.Load()))
}

// Alpha returns the α in use: Config.Alpha, or the fitted value.
func (e *Estimator) Alpha() float64 { return math.Float64frombits(e.alpha.Load()) }

// ClassMean returns class's confirmed mean S as of the last refresh, the
// prior of its unseen keys (0 for an unknown class or one without samples).
func (e *Estimator) ClassMean(class int) time.Duration {
	m, _, _ := e.ClassStats(class)
	return m
}

// ClassStats returns class's confirmed mean S (the prior of its unseen
// keys: the decayed mean of samples as counted, risen no faster than the
// rise limit; see doc.go, Outliers), the standard deviation of those
// samples (the G/G/1 model's σ_b) and their decayed weight, as of the last
// refresh.
func (e *Estimator) ClassStats(class int) (mean, stddev time.Duration, weight float64) {
	sn := e.snap.Load()
	if uint(class) >= uint(len(sn.classes)) {
		return 0, 0, 0
	}
	cs := sn.classes[class]
	if math.Float64frombits(cs.weight.Load()) <= 0 {
		return 0, 0, 0
	}
	return time.Duration(math.Float64frombits(cs.prior.Load())),
		time.Duration(math.Sqrt(math.Float64frombits(cs.variance.Load()))),
		math.Float64frombits(cs.weight.Load())
}

// KeyStats is one key's learned service time.
type KeyStats struct {
	// Mean is what Estimate returns for the key: the decayed mean of its
	// samples as counted, risen no faster than the rise limit (doc.go,
	// Outliers). StdDev is of those samples.
	Mean, StdDev time.Duration
	// Weight is the decayed number of samples as of the last one.
	Weight float64
}

// Stats returns the key's learned statistics, if the key is in the table.
func (e *Estimator) Stats(class int, key []byte) (KeyStats, bool) {
	sn := e.snap.Load()
	if uint(class) >= uint(len(sn.classes)) {
		return KeyStats{}, false
	}
	cs := sn.classes[class]
	h := e.hash(cs.id, key)
	sh := e.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i, ok := sh.mu.idx[h]; ok {
		if en := &sh.mu.ents[i]; en.class == cs.id && en.key == string(key) {
			return KeyStats{
				Mean:   time.Duration(en.st.mean),
				StdDev: time.Duration(math.Sqrt(en.st.variance())),
				Weight: en.st.w,
			}, true
		}
	}
	return KeyStats{}, false
}

// Len is the number of keys in the table.
func (e *Estimator) Len() int { return int(e.size.Load()) }

// Evictions is the number of keys evicted so far.
func (e *Estimator) Evictions() uint64 { return e.evictions.Load() }

// MaxKeys is the table's cap in force.
func (e *Estimator) MaxKeys() int { return e.snap.Load().cfg.MaxKeys }

// Buckets returns the bucket mapping in force.
func (e *Estimator) Buckets() *Buckets { return e.snap.Load().buckets }

// Classes returns the class names in force, by index. Do not modify.
func (e *Estimator) Classes() []string { return e.snap.Load().names }

// Config returns the configuration in force, with defaults filled in.
func (e *Estimator) Config() Config { return e.snap.Load().cfg }

// Eta returns η = inflight / n, the mean number of requests in service per
// backend (docs/algorithms.md §0), from the proxy's exact in-flight count and the
// number n of healthy backends it owns. With n ≤ 0 there is no capacity and
// η is +Inf (0 when nothing is in flight), so an admission test fails.
func Eta(inflight int64, n int) float64 {
	if n <= 0 {
		if inflight <= 0 {
			return 0
		}
		return math.Inf(1)
	}
	return float64(inflight) / float64(n)
}
