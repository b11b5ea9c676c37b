package control

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/batchac"
	"github.com/sentry-proxy/sentry/classify"
	"github.com/sentry-proxy/sentry/estimator"
	estcollector "github.com/sentry-proxy/sentry/estimator/collector"
	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/thresholdac"
)

// Options are the manager's collaborators.
type Options struct {
	Logger     hclog.Logger
	Registerer prometheus.Registerer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// CPU reads the process CPU time for the mode switch; nil means
	// admission.ProcessCPUTime.
	CPU func() (time.Duration, error)
}

// Manager builds each app's admission stack from the policy and keeps it
// across reloads, keyed by app name.
type Manager struct {
	opts Options
	log  hclog.Logger
	ests *estimator.Registry

	mu   sync.Mutex
	apps map[string]*App

	// noMonitor leaves out each app's once-per-second monitor, for tests
	// that drive App.tick on a manual clock themselves.
	noMonitor bool
	// noLoops leaves out the batch, threshold and adaptive controllers'
	// own goroutines too, for simulations that tick every one of them on
	// a manual clock (deterministic runs).
	noLoops bool
	// fairRand, when set, is every app's fair-share draw (deterministic
	// simulations).
	fairRand func() uint32
}

// NewManager returns a manager; its metrics go to opts.Registerer.
func NewManager(opts Options) (*Manager, error) {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	m := &Manager{opts: opts, log: opts.Logger.Named("control"), ests: estimator.NewRegistry(), apps: map[string]*App{}}
	if err := opts.Registerer.Register(&collector{m: m}); err != nil {
		return nil, err
	}
	if err := opts.Registerer.Register(provCollector{m: m}); err != nil { // provision.go
		return nil, err
	}
	if err := opts.Registerer.Register(adaptiveMetrics{m}); err != nil {
		return nil, err
	}
	if err := opts.Registerer.Register(fairCollector{m}); err != nil { // fairshare.go
		return nil, err
	}
	// Per-class λ and S, Q, η and the key table, at scrape time.
	eta := func(app string) (float64, bool) {
		m.mu.Lock()
		a := m.apps[app]
		m.mu.Unlock()
		if a == nil {
			return 0, false
		}
		return estimator.Eta(a.Inflight(), a.Healthy()), true
	}
	if err := opts.Registerer.Register(estcollector.New(m.ests, opts.Now, eta)); err != nil {
		return nil, err
	}
	return m, nil
}

// Estimators exposes the estimator registry (for the estimator's collector).
func (m *Manager) Estimators() *estimator.Registry { return m.ests }

// Build returns the app's stack, creating it or reconfiguring the existing
// one in place. On error nothing changes.
func (m *Manager) Build(ac *policy.App, pool Pool) (*App, error) {
	cls, err := classify.Compile(ac.Classes)
	if err != nil {
		return nil, fmt.Errorf("classes: %w", err)
	}
	mode, err := admission.ParseMode(ac.Admission.Mode)
	if err != nil {
		return nil, err
	}
	cfg := &appConfig{cls: cls, names: cls.Names(), sla: ac.SLA, mode: mode, strip: ac.ServerTiming.Strip,
		percentile: ac.SLA.Percentile, revenue: ac.SLA.Revenue, fallback: ac.Admission.Fallback,
		leastLoaded: ac.Balance == policy.LeastLoaded}
	if cfg.percentile <= 0 || cfg.percentile >= 100 {
		cfg.percentile = 95
	}
	est, err := m.ests.Get(ac.Name, ac.Estimator, cfg.names)
	if err != nil {
		return nil, fmt.Errorf("estimator: %w", err)
	}
	bcfg := batchConfig(ac, cls, est)

	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.apps[ac.Name]
	if a == nil {
		return m.create(ac, pool, cfg, est, bcfg)
	}
	if err := a.batch.Reconfigure(bcfg); err != nil {
		return nil, fmt.Errorf("batch: %w", err)
	}
	a.pool.Store(&poolRef{pool})
	a.setClasses(cfg.names)
	a.cfg.Store(cfg)
	a.setProvisioning(ac.Provisioning)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mu.nClasses != len(cfg.names) || a.mu.thrCfg != ac.Admission.Threshold {
		if err := a.startThreshold(ac, len(cfg.names)); err != nil {
			return nil, err
		}
	}
	if err := a.startAdaptive(ac, cfg.names, cfg.percentile); err != nil {
		return nil, err
	}
	if err := a.startFair(ac, cfg.names); err != nil {
		return nil, err
	}
	if a.mu.swCfg != ac.Admission.Switch || a.sw.Load().Configured() != mode {
		if err := a.startSwitch(ac, mode, m.opts); err != nil {
			return nil, err
		}
	}
	if err := a.reconfigureTermination(ac); err != nil {
		return nil, err
	}
	return a, nil
}

