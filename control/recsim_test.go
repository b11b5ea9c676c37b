package control

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/policy"
)

// ctlSim is a discrete-event farm behind a whole App (every admission
// mode, the estimator, auto's fall-back), on a manual clock with every
// loop ticked by the simulation: servers of slots each, FIFO per server,
// each admitted request sent to the up server with the fewest in flight
// (least_loaded), its service time drawn at dispatch; each response
// reports its service and queueing time in Server-Timing, as sim/farm
// does. Arrivals are open-loop Poisson of one class at rate(t). It records
// per second what was offered and admitted, the responses within the
// target by completion second (goodput) and their p95, and the mode at
// the second's end.
type ctlSim struct {
	servers, slots int
	target         time.Duration
	rate           func(t time.Duration) float64
	// service draws a request's service time on server i at t.
	service func(r *rand.Rand, i int, t time.Duration) time.Duration
	// up tells whether server i is pickable at t (nil: always).
	up func(i int, t time.Duration) bool

	a       *App
	ck      *manualClock
	logs    *syncBuf
	srv     []ctlServer
	events  ctlHeap
	flight  atomic.Int64
	healthy atomic.Int64
	secs    []ctlSecond
	start   time.Time // the run's start
	seq     int
	dbg     func(el time.Duration)
}

type ctlServer struct {
	busy  int
	queue []*ctlJob
	down  bool
}

type ctlJob struct {
	client   int // fairSim: the client that sent it
	tk       admission.Ticket
	server   int
	dispatch time.Time
	start    time.Time
	inSvc    int
	svc      time.Duration
	gone     bool // its server was killed: no answer
}

type ctlSecond struct {
	offered, admitted, over, good, done int
	// busy is the slot time the farm's servers spent serving in the
	// second; busy / (servers × slots × 1 s) is its utilisation.
	busy time.Duration
	lat  []time.Duration
	mode admission.Mode
	rate float64
	// queueing: the backends were queueing at the second's end
	// (App.Queueing).
	queueing bool
}

type ctlEvent struct {
	at  time.Time
	seq int
	job *ctlJob
}

type ctlHeap []ctlEvent

