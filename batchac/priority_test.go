package batchac

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/estimator"
	"github.com/sentry-proxy/sentry/thresholdac"
)

// A discrete-event simulation on a manual clock: a farm of n backends with
// P worker slots each (FIFO queue per backend, least-loaded balancing),
// open-loop Poisson load per class, and the admission controller deciding
// every arrival. The arrival rates reach the reserve through the real
// estimator (RecentRate), as in production. No sockets, no sleeps: the
// outcome is a deterministic function of the seed.
//
// It reproduces the priority inversion of a flood of less important
// requests (TestPriorityInversionWithoutReserve) and checks that the
// reserve removes it in batch and threshold mode, with and without class
// periods, for two and three classes, fixed and exponential service times,
// and an important class that rises in one step.

type simPhase struct {
	dur  time.Duration
	frac float64 // offered load as a fraction of the farm's capacity
}

type simClass struct {
	name   string
	period time.Duration
	load   []simPhase
	s      time.Duration // this class's service time; 0: the case's s
}

type simCase struct {
	n, p      int
	s         time.Duration // mean service time
	exp       bool          // exponential service times (else fixed)
	rsla      time.Duration
	classes   []simClass
	threshold bool // threshold mode (thresholdac + the Room guard), else batch
	noReserve bool
	learnP    bool    // start from P = 1 and learn it from completions, as the policy's default does
	kFactor   float64 // threshold mode's K as a share of the true n·P (0: 1)
	seed      uint64
	// realQ: Q is the real estimator's, fed each completion's queueing
	// delay at its backend (as sim/farm reports queue;dur=), instead of 0.
	realQ      bool
	noImpliedQ bool // Config.NoImpliedQueue
}

type simSecond struct{ offered, admitted, good []int }

type simResult struct {
	offered, admitted, good []int // per class
	late                    []int // admitted but over R_sla
	seconds                 []simSecond
	lat                     [][]time.Duration // per second of arrival: admitted requests' response times
	capacity                float64           // requests per second, at the case's s
	work                    []float64         // per class: seconds of service per request, over the case's s
	dur                     time.Duration
}

func (r *simResult) admittedFrac(c int) float64 {
	if r.offered[c] == 0 {
		return 1
	}
	return float64(r.admitted[c]) / float64(r.offered[c])
}

// goodput is the work answered within R_sla per second, as a fraction of
// the farm's capacity (requests weighted by their service time).
func (r *simResult) goodput(classes ...int) float64 {
	var g float64
	for _, c := range classes {
		g += float64(r.good[c]) * r.work[c]
	}
	return g / r.dur.Seconds() / r.capacity
}

func (r *simResult) String() string {
	var b strings.Builder
	for c := range r.offered {
		fmt.Fprintf(&b, "class %d: offered %d admitted %.2f%% late %d; ", c, r.offered[c], 100*r.admittedFrac(c), r.late[c])
	}
	all := make([]int, len(r.offered))
	for i := range all {
		all[i] = i
	}
	fmt.Fprintf(&b, "goodput %.3f× capacity", r.goodput(all...))
	return b.String()
}

type simEvent struct {
	at      int64
	kind    uint8 // 0 arrival, 1 completion, 2 tick
	class   int
	backend int
}

type simHeap []simEvent