func batchConfig(ac *policy.App, cls *classify.Classifier, est *estimator.Estimator) batchac.Config {
	bc := batchac.Config{
		Buckets:          est.Buckets().N(),
		QueueCap:         ac.Admission.Batch.QueueCap,
		AllOrNothing:     ac.Admission.Batch.AllOrNothing,
		StrictPeriods:    ac.Admission.Batch.StrictPeriods,
		NoImpliedQueue:   !ac.Admission.Batch.ImpliedQueue,
		Parallelism:      ac.Admission.Batch.Parallelism,
		LearnParallelism: ac.Admission.Batch.Parallelism == 0,
		NoReserve:        !ac.Admission.Reserve,
		ReserveFloor:     ac.Admission.ReserveFloor,
	}
	if bc.Parallelism == 0 {
		bc.Parallelism = 1
	}
	for i := 0; i < cls.Len(); i++ {
		c := cls.Class(i)
		bc.Classes = append(bc.Classes, batchac.ClassConfig{Name: c.Name, Period: c.Period})
	}
	return bc
}

func (m *Manager) create(ac *policy.App, pool Pool, cfg *appConfig, est *estimator.Estimator, bcfg batchac.Config) (*App, error) {
	a := &App{name: ac.Name, log: m.log.With("app", ac.Name), now: m.opts.Now, est: est, noLoops: m.noLoops, fairRand: m.fairRand}
	a.pool.Store(&poolRef{pool})
	a.cfg.Store(cfg)
	a.setClasses(cfg.names)
	a.rsla.Store(int64(cfg.sla.Target(0)))
	labels := prometheus.Labels{"app": ac.Name}
	bcfg.ConstLabels = labels
	bcfg.Now = m.opts.Now
	b, err := batchac.New(a, bcfg)
	if err != nil {
		return nil, fmt.Errorf("batch: %w", err)
	}
	a.batch = b
	a.learner, err = thresholdac.NewLearner(thresholdac.LearnerConfig{})
	if err != nil {
		return nil, err
	}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.mu.Lock()
	if err := a.startThreshold(ac, len(cfg.names)); err == nil {
		if err = a.startAdaptive(ac, cfg.names, cfg.percentile); err == nil {
			if err = a.startFair(ac, cfg.names); err == nil {
				err = a.startSwitch(ac, cfg.mode, m.opts)
			}
		}
	}
	a.mu.Unlock()
	if err != nil {
		a.stop()
		return nil, err
	}
	if err := m.opts.Registerer.Register(b); err != nil {
		a.stop()
		return nil, fmt.Errorf("batch metrics: %w", err)
	}
	if err := a.startTermination(ac, m.opts.Registerer); err != nil {
		m.opts.Registerer.Unregister(b)
		a.stop()
		return nil, err
	}
	a.setProvisioning(ac.Provisioning)
	if !m.noLoops {
		a.wg.Add(1)
		go func() { defer a.wg.Done(); b.Run(a.ctx) }()
	}
	if !m.noMonitor {
		a.wg.Add(1)
		go a.monitor()
	}
	m.apps[ac.Name] = a
	return a, nil
}

// startThreshold (re)builds the threshold controller; a.mu held.
func (a *App) startThreshold(ac *policy.App, classes int) error {
	tc := thresholdac.Config{Classes: classes, Inputs: a, Period: ac.Admission.Threshold.Recompute, Now: a.now}
	a.thrCapacity.Store(math.Float64bits(ac.Admission.Threshold.Capacity))
	if c := ac.Admission.Threshold.Capacity; c > 0 {
		tc.PerServer = c
	} else {
		tc.Learned = capacityOf{a}
	}
	t, err := thresholdac.New(tc)
	if err != nil {
		return fmt.Errorf("threshold: %w", err)
	}
	t.Recompute(a.now())
	if a.mu.thrCancel != nil {
		a.mu.thrCancel()
	}
	ctx, cancel := context.WithCancel(a.ctx)
	a.mu.thrCancel, a.mu.thrCfg, a.mu.nClasses = cancel, ac.Admission.Threshold, classes
	a.thr.Store(t)
	if !a.noLoops {
		a.wg.Add(1)
		go func() { defer a.wg.Done(); t.Run(ctx) }()
	}
	return nil
}

