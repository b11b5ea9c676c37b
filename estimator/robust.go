package estimator

import (
	"math"
	"time"
)

// Outlier resistance (see "Outliers" in doc.go). Decisions, not settings:
// they bound what any one client can do, and the bounds are written in
// terms of the half-life, which is a setting.
const (
	// Rho bounds a sample's weight where no ceiling holds it: a young
	// key's S sample, and the fallback queueing sample, count as at most
	// Rho·m + Floor against their level m (winsorising). With Rho = 2 one
	// sample moves a mean of decayed weight w up by at most a factor
	// 1 + 1/(w+1) (plus Floor/(w+1)).
	Rho = 2.0
	// Tail bounds a grown-up key's sample: it counts as at most
	// Tail·m + Floor against the key's mean m. A sustained share s of
	// requests costing c·m is then learned in full when s·Tail ≥ 1 (2% and
	// more: a heavy tail is the key's real cost), and otherwise moves the
	// mean to at most about m/(1 − s·Tail) (1%: 2×; 0.1%: 1.05×) however
	// long it lasts. Issue 14's sweep URL (5 ms, 2% at 500 ms) is learned;
	// a trickle of 12 s outliers among 10 ms requests is not (doc.go,
	// Outliers).
	Tail = 50.0
	// Floor lets a zero or tiny estimate move at all: it is added to every
	// clamp and to the rise limit.
	Floor = time.Millisecond
	// YoungSamples and YoungTime: a key is young until it has had
	// YoungSamples samples and its first is YoungTime old; a class's prior
	// likewise, counting decayed weight from its first refresh with
	// samples (see young). A young key is not held to its ceiling but to
	// Rho·prior + Floor of an established class (so a new key whose first
	// samples came in low, fallback S = measured − Q can be 0, catches up
	// with its class at once), and to nothing but winsorising at
	// Rho·mean + Floor while its class is young too; a young
	// prior is not held at all. YoungTime exists for cold starts: the
	// first completions are the shortest of everything dispatched
	// together (step10x: a key of mean 80 ms began with samples of
	// 2–20 ms from bronze's first batch), and an estimate held from its
	// 8th sample stayed at a fraction of the truth for a minute.
	YoungSamples = 8
	YoungTime    = 500 * time.Millisecond
	// Z is the headroom of a ceiling in standard errors of the mean (see
	// ceiling): an honest estimate wanders about its level by a few
	// standard errors, and must not meet the rise limit when it does.
	Z = 3.0
)

const floorNs = float64(Floor)

// winsorise clamps sample x against a level m ≥ 0: min(x, Rho·m + Floor).
func winsorise(x, m float64) float64 { return min(x, Rho*m+floorNs) }

// tailClamp clamps a grown-up key's sample x against its mean m ≥ 0:
// min(x, Tail·m + Floor).
func tailClamp(x, m float64) float64 { return min(x, Tail*m+floorNs) }

// riseLimit is the highest a confirmed level (a key's base, a class's
// prior) may reach dt after it was level: (level + Floor)·4^(dt/H) − Floor,
// with invHalf = 1/H in 1/ns. That is, level + Floor may double every half
// of a half-life (15 s by default): twice the pace at which a decayed
// mean closes a gap, so a real rise is learned about as fast as the
// half-life allows (see doc.go),
// slow enough that a burst of outliers lasting a few seconds moves a level
// by a few percent. dt counts up to half a half-life: the time between
// samples is what accrues, so after any idle period a burst can at most
// double a level (plus Floor). It never falls below level; dt ≤ 0 (the
// same instant, or time running backwards) allows no rise.
func riseLimit(level float64, dt int64, invHalf float64) float64 {
	if dt <= 0 {
		return level
	}
	x := min(2*float64(dt)*invHalf, 1)
	return (level+floorNs)/exp2neg(x) - floorNs
}

// young tells whether a statistic with n samples (or decayed weight), the
// first at first (unix ns; 0: none yet), is still young at now: it has had
// fewer than YoungSamples, or its first came less than YoungTime ago.
func young(n float64, first, now int64) bool {
	return n < YoungSamples || first == 0 || now-first < int64(YoungTime)
}

// headroom is how far above its mean d's ceiling may sit: Z standard
// errors of the mean, Z·σ/√w (σ of the samples as counted). It is large
// while d has few or scattered samples and shrinks as samples accumulate;
// for a key whose samples agree (σ = 0) it is 0.
func (d *dstat) headroom() float64 {
	if d.w <= 0 {
		return 0
	}
	return Z * math.Sqrt(d.variance()/d.w)
}

// ceiling is the highest d's mean may reach at now, given its previous
// ceiling c set at cAt: c risen by riseLimit over now − cAt, but at most
// d.mean + d.headroom(); and at least d.mean risen by riseLimit since its
// last sample (so a key whose samples agree, σ = 0, still learns a rise).
// Since d.mean ≤ c, the ceiling rises no faster than riseLimit whatever
// the samples do: a burst of outliers moves the mean at most to the
// headroom it had, and then at the rise limit. But the mean may wander
// below the ceiling by the standard errors of honest samples without
// meeting it. (Holding the mean itself to riseLimit per sample cut every
// honest upward step that came soon after the previous sample, or with an
// earlier timestamp as concurrent completions do, and never a downward
// one: exponential service times of mean 80 ms were estimated near 45 ms
// after a minute and 66 ms at steady state; TestSkewedUnbiased.)
func ceiling(c float64, cAt int64, d *dstat, now int64, invHalf float64) float64 {
	return max(riseLimit(d.mean, now-d.last, invHalf), min(riseLimit(c, now-cAt, invHalf), d.mean+d.headroom()))
}

// Probe tells admission whether to let this request through although it
// was rejected, so that a class or key whose estimate is too high still
// gets samples: rejected requests produce none, and without them nothing
// would ever lower the estimate. It returns true at most once per
// Config.ProbeInterval per class, and only when the key has had no sample
// for at least that interval (an unseen key: its class, as of the last
// refresh). A class never sampled is not probed: it has learned nothing
// that could be wrong. A caller that gets true must admit the request; the probe is
// spent. A nil key asks about the class alone.
//
// It costs one atomic load while the class's probe is not yet due, and a
// shard lock when it is; it does not allocate.
func (e *Estimator) Probe(class int, key []byte, now time.Time) bool {
	sn := e.snap.Load()
	if uint(class) >= uint(len(sn.classes)) {
		return false
	}
	cs := sn.classes[class]
	n := now.UnixNano()
	next := cs.nextProbe.Load()
	if n < next {
		return false
	}
	last := cs.lastSample.Load()
	if key != nil {
		h := e.hash(cs.id, key)
		sh := e.shardOf(h)
		sh.mu.Lock()
		if i, ok := sh.mu.idx[h]; ok {
			if en := &sh.mu.ents[i]; en.class == cs.id && en.key == string(key) {
				last = en.st.last
			}
		}
		sh.mu.Unlock()
	}
	iv := int64(sn.cfg.ProbeInterval)
	if last == 0 || n-last < iv { // never sampled: nothing learned to correct
		return false
	}
	return cs.nextProbe.CompareAndSwap(next, n+iv)
}
