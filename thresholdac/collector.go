package thresholdac

import "github.com/prometheus/client_golang/prometheus"

// Collector exports a Controller's current threshold at scrape time, so the
// request path pays nothing for it. Register it on the project's registry:
//
//	reg.MustRegister(thresholdac.NewCollector(c, prometheus.Labels{"app": app.Name}))
type Collector struct {
	c                              *Controller
	class, prob, capacity, offered *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector for c; constLabels come from config
// (e.g. the app name), never from request data.
func NewCollector(c *Controller, constLabels prometheus.Labels) *Collector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, nil, constLabels)
	}
	return &Collector{
		c:        c,
		class:    d("sentry_threshold_class", "Threshold class i: more important classes are admitted, less important rejected; equals the number of classes when all fit."),
		prob:     d("sentry_threshold_admit_probability", "Admit probability p of the threshold class (1 when all classes fit)."),
		capacity: d("sentry_threshold_capacity_server_seconds", "Capacity K = n × per-server capacity, in server-seconds per second (0 while unknown)."),
		offered:  d("sentry_threshold_offered_server_seconds", "Offered work Σ λ_j·s_j at the last recompute, in server-seconds per second."),
	}
}

// Describe implements prometheus.Collector.
func (k *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- k.class
	ch <- k.prob
	ch <- k.capacity
	ch <- k.offered
}

// Collect implements prometheus.Collector.
func (k *Collector) Collect(ch chan<- prometheus.Metric) {
	th := k.c.Current()
	ch <- prometheus.MustNewConstMetric(k.class, prometheus.GaugeValue, float64(th.Class))
	ch <- prometheus.MustNewConstMetric(k.prob, prometheus.GaugeValue, th.P)
	ch <- prometheus.MustNewConstMetric(k.capacity, prometheus.GaugeValue, th.K)
	ch <- prometheus.MustNewConstMetric(k.offered, prometheus.GaugeValue, th.Offered)
}
