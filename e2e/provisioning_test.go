package e2e

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/e2e/scenario"
)

// checkAutoscale holds a closed-loop run to the behaviour every run must
// show, whatever the machine's speed: the step overloaded the farm and the
// autoscaler answered it (servers grew, the drop ratio came back under 5%
// before the load fell); sentry followed the DNS name both ways (no
// responses from a server after it left the name, beyond the grace); the
// count came back to the floor after the fall, one step at a time, never
// going back up.
// needLoopbackRange skips where 127.0.0.11 cannot be bound (loopback is
// 127.0.0.1 only, as on macOS): the farm's servers need one address each.
func needLoopbackRange(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.11:0")
	if err != nil {
		t.Skipf("the closed loop puts servers on 127.0.0.10, .11, …: %v", err)
	}
	ln.Close()
}

func checkAutoscale(t *testing.T, res *scenario.AutoscaleResult) {
	t.Helper()
	c := res.Config
	t.Logf("\n%s", res.Summary())
	if res.PeakDrop < 0.2 {
		t.Errorf("peak drop ratio %.1f%%: the step did not overload the %d servers, so it tests nothing", 100*res.PeakDrop, c.Base)
	}
	if res.PeakServers <= c.Base {
		t.Errorf("servers never grew past %d during the step", c.Base)
	}
	if res.DropSettle < 0 {
		t.Errorf("the drop ratio never stayed below 5%% during the %v step", c.High)
	}
	if res.Stray != 0 {
		t.Errorf("%d responses came from servers after they left DNS: sentry did not follow the name", res.Stray)
	}
	if res.BackToBase < 0 {
		t.Errorf("servers did not come back to %d after the load fell", c.Base)
	}
	if res.Flaps != 0 {
		t.Errorf("%d scale-ups after a scale-down: the count flapped", res.Flaps)
	}
	if len(res.ScaleDowns) > 1 && res.MinDownGap < c.DownPeriod-200*time.Millisecond {
		t.Errorf("two scale-downs %v apart, want at least %v", res.MinDownGap, c.DownPeriod)
	}
	if res.Errors > res.Offered/100 {
		t.Errorf("%d errors of %d requests", res.Errors, res.Offered)
	}
}

// TestAutoscaleClosedLoop is the short closed loop (scenario.ShortAutoscale,
// about 115 s): one server at 1×, a 3× step, a stand-in autoscaler on
// sentry's /metrics that adds servers to the DNS name sentry follows after
// 5 s and removes one per 5 s. The p95 bound is generous (a tenth of the
// judged seconds may miss, for a machine shared with other work); the
// long run (TestAutoscaleClosedLoopLong) holds the targets themselves.
func TestAutoscaleClosedLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a closed loop for about 115 s")
	}
	needLoopbackRange(t)
	c := scenario.ShortAutoscale()
	c.Sentry, c.Dir, c.Seed = sentryBin, t.TempDir(), 15
	if d := os.Getenv("SENTRY_AUTOSCALE_OUT"); d != "" {
		c.Dir = d
	}
	c.Progress = func(s string) { t.Log(s) }
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := scenario.RunAutoscale(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	checkAutoscale(t, res)
	if res.P95Missed > max(3, res.P95Judged/10) {
		t.Errorf("admitted p95 over %v in %d of %d seconds", c.SLA, res.P95Missed, res.P95Judged)
	}
	for _, f := range []string{scenario.AutoscalePNG, "series.csv", "scale.csv", "summary.txt"} {
		if st, err := os.Stat(c.Dir + "/" + f); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestAutoscaleClosedLoopLong is issue 15's closed-loop target at full
// length (about 6.5 min): 2 servers at 1× (130 req/s), up to 8, 120 s at
// 3×, a 10 s provisioning delay, a 2 s poll, one scale-down per 30 s. It
// runs only with SENTRY_E2E_LONG=1 (SENTRY_AUTOSCALE_OUT keeps its
// outputs) and holds the targets: the drop ratio below 5% within 30 s of
// the step, the admitted p95 within target in every judged second, back to
// 2 servers with at most one scale-down per 30 s.
func TestAutoscaleClosedLoopLong(t *testing.T) {
	if os.Getenv("SENTRY_E2E_LONG") != "1" {
		t.Skip("set SENTRY_E2E_LONG=1 to run the 6.5 min closed loop")
	}
	needLoopbackRange(t)
	c := scenario.AutoscaleConfig{Sentry: sentryBin, Dir: t.TempDir(), Seed: 15}
	if d := os.Getenv("SENTRY_AUTOSCALE_OUT"); d != "" {
		c.Dir = d
	}
	c.Progress = func(s string) { t.Log(s) }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := scenario.RunAutoscale(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	checkAutoscale(t, res)
	if res.DropSettle > 30*time.Second {
		t.Errorf("the drop ratio fell below 5%% for good %v after the step, want within 30s", res.DropSettle)
	}
	if res.P95Missed > 0 {
		t.Errorf("admitted p95 over %v in %d of %d seconds (worst %v)", c.SLA, res.P95Missed, res.P95Judged, res.WorstP95)
	}
}

// TestSeveralSentriesShareAFarm: two sentries, each owning its partition
// of one 6-server farm, the load spread over both at 3× capacity for 16 s.
// Together they keep the farm busy with goodput near capacity and the
// admitted p95 near the target, and each decides for its own share. The
// bounds are generous (goodput ≥ 0.75 × capacity, p95 ≤ 1.5 × target):
// under -race the load generator's own overhead counts in every latency,
// and the machine is shared; a run measured 0.83–0.96 × capacity. The full
// 1-2-3 comparison is e2e/cmd/sentries (e2e/README.md).
func TestSeveralSentriesShareAFarm(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two sentries under load for about 20 s")
	}
	c := scenario.SentriesConfig{Sentry: sentryBin, Dir: t.TempDir(), Counts: []int{2},
		Duration: 16 * time.Second, Warmup: 5 * time.Second, Seed: 9}
	if err := c.Normalize(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rows, err := scenario.RunSentries(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	r := rows[0]
	t.Log(r.String(c))
	if r.Shares[0]+r.Shares[1] != 6 {
		t.Errorf("shares %v do not cover the 6 servers once", r.Shares)
	}
	if r.GoodputRatio < 0.75 {
		t.Errorf("goodput %.2f × capacity, want ≥ 0.75", r.GoodputRatio)
	}
	if r.Rejected < 0.5 {
		t.Errorf("only %.0f%% rejected at 3× capacity: the sentries are not admitting for their shares", 100*r.Rejected)
	}
	if r.P95 > c.SLA*3/2 {
		t.Errorf("admitted p95 %v, target %v", r.P95, c.SLA)
	}
	if r.Errors > 0 {
		t.Errorf("%d errors", r.Errors)
	}
	for i, d := range r.PerSentry {
		if d <= 0 {
			t.Errorf("sentry %d made no decisions", i)
		}
	}
}
