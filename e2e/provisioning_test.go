package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/e2e/scenario"
	"github.com/sentry-proxy/sentry/internal/stall"
)

// needLoopbackRange skips where 127.0.0.11 cannot be bound (loopback is
// 127.0.0.1 only, as on macOS): the farm's servers need one address each.
func needLoopbackRange(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.11:0")
	if err != nil {
		t.Skipf("the closed loop puts servers on 127.0.0.10, .11, …: %v", err)
	}
	ln.Close()
}

// runAutoscale runs the closed loop as e2e/cmd/autoscale (-short for the
// short run), built without -race, into dir, logging its scaling actions.
// Decision: not in this test process, for the reason
// TestSeveralSentriesShareAFarm gives: the farm, the load generator, the
// DNS server and the autoscaler starved there on a loaded machine, the
// farm's service times grew with its timers' lateness, and sentry's model
// then asked for servers the load did not need (seen: the count stuck at
// 2 of 1 after the fall, and a flap).
func runAutoscale(t *testing.T, short bool, dir string, seed uint64, within time.Duration) *scenario.AutoscaleResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	args := []string{"-json", "-sentry", sentryBin, "-out", dir, "-seed", strconv.FormatUint(seed, 10)}
	if short {
		args = append(args, "-short")
	}
	cmd := exec.CommandContext(ctx, autoscaleBin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		t.Log(line)
	}
	if err != nil {
		t.Fatalf("%v: %v", cmd, err)
	}
	var res scenario.AutoscaleResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	return &res
}

