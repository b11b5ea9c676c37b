package batchac

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/internal/scripttest"
)

// The scenario scripts in testdata/*.txt drive a Controller on a manual
// clock, CockroachDB datadriven style:
//
//	# comment (kept on -rewrite)
//	command key=value ...
//	----
//	expected output
//	<blank line>
//
// Commands:
//
//	init classes=gold:100ms,silver:0 rsla=1s n=2 q=10ms inflight=0
//	     [parallelism=1] [learn] [buckets=8] [cap=1024] [all_or_nothing]
//	                          new controller at t=0 (closing the previous one);
//	                          learn: P is learned (LearnParallelism)
//	observe inservice=2 s=1500ms took=1500ms [over]
//	                          a finished request: ObserveService, or with over
//	                          ObserveSpare (admitted by the work-conserving
//	                          rule); prints P and the probe's ceiling
//	reconfigure classes=... [parallelism=] [buckets=] [cap=] [all_or_nothing]
//	arrive id=a[,b,...] class=gold s=50ms [bucket=0] [share=within|over|marginal|spare] [rank=0]
//	                          share: the request's fair-share standing;
//	                          rank: a marginal request's (Request.Rank)
//	                          each arrival calls Admit in its own goroutine and
//	                          waits until it is queued or decided; immediate
//	                          decisions are printed
//	advance 100ms             moves the clock; prints t=
//	tick [advance=D]          Controller.Tick(now); prints which classes ran
//	                          and every decision the run made
//	state [inflight=] [n=] [q=] [qnow=] [rsla=] [demand=gold:0.8,...] [means=gold:10ms,...] [within=gold:0.5,...]
//	                          demand is State.Demand in server-seconds/s,
//	                          means State.MeanS, within WithinShareDemand
//	reserve                   recompute the reserve now; prints each
//	                          class's share ρ and limit (d = 0)
//	gone id=a                 the client disconnects
//	close                     Controller.Close
//	queue                     queue lengths per class
//	decisions                 decision counters per class
//	maxwait                   the longest wait per class so far
//
// A decision prints as "id: verdict [over_target] [retry_after=] [waited=]"
// (over_target: admitted by the work-conserving rule); waited is the
// manual-clock time between arrival and decision, omitted when zero.
//
// Run with -rewrite to regenerate the expected output.

func TestScripts(t *testing.T) {
	scripttest.RunAll(t, "testdata/*.txt", func(t *testing.T, path string) scripttest.Exec {
		h := &harness{t: t, path: path}
		t.Cleanup(h.shutdown)
		return func(line int, cmd string) []string {
			h.line = line
			return h.exec(cmd)
		}
	})
}

// manualClock is a clock that moves only when told.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fakeState is a State set by the test.
type fakeState struct {
	q, rsla  atomic.Int64
	qNow     atomic.Int64 // ns; < 0: Q's value
	inflight atomic.Int64
	n        atomic.Int64
	demand   [MaxClasses]atomic.Uint64 // float64 bits, by class index
	means    [MaxClasses]atomic.Int64  // ns, by class index
	sust     atomic.Uint64             // float64 bits: Sustained
	within   [MaxClasses]atomic.Uint64 // float64 bits: WithinShareDemand, by class index
}

func (s *fakeState) Q() time.Duration { return time.Duration(s.q.Load()) }

// QNow is Q unless the script sets qnow= (qnow=-1ns: follow q again).
func (s *fakeState) QNow() time.Duration {
	if v := s.qNow.Load(); v >= 0 {
		return time.Duration(v)
	}
	return time.Duration(s.q.Load())
}
func (s *fakeState) Inflight() int64     { return s.inflight.Load() }
func (s *fakeState) Healthy() int        { return int(s.n.Load()) }
func (s *fakeState) RSLA() time.Duration { return time.Duration(s.rsla.Load()) }
func (s *fakeState) Demand(class int) float64 {
	return math.Float64frombits(s.demand[class].Load())
}
func (s *fakeState) MeanS(class int) time.Duration { return time.Duration(s.means[class].Load()) }
func (s *fakeState) WithinShareDemand(class int) float64 {
	return math.Float64frombits(s.within[class].Load())
}
func (s *fakeState) Sustained() float64 { return math.Float64frombits(s.sust.Load()) }

type scriptArrival struct {
	id      string
	seq     int
	class   string
	at      time.Time
	gone    chan struct{}
	decided bool
}