func (h simHeap) Len() int { return len(h) }
func (h simHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].kind > h[j].kind // completions and ticks before arrivals
}
func (h simHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *simHeap) Push(x any)   { *h = append(*h, x.(simEvent)) }
func (h *simHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

type simJob struct {
	class     int
	arrive    int64
	dispatch  int64
	started   int64 // service began (after the backend's queue)
	inService int   // on its backend at dispatch, itself included
}

type simBackend struct {
	busy  int
	queue []simJob
	run   []simJob // in service, completion order is by event
}

// simFarm implements State and thresholdac.Inputs for the controllers.
type simFarm struct {
	sc       *simCase
	now      int64
	inflight int64
	est      *estimator.Estimator
}

func (f *simFarm) Q() time.Duration {
	if !f.sc.realQ || f.inflight == 0 {
		return 0
	}
	return f.est.Q()
}
func (f *simFarm) QNow() time.Duration {
	if !f.sc.realQ || f.inflight == 0 {
		return 0
	}
	return f.est.QNow()
}
func (f *simFarm) Inflight() int64     { return f.inflight }
func (f *simFarm) Healthy() int        { return f.sc.n }
func (f *simFarm) RSLA() time.Duration { return f.sc.rsla }
func (f *simFarm) Demand(class int) float64 {
	return f.est.RecentRate(class, time.Unix(0, f.now)) * f.sc.sOf(class).Seconds()
}
func (f *simFarm) Rate(class int) float64        { return f.est.Rate(class, time.Unix(0, f.now)) }
func (f *simFarm) MeanS(class int) time.Duration { return f.sc.sOf(class) }

// Sustained: the simulation has no capacity learner; P (configured or
// learned by the controller) is all the reserve knows.
func (f *simFarm) Sustained() float64 { return 0 }

// sOf is class c's mean service time.
func (sc *simCase) sOf(c int) time.Duration {
	if s := sc.classes[c].s; s > 0 {
		return s
	}
	return sc.s
}

func runSim(t *testing.T, sc simCase) *simResult {
	t.Helper()
	rng := rand.New(rand.NewPCG(sc.seed, 7))
	names := make([]string, len(sc.classes))
	var total time.Duration
	for i, c := range sc.classes {
		names[i] = c.name
		var d time.Duration
		for _, ph := range c.load {
			d += ph.dur
		}
		total = max(total, d)
	}
	est, err := estimator.New(estimator.Config{}, names)
	if err != nil {
		t.Fatal(err)
	}
	f := &simFarm{sc: &sc, est: est}
	clock := func() time.Time { return time.Unix(0, f.now) }
	var ccs []ClassConfig
	for _, c := range sc.classes {
		ccs = append(ccs, ClassConfig{Name: c.name, Period: c.period})
	}
	cfg := Config{Classes: ccs, Parallelism: float64(sc.p), NoReserve: sc.noReserve,
		NoImpliedQueue: sc.noImpliedQ, ReserveFloor: DefaultReserveFloor, Now: clock}
	if sc.learnP {
		cfg.Parallelism, cfg.LearnParallelism = 1, true
	}
	ctl, err := New(f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	var thr *thresholdac.Controller
	if sc.threshold {
		// The farm's true capacity, K = n·P: the rule is under test here,
		// not the capacity learner (thresholdac's own tests).
		k := sc.kFactor
		if k == 0 {
			k = 1
		}
		thr, err = thresholdac.New(thresholdac.Config{Classes: len(sc.classes), Inputs: f,
			PerServer: k * float64(sc.p), Rand: rng.Uint64, Now: clock})
		if err != nil {
			t.Fatal(err)
		}
	}

	capacity := float64(sc.n*sc.p) / sc.s.Seconds()
	nsec := int(math.Ceil(total.Seconds()))
	res := &simResult{
		offered: make([]int, len(sc.classes)), admitted: make([]int, len(sc.classes)),
		good: make([]int, len(sc.classes)), late: make([]int, len(sc.classes)),
		seconds: make([]simSecond, nsec), capacity: capacity, dur: total,
		lat: make([][]time.Duration, nsec),
	}
	for c := range sc.classes {
		res.work = append(res.work, float64(sc.sOf(c))/float64(sc.s))
	}
	for i := range res.seconds {
		res.seconds[i] = simSecond{make([]int, len(sc.classes)), make([]int, len(sc.classes)), make([]int, len(sc.classes))}
	}
	backends := make([]simBackend, sc.n)
	var events simHeap
	service := func(c int) int64 {
		if sc.exp {
			return int64(rng.ExpFloat64() * float64(sc.sOf(c)))
		}
		return int64(sc.sOf(c))
	}
	rateAt := func(c int, at int64) (float64, int64) { // rate and the end of its phase
		var start int64
		for _, ph := range sc.classes[c].load {
			end := start + int64(ph.dur)
			if at < end {
				// frac is a share of the farm's work capacity.
				return ph.frac * capacity / res.work[c], end
			}
			start = end
		}
		return 0, math.MaxInt64
	}
	nextArrival := func(c int, from int64) {
		at := from
		for at < int64(total) {
			r, end := rateAt(c, at)
			if r <= 0 {
				at = end
				continue
			}
			next := at + int64(rng.ExpFloat64()/r*1e9)
			if next < end {
				heap.Push(&events, simEvent{at: next, kind: 0, class: c})
				return
			}
			at = end // memoryless: start again at the phase boundary
		}
	}
	for c := range sc.classes {
		nextArrival(c, 0)
	}
	heap.Push(&events, simEvent{at: int64(10 * time.Millisecond), kind: 2})

	// start puts j in a free slot of backend bi; the completion event
	// carries the slot index in its class field.
	start := func(bi int, j simJob) {
		b := &backends[bi]
		b.busy++
		j.started = f.now
		slot := -1
		for i := range b.run {
			if b.run[i].class == -1 {
				slot = i
				break
			}
		}
		if slot < 0 {
			b.run = append(b.run, j)
			slot = len(b.run) - 1
		} else {
			b.run[slot] = j
		}
		heap.Push(&events, simEvent{at: f.now + service(j.class), kind: 1, class: slot, backend: bi})
	}
	dispatch := func(j simJob) {
		res.admitted[j.class]++
		res.seconds[j.arrive/int64(time.Second)].admitted[j.class]++
		f.inflight++
		best := 0
		for i := range backends {
			if backends[i].busy+len(backends[i].queue) < backends[best].busy+len(backends[best].queue) {
				best = i
			}
		}
		j.dispatch = f.now
		j.inService = backends[best].busy + len(backends[best].queue) + 1
		if b := &backends[best]; b.busy < sc.p {
			start(best, j)
		} else {
			b.queue = append(b.queue, j)
		}
	}
	// Requests of classes with a period wait in Admit until a tick: each
	// gets a goroutine, and the simulation waits until it is queued (or
	// decided) before it moves on, so the run stays deterministic.
	type waiting struct {
		job simJob
		d   admission.Decision
	}
	decided := make(chan waiting, 4096)
	enq := make(chan struct{}, 1)
	// armed is set while one arrival is being placed: the first of "queued"
	// (the hook) and "decided at once" (Admit returned) sends one token.
	var armed atomic.Bool
	ctl.testHookEnqueued = func() {
		if armed.CompareAndSwap(true, false) {
			enq <- struct{}{}
		}
	}
	var wg sync.WaitGroup
	waitingN := 0
	onDecision := func(w waiting) {
		if w.d.Verdict == admission.Admit {
			dispatch(w.job)
		}
	}
	// collect takes the decisions of every request no longer queued.
	collect := func() {
		q := 0
		for i := range sc.classes {
			q += ctl.QueueLen(i)
		}
		for ; waitingN > q; waitingN-- {
			onDecision(<-decided)
		}
	}

	for events.Len() > 0 {
		e := heap.Pop(&events).(simEvent)
		f.now = e.at
		switch e.kind {
		case 0: // arrival
			nextArrival(e.class, e.at)
			res.offered[e.class]++
			res.seconds[e.at/int64(time.Second)].offered[e.class]++
			est.Arrive(e.class, clock())
			j := simJob{class: e.class, arrive: e.at}
			r := admission.Request{Class: e.class, S: sc.sOf(e.class)}
			if thr != nil {
				// As control's threshold mode (App.threshold): a free slot
				// admits; no room rejects; with room, a class at or above
				// the threshold class is admitted and the pair sheds the
				// classes below it.
				room, free, _ := ctl.Room(e.class, sc.sOf(e.class), 0, 0)
				if free || room && (thr.Within(e.class) || thr.Admit(&r).Verdict == admission.Admit) {
					dispatch(j)
				}
				continue
			}
			if sc.classes[e.class].period == 0 {
				if ctl.Admit(&r).Verdict == admission.Admit {
					dispatch(j)
				}
				continue
			}
			waitingN++
			wg.Add(1)
			armed.Store(true)
			go func() {
				defer wg.Done()
				d := ctl.Admit(&r)
				if armed.CompareAndSwap(true, false) { // decided without queueing
					enq <- struct{}{}
				}
				decided <- waiting{j, d}
			}()
			<-enq
			collect()
		case 1: // completion
			b := &backends[e.backend]
			j := b.run[e.class]
			b.run[e.class] = simJob{class: -1}
			b.busy--
			f.inflight--
			ctl.ObserveService(j.inService, sc.sOf(j.class), time.Duration(e.at-j.dispatch))
			if sc.realQ {
				est.ObserveTiming(j.class, simKey, estimator.Timing{IO: time.Duration(e.at - j.started), HasIO: true,
					Queue: time.Duration(j.started - j.dispatch), HasQueue: true}, time.Duration(e.at-j.dispatch), clock())
			}
			res.lat[j.arrive/int64(time.Second)] = append(res.lat[j.arrive/int64(time.Second)], time.Duration(e.at-j.arrive))
			if e.at-j.arrive <= int64(sc.rsla) {
				res.good[j.class]++
				res.seconds[j.arrive/int64(time.Second)].good[j.class]++
			} else {
				res.late[j.class]++
			}
			if len(b.queue) > 0 {
				next := b.queue[0]
				b.queue = b.queue[1:]
				start(e.backend, next)
			}
		case 2: // controllers' clocks
			ctl.Tick(clock())
			collect()
			if thr != nil && (e.at/int64(10*time.Millisecond))%100 == 0 {
				thr.Recompute(clock())
			}
			if e.at < int64(total) {
				heap.Push(&events, simEvent{at: e.at + int64(10*time.Millisecond), kind: 2})
			}
		}
	}
	ctl.Close()
	wg.Wait()
	return res
}

// simKey is the one URL key of realQ's estimator samples.
var simKey = []byte("/")

func twoClass(gold, bronze []simPhase, bronzePeriod time.Duration) []simClass {
	return []simClass{{name: "gold", load: gold}, {name: "bronze", period: bronzePeriod, load: bronze}}
}

func steady(frac float64, d time.Duration) []simPhase { return []simPhase{{d, frac}} }

// issueFarm is the farm of the report: 3 backends × 4 slots, 10ms per
// request (1,200 req/s), R_sla = 100ms.
func issueFarm(exp, threshold bool, classes []simClass) simCase {
	return simCase{n: 3, p: 4, s: 10 * time.Millisecond, exp: exp, rsla: 100 * time.Millisecond,
		classes: classes, threshold: threshold, seed: 11}
}

// TestPriorityInversionWithoutReserve reproduces the inversion the reserve
// removes: with the test alone (first come, first served against the
// farm's present load), a flood of bronze at 10× takes most of the farm and
// more than a quarter of gold is turned away.
func TestPriorityInversionWithoutReserve(t *testing.T) {
	sc := issueFarm(false, false, twoClass(steady(0.8, 10*time.Second), steady(9.2, 10*time.Second), 0))
	sc.noReserve = true
	r := runSim(t, sc)
	t.Log(r)
	if g := r.admittedFrac(0); g > 0.75 {
		t.Fatalf("without the reserve gold was admitted %.1f%%: the simulation no longer shows the inversion", 100*g)
	}
}

// TestPriorityHoldsUnderFlood is the issue's target: gold demand ≤ 0.9×
// capacity beside bronze at 3× and 10×, in batch and threshold mode, with
// fixed and exponential service times and with a bronze period: gold
// admitted ≥ 99%, gold's requests within R_sla, total goodput ≥ 0.95×.
func TestPriorityHoldsUnderFlood(t *testing.T) {
	const d = 10 * time.Second
	for _, mode := range []string{"batch", "threshold"} {
		for _, exp := range []bool{false, true} {
			for _, tc := range []struct {
				gold, bronze float64
				period       time.Duration
			}{
				{0.8, 2.2, 0}, {0.8, 9.2, 0}, {0.9, 9.1, 0}, {0.8, 9.2, 50 * time.Millisecond},
			} {
				if mode == "threshold" && tc.period != 0 {
					continue // threshold mode has no queues: periods do not apply
				}
				name := fmt.Sprintf("%s/exp=%v/gold=%.1f/bronze=%.1f/period=%v", mode, exp, tc.gold, tc.bronze, tc.period)
				t.Run(name, func(t *testing.T) {
					sc := issueFarm(exp, mode == "threshold", twoClass(steady(tc.gold, d), steady(tc.bronze, d), tc.period))
					r := runSim(t, sc)
					t.Log(r)
					if g := r.admittedFrac(0); g < 0.99 {
						t.Errorf("gold admitted %.2f%%, want ≥ 99%%", 100*g)
					}
					if late := float64(r.late[0]) / float64(max(r.admitted[0], 1)); late > 0.05 {
						t.Errorf("%.1f%% of admitted gold missed R_sla, want ≤ 5%% (p95 within target)", 100*late)
					}
					if g := r.goodput(0, 1); g < 0.95 {
						t.Errorf("goodput %.3f× capacity, want ≥ 0.95", g)
					}
				})
			}
		}
	}
}

// TestPriorityGoldAboveCapacity: gold alone asks for more than the farm
// has; gold gets ≥ 0.95× capacity and bronze nothing.
func TestPriorityGoldAboveCapacity(t *testing.T) {
	for _, mode := range []string{"batch", "threshold"} {
		t.Run(mode, func(t *testing.T) {
			sc := issueFarm(false, mode == "threshold", twoClass(steady(1.3, 10*time.Second), steady(5, 10*time.Second), 0))
			r := runSim(t, sc)
			t.Log(r)
			if g := r.goodput(0); g < 0.95 {
				t.Errorf("gold goodput %.3f× capacity, want ≥ 0.95", g)
			}
			// The first instants, before gold's rate is known, may let a
			// little bronze in. After the first second bronze gets only a
			// slot that is idle at the instant it asks (work-conserving):
			// at most 0.1% of its requests.
			var offered, admitted int
			for s := 1; s < len(r.seconds); s++ {
				offered += r.seconds[s].offered[1]
				admitted += r.seconds[s].admitted[1]
			}
			if f := float64(admitted) / float64(offered); f > 0.001 {
				t.Errorf("after the first second bronze admitted %.3f%% (%d), want ≤ 0.1%%", 100*f, admitted)
			}
		})
	}
}

// TestPriorityThreeClasses: gold 0.4×, silver 0.6×, bronze 9× capacity.
// Every second the admitted share is monotone in importance.
func TestPriorityThreeClasses(t *testing.T) {
	for _, mode := range []string{"batch", "threshold"} {
		t.Run(mode, func(t *testing.T) {
			const d = 10 * time.Second
			sc := issueFarm(true, mode == "threshold", []simClass{
				{name: "gold", load: steady(0.4, d)},
				{name: "silver", load: steady(0.6, d)},
				{name: "bronze", load: steady(9, d)},
			})
			r := runSim(t, sc)
			t.Log(r)
			for s, sec := range r.seconds {
				share := func(c int) float64 { return float64(sec.admitted[c]) / float64(max(sec.offered[c], 1)) }
				if !(share(0) >= share(1) && share(1) >= share(2)) {
					t.Errorf("second %d: admitted shares gold %.3f silver %.3f bronze %.3f are not monotone", s, share(0), share(1), share(2))
				}
			}
			if g := r.admittedFrac(0); g < 0.99 {
				t.Errorf("gold admitted %.2f%%, want ≥ 99%%", 100*g)
			}
			if g := r.goodput(0, 1, 2); g < 0.95 {
				t.Errorf("goodput %.3f× capacity, want ≥ 0.95", g)
			}
		})
	}
}

// TestPriorityStepRise: bronze floods at 9× while gold is quiet, then gold
// rises from 0 to 0.9× capacity in one step. Gold takes its room back
// within a fraction of a second: in every second after the step at least
// 97% of gold is admitted, and ≥ 99% over the whole of the step.
func TestPriorityStepRise(t *testing.T) {
	for _, mode := range []string{"batch", "threshold"} {
		t.Run(mode, func(t *testing.T) {
			gold := []simPhase{{5 * time.Second, 0}, {10 * time.Second, 0.9}}
			sc := issueFarm(false, mode == "threshold", twoClass(gold, steady(9, 15*time.Second), 0))
			r := runSim(t, sc)
			t.Log(r)
			for s := 5; s < len(r.seconds); s++ {
				sec := r.seconds[s]
				if f := float64(sec.admitted[0]) / float64(max(sec.offered[0], 1)); f < 0.97 {
					t.Errorf("second %d after the step: gold admitted %.2f%%, want ≥ 97%%", s, 100*f)
				}
			}
			if g := r.admittedFrac(0); g < 0.99 {
				t.Errorf("gold admitted %.2f%% over the step, want ≥ 99%%", 100*g)
			}
		})
	}
}

// TestPriorityNestedPeriods is Cataclysm's Fig. 5 shape with periods on 4 ×
// 8 slots of exponential 80 ms, R_sla 1 s: gold (period 0), silver (100 ms)
// and bronze (250 ms). For 10 s gold offers 0.2×, silver 0.9×, bronze 0.2×:
// silver alone overloads what gold leaves; then gold rises to 1.2× (alone
// above capacity) with silver and bronze at 0.9×. Every second, bronze gets
// no larger a share than silver and silver none larger than gold: the room
// a long-period class may fill must never let it past a more important one
// (it did, before the fill slack shrank with the more important demand).
func TestPriorityNestedPeriods(t *testing.T) {
	const d = 10 * time.Second
	sc := simCase{n: 4, p: 8, s: 80 * time.Millisecond, exp: true, rsla: time.Second, seed: 5,
		classes: []simClass{
			{name: "gold", load: []simPhase{{d, 0.2}, {d, 1.2}}},
			{name: "silver", period: 100 * time.Millisecond, load: []simPhase{{d, 0.9}, {d, 0.9}}},
			{name: "bronze", period: 250 * time.Millisecond, load: []simPhase{{d, 0.2}, {d, 0.9}}},
		}}
	r := runSim(t, sc)
	t.Log(r)
	for s, sec := range r.seconds {
		share := func(c int) float64 { return float64(sec.admitted[c]) / float64(max(sec.offered[c], 1)) }
		if share(1) > share(0)+0.01 || share(2) > share(1)+0.01 {
			t.Errorf("second %d: admitted shares gold %.3f silver %.3f bronze %.3f are not monotone", s, share(0), share(1), share(2))
		}
	}
	first := func(c int) float64 {
		var a, o int
		for _, sec := range r.seconds[:10] {
			a += sec.admitted[c]
			o += sec.offered[c]
		}
		return float64(a) / float64(o)
	}
	if g := first(0); g < 0.99 {
		t.Errorf("gold admitted %.2f%% while it fits, want ≥ 99%%", 100*g)
	}
	var good int
	for _, sec := range r.seconds[:10] {
		good += sec.good[0] + sec.good[1] + sec.good[2]
	}
	if g := float64(good) / 10 / r.capacity; g < 0.95 {
		t.Errorf("goodput %.3f× capacity in the first phase, want ≥ 0.95", g)
	}
}

// TestPriorityLearnedParallelism is the issue's setup with nothing tuned:
// P starts at 1 and is learned from completions, as with the policy's
// default (admission.batch.parallelism: 0). Gold at 0.8× beside bronze at
// 10× keeps ≥ 99% admitted and the farm's goodput stays ≥ 0.95×.
func TestPriorityLearnedParallelism(t *testing.T) {
	for _, exp := range []bool{false, true} {
		t.Run(fmt.Sprintf("exp=%v", exp), func(t *testing.T) {
			sc := issueFarm(exp, false, twoClass(steady(0.8, 20*time.Second), steady(9.2, 20*time.Second), 0))
			sc.learnP = true
			r := runSim(t, sc)
			t.Log(r)
			// The first seconds learn P; judge the rest.
			var off, adm, good int
			for _, sec := range r.seconds[5:] {
				off += sec.offered[0]
				adm += sec.admitted[0]
				good += sec.good[0] + sec.good[1]
			}
			if f := float64(adm) / float64(off); f < 0.99 {
				t.Errorf("gold admitted %.2f%% after 5 s of learning, want ≥ 99%%", 100*f)
			}
			if g := float64(good) / float64(len(r.seconds)-5) / r.capacity; g < 0.95 {
				t.Errorf("goodput %.3f× capacity after 5 s of learning, want ≥ 0.95", g)
			}
		})
	}
}

// TestPriorityMixedSizes: gold's requests are 10× or 40× bronze's. The
// test counts requests in service at the size of the one being tested, so
// a reserve judged at bronze's own size let a flood of small bronze
// requests fill the farm with a count gold's larger requests could not pass
// (gold admitted ~20%). Judged at gold's size (sref), gold keeps ≥ 99%.
func TestPriorityMixedSizes(t *testing.T) {
	for _, mode := range []string{"batch", "threshold"} {
		for _, sizes := range [][2]time.Duration{{20 * time.Millisecond, 2 * time.Millisecond}, {40 * time.Millisecond, time.Millisecond}} {
			t.Run(fmt.Sprintf("%s/gold=%v/bronze=%v", mode, sizes[0], sizes[1]), func(t *testing.T) {
				cls := twoClass(steady(0.8, 10*time.Second), steady(9, 10*time.Second), 0)
				cls[0].s, cls[1].s = sizes[0], sizes[1]
				sc := simCase{n: 3, p: 4, s: 10 * time.Millisecond, rsla: 200 * time.Millisecond,
					classes: cls, threshold: mode == "threshold", seed: 13}
				r := runSim(t, sc)
				t.Log(r)
				if g := r.admittedFrac(0); g < 0.99 {
					t.Errorf("gold admitted %.2f%%, want ≥ 99%%", 100*g)
				}
				if g := r.goodput(0, 1); g < 0.9 {
					t.Errorf("goodput %.3f× capacity, want ≥ 0.9", g)
				}
			})
		}
	}
}

// TestPriorityThresholdCapacityOff: threshold mode with K a quarter too low
// (a learner that cut it after an SLA miss, or 0.9·P before P is learned)
// or a quarter too high. With K too low the pair makes gold its threshold
// class; gold must still be admitted while it has room, rather than shed by
// the draw while bronze takes free slots.
func TestPriorityThresholdCapacityOff(t *testing.T) {
	for _, k := range []float64{0.75, 1.25} {
		t.Run(fmt.Sprintf("K=%.2f", k), func(t *testing.T) {
			sc := issueFarm(false, true, twoClass(steady(0.8, 10*time.Second), steady(9.2, 10*time.Second), 0))
			sc.kFactor = k
			r := runSim(t, sc)
			t.Log(r)
			if g := r.admittedFrac(0); g < 0.99 {
				t.Errorf("gold admitted %.2f%%, want ≥ 99%%", 100*g)
			}
			if g := r.goodput(0, 1); g < 0.95 {
				t.Errorf("goodput %.3f× capacity, want ≥ 0.95", g)
			}
		})
	}
}

// TestPriorityGoldPeriod: the most important class has a period of its own.
// With 20 ms (its batch of ~19 requests fits its budget easily) gold keeps
// ≥ 99%. A period whose batch alone nearly fills the class's budget is the
// class's own limit, not an inversion: at 50 ms, gold at 0.8× capacity
// waits up to 50 ms and its batch of ~48 requests needs ~40 ms of the
// 50 ms left, so even alone it is admitted 98.6% (this simulation), and
// with bronze's free-slot fills between its runs 94.8%: a known limit,
// written down in docs/algorithms.md §2.
func TestPriorityGoldPeriod(t *testing.T) {
	cls := twoClass(steady(0.8, 10*time.Second), steady(9.2, 10*time.Second), 0)
	cls[0].period = 20 * time.Millisecond
	r := runSim(t, issueFarm(false, false, cls))
	t.Log(r)
	if g := r.admittedFrac(0); g < 0.99 {
		t.Errorf("gold admitted %.2f%%, want ≥ 99%%", 100*g)
	}
	if g := r.goodput(0, 1); g < 0.95 {
		t.Errorf("goodput %.3f× capacity, want ≥ 0.95", g)
	}
}
