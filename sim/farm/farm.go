package farm

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Farm is a set of running simulated servers.
type Farm struct {
	servers []*server
	log     hclog.Logger

	// mu guards cfg (its routes change with UpdateRoute) and orders route
	// updates, kills and restarts against Close.
	mu     sync.Mutex
	cfg    Config
	closed bool

	closeOnce sync.Once
	closeErr  error
}

// Option changes how Start runs the farm (not what it simulates).
type Option func(*options)

type options struct {
	log hclog.Logger
	now func() time.Time
}

// WithLogger sets the logger (default: none). The farm uses
// Named("farm") and bridges each http.Server's ErrorLog to it.
func WithLogger(l hclog.Logger) Option { return func(o *options) { o.log = l } }

// Start normalizes cfg and starts cfg.Servers servers. Each listens before
// Start returns, so Addrs is immediately usable. Close stops them.
func Start(cfg Config, opts ...Option) (*Farm, error) {
	o := options{log: hclog.NewNullLogger(), now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	cfg, err := cfg.Normalize()
	if err != nil {
		return nil, err
	}
	f := &Farm{cfg: cfg, log: o.log.Named("farm")}
	host, portStr, _ := net.SplitHostPort(cfg.Listen)
	port, _ := strconv.Atoi(portStr)
	body := makeBody(cfg.Routes)
	for i := 0; i < cfg.Servers; i++ {
		p := 0
		if port != 0 {
			p = port + i
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("farm: server %d: %w", i, err)
		}
		s := newServer(i, cfg, body, o.now, f.log)
		f.servers = append(f.servers, s)
		s.serve(ln)
		f.log.Debug("listening", "server", i, "addr", ln.Addr().String())
	}
	return f, nil
}

// Config is the configuration the farm runs now (normalized; routes as
// UpdateRoute left them).
func (f *Farm) Config() Config {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cfg
}

// Addrs returns each server's host:port, in server order. A killed
// server keeps its address; Restart listens on it again.
func (f *Farm) Addrs() []string {
	a := make([]string, len(f.servers))
	for i, s := range f.servers {
		a[i] = s.addr
	}
	return a
}

// URLs returns "http://host:port" for each server.
func (f *Farm) URLs() []string {
	a := f.Addrs()
	for i := range a {
		a[i] = "http://" + a[i]
	}
	return a
}

// Stats returns each server's counters, in server order. They run on
// across a kill and restart.
func (f *Farm) Stats() []Stats {
	st := make([]Stats, len(f.servers))
	for i, s := range f.servers {
		st[i] = s.stats()
	}
	return st
}

// Close stops every server: listeners and connections close, requests
// waiting for a slot or sleeping end at once without a response, and
// Close returns when every handler has returned. Safe to call twice.
func (f *Farm) Close() error {
	f.closeOnce.Do(func() {
		f.mu.Lock()
		f.closed = true
		f.mu.Unlock()
		for _, s := range f.servers {
			if err := s.kill(); err != nil && f.closeErr == nil {
				f.closeErr = err
			}
		}
	})
	return f.closeErr
}

// UpdateRoute changes the route configured with path and prefix on every
// server at once: change gets a copy of it and edits its service model
// (CPU, IO, Heavy, Bytes, Status, ContentType); Path and Prefix stay. The
// result is validated as Start would; on error nothing changes. A request
// already in service keeps the times it drew. Bytes may not grow past the
// largest body any route had at Start.
func (f *Farm) UpdateRoute(path string, prefix bool, change func(*Route)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return errors.New("farm: closed")
	}
	routes := append([]Route(nil), f.cfg.Routes...)
	k := -1
	for i := range routes {
		if routes[i].Path == path && routes[i].Prefix == prefix {
			k = i
		}
	}
	if k < 0 {
		return fmt.Errorf("farm: no route %q (prefix %v)", path, prefix)
	}
	r := routes[k]
	change(&r)
	r.Path, r.Prefix = path, prefix
	routes[k] = r
	next := f.cfg
	next.Routes = routes
	next, err := next.Normalize()
	if err != nil {
		return err
	}
	if b := next.Routes[k].Bytes; len(f.servers) > 0 && b > len(f.servers[0].body) {
		return fmt.Errorf("farm: route %q: bytes %d is more than the farm started with (%d)", path, b, len(f.servers[0].body))
	}
	f.cfg = next
	rt := newRouter(next.Routes)
	for _, s := range f.servers {
		s.router.Store(rt)
	}
	return nil
}