// checkAutoscale holds a closed-loop run to the behaviour every run must
// show, whatever the machine's speed: the step overloaded the farm and the
// autoscaler answered it (servers grew, the drop ratio came back under 5%
// before the load fell); sentry followed the DNS name both ways (no
// responses from a server after it left the name, beyond the grace); the
// count came back to the floor after the fall, one step at a time, never
// going back up. What rests on the farm's timing (the drop ratio settling,
// the count back at the floor, no flap) and checks passed in as timing
// are reported as a skip when the harness measured itself starved
// (package internal/stall); the rest fails whatever the machine.
func checkAutoscale(t *testing.T, res *scenario.AutoscaleResult, timing stall.Checks) {
	t.Helper()
	c := res.Config
	t.Logf("\n%s", res.Summary())
	if res.PeakDrop < 0.2 {
		t.Errorf("peak drop ratio %.1f%%: the step did not overload the %d servers, so it tests nothing", 100*res.PeakDrop, c.Base)
	}
	if res.PeakServers <= c.Base {
		t.Errorf("servers never grew past %d during the step", c.Base)
	}
	if res.Stray != 0 {
		t.Errorf("%d responses came from servers after they left DNS: sentry did not follow the name", res.Stray)
	}
	if len(res.ScaleDowns) > 1 && res.MinDownGap < c.DownPeriod-200*time.Millisecond {
		t.Errorf("two scale-downs %v apart, want at least %v", res.MinDownGap, c.DownPeriod)
	}
	if res.Errors > res.Offered/100 {
		t.Errorf("%d errors of %d requests", res.Errors, res.Offered)
	}
	if res.DropSettle < 0 {
		timing.Add("the drop ratio never stayed below 5%% during the %v step", c.High)
	}
	if res.BackToBase < 0 {
		timing.Add("servers did not come back to %d after the load fell", c.Base)
	}
	if res.Flaps != 0 {
		timing.Add("%d scale-ups after a scale-down: the count flapped", res.Flaps)
	}
	// Starved: a tenth of the run, or one stall of the SLA, without
	// running.
	timing.Report(t, res.Stall.Share() >= 0.1 || res.Stall.Max >= c.SLA, res.Stall.String())
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
	dir := t.TempDir()
	if d := os.Getenv("SENTRY_AUTOSCALE_OUT"); d != "" {
		dir = d
	}
	res := runAutoscale(t, true, dir, 15, 4*time.Minute)
	var timing stall.Checks
	if res.P95Missed > max(3, res.P95Judged/10) {
		timing.Add("admitted p95 over %v in %d of %d seconds", res.Config.SLA, res.P95Missed, res.P95Judged)
	}
	checkAutoscale(t, res, timing)
	for _, f := range []string{scenario.AutoscalePNG, "series.csv", "scale.csv", "summary.txt"} {
		if st, err := os.Stat(dir + "/" + f); err != nil || st.Size() == 0 {
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
	dir := t.TempDir()
	if d := os.Getenv("SENTRY_AUTOSCALE_OUT"); d != "" {
		dir = d
	}
	res := runAutoscale(t, false, dir, 15, 10*time.Minute)
	c := res.Config
	var timing stall.Checks
	if res.DropSettle > 30*time.Second {
		timing.Add("the drop ratio fell below 5%% for good %v after the step, want within 30s", res.DropSettle)
	}
	if res.P95Missed > 0 {
		timing.Add("admitted p95 over %v in %d of %d seconds (worst %v)", c.SLA, res.P95Missed, res.P95Judged, res.WorstP95)
	}
	checkAutoscale(t, res, timing)
}

// TestSeveralSentriesShareAFarm: two sentries, each owning its partition
// of one 6-server farm, the load spread over both at 3× capacity for 16 s.
// Together they keep the farm busy with goodput near capacity and the
// admitted p95 near the target, and each decides for its own share. The
// bounds are generous (goodput ≥ 0.75 × capacity, p95 ≤ 1.5 × target)
// for a shared machine; a run alone measures 0.95 × capacity and a p95 at
// the target (e2e/README.md, "Several sentries").
//
// Decision: the farm and the load generator run in e2e/cmd/sentries,
// built without -race, not in this test process. Under -race they cost
// several times the CPU, and on a loaded machine the process starved:
// the generator sent seconds late and read even rejections (which sentry
// answers at once) seconds late, so every latency it measured was its
// own, and goodput read 0 while the sentries did their part. The
// capacity goodput is held to is the farm's nominal one, or less when the
// farm showed less (its timers late on a loaded machine: each slot held
// longer than drawn), since no admission can get more out of it. Goodput
// and p95 are timings of five processes sharing the machine: they are
// reported as a skip when the harness measured itself starved (package
// internal/stall); the shares, the rejections, the errors and the
// decisions are held whatever the machine.
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
	cmd := exec.CommandContext(ctx, sentriesBin, "-json", "-sentry", c.Sentry, "-out", c.Dir,
		"-counts", "2", "-duration", c.Duration.String(), "-warmup", c.Warmup.String())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, stderr.Bytes())
	}
	var r scenario.SentriesRow
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	t.Log(r.String(c))
	if r.Shares[0]+r.Shares[1] != 6 {
		t.Errorf("shares %v do not cover the 6 servers once", r.Shares)
	}
	if r.Rejected < 0.5 {
		t.Errorf("only %.0f%% rejected at 3× capacity: the sentries are not admitting for their shares", 100*r.Rejected)
	}
	if r.Errors > 0 {
		t.Errorf("%d errors", r.Errors)
	}
	for i, d := range r.PerSentry {
		if d <= 0 {
			t.Errorf("sentry %d made no decisions", i)
		}
	}
	var timing stall.Checks
	capacity := c.Capacity()
	if r.FarmCapacity > 0 && r.FarmCapacity < capacity {
		capacity = r.FarmCapacity
	}
	if g := r.Goodput / capacity; g < 0.75 {
		timing.Add("goodput %.0f req/s = %.2f × the capacity the farm showed (%.0f req/s; nominal %.0f), want ≥ 0.75",
			r.Goodput, g, capacity, c.Capacity())
	}
	if r.P95 > c.SLA*3/2 {
		timing.Add("admitted p95 %v, target %v", r.P95, c.SLA)
	}
	// Starved: a tenth of the window, or one stall of half the target,
	// without running.
	timing.Report(t, r.Stall.Share() >= 0.1 || r.Stall.Max >= c.SLA/2, r.Stall.String())
}
