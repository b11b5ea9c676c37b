package collector

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sentry-proxy/sentry/estimator"
)

func TestCollector(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	ests := estimator.NewRegistry()
	e, err := ests.Get("shop", estimator.Config{MaxKeys: 64}, []string{"gold", "bronze"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		e.Arrive(0, now)
		e.Observe(0, []byte{byte(i)}, 20*time.Millisecond, 5*time.Millisecond, now)
		now = now.Add(10 * time.Millisecond) // 100/s for 2 s
	}
	e.Refresh(now)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(New(ests, func() time.Time { return now }, func(app string) (float64, bool) { return 1.5, app == "shop" }))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, lp := range m.GetLabel() {
				key += "," + lp.GetName() + "=" + lp.GetValue()
			}
			got[key] = value(m)
		}
	}
	want := map[string]float64{
		"sentry_estimator_arrival_rate,app=shop,class=gold":         100,
		"sentry_estimator_arrival_rate,app=shop,class=bronze":       0,
		"sentry_estimator_service_time_seconds,app=shop,class=gold": 0.020,
		"sentry_estimator_queue_delay_seconds,app=shop":             0.005,
		"sentry_estimator_eta,app=shop":                             1.5,
		"sentry_estimator_alpha,app=shop":                           1,
		"sentry_estimator_keys,app=shop":                            float64(e.Len()),
		"sentry_estimator_keys_max,app=shop":                        64,
		"sentry_estimator_evictions_total,app=shop":                 float64(200 - e.Len()),
	}
	for k, v := range want {
		g, ok := got[k]
		if !ok || math.Abs(g-v) > 1e-6*math.Max(1, math.Abs(v)) {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	if len(got) != 3*2+6 {
		t.Errorf("%d series: %v", len(got), got)
	}
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return math.NaN()
}
