package batchac

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sentry-proxy/sentry/admission"
)

// waitBounds are the upper bounds, in seconds, of the wait-time histogram.
// A request waits at most d_i plus one run, so periods up to ~1 s are
// covered with resolution.
var waitBounds = [...]float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

// waitHist is a lock-free, allocation-free histogram observed per request and
// exported at scrape time.
type waitHist struct {
	counts [len(waitBounds) + 1]atomic.Uint64 // last is +Inf
	sumNs  atomic.Int64
}

func (h *waitHist) observe(d time.Duration) {
	if d < 0 {
		d = 0
	}
	sec := d.Seconds()
	i := 0
	for i < len(waitBounds) && sec > waitBounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sumNs.Add(int64(d))
}

func (h *waitHist) metric(desc *prometheus.Desc, class string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(waitBounds))
	var cum uint64
	for i, ub := range waitBounds {
		cum += h.counts[i].Load()
		buckets[ub] = cum
	}
	cum += h.counts[len(waitBounds)].Load()
	sum := time.Duration(h.sumNs.Load()).Seconds()
	return prometheus.MustNewConstHistogram(desc, cum, sum, buckets, class)
}

// descs are the metric descriptions of one controller.
type descs struct {
	decisions, queueLen, wait, eta, q, rsla, parallelism, pending, reserve *prometheus.Desc
}

func newDescs(constLabels prometheus.Labels) descs {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("sentry_batch_"+name, help, labels, constLabels)
	}
	return descs{
		decisions:   d("decisions_total", "Batch admission decisions by class and verdict.", "class", "verdict"),
		queueLen:    d("queue_length", "Requests waiting for the policer, by class.", "class"),
		wait:        d("wait_seconds", "Time a request waited in the batch queue before its decision.", "class"),
		eta:         d("eta", "Current η: requests in flight per healthy backend."),
		q:           d("queue_delay_seconds", "Current Q: estimated queueing delay at the backends."),
		rsla:        d("rsla_seconds", "Current response-time target R_sla."),
		parallelism: d("parallelism", "P used by the test: parallel request slots per backend."),
		pending:     d("admitted_pending", "Requests admitted by a policer run whose Admit call has not returned yet."),
		reserve:     d("reserve_ratio", "Share of the farm held for the predicted demand of more important classes, by class (ρ: 0 for the most important class; above 1 leaves the class nothing but free slots).", "class"),
	}
}

// Describe implements prometheus.Collector.
func (c *Controller) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.desc.decisions
	ch <- c.desc.queueLen
	ch <- c.desc.wait
	ch <- c.desc.eta
	ch <- c.desc.q
	ch <- c.desc.rsla
	ch <- c.desc.parallelism
	ch <- c.desc.pending
	ch <- c.desc.reserve
}

// Collect implements prometheus.Collector. Everything is read at scrape time
// from atomics and the State; the request path pays nothing for it. Only the
// classes of the current configuration are exported.
func (c *Controller) Collect(ch chan<- prometheus.Metric) {
	s := c.snap.Load()
	verdicts := admission.Verdicts()
	for _, cl := range s.classes {
		for _, v := range verdicts {
			ch <- prometheus.MustNewConstMetric(c.desc.decisions, prometheus.CounterValue,
				float64(cl.decisions[v].Load()), cl.name, v.String())
		}
		ch <- prometheus.MustNewConstMetric(c.desc.queueLen, prometheus.GaugeValue, float64(cl.queueLen()), cl.name)
		ch <- cl.wait.metric(c.desc.wait, cl.name)
		ch <- prometheus.MustNewConstMetric(c.desc.reserve, prometheus.GaugeValue, cl.reserve(), cl.name)
	}
	var eta float64
	if n := c.st.Healthy(); n > 0 {
		eta = float64(c.st.Inflight()) / float64(n)
	}
	ch <- prometheus.MustNewConstMetric(c.desc.eta, prometheus.GaugeValue, eta)
	ch <- prometheus.MustNewConstMetric(c.desc.q, prometheus.GaugeValue, c.st.Q().Seconds())
	ch <- prometheus.MustNewConstMetric(c.desc.rsla, prometheus.GaugeValue, c.st.RSLA().Seconds())
	ch <- prometheus.MustNewConstMetric(c.desc.parallelism, prometheus.GaugeValue, c.Parallelism())
	ch <- prometheus.MustNewConstMetric(c.desc.pending, prometheus.GaugeValue, float64(c.pending.Load()))
}

var _ prometheus.Collector = (*Controller)(nil)
