package scenario

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sentry-proxy/sentry/internal/stall"
	"github.com/sentry-proxy/sentry/sim/dns"
	"github.com/sentry-proxy/sentry/sim/farm"
	"github.com/sentry-proxy/sentry/sim/load"
)

// AutoscaleConfig is the closed-loop provisioning experiment (issue 15):
// sentry in front of a farm whose servers a stand-in autoscaler adds and
// removes, reading sentry_provision_servers_needed from sentry's /metrics
// the way a KEDA ScaledObject or an HPA on an External metric would, and
// changing the farm the way Kubernetes does: through the DNS name sentry
// follows (a headless Service's records are the ready pods). The load
// steps from 1× to Step× and back.
//
// "1×" is the offered rate Rate that the Base servers carry within the
// model's target (provisioning.target): the farm's floor. Every duration
// is wall-clock; sentry's own time constants (its 1 s tick, the predictor's
// 30 s level) do not scale, so a shorter run is a different run, not a
// faster one.
type AutoscaleConfig struct {
	// Sentry is the sentry binary; required.
	Sentry string
	// Dir receives policy.yaml, sentry.log, series.csv, scale.csv and the
	// plots; required.
	Dir string
	// Slots per server (default 4) and the mean of its exponential I/O
	// time (default 40 ms): one server takes Slots/Service req/s.
	Slots   int
	Service time.Duration
	// Base is the floor of servers (min_servers, and the count at 1×);
	// Max the ceiling (max_servers, and the servers started). Default 2, 8.
	Base, Max int
	// Rate is the 1× offered rate in req/s (default 130: 65% of two
	// servers, within what the model lets two servers take at 60 ms).
	Rate float64
	// Step multiplies Rate during the high phase (default 3).
	Step float64
	// Before, High and After are the phases' lengths (default 30 s,
	// 120 s, 240 s).
	Before, High, After time.Duration
	// SLA is the p95 target sentry admits for (default 500 ms).
	SLA time.Duration
	// ModelTarget is provisioning.target, the mean response time one
	// server must keep (default 1.5 × Service).
	ModelTarget time.Duration
	// Delay is the provisioning delay: from the autoscaler's decision to
	// the new server's address in DNS (default 10 s).
	Delay time.Duration
	// Poll is how often the autoscaler reads /metrics (default 2 s).
	Poll time.Duration
	// UpPods is the most servers added per UpPeriod (default 4 per 30 s,
	// the scaleUp policy of deploy/kubernetes).
	UpPods   int
	UpPeriod time.Duration
	// DownPeriod allows one scale-down step per period (default 30 s), the
	// HPA's scaleDown policy {type: Pods, value: 1, periodSeconds: 30}.
	DownPeriod time.Duration
	// Stabilization is the scale-down stabilization window: a scale-down
	// goes to the highest count recommended over it (default 30 s).
	Stabilization time.Duration
	// DNSInterval is backends.dns.interval (default 1 s).
	DNSInterval time.Duration
	// Seed seeds the load and the farm.
	Seed uint64
	// Progress, when set, gets a line per scaling action.
	Progress func(string) `json:"-"`
}