// capacityOf is threshold mode's per-server capacity: what the learner has
// learned (from batch and threshold intervals), or, before it knows, 0.9 ×
// the batch test's P (a backend with P parallel slots does at most P
// server-seconds of work per second).
// Without the fallback, threshold mode entered before any learning (forced
// threshold, or an early switch) would admit everything.
type capacityOf struct{ a *App }

func (c capacityOf) PerServer() (float64, bool) {
	if v, ok := c.a.learner.PerServer(); ok {
		return v, true
	}
	return fallbackHeadroom * c.a.batch.Parallelism(), true
}

// fallbackHeadroom keeps threshold mode below the raw capacity P until the
// learner knows better: at ρ = 1 queues grow without bound.
const fallbackHeadroom = 0.9

// startSwitch (re)builds the mode switch; a.mu held.
func (a *App) startSwitch(ac *policy.App, mode admission.Mode, o Options) error {
	s := ac.Admission.Switch
	sw, err := admission.NewSwitch(admission.SwitchConfig{
		Mode: mode, CPUHigh: s.CPUHigh, CPULow: s.CPULow, Hold: s.Hold, RevertAfter: s.RevertAfter,
		CPU: o.CPU, Now: a.now, Logger: a.log,
		Rate: func() float64 {
			now, r := a.now(), 0.0
			for c := range a.cfg.Load().names {
				r += a.est.Rate(c, now)
			}
			return r
		},
	})
	if err != nil {
		return fmt.Errorf("mode switch: %w", err)
	}
	if a.mu.swCancel != nil {
		a.mu.swCancel()
	}
	ctx, cancel := context.WithCancel(a.ctx)
	a.mu.swCancel, a.mu.swCfg = cancel, s
	a.sw.Store(sw)
	if mode == admission.ModeAuto {
		a.wg.Add(1)
		go func() { defer a.wg.Done(); sw.Run(ctx, admission.DefaultSampleInterval) }()
	}
	return nil
}

// setClasses lays out the per-class stats for names, keeping each class's
// counters by name across reloads (a class that moves keeps its own).
// Replaced atomically; Observe may run concurrently.
func (a *App) setClasses(names []string) {
	old := map[string]*classStats{}
	if cur := a.classes.Load(); cur != nil {
		for _, cs := range *cur {
			old[cs.name] = cs
		}
	}
	next := make([]*classStats, len(names))
	for i, n := range names {
		if cs := old[n]; cs != nil {
			next[i] = cs
		} else {
			next[i] = &classStats{name: n}
		}
	}
	a.classes.Store(&next)
}

func (a *App) stop() {
	if a.cancel != nil {
		a.cancel()
	}
	if a.batch != nil {
		a.batch.Close()
	}
	a.wg.Wait()
}

// Retain stops and forgets the apps not named.
func (m *Manager) Retain(names []string) {
	keep := map[string]bool{}
	for _, n := range names {
		keep[n] = true
	}
	m.mu.Lock()
	var gone []*App
	for name, a := range m.apps {
		if !keep[name] {
			gone = append(gone, a)
			delete(m.apps, name)
		}
	}
	m.mu.Unlock()
	for _, a := range gone {
		m.opts.Registerer.Unregister(a.batch)
		a.stopTermination(m.opts.Registerer)
		a.stop()
	}
	m.ests.Retain(names...)
}

// Close stops every app.
func (m *Manager) Close() { m.Retain(nil) }

// collector exports the stacks' state at scrape time.
type collector struct{ m *Manager }