func (h ctlHeap) Len() int { return len(h) }
func (h ctlHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h ctlHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *ctlHeap) Push(x any)   { *h = append(*h, x.(ctlEvent)) }
func (h *ctlHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (s *ctlSim) Healthy() int    { return int(s.healthy.Load()) }
func (s *ctlSim) Inflight() int64 { return s.flight.Load() }

// simPolicy is one app in mode with one class and the SLA target, every
// other key at its default, as a policy file gives it.
func simPolicy(t *testing.T, mode string, target time.Duration) *policy.App {
	t.Helper()
	src := fmt.Sprintf(`apps:
  - name: sim
    listen: 127.0.0.1:1
    backends: {static: ["127.0.0.1:2"]}
    classes: [{name: web, default: true}]
    sla: {percentile: 95, targets: [{target: %v}]}
    admission: {mode: %s}
`, target, mode)
	snap, err := policy.Parse("sim.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return snap.Apps[0]
}

// newCtlSim builds the App in mode on a manual clock, its loops not
// started (the simulation ticks them) and its CPU idle (auto's CPU rule
// never switches to threshold mode).
func newCtlSim(t *testing.T, s *ctlSim, mode string) {
	t.Helper()
	s.ck = newClock()
	s.logs = &syncBuf{}
	m, err := NewManager(Options{Registerer: prometheus.NewRegistry(), Now: s.ck.now,
		CPU:    func() (time.Duration, error) { return 0, nil },
		Logger: hclog.New(&hclog.LoggerOptions{Output: s.logs, Level: hclog.Info})})
	if err != nil {
		t.Fatal(err)
	}
	m.noMonitor, m.noLoops = true, true
	t.Cleanup(m.Close)
	s.srv = make([]ctlServer, s.servers)
	s.healthy.Store(int64(s.servers))
	if s.a, err = m.Build(simPolicy(t, mode, s.target), s); err != nil {
		t.Fatal(err)
	}
}

// run simulates length with seed.
func (s *ctlSim) run(t *testing.T, length time.Duration, seed uint64) {
	t.Helper()
	arr := rand.New(rand.NewPCG(seed, 1))
	svc := rand.New(rand.NewPCG(seed, 2))
	start := s.ck.now()
	s.start = start
	s.secs = make([]ctlSecond, int(length/time.Second))
	key := []byte("/search")
	var next50 time.Time = start
	tickTo := func(to time.Time) {
		for !next50.After(to) {
			s.ck.add(next50.Sub(s.ck.now()))
			el := next50.Sub(start)
			s.setUp(el)
			s.a.batch.Tick(next50)
			if el%(250*time.Millisecond) == 0 {
				s.a.adp.Load().Tick(next50)
			}
			if s.dbg != nil {
				s.dbg(el)
			}
			if el%time.Second == 0 && el > 0 {
				s.a.tick(next50, time.Second)
				if i := int(el/time.Second) - 1; i < len(s.secs) {
					s.secs[i].mode = s.a.Mode()
					s.secs[i].rate = s.a.adp.Load().State(0).Rate
					s.secs[i].queueing = s.a.Queueing()
				}
			}
			next50 = next50.Add(50 * time.Millisecond)
		}
	}
	complete := func(upTo time.Time) {
		for s.events.Len() > 0 && !s.events[0].at.After(upTo) {
			ev := heap.Pop(&s.events).(ctlEvent)
			tickTo(ev.at)
			s.ck.add(ev.at.Sub(s.ck.now()))
			j := ev.job
			if j.gone {
				continue
			}
			s.finish(j, ev.at, start)
		}
	}
	now := start
	for {
		el := now.Sub(start)
		now = now.Add(time.Duration(arr.ExpFloat64() / s.rate(el) * 1e9))
		el = now.Sub(start)
		if el >= length {
			break
		}
		complete(now)
		tickTo(now)
		s.ck.add(now.Sub(s.ck.now()))
		x := &s.secs[int(el/time.Second)]
		x.offered++
		S, bucket := s.a.Estimate(0, key, now)
		d := s.a.Admit(&admission.Request{Class: 0, Bucket: bucket, S: S, Key: key})
		if d.Verdict != admission.Admit {
			continue
		}
		x.admitted++
		if d.OverTarget {
			x.over++
		}
		s.dispatch(&ctlJob{tk: admission.Ticket{Class: 0, Key: key, S: S, Arrival: now, Mode: d.Mode, OverTarget: d.OverTarget}}, now, svc, el)
	}
	complete(start.Add(length))
	tickTo(start.Add(length))
}

// setUp applies the servers' up/down state at el: a server that goes
// down loses the requests on it (a crash: no answer; the pool releases
// them).
func (s *ctlSim) setUp(el time.Duration) {
	if s.up == nil {
		return
	}
	n := 0
	for i := range s.srv {
		up := s.up(i, el)
		if !up && !s.srv[i].down {
			for _, ev := range s.events {
				if ev.job.server == i && !ev.job.gone {
					ev.job.gone = true
					s.flight.Add(-1)
				}
			}
			for _, j := range s.srv[i].queue {
				j.gone = true
				s.flight.Add(-1)
			}
			s.srv[i].queue, s.srv[i].busy = nil, 0
		}
		s.srv[i].down = !up
		if up {
			n++
		}
	}
	s.healthy.Store(int64(n))
}

func (s *ctlSim) dispatch(j *ctlJob, now time.Time, svc *rand.Rand, el time.Duration) {
	best := -1
	for i := range s.srv {
		if s.srv[i].down {
			continue
		}
		if best < 0 || s.srv[i].busy+len(s.srv[i].queue) < s.srv[best].busy+len(s.srv[best].queue) {
			best = i
		}
	}
	if best < 0 {
		return // no backend: the proxy answers 503
	}
	b := &s.srv[best]
	j.server, j.dispatch, j.inSvc = best, now, b.busy+len(b.queue)+1
	j.svc = s.service(svc, best, el)
	s.flight.Add(1)
	if b.busy < s.slots {
		s.startJob(j, now)
	} else {
		b.queue = append(b.queue, j)
	}
}

func (s *ctlSim) startJob(j *ctlJob, now time.Time) {
	s.srv[j.server].busy++
	j.start = now
	s.addBusy(now, now.Add(j.svc))
	s.seq++
	heap.Push(&s.events, ctlEvent{at: now.Add(j.svc), seq: s.seq, job: j})
}

func (s *ctlSim) finish(j *ctlJob, now, start time.Time) {
	b := &s.srv[j.server]
	b.busy--
	if len(b.queue) > 0 {
		n := b.queue[0]
		b.queue = b.queue[1:]
		s.startJob(n, now)
	}
	s.flight.Add(-1)
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	st := fmt.Sprintf("io;dur=%.3f, queue;dur=%.3f", ms(j.svc), ms(j.start.Sub(j.dispatch)))
	s.a.Done(&j.tk, admission.Result{ServerTiming: []byte(st), Measured: now.Sub(j.dispatch), InService: j.inSvc, End: now})
	rt := now.Sub(j.tk.Arrival)
	if sec := int(now.Sub(start) / time.Second); sec < len(s.secs) {
		x := &s.secs[sec]
		x.done++
		x.lat = append(x.lat, rt)
		if rt <= s.target {
			x.good++
		}
	}
}

// addBusy counts the slot time [from, to) to the seconds it falls in.
func (s *ctlSim) addBusy(from, to time.Time) {
	if s.secs == nil {
		return
	}
	el, end := from.Sub(s.start), to.Sub(s.start)
	for el < end {
		i := int(el / time.Second)
		if i >= len(s.secs) {
			return
		}
		next := min(end, time.Duration(i+1)*time.Second)
		s.secs[i].busy += next - el
		el = next
	}
}

// util is the farm's utilisation in second i: the share of its slots'
// time spent serving.
func (s *ctlSim) util(i int) float64 {
	return float64(s.secs[i].busy) / float64(time.Duration(s.servers*s.slots)*time.Second)
}

func (s *ctlSim) p95(i int) time.Duration {
	l := slices.Clone(s.secs[i].lat)
	if len(l) < 20 {
		return 0
	}
	slices.Sort(l)
	return l[int(math.Ceil(0.95*float64(len(l))))-1]
}

func (s *ctlSim) table(from, to int) string {
	var b strings.Builder
	for i := from; i < to && i < len(s.secs); i++ {
		x := s.secs[i]
		fmt.Fprintf(&b, "s=%d offered=%d admitted=%d over=%d good=%d p95=%v mode=%v rate=%.0f\n", i, x.offered, x.admitted, x.over, x.good,
			s.p95(i).Round(time.Millisecond), x.mode, x.rate)
	}
	return b.String()
}

// A recovery case: an event and its end on the simulated farm, the
// second the event ends and the farm's capacity after it (requests per
// second). build(false) is the same farm and load without the event at
// all: the baseline whose SLA misses the seconds after the end are
// compared with.
type recCase struct {
	name     string
	build    func(event bool) *ctlSim
	length   time.Duration
	end      int
	capacity float64
}

var recCases = []recCase{
	{"size-shift", ctlSizeShift, 28 * time.Second, 20, 12 / 0.007475},
	{"capacity-undo", ctlCapacityUndo, 26 * time.Second, 18, 200},
	{"return", ctlReturn, 20 * time.Second, 12, 1200},
}

func recCaseNamed(name string) (recCase, bool) {
	for _, c := range recCases {
		if c.name == name {
			return c, true
		}
	}
	return recCase{}, false
}

// ctlSizeShift is e2e/scenarios/recover-size.yaml, its shift shorter: 3
// × 4 slots, 5 ms or 500 ms, heavy share 0.5% (10% from 8 s to 20 s with
// the event); 1.2× the capacity before (1,926/s); p95 target 250 ms.
func ctlSizeShift(event bool) *ctlSim {
	return &ctlSim{
		servers: 3, slots: 4, target: 250 * time.Millisecond,
		rate: func(time.Duration) float64 { return 1.2 * 12 / 0.007475 },
		service: func(r *rand.Rand, _ int, t time.Duration) time.Duration {
			share := 0.005
			if event && t >= 8*time.Second && t < 20*time.Second {
				share = 0.10
			}
			if r.Float64() < share {
				return 500 * time.Millisecond
			}
			return 5 * time.Millisecond
		},
	}
}

// ctlCapacityUndo is e2e/scenarios/recover-shift.yaml, shorter: 2 × 8
// slots, exponential 80 ms (200/s); 1× for 3 s, then 10×; every server
// 3× slower from 8 s to 18 s with the event; p95 target 1 s.
func ctlCapacityUndo(event bool) *ctlSim {
	return &ctlSim{
		servers: 2, slots: 8, target: time.Second,
		rate: func(t time.Duration) float64 {
			if t < 3*time.Second {
				return 200
			}
			return 2000
		},
		service: func(r *rand.Rand, _ int, t time.Duration) time.Duration {
			mean := 80 * time.Millisecond
			if event && t >= 8*time.Second && t < 18*time.Second {
				mean = 240 * time.Millisecond
			}
			return time.Duration(r.ExpFloat64() * float64(mean))
		},
	}
}

// ctlReturn is e2e/scenarios/recover-kill.yaml as admission sees it: 3 ×
// 4 slots, exponential 10 ms (1,200/s), offered 1.2× (1,440/s), p95
// target 250 ms; with the event server 2 is out of the pool (its
// requests lost) from 6 s, and back, as the balancer says, at 12 s.
func ctlReturn(event bool) *ctlSim {
	return &ctlSim{
		servers: 3, slots: 4, target: 250 * time.Millisecond,
		rate: func(time.Duration) float64 { return 1440 },
		service: func(r *rand.Rand, _ int, _ time.Duration) time.Duration {
			return time.Duration(r.ExpFloat64() * float64(10*time.Millisecond))
		},
		up: func(i int, t time.Duration) bool {
			return !event || i != 2 || t < 6*time.Second || t >= 12*time.Second
		},
	}
}