func (c *AutoscaleConfig) defaults() error {
	if c.Sentry == "" || c.Dir == "" {
		return errors.New("autoscale: Sentry and Dir are required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Slots == 0 {
		c.Slots = 4
	}
	def(&c.Service, 40*time.Millisecond)
	if c.Base == 0 {
		c.Base = 2
	}
	if c.Max == 0 {
		c.Max = 8
	}
	if c.Rate == 0 {
		c.Rate = 130
	}
	if c.Step == 0 {
		c.Step = 3
	}
	def(&c.Before, 30*time.Second)
	def(&c.High, 120*time.Second)
	def(&c.After, 240*time.Second)
	def(&c.SLA, 500*time.Millisecond)
	def(&c.ModelTarget, c.Service*3/2)
	def(&c.Delay, 10*time.Second)
	def(&c.Poll, 2*time.Second)
	if c.UpPods == 0 {
		c.UpPods = 4
	}
	def(&c.UpPeriod, 30*time.Second)
	def(&c.DownPeriod, 30*time.Second)
	def(&c.Stabilization, 30*time.Second)
	def(&c.DNSInterval, time.Second)
	if c.Base < 1 || c.Max < c.Base || c.Max > 200 {
		return fmt.Errorf("autoscale: want 1 ≤ Base ≤ Max ≤ 200, have %d, %d", c.Base, c.Max)
	}
	return nil
}

// ScaleEvent is one poll of the autoscaler, or a server becoming ready.
type ScaleEvent struct {
	At time.Duration // since the load started
	// Needed is sentry_provision_servers_needed as read (NaN when the
	// scrape failed, or for a readiness event).
	Needed float64
	// Replicas is the count asked for (ready and pending), Ready the
	// servers in DNS after the event.
	Replicas, Ready int
	// Action: "poll", "up" (Replicas grew), "down" (one server removed),
	// "ready" (a server entered DNS).
	Action string
	// The model behind Needed, from sentry's /provisioning (zero when
	// not read): λ_pred and λ_in in req/s, c_a², E[S] in seconds.
	LambdaPred, LambdaIn, CA2, MeanS float64
}

// provAdvice is the part of sentry's /provisioning the run records.
type provAdvice struct {
	Apps []struct {
		App        string  `json:"app"`
		LambdaIn   float64 `json:"lambda_in"`
		LambdaPred float64 `json:"lambda_pred"`
		CA2        float64 `json:"arrival_cv2"`
		MeanS      float64 `json:"mean_service_seconds"`
	} `json:"apps"`
}

// AutoscaleResult holds the run's series and the figures the targets are
// judged on.
//
// As JSON (e2e/cmd/autoscale -json) it carries the figures and Servers;
// the series, the events and Needed (NaN where nothing was read) are in
// the run's files (series.csv, scale.csv).
type AutoscaleResult struct {
	Config AutoscaleConfig
	Series *Series      `json:"-"`
	Events []ScaleEvent `json:"-"`
	// Per second: servers in DNS at the second's end, and the last
	// servers-needed read in it (NaN: none).
	Servers []int
	Needed  []float64 `json:"-"`
	// StepAt and FallAt: when the high phase starts and ends.
	StepAt, FallAt time.Duration
	// PeakDrop is the highest 5-second drop ratio of the high phase;
	// DropSettle the time from StepAt after which the 5-second drop ratio
	// stays below 5% until FallAt (-1: never).
	PeakDrop   float64
	DropSettle time.Duration
	// PeakServers is the most servers in DNS at once.
	PeakServers int
	// BackToBase: from FallAt until the servers in DNS are back to Base
	// for good (-1: not by the end).
	BackToBase time.Duration
	// ScaleDowns are the times of the scale-down steps after FallAt, and
	// MinDownGap the shortest gap between two of them (0 with fewer
	// than two).
	ScaleDowns []time.Duration
	MinDownGap time.Duration
	// Flaps counts scale-ups after the first scale-down (a count that
	// goes back up).
	Flaps int
	// P95Judged is the seconds with at least MinSamples admitted
	// responses, P95Missed those whose p95 exceeded the SLA; WorstP95 the
	// worst of them.
	P95Judged, P95Missed int
	WorstP95             time.Duration
	// Offered, Rejected and Errors over the run (errors: not rejections,
	// no response or ≥ 400).
	Offered, Rejected, Errors int
	// Stray counts responses written by a server more than the DNS
	// interval + 2 s after it left DNS (it should be 0: sentry follows
	// the name).
	Stray uint64
	// Stall is how long this process (the farm, the load generator, the
	// DNS server and the autoscaler) went without running while the load
	// ran (package internal/stall): on a starved machine the figures
	// above measure the machine.
	Stall stall.Result
}

// autoscaleApp is the app's name in the generated policy.
const autoscaleApp = "autoscale"

// autoscaleName is the DNS name of the farm.
const autoscaleName = "farm.autoscale.test"

// AutoscalePolicy is the sentry policy of the closed-loop run.
func AutoscalePolicy(c AutoscaleConfig, listen, admin, dnsAddr string, port int) []byte {
	return fmt.Appendf(nil, `# Generated by the closed-loop autoscaling run (e2e/scenario/autoscale.go).
admin: {listen: %s}
log: {level: warn}
server: {shutdown_timeout: 5s}
apps:
  - name: %s
    listen: %s
    backends:
      dns: {name: %s, port: %d, interval: %s, server: "%s"}
    sla:
      percentile: 95
      targets: [{target: %s}]
    admission:
      mode: batch
      batch: {parallelism: %d}
    provisioning:
      target: %s
      min_servers: %d
      max_servers: %d
      window: 30s
      spacing: 30s
`, admin, autoscaleApp, listen, autoscaleName, port, c.DNSInterval, dnsAddr, c.SLA, c.Slots, c.ModelTarget, c.Base, c.Max)
}

// startFarms starts n one-server farms at 127.0.0.(10+i):port, one port
// for all (a headless Service's endpoints share the port), and returns
// them with their addresses.
func startFarms(c AutoscaleConfig) ([]*farm.Farm, []netip.Addr, int, error) {
	cfg := func(i int, port int) farm.Config {
		return farm.Config{
			Listen: fmt.Sprintf("127.0.0.%d:%d", 10+i, port),
			Slots:  c.Slots, Servers: 1, Seed: c.Seed + uint64(i),
			Routes: []farm.Route{{Path: "/", Prefix: true, IO: farm.Dist{Kind: farm.Exponential, Mean: c.Service}}},
		}
	}
	var lastErr error
	for try := 0; try < 5; try++ {
		first, err := farm.Start(cfg(0, 0))
		if err != nil {
			return nil, nil, 0, err
		}
		_, ps, _ := net.SplitHostPort(first.Addrs()[0])
		port, _ := strconv.Atoi(ps)
		farms := []*farm.Farm{first}
		for i := 1; i < c.Max && err == nil; i++ {
			var f *farm.Farm
			if f, err = farm.Start(cfg(i, port)); err == nil {
				farms = append(farms, f)
			}
		}
		if err == nil {
			ips := make([]netip.Addr, len(farms))
			for i := range farms {
				ips[i] = netip.AddrFrom4([4]byte{127, 0, 0, byte(10 + i)})
			}
			return farms, ips, port, nil
		}
		lastErr = err
		for _, f := range farms {
			f.Close()
		}
	}
	return nil, nil, 0, fmt.Errorf("autoscale: no port free on every address: %w", lastErr)
}

// autoscaler is the stand-in for the HPA and the Deployment: replicas
// asked for, pods pending (ready at a time) and ready (in DNS).
type autoscaler struct {
	c   AutoscaleConfig
	dns *dns.Server
	ips []netip.Addr
	// served returns the responses server i has written so far.
	served func(i int) uint64
	start  time.Time
	metric string // the admin /metrics URL
	advice string // the admin /provisioning URL
	client *http.Client
	model  ScaleEvent // the last /provisioning read

	ready   []int // server indexes in DNS, oldest first
	pending map[int]time.Time
	recs    []ScaleEvent // recommendations within the stabilization window
	downAt  time.Time    // last scale-down
	ups     []time.Time  // when each server was asked for, within UpPeriod
	events  []ScaleEvent
	// removed: server → when it left DNS; baseline: its completed count
	// once the grace after that had passed.
	removed  map[int]time.Time
	baseline map[int]uint64
	stray    uint64 // served while out of DNS, by servers since added back
}

func (a *autoscaler) replicas() int { return len(a.ready) + len(a.pending) }

func (a *autoscaler) publish() {
	addrs := make([]netip.Addr, len(a.ready))
	for i, s := range a.ready {
		addrs[i] = a.ips[s]
	}
	a.dns.Set(autoscaleName, addrs...)
}

func (a *autoscaler) record(now time.Time, needed float64, action string) {
	e := ScaleEvent{At: now.Sub(a.start), Needed: needed, Replicas: a.replicas(), Ready: len(a.ready), Action: action}
	if !math.IsNaN(needed) {
		e.LambdaPred, e.LambdaIn, e.CA2, e.MeanS = a.model.LambdaPred, a.model.LambdaIn, a.model.CA2, a.model.MeanS
	}
	a.events = append(a.events, e)
	if action != "poll" && a.c.Progress != nil {
		a.c.Progress(fmt.Sprintf("%6.1fs %-5s needed %4.1f replicas %d ready %d", e.At.Seconds(), action, needed, e.Replicas, e.Ready))
	}
}

// scrapeNeeded reads the app's sentry_provision_servers_needed.
func (a *autoscaler) scrapeNeeded(ctx context.Context) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.metric, nil)
	if err != nil {
		return 0, err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	want := `sentry_provision_servers_needed{app="` + autoscaleApp + `"} `
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), want); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no sentry_provision_servers_needed for the app")
}

