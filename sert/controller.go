package sert

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMethods are the methods a class terminates when its config names
// none: the safe, idempotent reads.
var DefaultMethods = []string{"GET", "HEAD"}

// ClassConfig is one class's termination range.
type ClassConfig struct {
	// Name is the class's name; a reload keeps the state of a class of the
	// same name.
	Name string
	// Lower is LB, the least time a request is allowed before it may be
	// cut; > 0.
	Lower time.Duration
	// Upper is UB, the threshold while there is no overload; ≥ Lower.
	Upper time.Duration
	// Methods that may be terminated, upper case. Nil means
	// DefaultMethods (GET and HEAD).
	Methods []string
}

// Config configures a Controller.
type Config struct {
	Params
	// Classes by class index: a nil entry is a class that never
	// terminates. Names must be unique.
	Classes []*ClassConfig
	// Now is the clock Run reads. Nil means time.Now.
	Now func() time.Time
}

func (cfg *Config) validate() error {
	if err := cfg.Params.Validate(); err != nil {
		return err
	}
	seen := map[string]bool{}
	for i, cc := range cfg.Classes {
		if cc == nil {
			continue
		}
		switch {
		case cc.Name == "":
			return fmt.Errorf("sert: class %d has no name", i)
		case seen[cc.Name]:
			return fmt.Errorf("sert: class %q is given twice", cc.Name)
		case cc.Lower <= 0:
			return fmt.Errorf("sert: class %q: lower is %v, want > 0", cc.Name, cc.Lower)
		case cc.Upper < cc.Lower:
			return fmt.Errorf("sert: class %q: upper %v is below lower %v", cc.Name, cc.Upper, cc.Lower)
		}
		if cc.Methods != nil && len(cc.Methods) == 0 {
			return fmt.Errorf("sert: class %q: empty methods; nil means GET and HEAD", cc.Name)
		}
		for _, m := range cc.Methods {
			if m == "" || m != strings.ToUpper(m) {
				return fmt.Errorf("sert: class %q: method %q is not an upper-case method name", cc.Name, m)
			}
		}
		seen[cc.Name] = true
	}
	return nil
}

// Controller is the threshold controller of one app (§3.2): every
// interval it recomputes each terminating class's threshold from the
// class's loss fraction over that interval.
type Controller struct {
	now     func() time.Time
	classes atomic.Pointer[[]*Class] // by class index; nil entries
	params  atomic.Pointer[Params]

	// mu serialises Tick, Look and Reconfigure; it guards byName,
	// lastTick and the classes' tick state. The request path never takes
	// it.
	mu struct {
		sync.Mutex
		byName   map[string]*Class
		lastTick time.Time // the last Tick (New's time before any)
	}
}

// LooksPerInterval is how many times per interval Run calls Look: the
// last of them is the Tick.
const LooksPerInterval = 8

// Class is one class's termination state. Its request-path methods are
// lock-free and allocation-free.
type Class struct {
	name      string
	threshold atomic.Int64 // ns; the request path's one load
	rng       atomic.Pointer[classRange]

	arrived    atomic.Uint64
	rejected   atomic.Uint64
	terminated atomic.Uint64
	reclaimed  atomic.Int64 // ns of backend time reclaimed

	last atomic.Pointer[Update] // the last tick's outcome

	// Tick state, guarded by Controller.mu.
	seenArrived, seenLost uint64
	f                     float64   // F in force
	since                 time.Time // start of the window seenArrived counts from
}

// classRange is a class's immutable configuration, swapped on reload.
type classRange struct {
	lower, upper time.Duration
	methods      []string
}

// Update is the outcome of one tick for one class.
type Update struct {
	// At is the tick's time.
	At time.Time
	// Arrived and Lost (rejected + terminated) are the interval's counts.
	Arrived, Lost uint64
	// Skipped: fewer than MinArrivals arrived, the threshold was kept.
	Skipped bool
	// P is the interval's loss fraction Lost/Arrived (capped at 1); F is
	// F(P). Both are those of the last update not skipped (1 and 0
	// before any).
	P, F float64
	// Threshold is the threshold in force after the tick.
	Threshold time.Duration
	// Bounded: LB + F·(UB − LB) was more than Params.MaxRise × the
	// threshold in force, so the threshold rose by MaxRise only.
	Bounded bool
	// Early: a Look, not a Tick, set the threshold to LB: the losses so
	// far already make the window's p at least HW (see Look). P is then
	// the loss fraction so far and F 0; the window's counts are not
	// consumed, the next Tick judges the whole window.
	Early bool
}

