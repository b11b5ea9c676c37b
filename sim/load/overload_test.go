package load

import (
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/internal/stall"
	"github.com/sentry-proxy/sentry/sim/farm"
)

// Without a proxy, open-loop load at 3× the farm's capacity makes the queue
// inside the servers grow without bound: p95 goes past 5× its value at 1×,
// while the farm keeps completing at about its capacity.
//
// Capacity 1 × 4 slots / 40 ms = 100 req/s. Arrivals are uniform, so at
// 1× (D/D/4 at ρ≈1) nothing queues and p95 stays near the 40 ms service
// time, while at 3× for 1 s the backlog grows by 200 req/s and late
// arrivals wait ≈ 2 s. (Poisson arrivals at ρ≈1 make the 1× queue
// random-walk to hundreds of ms on a loaded machine, which blurs the
// comparison without saying anything about overload.) The modest rates keep the test's CPU small, so
// it holds on 2 cores shared with -race and other packages' tests.
func TestOverloadIsReal(t *testing.T) {
	f, err := farm.Start(farm.Config{Slots: 4, Routes: []farm.Route{{Path: "/", Prefix: true, IO: farm.Dist{Kind: farm.Fixed, Mean: 40 * time.Millisecond}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	capacity, _ := f.Config().Capacity("/")
	if capacity != 100 {
		t.Fatalf("capacity %v", capacity)
	}
	level := func(k float64, d time.Duration) ClassSummary {
		rep, err := Run(t.Context(), Config{
			Targets: f.URLs(), Seed: 0, // offers 153 and 302 requests: a shade above 1× and 3×
			Classes: []Class{{Name: "c", SLA: 400 * time.Millisecond, Open: &Open{Arrivals: Uniform, Rate: Constant(k*capacity, d)}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		s, _ := rep.Summary().Class("c")
		t.Logf("%.0f×: offered %d completed %d errors %d p50 %v p95 %v p99 %v goodput %.0f/s elapsed %v",
			k, s.Offered, s.Completed, s.Errors, s.P50, s.P95, s.P99, s.GoodputRate, rep.Elapsed)
		if s.Errors != 0 || s.Overflow != 0 || s.Completed != s.Offered {
			t.Fatalf("%.0f×: %+v", k, s)
		}
		return s
	}
	w := stall.Start()
	st0 := f.Stats()[0]
	one := level(1, 1500*time.Millisecond)
	st1 := f.Stats()[0]
	three := level(3, time.Second)
	st2 := f.Stats()[0]
	st := w.Stop()

	var c stall.Checks
	if three.P95 < 5*one.P95 {
		c.Add("p95 at 3× = %v, not past 5 × p95 at 1× (%v)", three.P95, one.P95)
	}
	// Throughput under overload stays near capacity: the 3× run's work
	// over its wall time, measured by the farm.
	thr := float64(st2.Completed-st1.Completed) / (st2.Elapsed - st1.Elapsed).Seconds()
	util := float64(st2.BusyTime-st1.BusyTime) / (float64(st2.Slots) * float64(st2.Elapsed-st1.Elapsed))
	t.Logf("3×: farm throughput %.0f req/s, utilisation %.2f, compensation %v; 1× utilisation %.2f; %v", thr, util, st2.Compensation,
		float64(st1.BusyTime-st0.BusyTime)/(float64(st1.Slots)*float64(st1.Elapsed-st0.Elapsed)), st)
	// Lenient: a starved CPU (other tests, -race) slows the farm itself.
	if thr < 0.7*capacity {
		c.Add("throughput under overload %.0f req/s, want ≈ %.0f", thr, capacity)
	}
	c.Report(t, st.Max >= 200*time.Millisecond, st.String())
}
