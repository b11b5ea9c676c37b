package estimator

import (
	"fmt"
	"math"
	"time"
	"unicode/utf8"
)

// State is what an estimator has learned, as plain values that outlive
// the process: a binary upgrade hands it to the next process, and a state
// file keeps it across a restart (package learned carries it). Times are
// unix nanoseconds of the clock given to Observe (wall time in sentry);
// durations and means are in nanoseconds. Export takes it, Restore puts
// it back, matched by class name and key.
type State struct {
	// At is when the state was taken.
	At int64 `json:"at"`
	// Q and QFallback are the queueing-delay statistics of reported
	// queue;dur samples and of fallback samples (doc.go, Observations).
	Q         Stat `json:"q"`
	QFallback Stat `json:"q_fallback"`
	// Alpha is the α in use (fitted, with fit_alpha).
	Alpha   float64      `json:"alpha"`
	Classes []ClassState `json:"classes"`
}

// Stat is a time-decayed mean and variance: weight W (decayed samples),
// mean, M2 (variance = M2/W), as of Last.
type Stat struct {
	W    float64 `json:"w"`
	Mean float64 `json:"mean"`
	M2   float64 `json:"m2"`
	Last int64   `json:"last"`
}

// ClassState is one class's learned state.
type ClassState struct {
	Name string `json:"name"`
	// Prior is the decayed mean unseen keys get, Ceil its ceiling; First
	// and LastSample the refreshes that first and last found samples.
	Prior      Stat    `json:"prior"`
	Ceil       float64 `json:"ceil"`
	First      int64   `json:"first"`
	LastSample int64   `json:"last_sample"`
	// Samples is the class's samples as counted (ClassStats' weight and
	// deviation).
	Samples Stat `json:"samples"`
	// Rate is the smoothed arrival rate λ and LastRate the last closed
	// window's own, in requests per second.
	Rate     float64    `json:"rate"`
	LastRate float64    `json:"last_rate"`
	Keys     []KeyState `json:"keys,omitempty"`
}

// KeyState is one key's learned service time. A key that is not valid
// UTF-8 (JSON would mangle it) is carried in KeyBytes instead of Key.
type KeyState struct {
	Key      string  `json:"key,omitempty"`
	KeyBytes []byte  `json:"key_bytes,omitempty"`
	Stat     Stat    `json:"stat"`
	Ceil     float64 `json:"ceil"`
	CeilAt   int64   `json:"ceil_at"`
	First    int64   `json:"first"`
	N        uint32  `json:"n"`
}

func statOf(d dstat) Stat { return Stat{W: d.w, Mean: d.mean, M2: d.m2, Last: d.last} }

// valid tells whether a Stat can be taken in: finite, non-negative weight
// and M2, a mean ≥ 0.
func (s Stat) valid() bool {
	return finite(s.W) && finite(s.Mean) && finite(s.M2) && s.W >= 0 && s.M2 >= 0 && s.Mean >= 0
}

func (s Stat) dstat() dstat { return dstat{w: s.W, mean: s.Mean, m2: s.M2, last: s.Last} }

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// Export takes the estimator's learned state at now: every class of the
// configuration in force, with its keys. It folds pending samples first
// (a Refresh), and takes each shard's lock in turn, briefly; it allocates
// in proportion to the key table, so call it at a handover or a
// checkpoint, not per request.
func (e *Estimator) Export(now time.Time) State {
	n := now.UnixNano()
	e.lastRefresh.Store(n)
	sn := e.snap.Load()
	e.refresh(sn, n)
	e.agg.Lock()
	defer e.agg.Unlock()
	st := State{At: n, Alpha: e.Alpha(), Classes: make([]ClassState, len(sn.classes))}
	byID := map[int32]int{}
	for i, cs := range sn.classes {
		byID[cs.id] = i
		st.Classes[i] = ClassState{Name: cs.name, Prior: statOf(cs.pst), Ceil: cs.ceil,
			First: cs.first.Load(), LastSample: cs.lastSample.Load()}
		st.Classes[i].Rate, st.Classes[i].LastRate = cs.rate.export()
	}
	var qRep, qFb dstat
	acc := make([]dstat, len(sn.classes))
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		qRep.merge(sh.mu.qRep.d.at(n, sn.invQHalf))
		qFb.merge(sh.mu.qFb.d.at(n, sn.invQHalf))
		for id := range sh.mu.cls {
			if c, ok := byID[int32(id)]; ok {
				acc[c].merge(sh.mu.cls[id].d.at(n, sn.invHalf))
			}
		}
		for j := range sh.mu.ents {
			en := &sh.mu.ents[j]
			c, ok := byID[en.class]
			if !en.live || !ok {
				continue
			}
			k := KeyState{Stat: statOf(en.st), Ceil: en.ceil, CeilAt: en.ceilAt, First: en.first, N: en.n}
			if utf8.ValidString(en.key) {
				k.Key = en.key
			} else {
				k.KeyBytes = []byte(en.key)
			}
			st.Classes[c].Keys = append(st.Classes[c].Keys, k)
		}
		sh.mu.Unlock()
	}
	st.Q, st.QFallback = statOf(qRep), statOf(qFb)
	for i := range acc {
		st.Classes[i].Samples = statOf(acc[i])
	}
	return st
}

