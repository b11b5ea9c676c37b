package control

import (
	"math"
	"time"
)

// loadEvery is how often Load recomputes: between two recomputations
// every request reads the same value from an atomic.
const loadEvery = 5 * time.Millisecond

// maxLoad caps Load (the header's value stays short and parsable).
const maxLoad = 99.99

// Load is the farm's load as the batch model predicts it, for the
// degradation signal (policy.Degradation, docs/policy.md "degradation"):
// the predicted response time of one more request of the app's mean
// service time, over R_sla,
//
//	load = (Q + max(1, (η + 1)/P)·S̄) / R_sla
//
// with Q the backends' queueing delay (App.Q), η = in flight / healthy
// backends, P the backends' parallelism as batch mode models it, and S̄
// the classes' mean inherent service times weighted by their arrival
// rates. It is the left side of batch mode's test for a batch of one
// (docs/algorithms.md §2) over its right side: at or below 1 a request
// would be admitted now; under overload admission holds it near 1
// whatever the mode. 0 with no healthy backend or nothing learned yet.
//
// Decision: computed at most every loadEvery (5 ms) by the request that
// finds the value stale (a compare-and-swap on its time); every other
// request does two atomic loads. Never under a lock.
func (a *App) Load(now time.Time) float64 {
	ns := now.UnixNano()
	at := a.loadAt.Load()
	if ns-at < int64(loadEvery) || !a.loadAt.CompareAndSwap(at, ns) {
		return math.Float64frombits(a.load.Load())
	}
	v := a.computeLoad(now)
	a.load.Store(math.Float64bits(v))
	return v
}

func (a *App) computeLoad(now time.Time) float64 {
	n := a.pool.Load().Healthy()
	rsla := float64(a.rsla.Load())
	if n <= 0 || rsla <= 0 {
		return 0
	}
	var sum, w float64
	for c := range a.cfg.Load().names {
		r := a.est.Rate(c, now)
		sum += r * float64(a.est.ClassMean(c))
		w += r
	}
	if w <= 0 {
		return 0
	}
	s := sum / w
	p := max(a.batch.Parallelism(), 1)
	eta := float64(max(a.Inflight(), 0)) / float64(n)
	v := (float64(max(a.Q(), 0)) + max(1, (eta+1)/p)*s) / rsla
	if !(v >= 0) { // NaN
		return 0
	}
	return min(v, maxLoad)
}
