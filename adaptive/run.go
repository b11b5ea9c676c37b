package adaptive

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Run calls Tick every Timeout/4 until ctx is done, so that a class with
// few completions still has its rate adjusted (the paper's timeout). The
// caller owns the goroutine.
func (c *Controller) Run(ctx context.Context) error {
	t := time.NewTicker(max(c.cfg.Timeout/4, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			c.Tick(c.cfg.Now())
		}
	}
}

// Collector exports every internal variable of a Controller at scrape
// time: rate, tokens, cur, err, waiting samples, runs, lc and the
// decisions, by class, and the in-flight limit and count of the farm (no
// class label). Class names come from the configuration.
type Collector struct {
	c               *Controller
	names           []string
	descs           [9]*prometheus.Desc
	limit, inFlight *prometheus.Desc
}

// NewCollector returns a collector for c; names are its class names, most
// important first, and constLabels are added to every series (e.g. app).
func NewCollector(c *Controller, names []string, constLabels prometheus.Labels) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("sentry_adaptive_"+name, help, append([]string{"class"}, labels...), constLabels)
	}
	return &Collector{c: c, names: names, descs: [...]*prometheus.Desc{
		d("rate", "Token bucket rate, requests per second."),
		d("tokens", "Tokens in the bucket."),
		d("percentile_seconds", "Smoothed response-time percentile (cur)."),
		d("error", "(cur − target)/target at the last controller run."),
		d("samples", "Response-time samples waiting for the next run."),
		d("runs_total", "Controller runs."),
		d("lc", "Runs over target with every less important class at the minimum rate."),
		d("sample_seconds", "The last run's percentile sample (samp)."),
		d("decisions_total", "Decisions of the token bucket.", "verdict"),
	},
		limit: prometheus.NewDesc("sentry_adaptive_in_flight_limit",
			"The in-flight limit in force, requests (0: none; admission.adaptive.in_flight_limit).", nil, constLabels),
		inFlight: prometheus.NewDesc("sentry_adaptive_in_flight",
			"Requests the controller counts as admitted and not completed, every class.", nil, constLabels),
	}
}

// Describe implements prometheus.Collector.
func (col *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range col.descs {
		ch <- d
	}
	ch <- col.limit
	ch <- col.inFlight
}

// Collect implements prometheus.Collector.
func (col *Collector) Collect(ch chan<- prometheus.Metric) {
	for i := 0; i < col.c.Classes() && i < len(col.names); i++ {
		st := col.c.State(i)
		name := col.names[i]
		g := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, name)
		}
		g(col.descs[0], st.Rate)
		g(col.descs[1], st.Tokens)
		g(col.descs[2], st.Cur.Seconds())
		g(col.descs[3], st.Err)
		g(col.descs[4], float64(st.Samples))
		ch <- prometheus.MustNewConstMetric(col.descs[5], prometheus.CounterValue, float64(st.Runs), name)
		g(col.descs[6], float64(st.LC))
		g(col.descs[7], st.Sample.Seconds())
		ch <- prometheus.MustNewConstMetric(col.descs[8], prometheus.CounterValue, float64(st.Admitted), name, "admitted")
		ch <- prometheus.MustNewConstMetric(col.descs[8], prometheus.CounterValue, float64(st.Rejected), name, "rejected_adaptive")
	}
	lim, in := col.c.Limit()
	ch <- prometheus.MustNewConstMetric(col.limit, prometheus.GaugeValue, float64(lim))
	ch <- prometheus.MustNewConstMetric(col.inFlight, prometheus.GaugeValue, float64(in))
}

var _ prometheus.Collector = (*Collector)(nil)
