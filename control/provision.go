package control

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/provision"
)

// provState is one app's provisioning advice (package provision): the
// G/G/1 model, the predictor, the reactive trigger and its webhook. The
// monitor updates it once per tick; the metrics collector and the
// /provisioning handler read it. Its mutex is a leaf lock and is never
// taken on the request path: the request path only adds to App.arrivals.
type provState struct {
	mu struct {
		sync.Mutex
		cfg      policy.Provisioning
		pred     provision.Predictor
		disp     provision.Dispersion
		trig     *provision.Trigger
		notifier *provision.Notifier
		stopHook context.CancelFunc
		hookCfg  policy.Webhook // of notifier

		arrivals uint64 // App.arrivals at the last tick
		offered  uint64 // cumulative, monitor-owned
		dropped  uint64 // cumulative, monitor-owned
		status   ProvisionStatus
	}
	asks atomic.Uint64 // reactive asks made
}

// ProvisionStatus is one app's provisioning advice as of its last tick.
type ProvisionStatus struct {
	App string `json:"app"`
	// Current is the healthy backends this sentry owns; Needed the model's
	// count ⌈λ_pred/λ_in⌉ within min_servers and max_servers.
	Current int `json:"servers_current"`
	Needed  int `json:"servers_needed"`
	// DropRatio is the share of the requests offered over the window that
	// were rejected; WindowFull whether a whole window has been seen.
	DropRatio  float64 `json:"drop_ratio"`
	WindowFull bool    `json:"window_full"`
	// The model's inputs and outputs, in seconds and per second.
	LambdaIn   float64 `json:"lambda_in"`
	LambdaPred float64 `json:"lambda_pred"`
	Offered    float64 `json:"offered_rate"`
	MeanS      float64 `json:"mean_service_seconds"`
	StdDevS    float64 `json:"service_stddev_seconds"`
	CA2        float64 `json:"arrival_cv2"`
	Slots      float64 `json:"slots"`
	Target     float64 `json:"target_seconds"`
	// NextServerGain is the revenue gain of one more server over a
	// provisioning cycle (eq. 10): λ_in·r·T_prov while short of demand.
	NextServerGain float64 `json:"next_server_gain"`
	Asks           uint64  `json:"asks_total"`
	Min            int     `json:"min_servers"`
	Max            int     `json:"max_servers"`
	Revenue        float64 `json:"revenue"`
	TProv          float64 `json:"t_prov_seconds"`
}

func (s ProvisionStatus) utility() provision.AppUtility {
	return provision.AppUtility{Name: s.App, Current: s.Current, LambdaIn: s.LambdaIn, LambdaPred: s.LambdaPred,
		Revenue: s.Revenue, TProv: s.TProv, Max: s.Max}
}

// setProvisioning applies the policy's provisioning section: the trigger's
// settings (its history and last ask survive) and the webhook, restarted
// only when its settings change. Called by Build with Manager.mu held.
func (a *App) setProvisioning(pc policy.Provisioning) {
	p := &a.prov
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.cfg = pc
	if p.mu.status.App == "" { // before the first tick: the floor
		p.mu.status = ProvisionStatus{App: a.name, Needed: pc.MinServers, Min: pc.MinServers, Max: pc.MaxServers,
			Revenue: pc.Revenue, TProv: pc.TProv.Seconds()}
	}
	tc := provision.TriggerConfig{Window: pc.Window, FDrop: pc.FDrop, Spacing: pc.Spacing, MaxStep: pc.MaxStep}
	if p.mu.trig == nil {
		p.mu.trig = provision.NewTrigger(tc)
	} else {
		p.mu.trig.SetConfig(tc)
	}
	var want policy.Webhook
	if pc.Webhook != nil {
		want = *pc.Webhook
	}
	if p.mu.notifier != nil && want == p.mu.hookCfg {
		return
	}
	if p.mu.stopHook != nil {
		p.mu.stopHook() // its goroutine ends; a.wg waits for it on stop
		p.mu.notifier, p.mu.stopHook = nil, nil
	}
	p.mu.hookCfg = want
	if want.URL == "" {
		return
	}
	retries := want.Retries
	if retries == 0 {
		retries = -1 // provision's "none"
	}
	n := provision.NewNotifier(provision.WebhookConfig{URL: want.URL, Timeout: want.Timeout, Retries: retries,
		Logger: a.log.Named("provision")})
	ctx, cancel := context.WithCancel(a.ctx)
	p.mu.notifier, p.mu.stopHook = n, cancel
	a.wg.Add(1)
	go func() { defer a.wg.Done(); n.Run(ctx) }()
}

// serviceStats returns the app's E[S] and σ_b² in seconds: the mixture of
// its classes' service-time distributions, weighted by their arrival rates
// (by their sample weights while nothing arrives).
func (a *App) serviceStats(now time.Time, classes int) (mean, variance float64) {
	var wsum, m1, m2 float64
	for pass := 0; pass < 2 && wsum == 0; pass++ {
		for c := 0; c < classes; c++ {
			m, sd, w := a.est.ClassStats(c)
			if w <= 0 || m <= 0 {
				continue
			}
			if pass == 0 {
				w = a.est.Rate(c, now)
			}
			ms, sds := m.Seconds(), sd.Seconds()
			wsum += w
			m1 += w * ms
			m2 += w * (sds*sds + ms*ms)
		}
	}
	if wsum <= 0 {
		return 0, 0
	}
	mean = m1 / wsum
	return mean, max(0, m2/wsum-mean*mean)
}

// provisionTick runs the model and the trigger once; the monitor calls it
// every tick with the interval's rejections.
func (a *App) provisionTick(now time.Time, interval time.Duration, rate float64, rejected int64) {
	cfg := a.cfg.Load()
	meanS, varS := a.serviceStats(now, len(cfg.names))
	healthy := a.pool.Load().Healthy()
	slots := a.batch.Parallelism()
	rsla := time.Duration(a.rsla.Load())

	p := &a.prov
	p.mu.Lock()
	pc := p.mu.cfg
	arr := a.arrivals.Load()
	delta := arr - p.mu.arrivals
	p.mu.arrivals = arr
	p.mu.offered += delta
	p.mu.dropped += uint64(max(rejected, 0))
	var offered float64
	if interval > 0 {
		offered = float64(delta) / interval.Seconds()
		p.mu.disp.Observe(float64(delta), interval)
		p.mu.pred.Observe(now, offered)
	}
	ca2 := p.mu.disp.CA2()
	pred := p.mu.pred.Predict()
	// The target: provisioning.target, else the QoS table's band for the
	// predicted rate (Cataclysm §4.1 reads E[R] at λ_pred), so capacity is
	// planned for the target that will be in force.
	target := pc.Target
	if target <= 0 {
		target = cfg.sla.Target(pred)
	}
	if target <= 0 {
		target = rsla
	}
	in := provision.Inputs{MeanS: meanS, VarS: varS, Target: target.Seconds(), Slots: slots}
	if rate > 0 {
		in.Rate, in.VarA = rate, ca2/(rate*rate)
	}
	lambdaIn := in.LambdaIn()
	needed := pc.MinServers
	if meanS > 0 { // no service time learned yet: nothing to model
		needed = provision.Needed(pred, lambdaIn, pc.MinServers, pc.MaxServers)
	}
	p.mu.trig.Observe(now, p.mu.offered, p.mu.dropped)
	frac, full := p.mu.trig.DropFraction()
	ask := p.mu.trig.Ask(now, healthy, needed, pc.MaxServers)
	st := ProvisionStatus{App: a.name, Current: healthy, Needed: needed, DropRatio: frac, WindowFull: full,
		LambdaIn: lambdaIn, LambdaPred: pred, Offered: offered, MeanS: meanS, StdDevS: math.Sqrt(varS), CA2: ca2,
		Slots: slots, Target: target.Seconds(), Min: pc.MinServers, Max: pc.MaxServers, Revenue: pc.Revenue,
		TProv: pc.TProv.Seconds()}
	st.NextServerGain = st.utility().Gain(healthy)
	if ask > 0 {
		st.Asks = p.asks.Add(1)
	} else {
		st.Asks = p.asks.Load()
	}
	p.mu.status = st
	n := p.mu.notifier
	p.mu.Unlock()

	if ask > 0 {
		a.log.Warn("asking for servers", "ask", ask, "servers_current", healthy, "servers_needed", needed,
			"drop_ratio", frac, "window", pc.Window)
		if n != nil {
			n.Notify(provision.Request{App: a.name, Ask: ask, Current: healthy, Needed: needed, DropRatio: frac, Time: now})
		}
	}
}

// Provisioning returns the app's advice as of its last tick.
func (a *App) Provisioning() ProvisionStatus {
	a.prov.mu.Lock()
	defer a.prov.mu.Unlock()
	return a.prov.mu.status
}

// webhookCounts returns the webhook's delivered, failed and dropped asks.
func (a *App) webhookCounts() (sent, failed, dropped uint64, ok bool) {
	a.prov.mu.Lock()
	n := a.prov.mu.notifier
	a.prov.mu.Unlock()
	if n == nil {
		return 0, 0, 0, false
	}
	return n.Sent(), n.Failed(), n.Dropped(), true
}