// SetSpeed sets server i's speed: its requests' drawn CPU and I/O times
// are divided by factor (0.5: twice as slow; 1: as configured). factor
// must be > 0. A request already in service keeps its times.
func (f *Farm) SetSpeed(i int, factor float64) error {
	if i < 0 || i >= len(f.servers) {
		return fmt.Errorf("farm: no server %d", i)
	}
	if !(factor > 0) || math.IsInf(factor, 0) {
		return fmt.Errorf("farm: speed must be > 0, got %v", factor)
	}
	f.servers[i].speed.Store(math.Float64bits(factor))
	return nil
}

// Kill stops server i as a crash would: its listener and connections
// close, its requests end without a response (their slots are freed), and
// Kill returns when its handlers have. Killing a dead server does nothing.
func (f *Farm) Kill(i int) error {
	if i < 0 || i >= len(f.servers) {
		return fmt.Errorf("farm: no server %d", i)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.servers[i].kill()
}

// Restart starts a killed server i again on its address, with its
// counters, speed and compensation as they were and every slot free.
// Restarting a running server does nothing.
func (f *Farm) Restart(i int) error {
	if i < 0 || i >= len(f.servers) {
		return fmt.Errorf("farm: no server %d", i)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return errors.New("farm: closed")
	}
	s := f.servers[i]
	if lf := s.life.Load(); lf != nil && !lf.isClosed() {
		return nil
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("farm: restart server %d: %w", i, err)
	}
	s.serve(ln)
	return nil
}

// Alive reports whether server i is serving (not killed).
func (f *Farm) Alive(i int) bool {
	if i < 0 || i >= len(f.servers) {
		return false
	}
	lf := f.servers[i].life.Load()
	return lf != nil && !lf.isClosed()
}

// Stats are one server's counters since it started.
type Stats struct {
	// Addr is the server's host:port.
	Addr string
	// Slots is the configured number of worker slots.
	Slots int
	// Completed counts responses written by routed requests.
	Completed uint64
	// Abandoned counts requests whose client left (or the farm closed)
	// while they waited for a slot, plus, with AbortOnDisconnect, those
	// stopped during their service, and those a Kill ended.
	Abandoned uint64
	// Degraded counts requests served a route's degraded variant.
	Degraded uint64
	// InFlight is routed requests inside the server now: waiting + busy.
	InFlight int64
	// Busy is slots in use now.
	Busy int
	// Waiting is requests queued for a slot now.
	Waiting int
	// BusyTime is the integral of busy slots over time (slot-seconds).
	BusyTime time.Duration
	// QueueTime is the total time completed requests waited for a slot.
	QueueTime time.Duration
	// Compensation is how much the server currently shortens each I/O
	// wait to keep the mean slot time at the drawn time (timer lateness
	// and scheduling delay). Near its cap (20 ms) or near the mean I/O
	// time, the machine is too loaded for the farm to hold its model.
	Compensation time.Duration
	// Elapsed is the time since the server started.
	Elapsed time.Duration
	// Utilisation is BusyTime / (Slots × Elapsed), in [0, 1]. For a window,
	// difference two snapshots' BusyTime and Elapsed instead.
	Utilisation float64
}

// MeanQueue is QueueTime / Completed (0 when nothing completed).
func (s Stats) MeanQueue() time.Duration {
	if s.Completed == 0 {
		return 0
	}
	return s.QueueTime / time.Duration(s.Completed)
}

type server struct {
	idx    int
	cfg    Config // Slots, AbortOnDisconnect, NoServerTiming: fixed
	router atomic.Pointer[router]
	speed  atomic.Uint64 // float64 bits; drawn times are divided by it
	body   []byte        // read-only, len = largest route's Bytes at Start
	now    func() time.Time
	start  time.Time
	slots  *slotPool
	log    hclog.Logger
	addr   string // host:port, kept across kill and restart

	rngMu sync.Mutex
	rng   *rand.Rand

	completed atomic.Uint64
	abandoned atomic.Uint64
	degraded  atomic.Uint64
	inFlight  atomic.Int64
	queueTime atomic.Int64 // ns
	overshoot atomic.Int64 // ns, slot-time compensation (see ServeHTTP)

	// life is the running incarnation (nil before the first serve); a
	// kill closes it, a restart replaces it.
	life atomic.Pointer[life]
}

// life is one incarnation of a server, from listen to kill: its listener,
// http.Server, and the handlers it let in.
type life struct {
	s         *server
	ln        net.Listener
	http      *http.Server
	serveDone chan struct{}

	// done is closed by close; handlers in a wait return at once.
	done chan struct{}
	// enterMu orders handler entry (RLock + wg.Add) against close
	// (Lock + closed), so wg.Wait never races an Add.
	enterMu  sync.RWMutex
	closed   bool
	handlers sync.WaitGroup
}

func newServer(idx int, cfg Config, body []byte, now func() time.Time, log hclog.Logger) *server {
	s := &server{
		idx:   idx,
		cfg:   cfg,
		body:  body,
		now:   now,
		start: now(),
		slots: newSlotPool(cfg.Slots, now),
		rng:   newRand(cfg.Seed, uint64(idx)),
		log:   log,
	}
	s.router.Store(newRouter(cfg.Routes))
	s.speed.Store(math.Float64bits(1))
	return s
}

// newLife makes a life that serves on ln, or, with ln nil, only through
// its ServeHTTP (tests).
func (s *server) newLife(ln net.Listener) *life {
	lf := &life{s: s, ln: ln, done: make(chan struct{}), serveDone: make(chan struct{})}
	lf.http = &http.Server{
		Handler:           lf,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       60 * time.Second,
		ErrorLog:          s.log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	if ln == nil {
		close(lf.serveDone)
	}
	s.life.Store(lf)
	return lf
}

// serve starts a new life on ln.
func (s *server) serve(ln net.Listener) {
	if s.addr == "" { // the first life; a restart listens on the same address
		s.addr = ln.Addr().String()
	}
	lf := s.newLife(ln)
	go func() {
		defer close(lf.serveDone)
		if err := lf.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("serve", "server", s.idx, "error", err)
		}
	}()
}

// kill closes the current life, if any.
func (s *server) kill() error {
	if lf := s.life.Load(); lf != nil {
		return lf.close()
	}
	return nil
}

func (lf *life) isClosed() bool {
	lf.enterMu.RLock()
	defer lf.enterMu.RUnlock()
	return lf.closed
}

func (lf *life) enter() bool {
	lf.enterMu.RLock()
	defer lf.enterMu.RUnlock()
	if lf.closed {
		return false
	}
	lf.handlers.Add(1)
	return true
}

func (lf *life) close() error {
	lf.enterMu.Lock()
	if lf.closed {
		lf.enterMu.Unlock()
		return nil
	}
	lf.closed = true
	lf.enterMu.Unlock()
	// Connections first, then wake the handlers: a handler woken while its
	// connection is open would answer with an empty 200.
	err := lf.http.Close()
	close(lf.done)
	<-lf.serveDone
	lf.handlers.Wait()
	return err
}

func (s *server) stats() Stats {
	busy, waiting, busyTime := s.slots.snapshot()
	el := s.now().Sub(s.start)
	st := Stats{
		Addr:         s.addr,
		Slots:        s.cfg.Slots,
		Completed:    s.completed.Load(),
		Abandoned:    s.abandoned.Load(),
		Degraded:     s.degraded.Load(),
		InFlight:     s.inFlight.Load(),
		Busy:         busy,
		Waiting:      waiting,
		BusyTime:     busyTime,
		QueueTime:    time.Duration(s.queueTime.Load()),
		Elapsed:      el,
		Compensation: time.Duration(s.overshoot.Load()),
	}
	if el > 0 {
		st.Utilisation = float64(busyTime) / (float64(s.cfg.Slots) * float64(el))
	}
	return st
}

// draw takes the CPU and I/O times for one request: the degraded
// variant's when degraded, else the route's, or with probability
// Heavy.Share the heavy part's; divided by the server's speed.
func (s *server) draw(r *Route, degraded bool) (cpuD, ioD time.Duration) {
	s.rngMu.Lock()
	if d := r.Degraded; degraded && d != nil {
		cpuD, ioD = d.CPU.Sample(s.rng), d.IO.Sample(s.rng)
	} else if h := &r.Heavy; h.Share > 0 && s.rng.Float64() < h.Share {
		cpuD, ioD = h.CPU.Sample(s.rng), h.IO.Sample(s.rng)
	} else {
		cpuD, ioD = r.CPU.Sample(s.rng), r.IO.Sample(s.rng)
	}
	s.rngMu.Unlock()
	if sp := math.Float64frombits(s.speed.Load()); sp != 1 {
		cpuD = time.Duration(float64(cpuD) / sp)
		ioD = time.Duration(float64(ioD) / sp)
	}
	return cpuD, ioD
}

// wantsDegraded reports whether r has a degraded variant and h's load
// header (its first value's number, before any ';') is above its Above.
func wantsDegraded(r *Route, h http.Header) bool {
	d := r.Degraded
	if d == nil {
		return false
	}
	v := h.Get(d.Header)
	if i := strings.IndexByte(v, ';'); i >= 0 {
		v = v[:i]
	}
	x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	return err == nil && x > d.Above
}

// ServeHTTP serves one request in this life.
func (lf *life) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	s := lf.s
	switch req.URL.Path {
	case HealthPath:
		w.Header().Set("Server-Timing", serverTiming(0, 0, 0))
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
		return
	case StatsPath:
		w.Header().Set("Server-Timing", serverTiming(0, 0, 0))
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(jsonStats(s.stats()))
		return
	}
	rt := s.router.Load().match(req.URL.Path)
	if rt == nil {
		w.Header().Set("Server-Timing", serverTiming(0, 0, 0))
		http.NotFound(w, req)
		return
	}
	if !lf.enter() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	defer lf.handlers.Done()
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)

	// Read the request body (bounded) as a real server would before it
	// answers; keep-alive needs it consumed.
	io.Copy(io.Discard, io.LimitReader(req.Body, 1<<20))

	ctx := req.Context()
	t0 := s.now()
	grant, ok := s.slots.acquire(ctx, lf.done)
	if !ok {
		s.abandoned.Add(1)
		return
	}
	queue := max(grant.Sub(t0), 0)
	deg := wantsDegraded(rt, req.Header)
	if deg {
		s.degraded.Add(1)
	}
	cpuD, ioD := s.draw(rt, deg)
	// With AbortOnDisconnect a request stops work when its connection
	// closes (Go's net/http cancels r.Context()), in its CPU part as in
	// its I/O wait, and its slot is freed at once.
	var ctxDone <-chan struct{}
	if s.cfg.AbortOnDisconnect {
		ctxDone = ctx.Done()
	}
	cpu, ok := burn(cpuD, lf.done, ctxDone)
	if !ok {
		s.slots.release()
		s.abandoned.Add(1)
		return
	}
	// Compensation: timers fire late (0.5 ms idle, several ms on a busy
	// machine) and a woken waiter needs CPU before it runs, so a slot
	// would be held longer than the drawn service time and the capacity
	// would fall below Slots/mean. The server therefore shortens each
	// I/O wait by est, an integrator that drives the mean slot holding
	// time to the mean drawn time (see the excess update below).
	est := time.Duration(s.overshoot.Load())
	ioT, ok := s.sleep(max(ioD-est, 0), lf.done, ctxDone)
	if !ok {
		s.slots.release()
		s.abandoned.Add(1)
		return
	}
	h := w.Header()
	if !s.cfg.NoServerTiming {
		h.Set("Server-Timing", serverTiming(cpu, ioT, queue))
	}
	h.Set("Content-Type", rt.ContentType)
	h.Set("Content-Length", strconv.Itoa(rt.Bytes))
	w.WriteHeader(rt.Status)
	if req.Method != http.MethodHead && rt.Bytes > 0 {
		w.Write(s.body[:rt.Bytes])
	}
	if ioD > 0 {
		// Gain 1/16 per request. Concurrent updates may overwrite each
		// other; it is an estimate and every access is atomic.
		excess := s.now().Sub(grant) - (cpuD + ioD)
		est += excess / 16
		s.overshoot.Store(int64(min(max(est, 0), maxOvershoot)))
	}
	s.slots.release()
	s.queueTime.Add(int64(queue))
	s.completed.Add(1)
}

