package load

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// StopReason says why a run ended.
type StopReason string

// The stop reasons.
const (
	// StopSchedule: every class's schedule ran to its end.
	StopSchedule StopReason = "schedule"
	// StopMaxRequests: Config.MaxRequests arrivals were reached.
	StopMaxRequests StopReason = "max_requests"
	// StopMaxDuration: Config.MaxDuration passed; in-flight requests were
	// cancelled (ErrCanceled).
	StopMaxDuration StopReason = "max_duration"
	// StopCanceled: the caller's context ended.
	StopCanceled StopReason = "canceled"
)

// Report is a finished run.
type Report struct {
	// Config is the normalized configuration that ran.
	Config Config
	// Start is the wall-clock start; every Result time is relative to it.
	Start time.Time
	// Elapsed is the run's wall time, drain included.
	Elapsed time.Duration
	// Stop says why the run ended.
	Stop StopReason
	// Results holds one entry per arrival, in completion order.
	Results []Result
}

// Option changes how Run runs (not what load it offers).
type Option func(*generator)

// WithClient sets the client, so that several runs share its
// connections. The default is a NewClient(cfg) of the run's own.
func WithClient(c *Client) Option { return func(g *generator) { g.client = c } }

// Run offers the configured load and returns every request's result. It
// returns when every class's schedule has ended (or MaxRequests arrivals
// were made) and every request has finished, or when MaxDuration passes
// or ctx ends (then in-flight requests are cancelled). The error is
// non-nil only for an invalid configuration.
func Run(ctx context.Context, cfg Config, opts ...Option) (*Report, error) {
	cfg, err := cfg.Normalize()
	if err != nil {
		return nil, err
	}
	if len(cfg.Targets) == 0 {
		return nil, fmt.Errorf("load: no targets")
	}
	g := &generator{cfg: cfg}
	for _, o := range opts {
		o(g)
	}
	if g.client == nil {
		g.client = NewClient(cfg)
		defer g.client.CloseIdle()
	}
	for _, t := range cfg.Targets {
		g.targets = append(g.targets, strings.TrimRight(t, "/"))
	}
	g.budget.Store(cfg.MaxRequests)
	g.classes = make([]classState, len(cfg.Classes))
	for i := range cfg.Classes {
		if g.classes[i], err = newClassState(&cfg.Classes[i].Request, g.targets); err != nil {
			return nil, fmt.Errorf("load: class %s: %w", cfg.Classes[i].Name, err)
		}
		cl := g.client
		if src := cfg.Classes[i].Source; src != "" {
			// A client of its own address: its own pool (the dialer binds
			// every connection to src).
			cl = newClient(cfg, &net.TCPAddr{IP: net.IP(netip.MustParseAddr(src).AsSlice())})
			defer cl.CloseIdle()
		}
		for _, t := range g.targets {
			p, err := cl.pool(t)
			if err != nil {
				return nil, fmt.Errorf("load: target %s: %w", t, err)
			}
			g.classes[i].pools = append(g.classes[i].pools, p)
		}
	}

	runCtx, cancel := context.WithTimeout(ctx, cfg.MaxDuration)
	defer cancel()
	g.runCtx = runCtx
	// genCtx stops the class loops (schedule over or budget spent);
	// requests in flight go on under runCtx.
	genCtx, stopGen := context.WithCancel(runCtx)
	defer stopGen()
	g.stopGen = stopGen

	g.start = time.Now()
	for i := range cfg.Classes {
		if cfg.Classes[i].Open != nil {
			g.wg.Go(func() { g.open(genCtx, i) })
		} else {
			g.wg.Go(func() { g.closed(genCtx, i) })
		}
	}
	g.wg.Wait()

	rep := &Report{Config: cfg, Start: g.start, Elapsed: time.Since(g.start), Results: g.rec.all()}
	switch {
	case ctx.Err() != nil:
		rep.Stop = StopCanceled
	case runCtx.Err() != nil:
		rep.Stop = StopMaxDuration
	case g.budgetHit.Load():
		rep.Stop = StopMaxRequests
	default:
		rep.Stop = StopSchedule
	}
	return rep, nil
}

