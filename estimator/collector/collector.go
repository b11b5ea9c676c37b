// Package collector exports estimator state to Prometheus at scrape time.
//
// A Collector reads estimator.Registry snapshots when Prometheus scrapes, so
// the request path pays nothing for these metrics. Label values are app and
// class names from the policy, never request data. It is a separate package
// so that the estimator itself stays free of the Prometheus dependency.
//
// Metrics (gauges unless noted):
//
//	sentry_estimator_arrival_rate{app,class}              λ, requests per second
//	sentry_estimator_service_time_seconds{app,class}      mean inherent service time S
//	sentry_estimator_service_time_stddev_seconds{app,class}
//	sentry_estimator_queue_delay_seconds{app}             Q
//	sentry_estimator_eta{app}                             η = inflight/n (when an Eta func is given)
//	sentry_estimator_alpha{app}                           α in use
//	sentry_estimator_keys{app}                            keys in the table
//	sentry_estimator_keys_max{app}                        the table's cap
//	sentry_estimator_evictions_total{app}                 counter
//
// Usage:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(collector.New(estimators, time.Now, func(app string) (float64, bool) {
//		return estimator.Eta(inflight(app), healthy(app)), true
//	}))
package collector

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sentry-proxy/sentry/estimator"
)

// EtaFunc returns app's current η; ok false omits the sample.
type EtaFunc func(app string) (eta float64, ok bool)

// Collector is a prometheus.Collector over an estimator.Registry.
type Collector struct {
	reg *estimator.Registry
	now func() time.Time
	eta EtaFunc

	rate, mean, stddev                *prometheus.Desc
	q, etaD, alpha, keys, maxKeys, ev *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns a collector. now is the clock used to close rate windows
// (time.Now in production). eta may be nil.
func New(reg *estimator.Registry, now func() time.Time, eta EtaFunc) *Collector {
	cl := []string{"app", "class"}
	app := []string{"app"}
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("sentry", "estimator", name), help, labels, nil)
	}
	return &Collector{
		reg: reg, now: now, eta: eta,
		rate:    d("arrival_rate", "Smoothed arrival rate λ per class, in requests per second.", cl),
		mean:    d("service_time_seconds", "Decayed mean inherent service time S per class.", cl),
		stddev:  d("service_time_stddev_seconds", "Decayed standard deviation of S per class.", cl),
		q:       d("queue_delay_seconds", "Estimated queueing delay Q at the backends.", app),
		etaD:    d("eta", "Mean number of requests in service per backend (inflight/n).", app),
		alpha:   d("alpha", "Weight α of io time in S = cpu + α·io.", app),
		keys:    d("keys", "Keys in the service-time table.", app),
		maxKeys: d("keys_max", "Capacity of the service-time table.", app),
		ev:      d("evictions_total", "Keys evicted from the service-time table.", app),
	}
}

// Describe sends every descriptor.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.rate, c.mean, c.stddev, c.q, c.etaD, c.alpha, c.keys, c.maxKeys, c.ev} {
		ch <- d
	}
}

// Collect reads a snapshot of every app's estimator.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	now := c.now()
	for _, ae := range c.reg.Apps() {
		s := ae.Estimator.Snapshot(now)
		for _, cs := range s.Classes {
			ch <- prometheus.MustNewConstMetric(c.rate, prometheus.GaugeValue, cs.Rate, ae.App, cs.Name)
			ch <- prometheus.MustNewConstMetric(c.mean, prometheus.GaugeValue, cs.Mean.Seconds(), ae.App, cs.Name)
			ch <- prometheus.MustNewConstMetric(c.stddev, prometheus.GaugeValue, cs.StdDev.Seconds(), ae.App, cs.Name)
		}
		ch <- prometheus.MustNewConstMetric(c.q, prometheus.GaugeValue, s.Q.Seconds(), ae.App)
		if c.eta != nil {
			if v, ok := c.eta(ae.App); ok {
				ch <- prometheus.MustNewConstMetric(c.etaD, prometheus.GaugeValue, v, ae.App)
			}
		}
		ch <- prometheus.MustNewConstMetric(c.alpha, prometheus.GaugeValue, s.Alpha, ae.App)
		ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(s.Keys), ae.App)
		ch <- prometheus.MustNewConstMetric(c.maxKeys, prometheus.GaugeValue, float64(s.MaxKeys), ae.App)
		ch <- prometheus.MustNewConstMetric(c.ev, prometheus.CounterValue, float64(s.Evictions), ae.App)
	}
}