// New validates cfg and returns a controller whose thresholds start at
// each class's upper bound (F = 1: no evidence of overload yet).
func New(cfg Config) (*Controller, error) {
	c := &Controller{now: cfg.Now}
	if c.now == nil {
		c.now = time.Now
	}
	c.mu.byName = map[string]*Class{}
	c.mu.lastTick = c.now()
	if err := c.Reconfigure(cfg); err != nil {
		return nil, err
	}
	return c, nil
}

// Reconfigure applies cfg. Classes are kept by name with their counters,
// loss fraction and F; a class whose bounds changed gets T = LB + F·(UB −
// LB) with its F at once. Classes no longer configured are forgotten. On
// error nothing changes. cfg.Now is ignored.
func (c *Controller) Reconfigure(cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	next := make([]*Class, len(cfg.Classes))
	byName := make(map[string]*Class, len(cfg.Classes))
	for i, cc := range cfg.Classes {
		if cc == nil {
			continue
		}
		cl := c.mu.byName[cc.Name]
		if cl == nil {
			cl = &Class{name: cc.Name, f: 1, since: c.mu.lastTick}
			cl.last.Store(&Update{P: 0, F: 1, Threshold: cc.Upper})
		}
		methods := DefaultMethods
		if cc.Methods != nil {
			methods = append([]string(nil), cc.Methods...)
		}
		cl.rng.Store(&classRange{lower: cc.Lower, upper: cc.Upper, methods: methods})
		cl.threshold.Store(int64(Threshold(cc.Lower, cc.Upper, cl.f)))
		next[i] = cl
		byName[cc.Name] = cl
	}
	p := cfg.Params
	c.params.Store(&p)
	c.classes.Store(&next)
	c.mu.byName = byName
	return nil
}

// Class returns class i's state, or nil when class i does not terminate
// (or is out of range). One atomic load.
func (c *Controller) Class(i int) *Class {
	cs := *c.classes.Load()
	if uint(i) >= uint(len(cs)) {
		return nil
	}
	return cs[i]
}

// Classes returns the classes by index (nil entries for classes that do
// not terminate). The slice must not be modified.
func (c *Controller) Classes() []*Class { return *c.classes.Load() }

// Params returns the parameters in force.
func (c *Controller) Params() Params { return *c.params.Load() }

// Tick recomputes every class's threshold from its counts since the
// previous tick: with at least MinArrivals arrivals, p = (rejected +
// terminated)/arrived (capped at 1) and T = LB + F(p)·(UB − LB), raised
// by at most Params.MaxRise × the T in force when that is set; with
// fewer, the threshold stays and the arrivals carry over to the next tick
// (they are not dropped: a quiet class is judged on a longer window, not
// on none). The new threshold applies at once, to requests in flight too.
func (c *Controller) Tick(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.lastTick = now
	p := *c.params.Load()
	for _, cl := range *c.classes.Load() {
		if cl == nil {
			continue
		}
		arr := cl.arrived.Load()
		lost := cl.rejected.Load() + cl.terminated.Load()
		da, dl := arr-cl.seenArrived, lost-cl.seenLost
		prev := cl.last.Load()
		u := &Update{At: now, Arrived: da, Lost: dl, P: prev.P, F: prev.F}
		if da < p.MinArrivals {
			u.Skipped = true
			u.Threshold = cl.Threshold()
			cl.last.Store(u)
			continue
		}
		cl.seenArrived, cl.seenLost, cl.since = arr, lost, now
		u.P = min(float64(dl)/float64(da), 1)
		u.F = F(u.P, p.Alpha, p.LowWater, p.HighWater)
		r := cl.rng.Load()
		u.Threshold, u.Bounded = rise(Threshold(r.lower, r.upper, u.F), cl.Threshold(), p.MaxRise)
		cl.f = u.F
		if u.Bounded {
			// The F the threshold in force stands for, so that a reload
			// that changes the bounds keeps the class where it is.
			cl.f = float64(u.Threshold-r.lower) / float64(r.upper-r.lower)
		}
		cl.threshold.Store(int64(u.Threshold))
		cl.last.Store(u)
	}
}

