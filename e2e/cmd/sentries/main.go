// Command sentries runs the several-sentries experiment (issue 15, the
// shape of Cataclysm's Fig. 9): 1, 2 and 3 sentries in front of one
// 6-server farm, each owning a partition of it, the load spread evenly
// across them. See e2e/README.md, "Several sentries".
//
//	go run ./e2e/cmd/sentries -out sentries-out                     # goodput and p95 at 3× capacity
//	go run ./e2e/cmd/sentries -out sentries-out -wrk -pin -counts 1,2 # decisions/s, each sentry pinned to a core
//	go run ./e2e/cmd/sentries -out sentries-out -wrk -cpu-quota 0.25  # decisions/s, each sentry held to a quarter core
//
// It prints one line per run; with -json, one JSON object per run
// (scenario.SentriesRow) instead, for a program to read (the e2e test
// TestSeveralSentriesShareAFarm runs it so).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/sentry-proxy/sentry/e2e/scenario"
)

func main() { os.Exit(run()) }

func run() int {
	out := flag.String("out", "sentries-out", "output `DIR`")
	sentryBin := flag.String("sentry", "", "sentry binary `PATH` (default: go build ./cmd/sentry into OUT/.bin/)")
	counts := flag.String("counts", "1,2,3", "comma-separated numbers of sentries, one run each")
	level := flag.Float64("level", 3, "offered load in units of the farm's capacity (goodput runs)")
	dur := flag.Duration("duration", 0, "length of each run (default 30s; the first 5s are not counted)")
	wrk := flag.Bool("wrk", false, "drive every sentry with wrk as fast as it goes and report decisions/s")
	conns := flag.Int("wrk-conns", 0, "wrk connections per sentry (default 1000)")
	pin := flag.Bool("pin", false, "pin sentry i to CPU i mod NumCPU with taskset")
	quota := flag.Float64("cpu-quota", 0, "hold each sentry to this many `cores` with a CPU cgroup (needs root), so each is CPU-bound")
	shared := flag.Bool("shared", false, "no partition: every sentry admits for the whole farm (for comparison)")
	warmup := flag.Duration("warmup", 0, "the start of each run not counted (default 5s)")
	asJSON := flag.Bool("json", false, "print each run as a JSON object (scenario.SentriesRow; durations in ns, an unknown CPU figure as -1)")
	flag.Parse()
	c := scenario.SentriesConfig{Level: *level, Duration: *dur, Warmup: *warmup, Wrk: *wrk, WrkConns: *conns, Pin: *pin, CPUQuota: *quota, Shared: *shared, Seed: 9}
	for _, s := range strings.Split(*counts, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintln(os.Stderr, "sentries: -counts:", err)
			return 2
		}
		c.Counts = append(c.Counts, k)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	bin := *sentryBin
	if bin == "" {
		var err error
		if bin, err = scenario.BuildSentry(ctx, *out); err != nil {
			fmt.Fprintln(os.Stderr, "sentries: building sentry:", err)
			return 1
		}
	}
	c.Sentry, c.Dir = bin, *out
	c.Progress = func(s string) { fmt.Println(s) }
	if *asJSON {
		c.Progress = nil
	}
	rows, err := scenario.RunSentries(ctx, c)
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		for _, r := range rows {
			if err := enc.Encode(jsonRow(r)); err != nil {
				fmt.Fprintln(os.Stderr, "sentries:", err)
				return 1
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sentries:", err)
		return 1
	}
	return 0
}

// jsonRow is r with its CPU figures that could not be read (NaN, which
// JSON cannot carry) as -1.
func jsonRow(r scenario.SentriesRow) scenario.SentriesRow {
	r.CPU = append([]float64(nil), r.CPU...)
	for i, v := range r.CPU {
		if math.IsNaN(v) {
			r.CPU[i] = -1
		}
	}
	if math.IsNaN(r.PerCore) || math.IsInf(r.PerCore, 0) {
		r.PerCore = -1
	}
	return r
}
