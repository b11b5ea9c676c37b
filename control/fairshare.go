package control

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/fairshare"
	"github.com/sentry-proxy/sentry/policy"
)

// Fair share inside each class (package fairshare; docs/algorithms.md
// §12). Before the mode decides, the request's client is looked up in the
// app's table and the request is given its standing (admission.Share);
// every mode reads it. When the decision is taken -- at once, or when a
// parked request's run decides it -- the table is told (Table.Done), once
// per request, in account. Mode off asks nothing.

// startFair builds the app's fair-share table, or keeps the one it has
// when the classes and the table's size and rotation are unchanged (a
// reload that changes them starts the table afresh: its clients' rates
// are relearned within seconds). Disabled: no table. a.mu held.
func (a *App) startFair(ac *policy.App, names []string) error {
	fs := ac.Admission.FairShare
	old := a.fair.Load()
	if !fs.Enabled {
		a.stopFair()
		return nil
	}
	if old != nil && equalNames(old.Classes(), names) && old.Slots() == roundSlots(fs.MaxClients) && old.Rotate() == fs.Rotate {
		return nil
	}
	t, err := fairshare.New(fairshare.Config{Classes: names, Slots: fs.MaxClients, Rotate: fs.Rotate, Rand: a.fairRand})
	if err != nil {
		return fmt.Errorf("fair share: %w", err)
	}
	a.stopFair()
	ctx, cancel := context.WithCancel(a.ctx)
	a.mu.fairCancel = cancel
	t.Tick(a.now())
	a.fair.Store(t)
	if !a.noLoops {
		a.wg.Add(1)
		go func() { defer a.wg.Done(); a.runFair(ctx, t) }()
	}
	return nil
}

func roundSlots(n int) int {
	if n == 0 {
		n = fairshare.DefaultSlots
	}
	return (n + fairshare.Ways - 1) / fairshare.Ways * fairshare.Ways
}

// stopFair stops the table's ticker and forgets the table. a.mu held.
func (a *App) stopFair() {
	if a.mu.fairCancel != nil {
		a.mu.fairCancel()
		a.mu.fairCancel = nil
	}
	a.fair.Store(nil)
}

// runFair ticks t every fairshare.TickInterval until ctx is done.
func (a *App) runFair(ctx context.Context, t *fairshare.Table) {
	tk := time.NewTicker(fairshare.TickInterval)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
			t.Tick(a.now())
		}
	}
}

// share gives r its standing in its class's fair share and returns the
// table and slot its decision is reported to (Table.Done, in account).
func (a *App) share(r *admission.Request) (*fairshare.Table, fairshare.Slot) {
	t := a.fair.Load()
	if t == nil {
		r.Share = admission.WithinShare
		return nil, fairshare.NoSlot
	}
	slot, sh, rank := t.Share(r.Class, r.Client, r.Addr)
	r.Share, r.Rank = sh, rank
	return t, slot
}

// WithinShareDemand is class's demand within its clients' shares, in
// server-seconds per second, for batch mode's fair-share tiers
// (batchac.ShareState): the within-share clients' arrival rate times the
// class's mean S.
func (a *App) WithinShareDemand(class int) float64 {
	w, _ := a.shareRates(class)
	return w * a.est.ClassMean(class).Seconds()
}

// shareRates is class's within-share and in-turn arrival rates, requests
// per second (adaptive.Config.ShareRates); 0 without fair sharing.
func (a *App) shareRates(class int) (within, turns float64) {
	t := a.fair.Load()
	if t == nil {
		return 0, 0
	}
	return t.ShareRates(class)
}

// TopClients returns the app's top talkers (fairshare.Table.Top); nil
// without fair sharing.
func (a *App) TopClients() []fairshare.Client {
	if t := a.fair.Load(); t != nil {
		return t.Top()
	}
	return nil
}

// TopClients returns each app's top talkers by app name, for the status
// page.
func (m *Manager) TopClients() map[string][]fairshare.Client {
	out := map[string][]fairshare.Client{}
	for _, a := range m.appList() {
		if c := a.TopClients(); len(c) > 0 {
			out[a.name] = c
		}
	}
	return out
}

// fairCollector exports every app's fair-share state at scrape time.
// Labels are app and class: never a client.
type fairCollector struct{ m *Manager }

var (
	descFairClients = prometheus.NewDesc("sentry_fairshare_clients", "Clients active in the class (a request within the last 10 s), as the fair-share table counts them.", []string{"app", "class"}, nil)
	descFairOver    = prometheus.NewDesc("sentry_fairshare_over_clients", "Clients over their fair share of the class (0 while the class is not shedding).", []string{"app", "class"}, nil)
	descFairSharing = prometheus.NewDesc("sentry_fairshare_sharing", "1 while the class sheds and shares its capacity among its clients, else 0.", []string{"app", "class"}, nil)
	descFairLevel   = prometheus.NewDesc("sentry_fairshare_level_rps", "The class's max-min fair level: the request rate each client may send within its share (absent while every client fits).", []string{"app", "class"}, nil)
	descFairCap     = prometheus.NewDesc("sentry_fairshare_capacity_rps", "The class's admitted rate that the fair level shares out.", []string{"app", "class"}, nil)
	descFairShed    = prometheus.NewDesc("sentry_fairshare_shed_total", "Requests of the class refused (by the fair-share filter or the mode), by whether their client was over its fair share or within it.", []string{"app", "class", "client"}, nil)
)

func (c fairCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descFairClients, descFairOver, descFairSharing, descFairLevel, descFairCap, descFairShed} {
		ch <- d
	}
}

func (c fairCollector) Collect(ch chan<- prometheus.Metric) {
	for _, a := range c.m.appList() {
		t := a.fair.Load()
		if t == nil {
			continue
		}
		names := t.Classes()
		for i, st := range t.Stats() {
			l := []string{a.name, names[i]}
			ch <- prometheus.MustNewConstMetric(descFairClients, prometheus.GaugeValue, float64(st.Clients), l...)
			ch <- prometheus.MustNewConstMetric(descFairOver, prometheus.GaugeValue, float64(st.Over), l...)
			v := 0.0
			if st.Sharing {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descFairSharing, prometheus.GaugeValue, v, l...)
			if st.Sharing && st.Level < 1e300 {
				ch <- prometheus.MustNewConstMetric(descFairLevel, prometheus.GaugeValue, st.Level, l...)
			}
			ch <- prometheus.MustNewConstMetric(descFairCap, prometheus.GaugeValue, st.Capacity, l...)
			ch <- prometheus.MustNewConstMetric(descFairShed, prometheus.CounterValue, float64(st.ShedOver), a.name, names[i], "over_share")
			ch <- prometheus.MustNewConstMetric(descFairShed, prometheus.CounterValue, float64(st.ShedWithin), a.name, names[i], "within_share")
		}
	}
}