type generator struct {
	cfg     Config
	client  *Client
	targets []string
	classes []classState
	start   time.Time
	runCtx  context.Context
	stopGen context.CancelFunc
	wg      sync.WaitGroup // class loops, users and requests

	rr        atomic.Uint64 // round-robin over targets
	budget    atomic.Int64  // arrivals left (MaxRequests)
	budgetHit atomic.Bool
	inFlight  atomic.Int64 // open-loop requests in flight

	rec recorder
}

// recorder keeps every Result under one short mutex, in chunks of at most
// recordChunk. Decision: not one slice. Its append doubled it now and
// then under the lock; at 2^20 results (fair100.yaml's 582nd second, at
// 1,800 req/s) that is a copy of about 110 MB while every sender waits,
// and the fair100 runs showed a stall at that second (the farm at 42%
// utilisation, the proxy refusing in bursts after it).
type recorder struct {
	mu     sync.Mutex
	chunks [][]Result
	n      int
}

// recordChunk is the most Results of one chunk (about 7 MB); the first
// chunks are smaller (1,024, doubling), so a short run allocates little.
const recordChunk = 1 << 16

func (r *recorder) add(res Result) {
	r.mu.Lock()
	k := len(r.chunks) - 1
	if k < 0 || len(r.chunks[k]) == cap(r.chunks[k]) {
		size := 1024
		if k >= 0 {
			size = min(2*cap(r.chunks[k]), recordChunk)
		}
		r.chunks = append(r.chunks, make([]Result, 0, size))
		k++
	}
	r.chunks[k] = append(r.chunks[k], res)
	r.n++
	r.mu.Unlock()
}

// all returns every Result in the order added, in one slice; the run
// is over (no add after it).
func (r *recorder) all() []Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Result, 0, r.n)
	for _, c := range r.chunks {
		out = append(out, c...)
	}
	return out
}

// classState is what a class's requests share, prepared once.
type classState struct {
	wire  [][][]byte // [target][path]: the request's bytes
	head  bool       // HEAD: responses have no body
	retry bool       // an idempotent method (pool.do)
	cum   []float64  // cumulative path weights
	pools []*pool    // [target]: the class's client's connections to it
}

func newClassState(r *Request, targets []string) (classState, error) {
	h := http.Header{}
	keys := make([]string, 0, len(r.Headers))
	for k := range r.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		h.Set(k, r.Headers[k])
	}
	if len(r.Cookies) > 0 {
		names := make([]string, 0, len(r.Cookies))
		for n := range r.Cookies {
			names = append(names, n)
		}
		sort.Strings(names)
		parts := make([]string, len(names))
		for i, n := range names {
			parts[i] = (&http.Cookie{Name: n, Value: r.Cookies[n]}).String()
		}
		h.Set("Cookie", strings.Join(parts, "; "))
	}
	cs := classState{cum: make([]float64, len(r.Paths)), wire: make([][][]byte, len(targets))}
	switch r.Method {
	case http.MethodHead:
		cs.head, cs.retry = true, true
	case "", http.MethodGet, http.MethodOptions, http.MethodTrace:
		cs.retry = true
	}
	sum := 0.0
	for i, p := range r.Paths {
		sum += p.Weight
		cs.cum[i] = sum
	}
	for t, target := range targets {
		cs.wire[t] = make([][]byte, len(r.Paths))
		for i, p := range r.Paths {
			w, err := requestWire(r.Method, target, p.Path, r.Host, h, r.Body)
			if err != nil {
				return cs, err
			}
			cs.wire[t][i] = w
		}
	}
	return cs, nil
}

// pick draws a path index by weight.
func (cs *classState) pick(rng *rand.Rand) int {
	if len(cs.cum) == 1 {
		return 0
	}
	x := rng.Float64() * cs.cum[len(cs.cum)-1]
	i := sort.SearchFloat64s(cs.cum, x)
	return min(i, len(cs.cum)-1)
}

// take spends one arrival from the budget; false when it is spent, which
// also stops every class loop.
func (g *generator) take() bool {
	if g.budget.Add(-1) >= 0 {
		return true
	}
	g.budgetHit.Store(true)
	g.stopGen()
	return false
}

