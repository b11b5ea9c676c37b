package e2e

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/sim/farm"
)

func contextTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// TestEstimatesSettleAgainstFarm: with known per-path service times, the
// estimator's per-key means settle within 10% after warm-up from the
// backend's Server-Timing reports, and within 15% from proxy-measured
// times alone (they carry the proxy's own delay; see below).
func TestEstimatesSettleAgainstFarm(t *testing.T) {
	routes := map[string]time.Duration{"/fast": 40 * time.Millisecond, "/mid": 80 * time.Millisecond, "/slow": 160 * time.Millisecond}
	for _, withTiming := range []bool{true, false} {
		name := map[bool]string{true: "server-timing", false: "measured"}[withTiming]
		t.Run(name, func(t *testing.T) {
			cfg := farm.Config{Servers: 2, Slots: 16, Seed: 7, NoServerTiming: !withTiming}
			for p, d := range routes {
				cfg.Routes = append(cfg.Routes, farm.Route{Path: p, IO: farm.Dist{Kind: farm.Fixed, Mean: d}})
			}
			f, err := farm.Start(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			s := startInproc(t, policyFor(freePort(t), f.Addrs(), "    admission: {mode: off}\n"))
			// 6 workers against 32 slots: no queueing, so the truth is the
			// route's service time.
			counts := hammer(t, "http://"+s.addr, 6, 3*time.Second, []string{"/fast", "/mid", "/slow"}, nil)
			if counts[200] == 0 || len(counts) != 1 {
				t.Fatalf("statuses %v", counts)
			}
			est := s.m.Estimators().Lookup("shop")
			// Reported times are the farm's own; measured ones include
			// the proxy's and the scheduler's delay, which under -race on
			// a 2-core machine running other packages' tests reaches a few
			// milliseconds (seen: 44.6 ms for a 40 ms route, 11.6%; idle it
			// is 0.4–2.4%). Measured estimates are held to 15%.
			limit := 0.10
			if !withTiming {
				limit = 0.15
			}
			worst := 0.0
			for p, want := range routes {
				st, ok := est.Stats(0, []byte(p))
				if !ok {
					t.Fatalf("no estimate for %s", p)
				}
				errFrac := math.Abs(float64(st.Mean-want)) / float64(want)
				worst = max(worst, errFrac)
				t.Logf("%s %s: estimate %v, true %v, error %.1f%%", name, p, st.Mean.Round(time.Microsecond), want, 100*errFrac)
				if errFrac > limit {
					t.Errorf("%s: estimate %v is more than %.0f%% off %v", p, st.Mean, 100*limit, want)
				}
			}
			t.Logf("%s: worst error %.1f%% over %d requests; Q = %v", name, 100*worst, counts[200], est.Q())
		})
	}
}