type scriptResult struct {
	id string
	d  admission.Decision
}

type harness struct {
	t     *testing.T
	path  string
	line  int
	clock *manualClock
	t0    time.Time
	st    *fakeState
	c     *Controller
	cfg   Config

	arrivals map[string]*scriptArrival
	seq      int
	results  chan scriptResult
	enq      chan struct{}
	wg       sync.WaitGroup
	maxWait  map[string]time.Duration
}

func (h *harness) fatalf(format string, args ...any) {
	h.t.Helper()
	h.t.Fatalf("%s:%d: %s", h.path, h.line, fmt.Sprintf(format, args...))
}

func (h *harness) shutdown() {
	if h.c != nil {
		h.c.Close()
		h.wg.Wait()
	}
}

func (h *harness) dur(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		h.fatalf("bad duration %q: %v", s, err)
	}
	return d
}

func (h *harness) num(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		h.fatalf("bad number %q: %v", s, err)
	}
	return n
}

func (h *harness) exec(line string) []string {
	fields := strings.Fields(line)
	args := scripttest.Args(fields[1:])
	switch fields[0] {
	case "init":
		return h.init(args)
	case "reconfigure":
		cfg := h.config(args)
		before := h.queued()
		if err := h.c.Reconfigure(cfg); err != nil {
			return []string{"error: " + err.Error()}
		}
		h.cfg = cfg
		return h.collect(before - h.queued())
	case "arrive":
		return h.arrive(args)
	case "advance":
		h.clock.Advance(h.dur(fields[1]))
		return []string{"t=" + h.clock.Now().Sub(h.t0).String()}
	case "tick":
		if a, ok := args["advance"]; ok {
			h.clock.Advance(h.dur(a))
		}
		before := h.queued()
		due := h.c.tick(h.clock.Now())
		var ran []string
		for i, d := range due {
			if d {
				ran = append(ran, h.cfg.Classes[i].Name)
			}
		}
		if len(ran) == 0 {
			ran = []string{"none"}
		}
		out := []string{"ran: " + strings.Join(ran, ",")}
		return append(out, h.collect(before-h.queued())...)
	case "state":
		h.setState(args)
		return nil
	case "observe":
		in, s, took := int(h.num(args["inservice"])), h.dur(args["s"]), h.dur(args["took"])
		if _, over := args["over"]; over {
			h.c.ObserveSpare(in, s, took)
		} else {
			h.c.ObserveService(in, s, took)
		}
		ceil := "-"
		if m := h.c.par.ceil.Load(); m > 0 && h.clock.Now().UnixNano() < h.c.par.ceilUntil.Load() {
			ceil = fmt.Sprintf("%d until t=%v", m, time.Unix(0, h.c.par.ceilUntil.Load()).Sub(h.t0))
		}
		return []string{fmt.Sprintf("P=%.4g ceiling=%s", h.c.Parallelism(), ceil)}
	case "reserve":
		h.c.run.Lock()
		s := h.c.snap.Load()
		h.c.updateReserve(s, h.clock.Now())
		h.c.run.Unlock()
		m := model{n: max(int(h.st.n.Load()), 1), rsla: float64(h.st.rsla.Load()), p: h.c.parallelism(s)}
		var out []string
		for _, cl := range s.classes {
			_, lim := m.limits(float64(cl.period), cl.dAbove, cl.reserve())
			line := fmt.Sprintf("%s: rho=%.4g limit=%v", cl.name, cl.reserve(), time.Duration(lim).Round(time.Microsecond))
			if rt := math.Float64frombits(cl.rhoT[0].Load()); rt != cl.reserve() {
				// The fair-share tiers' shares (doc.go, Fair share), when
				// the within-share demand holds more than the class's own.
				line += fmt.Sprintf(" over=%.4g marginal=%.4g", rt, math.Float64frombits(cl.rhoT[1].Load()))
			}
			out = append(out, line)
		}
		return out
	case "room":
		// Room and Held for one request of class at s (threshold mode's
		// guard, package control).
		class := -1
		for i, c := range h.cfg.Classes {
			if c.Name == args["class"] {
				class = i
			}
		}
		if class < 0 {
			h.fatalf("room: no class %q", args["class"])
		}
		s := h.dur(args["s"])
		room, free, _ := h.c.Room(class, s, 0, 0)
		return []string{fmt.Sprintf("room=%v free=%v held=%v", room, free, h.c.Held(class, s))}
	case "gone":
		a := h.arrivals[args["id"]]
		if a == nil || a.decided {
			h.fatalf("gone: no waiting arrival %q", args["id"])
		}
		close(a.gone)
		return h.collect(1)
	case "close":
		before := h.queued()
		h.c.Close()
		return append([]string{"closed"}, h.collect(before)...)
	case "queue":
		var out []string
		for i, cc := range h.cfg.Classes {
			out = append(out, fmt.Sprintf("%s: %d", cc.Name, h.c.QueueLen(i)))
		}
		return out
	case "decisions":
		var out []string
		for _, cl := range h.c.snap.Load().classes {
			var parts []string
			for _, v := range admission.Verdicts() {
				if n := cl.decisions[v].Load(); n > 0 {
					parts = append(parts, fmt.Sprintf("%s=%d", v, n))
				}
			}
			if n := cl.overTarget.Load(); n > 0 {
				parts = append(parts, fmt.Sprintf("over_target=%d", n))
			}
			if len(parts) == 0 {
				parts = []string{"-"}
			}
			out = append(out, cl.name+": "+strings.Join(parts, " "))
		}
		return out
	case "maxwait":
		var out []string
		for _, cc := range h.cfg.Classes {
			out = append(out, fmt.Sprintf("%s: %v (period %v)", cc.Name, h.maxWait[cc.Name], cc.Period))
		}
		return out
	}
	h.fatalf("unknown command %q", fields[0])
	return nil
}

