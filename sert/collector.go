package sert

import "github.com/prometheus/client_golang/prometheus"

// Collector exports a Controller's per-class state at scrape time, so the
// request path pays nothing for it beyond its counters. Labels: the
// constant labels given (the app) and class, the class's configured name.
// Only classes that declare termination appear.
//
//	reg.MustRegister(sert.NewCollector(c, prometheus.Labels{"app": app.Name}))
type Collector struct {
	c                                                  *Controller
	threshold, loss, f, arrived, terminated, reclaimed *prometheus.Desc
	rejected, lower, upper                             *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector for c; constLabels come from config,
// never from request data.
func NewCollector(c *Controller, constLabels prometheus.Labels) *Collector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"class"}, constLabels)
	}
	return &Collector{
		c:          c,
		threshold:  d("sentry_termination_threshold_seconds", "Current termination threshold T = LB + F(p)·(UB − LB) of the class."),
		lower:      d("sentry_termination_lower_seconds", "The class's lower bound LB."),
		upper:      d("sentry_termination_upper_seconds", "The class's upper bound UB."),
		loss:       d("sentry_termination_loss_ratio", "Loss fraction p = (rejected + terminated)/arrived over the last interval that updated the threshold."),
		f:          d("sentry_termination_load_factor", "F(p) of the last update: 1 at or below low water (T = UB), 0 at or above high water (T = LB)."),
		arrived:    d("sentry_termination_arrivals_total", "Requests of the class that reached admission (the denominator of p)."),
		rejected:   d("sentry_termination_rejected_total", "Requests of the class rejected by admission (counted in p)."),
		terminated: d("sentry_terminations_total", "Requests of the class terminated for passing the threshold before their first response byte."),
		reclaimed:  d("sentry_termination_reclaimed_server_seconds_total", "Backend time termination reclaimed, in server-seconds (the proxy's estimate of work the cut requests would still have done)."),
	}
}

// Describe implements prometheus.Collector.
func (k *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{k.threshold, k.lower, k.upper, k.loss, k.f, k.arrived, k.rejected, k.terminated, k.reclaimed} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (k *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, cl := range k.c.Classes() {
		if cl == nil {
			continue
		}
		g := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, cl.name)
		}
		n := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, cl.name)
		}
		u, cnt := cl.Last(), cl.Counts()
		lo, hi := cl.Bounds()
		g(k.threshold, cl.Threshold().Seconds())
		g(k.lower, lo.Seconds())
		g(k.upper, hi.Seconds())
		g(k.loss, u.P)
		g(k.f, u.F)
		n(k.arrived, float64(cnt.Arrived))
		n(k.rejected, float64(cnt.Rejected))
		n(k.terminated, float64(cnt.Terminated))
		n(k.reclaimed, cnt.Reclaimed.Seconds())
	}
}