// sleep waits d and reports the time actually waited, or false when a or
// b closed first.
func (s *server) sleep(d time.Duration, a, b <-chan struct{}) (time.Duration, bool) {
	if d <= 0 {
		return 0, true
	}
	t0 := s.now()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return s.now().Sub(t0), true
	case <-a:
	case <-b:
	}
	return s.now().Sub(t0), false
}

// maxOvershoot bounds the slot-time compensation (see ServeHTTP).
const maxOvershoot = 20 * time.Millisecond

// burn spins for d of wall-clock time and returns the time spent, or
// false when a or b closed first. It measures wall time, not CPU time: if
// the machine is oversubscribed the spin is preempted and the request gets
// less CPU.
func burn(d time.Duration, a, b <-chan struct{}) (time.Duration, bool) {
	if d <= 0 {
		return 0, true
	}
	t0 := time.Now()
	deadline := t0.Add(d)
	x := uint64(t0.UnixNano()) | 1
	for i := 0; ; i++ {
		// xorshift: work the loop cannot skip (x never becomes 0)
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		if x == 0 {
			break
		}
		if i&1023 == 0 {
			if !time.Now().Before(deadline) {
				break
			}
			select {
			case <-a:
				return time.Since(t0), false
			case <-b:
				return time.Since(t0), false
			default:
			}
		}
	}
	return time.Since(t0), true
}

