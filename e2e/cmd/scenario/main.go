// Command scenario runs sentry's experiment scenarios: for each peer in
// turn (sentry, off, haproxy, nginx) it starts a fresh simulated farm, the
// peer in front of it and the scenario's load through the peer, then
// writes per-second series, plots and a summary.
//
//	go run ./e2e/cmd/scenario -f e2e/scenarios/fig5.yaml -peers sentry,off,haproxy,nginx -out out/
//
// Outputs: OUT/<scenario>/<peer>/{series.csv,arrival.png,p95.png,util.png,
// summary.json,peer.log,…} and OUT/<scenario>/summary.md. See
// e2e/README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/sentry-proxy/sentry/e2e/scenario"
)

func main() { os.Exit(run()) }

func run() int {
	var files multi
	flag.Var(&files, "f", "scenario `FILE` (repeatable; runs one after another)")
	peers := flag.String("peers", strings.Join(scenario.PeerNames, ","), "comma-separated `PEERS` to run, in order: "+strings.Join(scenario.PeerNames, ", "))
	out := flag.String("out", "scenario-out", "output `DIR`")
	sentryBin := flag.String("sentry", "", "sentry binary `PATH` (default: go build ./cmd/sentry into OUT/.bin/)")
	farmBin := flag.String("farm", "", "farm binary `PATH`, run in its own process (default: go build ./e2e/cmd/farm into OUT/.bin/)")
	level := flag.Float64("scale", 1, "multiply every load level (rates, users) by `K`")
	timeScale := flag.Float64("time-scale", 1, "multiply every schedule duration by `K` (0.2: a 90 s scenario in 18 s)")
	check := flag.Bool("check", false, "parse the scenario files, run sentry check on their policies, print their capacity and exit")
	skipUpgrades := flag.Bool("skip-upgrades", false, "play no upgrade event: the control run of an upgrade scenario")
	cpuProfile := flag.String("cpuprofile", "", "write the runner's own CPU profile (load generator and event player) to `FILE`")
	flag.Parse()
	if len(files) == 0 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: scenario -f FILE [-f FILE ...] [-peers sentry,off,haproxy,nginx] [-out DIR] [-sentry BIN] [-farm BIN] [-scale K] [-time-scale K]")
		return 2
	}
	if !(*level > 0) || !(*timeScale > 0) {
		fmt.Fprintln(os.Stderr, "scenario: -scale and -time-scale must be > 0")
		return 2
	}
	var scs []*scenario.Scenario
	for _, f := range files {
		sc, err := scenario.Load(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		scs = append(scs, sc)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "scenario:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "scenario:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	sl := scenario.Scaling{Level: *level, Time: *timeScale}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *check {
		bin := *sentryBin
		if bin == "" {
			var err error
			if bin, err = scenario.BuildSentry(ctx, *out); err != nil {
				fmt.Fprintln(os.Stderr, "scenario: building sentry:", err)
				return 1
			}
		}
		code := 0
		for _, sc := range scs {
			if err := scenario.CheckSentry(ctx, bin, sc); err != nil {
				fmt.Fprintln(os.Stderr, err)
				code = 1
				continue
			}
			// The haproxy peer matches sentry's classes with ACLs.
			if _, err := scenario.HAProxyClasses(sc); err != nil {
				fmt.Fprintln(os.Stderr, err)
				code = 1
				continue
			}
			c, _ := sc.ComputeCapacity()
			fmt.Printf("%s: ok; capacity %.0f req/s (%s), duration %v\n", sc.Source, c.Rate, c.Source, sc.ScaledDuration(sl))
		}
		return code
	}
	var names []string
	for _, p := range strings.Split(*peers, ",") {
		if p = strings.TrimSpace(p); p != "" {
			if _, err := scenario.NewPeer(p, ""); err != nil {
				fmt.Fprintln(os.Stderr, "scenario:", err)
				return 2
			}
			names = append(names, p)
		}
	}
	bin := *sentryBin
	if bin == "" && needsSentry(names) {
		var err error
		if bin, err = scenario.BuildSentry(ctx, *out); err != nil {
			fmt.Fprintln(os.Stderr, "scenario: building sentry:", err)
			return 1
		}
	}
	fbin := *farmBin
	if fbin == "" {
		var err error
		if fbin, err = scenario.BuildFarm(ctx, *out); err != nil {
			fmt.Fprintln(os.Stderr, "scenario: building the farm:", err)
			return 1
		}
	}
	code := 0
	for _, sc := range scs {
		res, err := scenario.Run(ctx, sc, scenario.Options{
			Peers: names, OutDir: *out, SentryBin: bin, FarmBin: fbin, Scaling: sl, Progress: os.Stdout, SkipUpgrades: *skipUpgrades,
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "scenario %s: %v\n", sc.Name, err)
			code = 1
		}
		for _, r := range res {
			if r.Err != nil {
				code = 1
			}
		}
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "scenario: interrupted")
			return 130
		}
	}
	return code
}

func needsSentry(peers []string) bool {
	for _, p := range peers {
		if scenario.IsSentryPeer(p) {
			return true
		}
	}
	return false
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }
