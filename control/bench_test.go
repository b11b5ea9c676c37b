package control

import (
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/admission"
)

// BenchmarkAppAdmit is the whole admission decision as the proxy calls it,
// per mode: batch (the immediate test with the reserve) and threshold (the
// Room guard, then the (i, p) draw), on a busy farm that rejects most
// bronze. 0 allocs/op.
func BenchmarkAppAdmit(b *testing.B) {
	for _, mode := range []string{"batch", "threshold"} {
		b.Run(mode, func(b *testing.B) {
			m, _ := newManager(b, nil)
			pool := &fakePool{}
			pool.healthy.Store(3)
			pool.inflight.Store(30)
			a, err := m.Build(testApp(mode), pool)
			if err != nil {
				b.Fatal(err)
			}
			now := time.Now()
			for i := 0; i < 200; i++ {
				a.Estimate(0, []byte("/checkout"), now)
				a.Estimate(1, []byte("/browse"), now)
			}
			r := admission.Request{Class: 1, S: 10 * time.Millisecond}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				a.Admit(&r)
			}
		})
	}
}

// BenchmarkAppParkCancel parks a request of a class with a period and
// withdraws it, the path of a parked request whose client goes: the
// ticket is pooled, 0 allocs/op.
func BenchmarkAppParkCancel(b *testing.B) {
	m, _ := newManager(b, nil)
	pool := &fakePool{}
	pool.healthy.Store(3)
	ac := testApp("batch")
	ac.Classes[1].Period = time.Hour
	// Every arrival parks: an hour's period leaves no budget, and on this
	// idle farm the work-conserving rule would admit it at once.
	ac.Admission.Batch.StrictPeriods = true
	a, err := m.Build(ac, pool)
	if err != nil {
		b.Fatal(err)
	}
	wk := make(testWaker, 1)
	r := admission.Request{Class: 1, S: 10 * time.Millisecond, Key: []byte("/browse")}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, p, decided := a.Park(&r, wk)
		if decided {
			b.Fatal("decided at once")
		}
		p.Cancel()
	}
}