// readAdvice reads the model's inputs from /provisioning, for the record
// (the autoscaler decides on the metric alone).
func (a *autoscaler) readAdvice(ctx context.Context) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.advice, nil)
	if err != nil {
		return
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	var adv provAdvice
	if json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&adv) != nil {
		return
	}
	for _, ap := range adv.Apps {
		if ap.App == autoscaleApp {
			a.model = ScaleEvent{LambdaPred: ap.LambdaPred, LambdaIn: ap.LambdaIn, CA2: ap.CA2, MeanS: ap.MeanS}
		}
	}
}

// poll is one HPA sync: desired = ⌈needed⌉ within [Base, Max] (a KEDA
// AverageValue target of 1 on a metric that already counts servers).
// Scale-up is immediate, at most UpPods per UpPeriod; scale-down goes to
// the highest recommendation of the stabilization window, one server per
// DownPeriod. The HPA's 10% tolerance is left out: the metric is already
// a whole number of servers.
func (a *autoscaler) poll(ctx context.Context, now time.Time) {
	needed, err := a.scrapeNeeded(ctx)
	if err != nil {
		a.record(now, math.NaN(), "poll")
		return
	}
	a.readAdvice(ctx)
	desired := min(max(int(math.Ceil(needed-1e-9)), a.c.Base), a.c.Max)
	a.recs = append(a.recs, ScaleEvent{At: now.Sub(a.start), Replicas: desired})
	for len(a.recs) > 0 && now.Sub(a.start)-a.recs[0].At > a.c.Stabilization {
		a.recs = a.recs[1:]
	}
	for len(a.ups) > 0 && now.Sub(a.ups[0]) >= a.c.UpPeriod {
		a.ups = a.ups[1:]
	}
	switch n := a.replicas(); {
	case desired > n:
		add := min(desired-n, a.c.UpPods-len(a.ups))
		if add <= 0 {
			a.record(now, needed, "poll")
			return
		}
		for range add {
			a.pending[a.freeIndex()] = now.Add(a.c.Delay)
			a.ups = append(a.ups, now)
		}
		a.record(now, needed, "up")
	case desired < n:
		stab := desired
		for _, r := range a.recs {
			stab = max(stab, r.Replicas)
		}
		if stab < n && (a.downAt.IsZero() || now.Sub(a.downAt) >= a.c.DownPeriod) {
			a.removeOne(now)
			a.downAt = now
			a.record(now, needed, "down")
			return
		}
		a.record(now, needed, "poll")
	default:
		a.record(now, needed, "poll")
	}
}

