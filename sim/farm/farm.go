package farm

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Farm is a set of running simulated servers.
type Farm struct {
	cfg     Config
	servers []*server
	log     hclog.Logger

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
		s := newServer(i, cfg, body, o.now)
		s.ln = ln
		s.http = &http.Server{
			Handler:           s,
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       60 * time.Second,
			ErrorLog:          f.log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
		}
		f.servers = append(f.servers, s)
		s.serveDone = make(chan struct{})
		go func() {
			defer close(s.serveDone)
			if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				f.log.Error("serve", "server", s.idx, "error", err)
			}
		}()
		f.log.Debug("listening", "server", i, "addr", ln.Addr().String())
	}
	return f, nil
}

// Config is the normalized configuration the farm runs.
func (f *Farm) Config() Config { return f.cfg }

// Addrs returns each server's host:port, in server order.
func (f *Farm) Addrs() []string {
	a := make([]string, len(f.servers))
	for i, s := range f.servers {
		a[i] = s.ln.Addr().String()
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

// Stats returns each server's counters, in server order.
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
		for _, s := range f.servers {
			if err := s.close(); err != nil && f.closeErr == nil {
				f.closeErr = err
			}
		}
	})
	return f.closeErr
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
	// stopped during their I/O wait.
	Abandoned uint64
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
	cfg    Config
	router *router
	body   []byte // read-only, len = largest route's Bytes
	now    func() time.Time
	start  time.Time
	slots  *slotPool

	rngMu sync.Mutex
	rng   *rand.Rand

	completed atomic.Uint64
	abandoned atomic.Uint64
	inFlight  atomic.Int64
	queueTime atomic.Int64 // ns
	overshoot atomic.Int64 // ns, slot-time compensation (see ServeHTTP)

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

func newServer(idx int, cfg Config, body []byte, now func() time.Time) *server {
	return &server{
		idx:    idx,
		cfg:    cfg,
		router: newRouter(cfg.Routes),
		body:   body,
		now:    now,
		start:  now(),
		slots:  newSlotPool(cfg.Slots, now),
		rng:    newRand(cfg.Seed, uint64(idx)),
		done:   make(chan struct{}),
	}
}

func (s *server) enter() bool {
	s.enterMu.RLock()
	defer s.enterMu.RUnlock()
	if s.closed {
		return false
	}
	s.handlers.Add(1)
	return true
}

func (s *server) close() error {
	s.enterMu.Lock()
	if s.closed {
		s.enterMu.Unlock()
		return nil
	}
	s.closed = true
	s.enterMu.Unlock()
	// Connections first, then wake the handlers: a handler woken while its
	// connection is open would answer with an empty 200.
	var err error
	if s.http != nil {
		err = s.http.Close()
	}
	close(s.done)
	if s.http != nil {
		<-s.serveDone
	}
	s.handlers.Wait()
	return err
}

func (s *server) stats() Stats {
	busy, waiting, busyTime := s.slots.snapshot()
	el := s.now().Sub(s.start)
	st := Stats{
		Slots:        s.cfg.Slots,
		Completed:    s.completed.Load(),
		Abandoned:    s.abandoned.Load(),
		InFlight:     s.inFlight.Load(),
		Busy:         busy,
		Waiting:      waiting,
		BusyTime:     busyTime,
		QueueTime:    time.Duration(s.queueTime.Load()),
		Elapsed:      el,
		Compensation: time.Duration(s.overshoot.Load()),
	}
	if s.ln != nil {
		st.Addr = s.ln.Addr().String()
	}
	if el > 0 {
		st.Utilisation = float64(busyTime) / (float64(s.cfg.Slots) * float64(el))
	}
	return st
}

// draw takes the CPU and I/O times for one request.
func (s *server) draw(r *Route) (cpuD, ioD time.Duration) {
	s.rngMu.Lock()
	cpuD = r.CPU.Sample(s.rng)
	ioD = r.IO.Sample(s.rng)
	s.rngMu.Unlock()
	return cpuD, ioD
}

func (s *server) ServeHTTP(w http.ResponseWriter, req *http.Request) {
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
	rt := s.router.match(req.URL.Path)
	if rt == nil {
		w.Header().Set("Server-Timing", serverTiming(0, 0, 0))
		http.NotFound(w, req)
		return
	}
	if !s.enter() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	defer s.handlers.Done()
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)

	// Read the request body (bounded) as a real server would before it
	// answers; keep-alive needs it consumed.
	io.Copy(io.Discard, io.LimitReader(req.Body, 1<<20))

	ctx := req.Context()
	t0 := s.now()
	grant, ok := s.slots.acquire(ctx, s.done)
	if !ok {
		s.abandoned.Add(1)
		return
	}
	queue := max(grant.Sub(t0), 0)
	cpuD, ioD := s.draw(rt)
	cpu := burn(cpuD, s.done)
	var ctxDone <-chan struct{}
	if s.cfg.AbortOnDisconnect {
		ctxDone = ctx.Done()
	}
	// Compensation: timers fire late (0.5 ms idle, several ms on a busy
	// machine) and a woken waiter needs CPU before it runs, so a slot
	// would be held longer than the drawn service time and the capacity
	// would fall below Slots/mean. The server therefore shortens each
	// I/O wait by est, an integrator that drives the mean slot holding
	// time to the mean drawn time (see the excess update below).
	est := time.Duration(s.overshoot.Load())
	ioT, ok := s.sleep(max(ioD-est, 0), s.done, ctxDone)
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

// burn spins for d of wall-clock time (or until done closes) and returns
// the time spent. It measures wall time, not CPU time: if the machine is
// oversubscribed the spin is preempted and the request gets less CPU.
func burn(d time.Duration, done <-chan struct{}) time.Duration {
	if d <= 0 {
		return 0
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
			case <-done:
				return time.Since(t0)
			default:
			}
		}
	}
	return time.Since(t0)
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
		Addr: s.Addr, Slots: s.Slots, Completed: s.Completed, Abandoned: s.Abandoned,
		InFlight: s.InFlight, Busy: s.Busy, Waiting: s.Waiting,
		BusySeconds: s.BusyTime.Seconds(), QueueSeconds: s.QueueTime.Seconds(),
		ElapsedSeconds: s.Elapsed.Seconds(), Utilisation: s.Utilisation,
		MeanQueueSeconds:    s.MeanQueue().Seconds(),
		CompensationSeconds: s.Compensation.Seconds(),
	}
}