// open runs an open-loop class: arrivals at the schedule's times, each
// sent by its own goroutine, whatever the responses do. Bounded by the
// schedule's end, ctx and the request budget.
func (g *generator) open(ctx context.Context, ci int) {
	k := &g.cfg.Classes[ci]
	cs := &g.classes[ci]
	rng := newRand(g.cfg.Seed, uint64(ci)<<32)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	x := 0.0
	for n := int64(0); n < g.cfg.MaxRequests; n++ {
		if k.Open.Arrivals == Uniform {
			x++
		} else {
			x += rng.ExpFloat64()
		}
		at, ok := k.Open.Rate.Inverse(x)
		if !ok {
			return
		}
		if d := time.Until(g.start.Add(at)); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		} else if ctx.Err() != nil {
			return
		}
		if !g.take() {
			return
		}
		pi := cs.pick(rng)
		if g.inFlight.Add(1) > int64(g.cfg.MaxInFlight) {
			g.inFlight.Add(-1)
			g.rec.add(Result{Class: ci, Path: pi, Start: at, Lag: time.Since(g.start) - at, RetryAfter: -1, Err: ErrOverflow})
			continue
		}
		g.wg.Go(func() {
			defer g.inFlight.Add(-1)
			g.rec.add(g.do(ci, pi, at))
		})
	}
}

// closedTick is how often a closed-loop class adjusts its user count.
const closedTick = 20 * time.Millisecond

// closed runs a closed-loop class: it keeps round(Users.At(t)) users
// alive until the schedule ends. Bounded by the schedule's end and ctx.
func (g *generator) closed(ctx context.Context, ci int) {
	k := &g.cfg.Classes[ci]
	users := k.Closed.Users
	end := users.Duration()
	alive := make([]atomic.Bool, int(math.Round(users.Peak())))
	var target atomic.Int64
	usersCtx, stopUsers := context.WithCancel(ctx)
	defer stopUsers()
	tick := time.NewTicker(closedTick)
	defer tick.Stop()
	for n := 0; n < int(end/closedTick)+2; n++ {
		el := time.Since(g.start)
		if el >= end {
			return
		}
		want := min(int(math.Round(users.At(el))), len(alive))
		target.Store(int64(want))
		for i := 0; i < want; i++ {
			if alive[i].CompareAndSwap(false, true) {
				g.wg.Go(func() {
					defer alive[i].Store(false)
					g.user(usersCtx, ci, i, &target)
				})
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// user is one closed-loop user: request, then think (exponential) or, after
// a 503/429, back off for Retry-After (default Config.RetryAfter). It
// stops when its index leaves the target count, ctx ends or the budget is
// spent.
func (g *generator) user(ctx context.Context, ci, idx int, target *atomic.Int64) {
	k := &g.cfg.Classes[ci]
	cs := &g.classes[ci]
	rng := newRand(g.cfg.Seed, uint64(ci)<<32|1<<31|uint64(idx))
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for n := int64(0); n < g.cfg.MaxRequests; n++ {
		if ctx.Err() != nil || int64(idx) >= target.Load() || !g.take() {
			return
		}
		res := g.do(ci, cs.pick(rng), time.Since(g.start))
		g.rec.add(res)
		wait := time.Duration(rng.ExpFloat64() * float64(k.Closed.Think))
		if res.Status == http.StatusServiceUnavailable || res.Status == http.StatusTooManyRequests {
			wait = res.RetryAfter
			if wait < 0 {
				wait = g.cfg.RetryAfter
			}
		}
		if wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		}
	}
}

// do sends one request and reads the whole response.
func (g *generator) do(ci, pi int, at time.Duration) Result {
	cs := &g.classes[ci]
	res := Result{Class: ci, Path: pi, Start: at, RetryAfter: -1}
	ti := int(g.rr.Add(1) % uint64(len(g.targets)))
	sent := time.Now()
	res.Lag = max(sent.Sub(g.start)-at, 0)
	ex, err := cs.pools[ti].do(g.runCtx, cs.wire[ti][pi], cs.head, cs.retry, sent.Add(g.cfg.Timeout))
	res.Latency = time.Since(sent)
	res.Bytes = ex.bytes
	if err != nil {
		res.Err = classify(err, g.runCtx.Err())
		return res
	}
	res.Status = ex.status
	if res.Status == http.StatusServiceUnavailable || res.Status == http.StatusTooManyRequests {
		res.RetryAfter = parseRetryAfter(ex.retryAfter, sent.Add(res.Latency))
		if ex.reject != "" {
			res.Rejected = true
			res.Reason = ex.reject
		}
	}
	return res
}
