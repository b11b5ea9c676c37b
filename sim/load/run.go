package load

import (
	"context"
	"fmt"
	"io"
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

// WithClient sets the HTTP client. The default is NewClient(cfg). The
// client's own Timeout should be zero: Run applies Config.Timeout.
func WithClient(c *http.Client) Option { return func(g *generator) { g.client = c } }

// NewClient builds the default client: HTTP/1.1 keep-alive, as many idle
// connections per host as MaxInFlight (open loop needs one connection per
// request in flight), no compression, no redirects, 5 s dial timeout.
func NewClient(cfg Config) *http.Client { return newClient(cfg, nil) }

// newClient is NewClient with connections made from local (nil: the
// system's choice).
func newClient(cfg Config, local net.Addr) *http.Client {
	n := cfg.MaxInFlight
	if n <= 0 {
		n = 10000
	}
	return &http.Client{
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second, LocalAddr: local}).DialContext,
			MaxIdleConns:        0, // no total limit
			MaxIdleConnsPerHost: n,
			IdleConnTimeout:     30 * time.Second,
			DisableCompression:  true,
			ForceAttemptHTTP2:   false,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

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
		if tr, ok := g.client.Transport.(*http.Transport); ok {
			defer tr.CloseIdleConnections()
		}
	}
	for _, t := range cfg.Targets {
		g.targets = append(g.targets, strings.TrimRight(t, "/"))
	}
	g.budget.Store(cfg.MaxRequests)
	g.classes = make([]classState, len(cfg.Classes))
	for i := range cfg.Classes {
		g.classes[i] = newClassState(&cfg.Classes[i].Request)
		if src := cfg.Classes[i].Source; src != "" {
			// A client of its own address: its own pool (the dialer binds
			// every connection to src).
			c := newClient(cfg, &net.TCPAddr{IP: net.IP(netip.MustParseAddr(src).AsSlice())})
			defer c.Transport.(*http.Transport).CloseIdleConnections()
			g.classes[i].client = c
		}
	}
	g.rec.results = make([]Result, 0, min(expected(cfg), 1<<20))

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

	rep := &Report{Config: cfg, Start: g.start, Elapsed: time.Since(g.start), Results: g.rec.results}
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

// expected estimates the number of arrivals, to size the result slice.
func expected(cfg Config) int {
	n := 0.0
	for _, k := range cfg.Classes {
		if k.Open != nil {
			n += k.Open.Rate.Integral(k.Open.Rate.Duration())
		} else {
			n += k.Closed.Users.Peak() * 10
		}
	}
	return int(min(n*1.1+16, float64(cfg.MaxRequests)))
}

type generator struct {
	cfg     Config
	client  *http.Client
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

// recorder collects results. One short mutex; appends only.
type recorder struct {
	mu      sync.Mutex
	results []Result
}

func (r *recorder) add(res Result) {
	r.mu.Lock()
	r.results = append(r.results, res)
	r.mu.Unlock()
}

// classState is what a class's requests share, prepared once.
type classState struct {
	header http.Header  // cloned per request
	cum    []float64    // cumulative path weights
	client *http.Client // Class.Source's; nil: the generator's
}

func newClassState(r *Request) classState {
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
	cs := classState{header: h, cum: make([]float64, len(r.Paths))}
	sum := 0.0
	for i, p := range r.Paths {
		sum += p.Weight
		cs.cum[i] = sum
	}
	return cs
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
	k := &g.cfg.Classes[ci]
	res := Result{Class: ci, Path: pi, Start: at, RetryAfter: -1}
	target := g.targets[int(g.rr.Add(1)%uint64(len(g.targets)))]
	ctx, cancel := context.WithTimeout(g.runCtx, g.cfg.Timeout)
	defer cancel()
	var body io.Reader
	if k.Request.Body != "" {
		body = strings.NewReader(k.Request.Body)
	}
	sent := time.Now()
	res.Lag = max(sent.Sub(g.start)-at, 0)
	req, err := http.NewRequestWithContext(ctx, k.Request.Method, target+k.Request.Paths[pi].Path, body)
	if err != nil {
		res.Err = ErrOther
		return res
	}
	req.Header = g.classes[ci].header.Clone()
	if k.Request.Host != "" {
		req.Host = k.Request.Host
	}
	cl := g.client
	if c := g.classes[ci].client; c != nil {
		cl = c
	}
	resp, err := cl.Do(req)
	if err != nil {
		res.Latency = time.Since(sent)
		res.Err = classify(err, g.runCtx.Err())
		return res
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	res.Latency = time.Since(sent)
	res.Bytes = n
	if err != nil {
		res.Err = classify(err, g.runCtx.Err())
		return res
	}
	res.Status = resp.StatusCode
	if res.Status == http.StatusServiceUnavailable || res.Status == http.StatusTooManyRequests {
		res.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), sent.Add(res.Latency))
		if reason := resp.Header.Get(RejectHeader); reason != "" {
			res.Rejected = true
			res.Reason = reason
		}
	}
	return res
}