// RestoreReport says what Restore took and what it left out, and why.
type RestoreReport struct {
	// Classes and Keys taken in.
	Classes, Keys int
	// Ignored lists what was left out, one line each ("class "x": not in
	// the policy (12 keys)").
	Ignored []string
}

// Restore takes in a state Export gave, at now: each class of st whose
// name the configuration in force has gets its prior, samples and rates
// and its keys (up to the key table's capacity), and Q and α come back.
// What does not match -- a class the policy no longer has, a value that
// is not finite -- is left out and reported, never an error. Rates decay
// over the time since st.At as if no request had come (a state file read
// after a long stop does not claim an old load); decayed means and
// variances age by their half-lives as they would have in a running
// process. Meant for a fresh estimator, before it serves: what it has
// already learned for a restored key or class is replaced.
func (e *Estimator) Restore(st State, now time.Time) RestoreReport {
	var rep RestoreReport
	n := now.UnixNano()
	sn := e.snap.Load()
	byName := map[string]*classState{}
	for _, cs := range sn.classes {
		byName[cs.name] = cs
	}
	e.agg.Lock()
	type keyed struct {
		cs *classState
		k  *KeyState
	}
	var keys []keyed
	for i := range st.Classes {
		c := &st.Classes[i]
		cs := byName[c.Name]
		switch {
		case cs == nil:
			rep.Ignored = append(rep.Ignored, fmt.Sprintf("class %q: not in the policy (%d keys)", c.Name, len(c.Keys)))
			continue
		case !c.Prior.valid() || !c.Samples.valid() || !finite(c.Ceil) || !finite(c.Rate) || c.Rate < 0 || !finite(c.LastRate) || c.LastRate < 0:
			rep.Ignored = append(rep.Ignored, fmt.Sprintf("class %q: a value out of range", c.Name))
			continue
		}
		delete(byName, c.Name) // a class named twice: the first wins
		rep.Classes++
		cs.pst, cs.ceil = c.Prior.dstat(), c.Ceil
		cs.first.Store(c.First)
		cs.lastSample.Store(c.LastSample)
		cs.prior.Store(math.Float64bits(c.Prior.Mean))
		cs.rate.restore(c.Rate, c.LastRate, n-st.At, sn)
		sh := &e.shards[0]
		sh.mu.Lock()
		if int(cs.id) >= len(sh.mu.cls) {
			sh.mu.cls = append(sh.mu.cls, make([]batched, len(sn.all)-len(sh.mu.cls))...)
		}
		sh.mu.cls[cs.id] = batched{d: c.Samples.dstat(), k: c.Samples.Mean, kSet: true}
		sh.mu.Unlock()
		for j := range c.Keys {
			keys = append(keys, keyed{cs, &c.Keys[j]})
		}
	}
	if st.Q.valid() && st.QFallback.valid() {
		sh := &e.shards[0]
		sh.mu.Lock()
		sh.mu.qRep = batched{d: st.Q.dstat(), k: st.Q.Mean, kSet: true}
		sh.mu.qFb = batched{d: st.QFallback.dstat(), k: st.QFallback.Mean, kSet: true}
		sh.mu.Unlock()
	} else {
		rep.Ignored = append(rep.Ignored, "queueing delay: a value out of range")
	}
	if sn.cfg.FitAlpha && finite(st.Alpha) && st.Alpha >= 0 {
		e.alpha.Store(math.Float64bits(st.Alpha))
	}
	e.agg.Unlock()

	bad, full := 0, 0
	for _, kk := range keys {
		k := kk.k
		key := k.Key
		if len(k.KeyBytes) > 0 {
			key = string(k.KeyBytes)
		}
		if !k.Stat.valid() || !finite(k.Ceil) {
			bad++
			continue
		}
		h := e.hash(kk.cs.id, []byte(key))
		sh := e.shardOf(h)
		sh.mu.Lock()
		i, ok := sh.mu.idx[h]
		if !ok {
			if sh.mu.size >= sh.mu.cap {
				sh.mu.Unlock()
				full++
				continue
			}
			i = e.insert(sh, h, kk.cs.id, []byte(key))
		}
		if i >= 0 {
			en := &sh.mu.ents[i]
			en.key, en.class, en.live = key, kk.cs.id, true
			en.st, en.ceil, en.ceilAt, en.first, en.n = k.Stat.dstat(), k.Ceil, k.CeilAt, k.First, k.N
			rep.Keys++
		}
		sh.mu.Unlock()
	}
	if bad > 0 {
		rep.Ignored = append(rep.Ignored, fmt.Sprintf("%d keys: a value out of range", bad))
	}
	if full > 0 {
		rep.Ignored = append(rep.Ignored, fmt.Sprintf("%d keys: the key table is full (estimator.max_keys)", full))
	}
	e.lastRefresh.Store(n)
	e.refresh(sn, n)
	return rep
}
