package estimator

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// rateState measures a class's arrival rate: arrivals are counted per window
// (Config.RateWindow) with one atomic add, and each closed window's rate is
// folded into an exponential average (time constant Config.RateSmoothing).
// The first closed window sets the average directly; windows with no
// arrivals count as rate 0.
type rateState struct {
	count atomic.Int64
	end   atomic.Int64  // unix ns at which the current window closes; 0 = not started
	rate  atomic.Uint64 // float64 bits, requests per second
	last  atomic.Uint64 // float64 bits: the last closed window's own rate
	mu    struct {      // closing a window; a leaf lock
		sync.Mutex
		seeded bool
	}
}

func (r *rateState) arrive(now int64, sn *snapshot) {
	if end := r.end.Load(); end == 0 || now >= end {
		r.roll(now, sn)
	}
	r.count.Add(1)
}

func (r *rateState) roll(now int64, sn *snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	end := r.end.Load()
	if end == 0 {
		r.end.Store(now + sn.win)
		return
	}
	if now < end {
		return
	}
	k := 1 + (now-end)/sn.win // windows closed: one with the count, k-1 empty
	n := r.count.Swap(0)
	sample := float64(n) / (float64(sn.win) / float64(time.Second))
	rate := math.Float64frombits(r.rate.Load())
	if !r.mu.seeded {
		rate, r.mu.seeded = sample, true
	} else {
		rate += sn.rateAlpha * (sample - rate)
	}
	if k > 1 {
		rate *= math.Pow(1-sn.rateAlpha, float64(k-1))
	}
	r.rate.Store(math.Float64bits(rate))
	if k > 1 {
		sample = 0 // the newest closed window was empty
	}
	r.last.Store(math.Float64bits(sample))
	r.end.Store(end + k*sn.win)
}

// Arrive counts one arrival of class at now. It takes one atomic load and
// one atomic add, plus a short lock once per window.
func (e *Estimator) Arrive(class int, now time.Time) {
	sn := e.snap.Load()
	if uint(class) < uint(len(sn.classes)) {
		sn.classes[class].rate.arrive(now.UnixNano(), sn)
	}
}

// Rate returns class's smoothed arrival rate λ in requests per second,
// closing any windows that ended before now. It lags by up to one window.
func (e *Estimator) Rate(class int, now time.Time) float64 {
	sn := e.snap.Load()
	if uint(class) >= uint(len(sn.classes)) {
		return 0
	}
	r := &sn.classes[class].rate
	if end := r.end.Load(); end != 0 && now.UnixNano() >= end {
		r.roll(now.UnixNano(), sn)
	}
	return math.Float64frombits(r.rate.Load())
}

// minPartial is the fraction of a window that must have passed before
// RecentRate trusts the current window's own count.
const minPartial = 10

// RecentRate is an arrival rate of class that follows a rise within a
// fraction of one window: the largest of the smoothed rate (Rate), the last
// closed window's own rate, and the current window's count so far divided
// by the time it has run (once it has run a tenth of a window). The smoothed
// term falls as slowly as Rate; the two window terms fall as soon as a
// window closes quieter, so a burst early in a window overstates the rate
// for at most that window. Admission uses it to hold room for more
// important classes (package batchac): a class that rises takes its room
// back at once, one that falls quiet gives it back over the smoothing time.
func (e *Estimator) RecentRate(class int, now time.Time) float64 {
	rate := e.Rate(class, now)
	sn := e.snap.Load()
	if uint(class) >= uint(len(sn.classes)) {
		return rate
	}
	r := &sn.classes[class].rate
	rate = max(rate, math.Float64frombits(r.last.Load()))
	if end := r.end.Load(); end != 0 {
		if ran := now.UnixNano() - (end - sn.win); ran >= sn.win/minPartial && ran > 0 {
			cur := float64(r.count.Load()) / (float64(ran) / float64(time.Second))
			rate = max(rate, cur)
		}
	}
	return rate
}

// export returns the smoothed rate and the last closed window's rate.
func (r *rateState) export() (rate, last float64) {
	return math.Float64frombits(r.rate.Load()), math.Float64frombits(r.last.Load())
}

// restore sets the smoothed rate as a process that saw it age ago would
// have it now: decayed by every window that closed since with no arrival.
// The next arrival starts a window.
func (r *rateState) restore(rate, last float64, age int64, sn *snapshot) {
	if k := age / sn.win; k > 0 {
		rate *= math.Pow(1-sn.rateAlpha, float64(k))
		last = 0
	}
	r.mu.Lock()
	r.mu.seeded = true
	r.mu.Unlock()
	r.count.Store(0)
	r.end.Store(0)
	r.rate.Store(math.Float64bits(rate))
	r.last.Store(math.Float64bits(last))
}