// Look is the early look between ticks (Run calls it LooksPerInterval −
// 1 times per interval): a class whose losses since its window began are
// already so many that the window's p will be at least HW when the next
// Tick judges it -- lost ≥ HW × the arrivals the window will hold if they
// go on at the rate so far -- gets T = LB now instead of at that Tick,
// which would set it (F(p ≥ HW) = 0). Nothing else changes: the counts
// are not consumed, a threshold already at LB is left alone, and a
// window with fewer than MinArrivals arrivals so far is not looked at.
// So Look only brings forward, by up to an interval, a fall the paper's
// rule makes anyway, given a steady arrival rate; a loss that would
// leave the window's p below HW never moves it.
func (c *Controller) Look(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := *c.params.Load()
	next := c.mu.lastTick.Add(p.Interval)
	for _, cl := range *c.classes.Load() {
		if cl == nil {
			continue
		}
		r := cl.rng.Load()
		if cl.Threshold() <= r.lower {
			continue
		}
		da := cl.arrived.Load() - cl.seenArrived
		dl := cl.rejected.Load() + cl.terminated.Load() - cl.seenLost
		elapsed, span := now.Sub(cl.since), next.Sub(cl.since)
		if da < p.MinArrivals || elapsed <= 0 || span <= elapsed {
			continue
		}
		if float64(dl) < p.HighWater*float64(da)*span.Seconds()/elapsed.Seconds() {
			continue
		}
		cl.f = 0
		cl.threshold.Store(int64(r.lower))
		cl.last.Store(&Update{At: now, Arrived: da, Lost: dl, P: min(float64(dl)/float64(da), 1), F: 0,
			Threshold: r.lower, Early: true})
	}
}

// rise bounds a rise of the threshold from cur to target by maxRise (0:
// no bound): it returns min(target, maxRise·cur) and whether the bound
// applied. A fall is never bounded.
func rise(target, cur time.Duration, maxRise float64) (time.Duration, bool) {
	if maxRise <= 0 || cur <= 0 || target <= cur {
		return target, false
	}
	if lim := float64(cur) * maxRise; float64(target) > lim {
		return time.Duration(lim), true
	}
	return target, false
}

// Run ticks every Params.Interval, and looks (Look) LooksPerInterval − 1
// times in between, until ctx is done, following an interval changed by
// Reconfigure from the next tick on. The caller owns the goroutine.
func (c *Controller) Run(ctx context.Context) {
	iv := c.Params().Interval
	t := time.NewTicker(lookStep(iv))
	defer t.Stop()
	c.run(ctx, iv, t.C, t.Reset)
}

// lookStep is the period of Run's ticker: LooksPerInterval per interval.
func lookStep(iv time.Duration) time.Duration { return max(iv/LooksPerInterval, 1) }

// run is Run's loop on a given ticker channel: every LooksPerInterval-th
// tick is a Tick, the others are Looks; reset re-times the ticker when
// Reconfigure changed the interval (iv is the interval it was started
// with).
func (c *Controller) run(ctx context.Context, iv time.Duration, ticks <-chan time.Time, reset func(time.Duration)) {
	n := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
		if n++; n < LooksPerInterval {
			c.Look(c.now())
			continue
		}
		n = 0
		c.Tick(c.now())
		if next := c.Params().Interval; next != iv {
			iv = next
			reset(lookStep(iv))
		}
	}
}

// Name is the class's name.
func (cl *Class) Name() string { return cl.name }

// Threshold is the class's termination threshold now: one atomic load.
// Read it again when a timer armed with an older value fires: a new
// threshold applies to requests already in flight (see Remaining).
func (cl *Class) Threshold() time.Duration { return time.Duration(cl.threshold.Load()) }

// Remaining is how long a request that has run elapsed may still run
// before it is overdue under the current threshold; ≤ 0 means terminate
// now. A timer that fires re-checks with it and re-arms for the remainder
// when the threshold has risen since it was armed.
func (cl *Class) Remaining(elapsed time.Duration) time.Duration {
	return cl.Threshold() - elapsed
}

// Bounds returns the class's LB and UB.
func (cl *Class) Bounds() (lower, upper time.Duration) {
	r := cl.rng.Load()
	return r.lower, r.upper
}

// Terminable tells whether requests with this method may be terminated
// (GET and HEAD unless the class lists its methods). method is compared
// exactly, as the request line gives it.
func (cl *Class) Terminable(method string) bool {
	for _, m := range cl.rng.Load().methods {
		if m == method {
			return true
		}
	}
	return false
}