func (h *harness) config(args map[string]string) Config {
	cfg := Config{Now: h.clock.Now}
	for _, spec := range strings.Split(args["classes"], ",") {
		name, period, ok := strings.Cut(spec, ":")
		if !ok {
			h.fatalf("class %q: want name:period", spec)
		}
		cfg.Classes = append(cfg.Classes, ClassConfig{Name: name, Period: h.dur(period)})
	}
	if v, ok := args["parallelism"]; ok {
		p, err := strconv.ParseFloat(v, 64)
		if err != nil {
			h.fatalf("parallelism: %v", err)
		}
		cfg.Parallelism = p
	}
	if v, ok := args["buckets"]; ok {
		cfg.Buckets = int(h.num(v))
	}
	if v, ok := args["cap"]; ok {
		cfg.QueueCap = int(h.num(v))
	}
	_, cfg.AllOrNothing = args["all_or_nothing"]
	_, cfg.LearnParallelism = args["learn"]
	// The scripts test the policer's runs: arrivals wait for them unless
	// the script says early (StrictPeriods off, the production default).
	_, early := args["early"]
	cfg.StrictPeriods = !early
	_, cfg.NoReserve = args["no_reserve"]
	_, cfg.NoImpliedQueue = args["no_implied_queue"]
	if v, ok := args["floor"]; ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			h.fatalf("floor: %v", err)
		}
		cfg.ReserveFloor = f
	}
	return cfg
}

func (h *harness) setState(args map[string]string) {
	for k, v := range args {
		switch k {
		case "inflight":
			h.st.inflight.Store(h.num(v))
		case "n":
			h.st.n.Store(h.num(v))
		case "q":
			h.st.q.Store(int64(h.dur(v)))
		case "qnow": // the queue now (QNow), when it differs from Q
			h.st.qNow.Store(int64(h.dur(v)))
		case "rsla":
			h.st.rsla.Store(int64(h.dur(v)))
		case "demand": // class:work,... in server-seconds per second
			for _, spec := range strings.Split(v, ",") {
				name, w, _ := strings.Cut(spec, ":")
				f, err := strconv.ParseFloat(w, 64)
				if err != nil {
					h.fatalf("demand %q: %v", spec, err)
				}
				h.st.demand[h.classIndex(name)].Store(math.Float64bits(f))
			}
		case "sustained": // server-seconds per second per backend (read every ReservePeriod)
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				h.fatalf("sustained: %v", err)
			}
			h.st.sust.Store(math.Float64bits(f))
		case "within": // class:work,... the within-share demand (ShareState), server-seconds/s
			for _, spec := range strings.Split(v, ",") {
				name, w, _ := strings.Cut(spec, ":")
				f, err := strconv.ParseFloat(w, 64)
				if err != nil {
					h.fatalf("within %q: %v", spec, err)
				}
				h.st.within[h.classIndex(name)].Store(math.Float64bits(f))
			}
		case "means": // class:duration,... the classes' mean S
			for _, spec := range strings.Split(v, ",") {
				name, d, _ := strings.Cut(spec, ":")
				h.st.means[h.classIndex(name)].Store(int64(h.dur(d)))
			}
		case "classes", "parallelism", "learn", "buckets", "cap", "all_or_nothing", "no_reserve", "no_implied_queue", "floor", "early":
		default:
			h.fatalf("unknown state key %q", k)
		}
	}
}