// serverTiming formats "cpu;dur=X, io;dur=Y, queue;dur=Z" in milliseconds.
func serverTiming(cpu, io, queue time.Duration) string {
	b := make([]byte, 0, 64)
	b = append(b, "cpu;dur="...)
	b = strconv.AppendFloat(b, ms(cpu), 'f', 3, 64)
	b = append(b, ", io;dur="...)
	b = strconv.AppendFloat(b, ms(io), 'f', 3, 64)
	b = append(b, ", queue;dur="...)
	b = strconv.AppendFloat(b, ms(queue), 'f', 3, 64)
	return string(b)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// makeBody builds the shared read-only body, as long as the largest route.
func makeBody(routes []Route) []byte {
	n := 0
	for _, r := range routes {
		n = max(n, r.Bytes)
	}
	const pattern = "sentry farm simulated payload 0123456789abcdefghijklmnopqrstuvwxyz\n"
	b := make([]byte, n)
	for i := range b {
		b[i] = pattern[i%len(pattern)]
	}
	return b
}

// statsJSON is the /_farm/stats body: units in the field names.
type statsJSON struct {
	Addr                string  `json:"addr"`
	Slots               int     `json:"slots"`
	Completed           uint64  `json:"completed"`
	Abandoned           uint64  `json:"abandoned"`
	Degraded            uint64  `json:"degraded"`
	InFlight            int64   `json:"in_flight"`
	Busy                int     `json:"busy"`
	Waiting             int     `json:"waiting"`
	BusySeconds         float64 `json:"busy_slot_seconds"`
	QueueSeconds        float64 `json:"queue_seconds"`
	ElapsedSeconds      float64 `json:"elapsed_seconds"`
	Utilisation         float64 `json:"utilisation"`
	MeanQueueSeconds    float64 `json:"mean_queue_seconds"`
	CompensationSeconds float64 `json:"compensation_seconds"`
}

func jsonStats(s Stats) statsJSON {
	return statsJSON{
		Addr: s.Addr, Slots: s.Slots, Completed: s.Completed, Abandoned: s.Abandoned, Degraded: s.Degraded,
		InFlight: s.InFlight, Busy: s.Busy, Waiting: s.Waiting,
		BusySeconds: s.BusyTime.Seconds(), QueueSeconds: s.QueueTime.Seconds(),
		ElapsedSeconds: s.Elapsed.Seconds(), Utilisation: s.Utilisation,
		MeanQueueSeconds:    s.MeanQueue().Seconds(),
		CompensationSeconds: s.Compensation.Seconds(),
	}
}