// ProvisioningAdvice is the /provisioning document.
type ProvisioningAdvice struct {
	Apps []ProvisionStatus `json:"apps"`
	// Spare and Allocation: the greedy allocation of ?spare=N servers
	// (eq. 10–11), extra servers by app; absent without spare.
	Spare      int            `json:"spare,omitempty"`
	Allocation map[string]int `json:"allocation,omitempty"`
}

// Advice returns every app's status, by name, and the greedy allocation of
// spare servers (none when spare ≤ 0).
func (m *Manager) Advice(spare int) ProvisioningAdvice {
	apps := m.appList()
	sort.Slice(apps, func(i, j int) bool { return apps[i].name < apps[j].name })
	adv := ProvisioningAdvice{Apps: make([]ProvisionStatus, len(apps))}
	us := make([]provision.AppUtility, len(apps))
	for i, a := range apps {
		adv.Apps[i] = a.Provisioning()
		adv.Apps[i].App = a.name
		us[i] = adv.Apps[i].utility()
	}
	if spare > 0 {
		adv.Spare = spare
		adv.Allocation = map[string]int{}
		for i, n := range provision.Allocate(us, spare) {
			adv.Allocation[apps[i].name] = n
		}
	}
	return adv
}

// maxSpare bounds ?spare= (Allocate's work is spare × apps).
const maxSpare = 100000

// ProvisioningHandler serves GET /provisioning: Advice as JSON.
// ?spare=N (0–100000) adds the greedy allocation of N spare servers.
func (m *Manager) ProvisioningHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		spare := 0
		if s := r.URL.Query().Get("spare"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 || n > maxSpare {
				http.Error(w, "spare must be an integer from 0 to "+strconv.Itoa(maxSpare), http.StatusBadRequest)
				return
			}
			spare = n
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(m.Advice(spare))
	})
}

// provCollector exports the advice at scrape time.
type provCollector struct{ m *Manager }

var (
	descNeeded  = prometheus.NewDesc("sentry_provision_servers_needed", "Servers the app needs by the G/G/1 model: ⌈λ_pred/λ_in⌉ within min_servers and max_servers (a KEDA AverageValue target of 1 scales the backends to it).", []string{"app"}, nil)
	descCurrent = prometheus.NewDesc("sentry_provision_servers_current", "Healthy backends this sentry owns.", []string{"app"}, nil)
	descDrop    = prometheus.NewDesc("sentry_drop_ratio", "Share of the requests offered over provisioning.window that were rejected.", []string{"app"}, nil)
	descAsks    = prometheus.NewDesc("sentry_provision_requests_total", "Reactive asks for servers (drop ratio above f_drop over the window).", []string{"app"}, nil)
	descLIn     = prometheus.NewDesc("sentry_provision_lambda_in", "λ_in: requests per second one server takes within the provisioning target (eq. 9).", []string{"app"}, nil)
	descLPred   = prometheus.NewDesc("sentry_provision_lambda_pred", "λ_pred: the predicted offered rate, requests per second.", []string{"app"}, nil)
	descHook    = prometheus.NewDesc("sentry_provision_webhook_total", "Webhook deliveries of reactive asks by outcome (sent, failed, dropped: queue full).", []string{"app", "outcome"}, nil)
)

func (c provCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descNeeded, descCurrent, descDrop, descAsks, descLIn, descLPred, descHook} {
		ch <- d
	}
}

func (c provCollector) Collect(ch chan<- prometheus.Metric) {
	apps := c.m.appList()
	for _, a := range apps {
		st := a.Provisioning()
		ch <- prometheus.MustNewConstMetric(descNeeded, prometheus.GaugeValue, float64(st.Needed), a.name)
		ch <- prometheus.MustNewConstMetric(descCurrent, prometheus.GaugeValue, float64(st.Current), a.name)
		ch <- prometheus.MustNewConstMetric(descDrop, prometheus.GaugeValue, st.DropRatio, a.name)
		ch <- prometheus.MustNewConstMetric(descAsks, prometheus.CounterValue, float64(a.prov.asks.Load()), a.name)
		ch <- prometheus.MustNewConstMetric(descLIn, prometheus.GaugeValue, st.LambdaIn, a.name)
		ch <- prometheus.MustNewConstMetric(descLPred, prometheus.GaugeValue, st.LambdaPred, a.name)
		if sent, failed, dropped, ok := a.webhookCounts(); ok {
			ch <- prometheus.MustNewConstMetric(descHook, prometheus.CounterValue, float64(sent), a.name, "sent")
			ch <- prometheus.MustNewConstMetric(descHook, prometheus.CounterValue, float64(failed), a.name, "failed")
			ch <- prometheus.MustNewConstMetric(descHook, prometheus.CounterValue, float64(dropped), a.name, "dropped")
		}
	}
}
