package control

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sentry-proxy/sentry/admission"
)

// TestLoadIsBatchModelOverRSLA: Load is (Q + max(1, (η+1)/P)·S̄)/R_sla,
// recomputed at most every loadEvery: a change in flight shows only once
// 5 ms have passed.
func TestLoadIsBatchModelOverRSLA(t *testing.T) {
	ck := newClock() // atomic: the app's goroutines read it too
	m, reg := newManager(t, ck.now)
	pool := &fakePool{}
	pool.healthy.Store(2)
	a, err := m.Build(testApp("batch"), pool)
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Load(ck.now()); got != 0 {
		t.Fatalf("load with nothing learned = %v, want 0", got)
	}
	key := []byte("/x")
	for i := 0; i < 200; i++ {
		now := ck.now()
		a.Estimate(1, key, now)
		a.Done(&admission.Ticket{Class: 1, Key: key, Arrival: now.Add(-100 * time.Millisecond)},
			admission.Result{ServerTiming: []byte("cpu;dur=100, queue;dur=0"), Measured: 100 * time.Millisecond, InService: 1, End: now})
		ck.add(5 * time.Millisecond)
	}
	now := ck.now()
	s := a.est.ClassMean(1).Seconds()
	if math.Abs(s-0.1) > 0.005 {
		t.Fatalf("class mean S %v, want about 100ms", s)
	}
	rsla := a.RSLA().Seconds()
	if rsla != 1 {
		t.Fatalf("R_sla %v, want 1s", rsla)
	}
	want := func(inflight float64) float64 {
		q := a.Q().Seconds()
		return (q + max(1, (inflight/2+1)/max(a.batch.Parallelism(), 1))*s) / rsla
	}
	ck.add(loadEvery)
	now = ck.now()
	if got, w := a.Load(now), want(0); math.Abs(got-w) > 1e-9 || got < 0.09 || got > 0.11 {
		t.Fatalf("idle load = %v, want %v (S/R_sla)", got, w)
	}
	pool.inflight.Store(200)
	if got := a.Load(now.Add(loadEvery - time.Millisecond)); got > 0.11 {
		t.Errorf("load recomputed within %v: %v", loadEvery, got)
	}
	ck.add(loadEvery)
	now = ck.now()
	got, w := a.Load(now), want(200)
	if math.Abs(got-w) > 1e-9 || got <= 1 {
		t.Errorf("load with 100 in flight per backend = %v, want %v (> 1)", got, w)
	}
	// Exported at scrape time (the value is the one requests read: the
	// clock has not moved, so it is not recomputed).
	if v := gaugeValue(t, reg, "sentry_farm_load"); math.Abs(v-got) > 1e-9 {
		t.Errorf("sentry_farm_load = %v, want %v", v, got)
	}
	pool.healthy.Store(0)
	if got := a.Load(now.Add(loadEvery)); got != 0 {
		t.Errorf("load without a healthy backend = %v, want 0", got)
	}
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no single %s series", name)
	return 0
}

// BenchmarkLoad: the per-request read allocates nothing.
func BenchmarkLoad(b *testing.B) {
	m, _ := newManager(b, nil)
	pool := &fakePool{}
	pool.healthy.Store(2)
	a, err := m.Build(testApp("batch"), pool)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_ = a.Load(now.Add(time.Duration(i) * time.Microsecond))
	}
}