func (a *autoscaler) freeIndex() int {
	used := map[int]bool{}
	for _, s := range a.ready {
		used[s] = true
	}
	for s := range a.pending {
		used[s] = true
	}
	for i := range a.ips {
		if !used[i] {
			return i
		}
	}
	panic("autoscale: no free server (replicas > Max)")
}

// removeOne deletes a pending pod first (the newest), else the newest
// ready one, which leaves DNS at once (an endpoint is removed as its pod
// starts terminating).
func (a *autoscaler) removeOne(now time.Time) {
	newest, at := -1, time.Time{}
	for s, t := range a.pending {
		if newest < 0 || t.After(at) {
			newest, at = s, t
		}
	}
	if newest >= 0 {
		delete(a.pending, newest)
		return
	}
	s := a.ready[len(a.ready)-1]
	a.ready = a.ready[:len(a.ready)-1]
	a.publish()
	a.removed[s] = now
	delete(a.baseline, s)
}

// tick promotes pending servers whose delay has passed and takes the
// baselines of removed servers once their grace has passed.
func (a *autoscaler) tick(now time.Time) {
	changed := false
	for s, t := range a.pending {
		if !now.Before(t) {
			delete(a.pending, s)
			a.ready = append(a.ready, s)
			if b, ok := a.baseline[s]; ok {
				a.stray += a.served(s) - b // what it served while out of DNS
			}
			delete(a.removed, s)
			delete(a.baseline, s)
			changed = true
		}
	}
	if changed {
		a.publish()
		a.record(now, math.NaN(), "ready")
	}
	grace := a.c.DNSInterval + 2*time.Second
	for s, t := range a.removed {
		if _, ok := a.baseline[s]; !ok && now.Sub(t) >= grace {
			a.baseline[s] = a.served(s)
		}
	}
}