// TerminableBytes is Terminable for a method held as bytes (fasthttp, the
// event loops); it does not allocate.
func (cl *Class) TerminableBytes(method []byte) bool {
	for _, m := range cl.rng.Load().methods {
		if m == string(method) {
			return true
		}
	}
	return false
}

// Arrive counts one request of the class reaching admission, whatever
// happens to it next (the denominator of p).
func (cl *Class) Arrive() { cl.arrived.Add(1) }

// Reject counts one request of the class rejected by admission.
func (cl *Class) Reject() { cl.rejected.Add(1) }

// Terminate counts one request of the class terminated.
func (cl *Class) Terminate() { cl.terminated.Add(1) }

// Reclaim adds d to the backend time termination reclaimed (the proxy's
// estimate of the work the cut request would still have done); d ≤ 0 is
// ignored.
func (cl *Class) Reclaim(d time.Duration) {
	if d > 0 {
		cl.reclaimed.Add(int64(d))
	}
}

// Counts are a class's totals since it was created.
type Counts struct {
	Arrived, Rejected, Terminated uint64
	Reclaimed                     time.Duration
}

// Counts returns the class's totals.
func (cl *Class) Counts() Counts {
	return Counts{Arrived: cl.arrived.Load(), Rejected: cl.rejected.Load(),
		Terminated: cl.terminated.Load(), Reclaimed: time.Duration(cl.reclaimed.Load())}
}

// Last returns the outcome of the last tick (before any: P 0, F 1 and
// the upper bound).
func (cl *Class) Last() Update { return *cl.last.Load() }

// Latch decides, once, whether a request is terminated or its response
// goes out: the termination timer calls Terminate, the first response byte
// calls Disarm, and a compare-and-swap lets exactly one of them win. The
// zero Latch is armed. Embed it in the exchange; it does not allocate.
type Latch struct{ state atomic.Uint32 }

const (
	latchArmed uint32 = iota
	latchDisarmed
	latchTerminated
)

// Terminate reports whether termination won: true the first time, while
// no response byte has gone out; the caller then cuts the backend and
// answers 503.
func (l *Latch) Terminate() bool {
	return l.state.CompareAndSwap(latchArmed, latchTerminated)
}

// Disarm reports whether the response may go out: true unless the
// request was terminated first. After Disarm, Terminate returns false.
func (l *Latch) Disarm() bool {
	if l.state.CompareAndSwap(latchArmed, latchDisarmed) {
		return true
	}
	return l.state.Load() == latchDisarmed
}

// Terminated reports whether Terminate won.
func (l *Latch) Terminated() bool { return l.state.Load() == latchTerminated }

// Reset re-arms the latch for a new exchange.
func (l *Latch) Reset() { l.state.Store(latchArmed) }

// ClassState is what a class's controller has concluded, to carry it to
// another process (a binary upgrade, a state file): F in force, which
// places the threshold between the class's bounds, and the last
// interval's loss fraction P.
type ClassState struct {
	Class string  `json:"class"`
	F     float64 `json:"f"`
	P     float64 `json:"p"`
}

// State returns every terminating class's state.
func (c *Controller) State() []ClassState {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []ClassState
	for _, cl := range *c.classes.Load() {
		if cl != nil {
			out = append(out, ClassState{Class: cl.name, F: cl.f, P: cl.last.Load().P})
		}
	}
	return out
}

// Restore gives each class of states that this controller has (by name)
// its F, and so its threshold within this configuration's bounds, and its
// last P. It returns what it left out, one line each: a class that does
// not terminate here, an F or P outside [0, 1].
func (c *Controller) Restore(states []ClassState) (ignored []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range states {
		cl := c.mu.byName[s.Class]
		switch {
		case cl == nil:
			ignored = append(ignored, fmt.Sprintf("termination of class %q: the class does not terminate in the policy", s.Class))
			continue
		case !(s.F >= 0 && s.F <= 1) || !(s.P >= 0 && s.P <= 1):
			ignored = append(ignored, fmt.Sprintf("termination of class %q: a value out of range", s.Class))
			continue
		}
		r := cl.rng.Load()
		cl.f = s.F
		th := Threshold(r.lower, r.upper, s.F)
		cl.threshold.Store(int64(th))
		cl.last.Store(&Update{At: c.mu.lastTick, P: s.P, F: s.F, Threshold: th})
	}
	return ignored
}