func (h *harness) init(args map[string]string) []string {
	h.shutdown()
	h.t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	h.clock = &manualClock{t: h.t0}
	h.st = &fakeState{}
	h.st.qNow.Store(-1)
	h.st.n.Store(1)
	h.st.rsla.Store(int64(time.Second))
	h.cfg = h.config(args)
	h.setState(args)
	c, err := New(h.st, h.cfg)
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	h.c = c
	h.arrivals = make(map[string]*scriptArrival)
	h.results = make(chan scriptResult, 4096)
	h.enq = make(chan struct{}, 1)
	h.maxWait = make(map[string]time.Duration)
	c.testHookEnqueued = func() { h.enq <- struct{}{} }
	return nil
}

// queued is the total number of waiting requests.
func (h *harness) queued() int {
	total := 0
	for i := range h.cfg.Classes {
		total += h.c.QueueLen(i)
	}
	return total
}

func (h *harness) classIndex(name string) int {
	for i, cc := range h.cfg.Classes {
		if cc.Name == name {
			return i
		}
	}
	if n, err := strconv.Atoi(name); err == nil {
		return n // a raw index, to test out-of-range classes
	}
	h.fatalf("unknown class %q", name)
	return 0
}

func (h *harness) arrive(args map[string]string) []string {
	class := h.classIndex(args["class"])
	var bucket int
	if v, ok := args["bucket"]; ok {
		bucket = int(h.num(v))
	}
	s := h.dur(args["s"])
	share := admission.WithinShare
	switch args["share"] {
	case "", "within":
	case "over":
		share = admission.OverShare
	case "marginal":
		share = admission.Marginal
	case "spare":
		share = admission.SpareOnly
	default:
		h.fatalf("share %q: want within, over, marginal or spare", args["share"])
	}
	var rank uint8
	if v, ok := args["rank"]; ok {
		rank = uint8(h.num(v))
	}
	var out []string
	for _, id := range strings.Split(args["id"], ",") {
		if _, dup := h.arrivals[id]; dup {
			h.fatalf("arrival %q twice", id)
		}
		h.seq++
		a := &scriptArrival{id: id, seq: h.seq, class: args["class"], at: h.clock.Now(), gone: make(chan struct{})}
		h.arrivals[id] = a
		req := &admission.Request{Class: class, Bucket: bucket, S: s, Gone: a.gone, Share: share, Rank: rank}
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			h.results <- scriptResult{id: id, d: h.c.Admit(req)}
		}()
		select {
		case <-h.enq:
		case r := <-h.results:
			out = append(out, h.format(r))
		case <-time.After(10 * time.Second):
			h.fatalf("arrival %s neither queued nor decided", id)
		}
	}
	return out
}

// collect waits for exactly n decisions and formats them in arrival order.
func (h *harness) collect(n int) []string {
	rs := make([]scriptResult, 0, n)
	for range n {
		select {
		case r := <-h.results:
			rs = append(rs, r)
		case <-time.After(10 * time.Second):
			h.fatalf("waited for %d decisions, got %d", n, len(rs))
		}
	}
	select {
	case r := <-h.results:
		h.fatalf("unexpected extra decision %s", h.format(r))
	default:
	}
	slices.SortFunc(rs, func(a, b scriptResult) int { return h.arrivals[a.id].seq - h.arrivals[b.id].seq })
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = h.format(r)
	}
	return out
}

func (h *harness) format(r scriptResult) string {
	a := h.arrivals[r.id]
	a.decided = true
	s := r.id + ": " + r.d.Verdict.String()
	if r.d.OverTarget {
		s += " over_target"
	}
	if r.d.RetryAfter != 0 {
		s += " retry_after=" + r.d.RetryAfter.String()
	}
	if w := h.clock.Now().Sub(a.at); w > 0 {
		s += " waited=" + w.String()
		h.maxWait[a.class] = max(h.maxWait[a.class], w)
	}
	return s
}