// strayCount: responses written by servers out of DNS since their
// baseline.
func (a *autoscaler) strayCount() uint64 {
	var n uint64
	for s, b := range a.baseline {
		n += a.served(s) - b
	}
	return a.stray + n
}

func (a *autoscaler) run(ctx context.Context, done <-chan struct{}) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	next := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case now := <-t.C:
			a.tick(now)
			if !now.Before(next) {
				pctx, cancel := context.WithTimeout(ctx, a.c.Poll)
				a.poll(pctx, now)
				cancel()
				next = now.Add(a.c.Poll)
			}
		}
	}
}

// RunAutoscale runs the closed loop once and writes its series, scaling
// log and plots into c.Dir.
func RunAutoscale(ctx context.Context, c AutoscaleConfig) (*AutoscaleResult, error) {
	if err := c.defaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, err
	}
	farms, ips, port, err := startFarms(c)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, f := range farms {
			f.Close()
		}
	}()
	srv, err := dns.Start("127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	a := &autoscaler{c: c, dns: srv, ips: ips, served: func(i int) uint64 { return farms[i].Stats()[0].Completed }, pending: map[int]time.Time{},
		removed: map[int]time.Time{}, baseline: map[int]uint64{}, client: &http.Client{Timeout: 2 * time.Second}}
	for i := 0; i < c.Base; i++ {
		a.ready = append(a.ready, i)
	}
	a.publish()

	listen, err := freeAddr()
	if err != nil {
		return nil, err
	}
	admin, err := freeAddr()
	if err != nil {
		return nil, err
	}
	a.metric = "http://" + admin + "/metrics"
	a.advice = "http://" + admin + "/provisioning"
	polPath := filepath.Join(c.Dir, "policy.yaml")
	if err := os.WriteFile(polPath, AutoscalePolicy(c, listen, admin, srv.Addr(), port), 0o644); err != nil {
		return nil, err
	}
	proc, err := startProcess(filepath.Join(c.Dir, "sentry.log"), c.Sentry, "run", "-config", polPath)
	if err != nil {
		return nil, err
	}
	defer proc.stop(syscall.SIGTERM, 8*time.Second)
	if err := waitReady(ctx, proc, "http://"+admin+"/readyz", 10*time.Second); err != nil {
		return nil, fmt.Errorf("sentry: %w (log: %s)", err, filepath.Join(c.Dir, "sentry.log"))
	}
	// Ready when a request goes through: the name has been resolved.
	if err := waitReady(ctx, proc, "http://"+listen+"/", 10*time.Second); err != nil {
		return nil, fmt.Errorf("sentry never reached the farm through DNS: %w", err)
	}

	total := c.Before + c.High + c.After
	lc := load.Config{
		Targets: []string{"http://" + listen}, Seed: c.Seed, Timeout: 10 * time.Second,
		MaxInFlight: 4000, MaxRequests: 2000000,
		Classes: []load.Class{{
			Name: "web", SLA: c.SLA,
			Open: &load.Open{Rate: load.Schedule{
				{Duration: c.Before, From: c.Rate},
				{Duration: c.High, From: c.Rate * c.Step},
				{Duration: c.After, From: c.Rate},
			}},
		}},
	}
	a.start = time.Now()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.run(ctx, done)
	}()
	watch := stall.Start()
	rep, err := load.Run(ctx, lc)
	st := watch.Stop()
	close(done)
	wg.Wait()
	if err != nil {
		return nil, err
	}
	res := &AutoscaleResult{Config: c, Events: a.events, StepAt: c.Before, FallAt: c.Before + c.High, Stall: st}
	res.Stray = a.strayCount()
	res.Series = Aggregate(rep, []time.Duration{c.SLA}, nil, c.Slots, int(total/time.Second))
	res.evaluate()
	if err := res.write(c.Dir); err != nil {
		return res, err
	}
	return res, nil
}