var (
	descMode     = prometheus.NewDesc("sentry_admission_mode", "1 for the admission mode in force (batch, threshold, adaptive, off).", []string{"app", "mode"}, nil)
	descSwitches = prometheus.NewDesc("sentry_admission_mode_switches_total", "Mode switches, by the mode switched to.", []string{"app", "to"}, nil)
	descCPU      = prometheus.NewDesc("sentry_cpu_utilization_ratio", "sentry's own CPU utilisation (fraction of the CPUs it may use: GOMAXPROCS, or a smaller cgroup quota) as the mode switch last saw it.", []string{"app"}, nil)
	descRSLA     = prometheus.NewDesc("sentry_sla_target_seconds", "Current response-time target R_sla (follows the arrival rate through the QoS table).", []string{"app"}, nil)
	descQuant    = prometheus.NewDesc("sentry_sla_admitted_percentile_seconds", "Admitted requests' response-time percentile (the SLA's) over the last interval.", []string{"app"}, nil)
	descCQuant   = prometheus.NewDesc("sentry_class_admitted_percentile_seconds", "Per class: admitted requests' response-time percentile (the SLA's) over the last interval; 0 if none completed.", []string{"app", "class"}, nil)
	descRevenue  = prometheus.NewDesc("sentry_revenue_total", "Revenue earned: admitted requests that met the target × sla.revenue (Cataclysm eq. 2).", []string{"app", "class"}, nil)
	descMet      = prometheus.NewDesc("sentry_sla_met_total", "Admitted requests answered within the target.", []string{"app", "class"}, nil)
	descCap      = prometheus.NewDesc("sentry_learned_capacity_per_server", "Per-server capacity threshold mode uses when none is configured, in server-seconds per second: learned from batch mode, or the batch test's P until then.", []string{"app"}, nil)
	descThr      = prometheus.NewDesc("sentry_threshold_class", "Threshold mode's class index i (0-based) admitted with probability p.", []string{"app"}, nil)
	descThrP     = prometheus.NewDesc("sentry_threshold_admit_probability", "Threshold mode's admit probability p for class i.", []string{"app"}, nil)
	descProbes   = prometheus.NewDesc("sentry_admission_probes_total", "Rejections resting on the service-time estimate that a probe overrode, so the estimate keeps learning while its class is rejected.", []string{"app"}, nil)
	descThrK     = prometheus.NewDesc("sentry_threshold_capacity_server_seconds", "Threshold mode's capacity K = n × per-server capacity (0 while unknown).", []string{"app"}, nil)
	descOver     = prometheus.NewDesc("sentry_admitted_over_target_total", "Requests admitted although their own service time misses their class's target, because admitting them harmed nobody (a free slot, nothing waiting): the work-conserving rule, in every admission mode.", []string{"app", "class"}, nil)
	descPeer     = prometheus.NewDesc("sentry_upgrade_peer_in_flight", "Requests the other process of a binary upgrade in progress has in flight to the app's backends (the old one's while this one starts, the new one's while this one drains), counted as load by admission; 0 otherwise.", []string{"app"}, nil)
	descLoad     = prometheus.NewDesc("sentry_farm_load", "The farm's load as the batch model predicts it, the degradation signal's value: (Q + max(1, (η+1)/P)·S̄)/R_sla (load.go).", []string{"app"}, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMode, descSwitches, descCPU, descRSLA, descQuant, descCQuant, descRevenue, descMet,
		descCap, descThr, descThrP, descThrK, descProbes, descLoad, descOver, descPeer} {
		ch <- d
	}
}

// appList is a snapshot of the apps, taken under m.mu (the collectors and
// the provisioning advice walk it without holding the lock).
func (m *Manager) appList() []*App {
	m.mu.Lock()
	defer m.mu.Unlock()
	apps := make([]*App, 0, len(m.apps))
	for _, a := range m.apps {
		apps = append(apps, a)
	}
	return apps
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	apps := c.m.appList()
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	for _, a := range apps {
		cfg := a.cfg.Load()
		st := a.sw.Load().Status()
		for _, md := range []admission.Mode{admission.ModeBatch, admission.ModeThreshold, admission.ModeAdaptive, admission.ModeOff} {
			v := 0.0
			if st.Mode == md {
				v = 1
			}
			gauge(descMode, v, a.name, md.String())
		}
		counter(descSwitches, float64(st.ToThreshold), a.name, "threshold")
		counter(descSwitches, float64(st.ToBatch), a.name, "batch")
		counter(descSwitches, float64(st.ToAdaptive), a.name, "adaptive")
		if !math.IsNaN(st.Utilization) {
			gauge(descCPU, st.Utilization, a.name)
		}
		gauge(descRSLA, a.RSLA().Seconds(), a.name)
		gauge(descPeer, float64(a.peer.Load()), a.name)
		gauge(descQuant, time.Duration(a.lastQuantile.Load()).Seconds(), a.name)
		cs := *a.classes.Load()
		for i, name := range cfg.names {
			gauge(descCQuant, time.Duration(cs[i].quantile.Load()).Seconds(), a.name, name)
			met := float64(cs[i].met.Load())
			counter(descMet, met, a.name, name)
			counter(descRevenue, met*cfg.revenue, a.name, name)
			counter(descOver, float64(cs[i].over.Load()), a.name, name)
		}
		cap, _ := capacityOf{a}.PerServer()
		gauge(descCap, cap, a.name)
		th := a.thr.Load().Current()
		gauge(descThr, float64(th.Class), a.name)
		gauge(descThrP, th.P, a.name)
		gauge(descThrK, th.K, a.name)
		counter(descProbes, float64(a.Probes()), a.name)
		gauge(descLoad, a.Load(a.now()), a.name)
	}
}
