package thresholdac

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestCollector(t *testing.T) {
	in := &fakeInputs{}
	in.set(4, []float64{75, 50}, []time.Duration{time.Second, time.Second})
	c := newController(t, Config{Classes: 2, Inputs: in, PerServer: 25})
	c.Recompute(time.Unix(1, 0))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(c, prometheus.Labels{"app": "shop"}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"sentry_threshold_class":                   1,
		"sentry_threshold_admit_probability":       0.5,
		"sentry_threshold_capacity_server_seconds": 100,
		"sentry_threshold_offered_server_seconds":  125,
	}
	if len(mfs) != len(want) {
		t.Fatalf("gathered %d families, want %d", len(mfs), len(want))
	}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		if got, ok := want[mf.GetName()]; !ok || m.GetGauge().GetValue() != got {
			t.Errorf("%s = %v, want %v", mf.GetName(), m.GetGauge().GetValue(), got)
		}
		if l := m.GetLabel(); len(l) != 1 || l[0].GetName() != "app" || l[0].GetValue() != "shop" {
			t.Errorf("%s labels %v", mf.GetName(), l)
		}
	}
}