// evaluate fills the per-second servers and the figures.
func (r *AutoscaleResult) evaluate() {
	s, c := r.Series, r.Config
	n := s.Seconds
	r.Servers = make([]int, n)
	r.Needed = make([]float64, n)
	ready, ei := c.Base, 0
	for t := 0; t < n; t++ {
		r.Needed[t] = math.NaN()
		for ei < len(r.Events) && r.Events[ei].At < time.Duration(t+1)*time.Second {
			e := r.Events[ei]
			ready = e.Ready
			if !math.IsNaN(e.Needed) {
				r.Needed[t] = e.Needed
			}
			ei++
		}
		r.Servers[t] = ready
		r.PeakServers = max(r.PeakServers, ready)
	}
	total := len(s.Classes)
	drop := func(t0, t1 int) float64 { // arrivals in [t0, t1)
		var off, rej int
		for t := max(t0, 0); t < min(t1, n); t++ {
			row := s.At(t, total)
			off += row.Offered - row.Overflow
			rej += row.Offered - row.Overflow - row.Admitted
		}
		if off == 0 {
			return 0
		}
		return float64(rej) / float64(off)
	}
	step, fall := int(r.StepAt/time.Second), int(r.FallAt/time.Second)
	r.DropSettle = -1
	settled := -1
	for t := step; t+5 <= fall; t++ {
		d := drop(t, t+5)
		r.PeakDrop = max(r.PeakDrop, d)
		if d >= 0.05 {
			settled = -1
		} else if settled < 0 {
			settled = t
		}
	}
	if settled >= 0 {
		// The window [settled, settled+5) is the first below 5% for good;
		// the ratio fell below 5% by its end.
		r.DropSettle = time.Duration(settled+5-step) * time.Second
	}
	r.BackToBase = -1
	back := -1
	for t := fall; t < n; t++ {
		if r.Servers[t] == c.Base {
			if back < 0 {
				back = t
			}
		} else {
			back = -1
		}
	}
	if back >= 0 {
		r.BackToBase = time.Duration(back-fall) * time.Second
	}
	sawDown := false
	for _, e := range r.Events {
		switch e.Action {
		case "down":
			sawDown = true
			if e.At >= r.FallAt {
				r.ScaleDowns = append(r.ScaleDowns, e.At)
			}
		case "up":
			if sawDown {
				r.Flaps++
			}
		}
	}
	for i := 1; i < len(r.ScaleDowns); i++ {
		g := r.ScaleDowns[i] - r.ScaleDowns[i-1]
		if r.MinDownGap == 0 || g < r.MinDownGap {
			r.MinDownGap = g
		}
	}
	for t := 0; t < n; t++ {
		row := s.At(t, total)
		r.Offered += row.Offered
		r.Rejected += row.Rejected
		r.Errors += row.Errors
		if judged, ok := row.MeetsTarget(); judged {
			r.P95Judged++
			if !ok {
				r.P95Missed++
			}
			r.WorstP95 = max(r.WorstP95, row.P95)
		}
	}
}

// Summary is the run's figures, one per line.
func (r *AutoscaleResult) Summary() string {
	c := r.Config
	var b strings.Builder
	fmt.Fprintf(&b, "closed loop: %d→%d servers (%d slots, exp %v), %.0f req/s ×%.0f for %v, delay %v, poll %v, one scale-down per %v\n",
		c.Base, c.Max, c.Slots, c.Service, c.Rate, c.Step, c.High, c.Delay, c.Poll, c.DownPeriod)
	fmt.Fprintf(&b, "offered %d, rejected %d (%.1f%%), errors %d\n", r.Offered, r.Rejected, 100*float64(r.Rejected)/math.Max(1, float64(r.Offered)), r.Errors)
	fmt.Fprintf(&b, "high phase: peak 5-s drop ratio %.1f%%, below 5%% for good %v after the step; peak servers %d\n", 100*r.PeakDrop, r.DropSettle, r.PeakServers)
	fmt.Fprintf(&b, "admitted p95: %d of %d judged seconds over %v, worst %v\n", r.P95Missed, r.P95Judged, c.SLA, r.WorstP95.Round(time.Millisecond))
	downs := make([]string, len(r.ScaleDowns))
	for i, d := range r.ScaleDowns {
		downs[i] = fmt.Sprintf("%.0fs", d.Seconds())
	}
	fmt.Fprintf(&b, "after the fall: back to %d servers %v after it; scale-downs at [%s], shortest gap %v; flaps %d\n",
		c.Base, r.BackToBase, strings.Join(downs, " "), r.MinDownGap.Round(100*time.Millisecond), r.Flaps)
	fmt.Fprintf(&b, "responses from servers out of DNS (after %v grace): %d\n", c.DNSInterval+2*time.Second, r.Stray)
	fmt.Fprintf(&b, "harness: %v\n", r.Stall)
	return b.String()
}

func (r *AutoscaleResult) write(dir string) error {
	if err := writeFileWith(filepath.Join(dir, "series.csv"), func(w io.Writer) error {
		cw := csv.NewWriter(w)
		cw.Write([]string{"t", "servers", "needed", "offered", "admitted", "completed", "rejected", "drop_ratio", "p95_ms", "samples"})
		total := len(r.Series.Classes)
		for t := 0; t < r.Series.Seconds; t++ {
			row := r.Series.At(t, total)
			cw.Write([]string{strconv.Itoa(t), strconv.Itoa(r.Servers[t]), fmtFloat(r.Needed[t]),
				strconv.Itoa(row.Offered), strconv.Itoa(row.Admitted), strconv.Itoa(row.Completed), strconv.Itoa(row.Rejected),
				fmtFloat(dropRatio(row)), fmtFloat(float64(row.P95) / float64(time.Millisecond)), strconv.Itoa(row.Samples)})
		}
		cw.Flush()
		return cw.Error()
	}); err != nil {
		return err
	}
	if err := writeFileWith(filepath.Join(dir, "scale.csv"), func(w io.Writer) error {
		cw := csv.NewWriter(w)
		cw.Write([]string{"t", "action", "needed", "replicas", "ready", "lambda_pred", "lambda_in", "ca2", "mean_s_ms"})
		for _, e := range r.Events {
			cw.Write([]string{strconv.FormatFloat(e.At.Seconds(), 'f', 1, 64), e.Action, fmtFloat(e.Needed), strconv.Itoa(e.Replicas), strconv.Itoa(e.Ready),
				fmtFloat(e.LambdaPred), fmtFloat(e.LambdaIn), fmtFloat(e.CA2), fmtFloat(1000 * e.MeanS)})
		}
		cw.Flush()
		return cw.Error()
	}); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(r.Summary()), 0o644); err != nil {
		return err
	}
	return writeAutoscalePlots(dir, r)
}

// dropRatio: rejected arrivals over sent arrivals of the second.
func dropRatio(row *Row) float64 {
	sent := row.Offered - row.Overflow
	if sent == 0 {
		return 0
	}
	return float64(sent-row.Admitted) / float64(sent)
}

func fmtFloat(v float64) string {
	if math.IsNaN(v) {
		return ""
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// ShortAutoscale is the lighter, shorter closed loop the e2e test runs
// in CI: one server at 1× (55 req/s) and at most four, 10 s at 1×, 25 s at
// 3×, 75 s at 1×, a 5 s provisioning delay, a 1 s poll and one scale-down
// per 5 s (about 115 s). sentry's own time constants are unchanged (see
// AutoscaleConfig), so most of the 75 s is sentry's servers-needed coming
// down after the fall: the predicted rate falls from about 150/s to under
// λ_in (about 68/s for this farm's exponential 40 ms) some 55 s after it.
// Decision: 75 s, not 60 s. With 60 s the last scale-down came at 94 s of
// 95 once the estimator stopped clamping samples at m + max(m, 3σ): that
// clamp had held the estimate of an exponential 40 ms near 37 ms, so λ_in
// was near 80/s and the prediction crossed it 15 s sooner.
func ShortAutoscale() AutoscaleConfig {
	return AutoscaleConfig{
		Base: 1, Max: 4, Rate: 55,
		Before: 10 * time.Second, High: 25 * time.Second, After: 75 * time.Second,
		Delay: 5 * time.Second, Poll: time.Second, DownPeriod: 5 * time.Second, Stabilization: 5 * time.Second,
	}
}
