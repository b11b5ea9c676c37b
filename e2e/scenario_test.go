package e2e

import (
	"context"
	"encoding/csv"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/e2e/scenario"
)

// TestScenarioFiles parses every scenario in e2e/scenarios and checks each
// one's generated sentry policy (and its admission-off variant) with the
// binary under test.
func TestScenarioFiles(t *testing.T) {
	files, err := filepath.Glob("scenarios/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario files: %v", err)
	}
	for _, f := range files {
		sc, err := scenario.Load(f)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if err := scenario.CheckSentry(context.Background(), sentryBin, sc); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestScenarioFig5Off runs a short fig5 (0.1× time, a farm of half the
// size) through sentry with admission off and checks the outputs, and that
// the overload shows: without admission control the admitted p95 in the
// overloaded seconds is many times that of the first seconds.
func TestScenarioFig5Off(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load for about 12 s")
	}
	sc, err := scenario.Load("scenarios/fig5.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// Half the farm (capacity 200 req/s, peak offered 600 req/s), so the
	// test machine is not the bottleneck, and a short request timeout so
	// the backlog's drain stays bounded.
	sc.Farm.Servers = 2
	sc.Load.Timeout = 3 * time.Second
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	var progress strings.Builder
	res, err := scenario.Run(ctx, sc, scenario.Options{
		Peers: []string{"off"}, OutDir: out, SentryBin: sentryBin, FarmBin: farmBin,
		Scaling: scenario.Scaling{Time: 0.1}, Progress: &progress,
	})
	t.Logf("runner:\n%s", progress.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Err != nil || res[0].Summary == nil {
		t.Fatalf("result: %+v", res)
	}
	dir := filepath.Join(out, "fig5", "off")
	for _, f := range []string{"series.csv", "arrival.png", "p95.png", "util.png", "summary.json", "policy.yaml", "../summary.md"} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Size() == 0 {
			t.Errorf("%s: missing or empty (%v)", f, err)
		}
	}
	md, _ := os.ReadFile(filepath.Join(out, "fig5", "summary.md"))
	if !strings.Contains(string(md), "## off") || !strings.Contains(string(md), "| gold | 1s |") {
		t.Errorf("summary.md:\n%s", md)
	}

	f, err := os.Open(filepath.Join(dir, "series.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := func(name string) int {
		i := slices.Index(rows[0], name)
		if i < 0 {
			t.Fatalf("no column %q in %v", name, rows[0])
		}
		return i
	}
	ct, cc, cp95, coff, crej, cutil := col("t_s"), col("class"), col("p95_ms"), col("offered"), col("rejected"), col("util")
	var p95 []float64 // of "all", by second
	offered, rejected, utilSeen := 0, 0, false
	for _, r := range rows[1:] {
		if r[cc] != "all" {
			continue
		}
		sec, _ := strconv.Atoi(r[ct])
		for len(p95) <= sec {
			p95 = append(p95, 0)
		}
		p95[sec], _ = strconv.ParseFloat(r[cp95], 64)
		n, _ := strconv.Atoi(r[coff])
		offered += n
		n, _ = strconv.Atoi(r[crej])
		rejected += n
		if r[cutil] != "" {
			utilSeen = true
		}
	}
	if offered < 1000 || rejected != 0 || !utilSeen {
		t.Errorf("offered %d (want ≥ 1000), rejected %d (admission is off: want 0), util sampled %v", offered, rejected, utilSeen)
	}
	if len(p95) < 9 {
		t.Fatalf("only %d seconds in the series", len(p95))
	}
	// Seconds 0–1 run at 0.6× capacity; from second 6 on the offered load
	// is 3× capacity and the backlog of the seconds before it is queued.
	base := max(p95[0], p95[1])
	worst := slices.Max(p95[6:9])
	t.Logf("p95 by second (ms): %v", p95)
	if base <= 0 || worst <= 5*base {
		t.Errorf("overload does not show: p95 %.0f ms in seconds 6–8, %.0f ms in seconds 0–1 (want > 5×)", worst, base)
	}
}
