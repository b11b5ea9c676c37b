// Command autoscale runs the closed-loop provisioning experiment (issue
// 15): sentry follows a DNS name, a stand-in autoscaler reads
// sentry_provision_servers_needed from its /metrics every 2 s and adds or
// removes farm servers in that name after a 10 s provisioning delay, and
// the load steps from 1× to 3× and back. See e2e/README.md, "Closed-loop
// autoscaling".
//
//	go run ./e2e/cmd/autoscale -out autoscale-out        # about 6 min
//	go run ./e2e/cmd/autoscale -short -out autoscale-out # about 2 min
//
// Outputs: OUT/{autoscale.png,series.csv,scale.csv,summary.txt,policy.yaml,sentry.log}.
// With -json the result (scenario.AutoscaleResult, durations in ns) is
// printed as one JSON object and the scaling actions go to stderr, for a
// program to read (the e2e tests TestAutoscaleClosedLoop* run it so).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sentry-proxy/sentry/e2e/scenario"
)

func main() { os.Exit(run()) }

func run() int {
	out := flag.String("out", "autoscale-out", "output `DIR`")
	sentryBin := flag.String("sentry", "", "sentry binary `PATH` (default: go build ./cmd/sentry into OUT/.bin/)")
	short := flag.Bool("short", false, "the shorter run the e2e test makes (ShortAutoscale)")
	seed := flag.Uint64("seed", 15, "load and farm `SEED`")
	asJSON := flag.Bool("json", false, "print the result as a JSON object (scenario.AutoscaleResult), the scaling actions on stderr")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: autoscale [-out DIR] [-sentry BIN] [-short] [-seed N] [-json]")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	bin := *sentryBin
	if bin == "" {
		var err error
		if bin, err = scenario.BuildSentry(ctx, *out); err != nil {
			fmt.Fprintln(os.Stderr, "autoscale: building sentry:", err)
			return 1
		}
	}
	c := scenario.AutoscaleConfig{}
	if *short {
		c = scenario.ShortAutoscale()
	}
	c.Sentry, c.Dir, c.Seed = bin, *out, *seed
	c.Progress = func(s string) { fmt.Println(s) }
	if *asJSON {
		c.Progress = func(s string) { fmt.Fprintln(os.Stderr, s) }
	}
	start := time.Now()
	res, err := scenario.RunAutoscale(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "autoscale:", err)
		return 1
	}
	if *asJSON {
		if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
			fmt.Fprintln(os.Stderr, "autoscale:", err)
			return 1
		}
		return 0
	}
	fmt.Print(res.Summary())
	fmt.Printf("took %v; plot %s/%s\n", time.Since(start).Round(time.Second), *out, scenario.AutoscalePNG)
	return 0
}
