// Command farm runs the simulated web farm of package sim/farm on its own,
// for experiments where the farm should not share a process with the
// proxy or the load generator.
//
//	farm -config farm.yaml
//	farm -servers 4 -slots 8 -service exp:20ms
//
// It prints one "host:port" line per server on stdout, then serves until
// SIGINT or SIGTERM. Logs go to stderr.
//
//	farm -control
//
// is the scenario runner's farm (package e2e/scenario, "The farm's
// process"): it reads the configuration and then requests (stats, events)
// as JSON lines on stdin, answers each on stdout, and exits when stdin
// closes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/sentry-proxy/sentry/e2e/scenario"
	"github.com/sentry-proxy/sentry/sim/farm"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("farm", flag.ContinueOnError)
	var (
		config   = fs.String("config", "", "YAML farm config (farm.Config); excludes the flags below except -log-level")
		listen   = fs.String("listen", "127.0.0.1:0", "host:port of the first server; with a fixed port p, server i listens on p+i")
		servers  = fs.Int("servers", 1, "number of servers")
		slots    = fs.Int("slots", 8, "worker slots per server (requests in service at once)")
		service  = fs.String("service", "20ms", "I/O (sleep) time per request: DURATION, exp:MEAN[:MAX] or pareto:MEAN:SHAPE[:MAX]")
		cpu      = fs.String("cpu", "0", "CPU (spin) time per request, same syntax; keep 0 on small machines")
		bytes    = fs.Int("bytes", 0, "response body bytes")
		seed     = fs.Uint64("seed", 0, "RNG seed")
		logLevel = fs.String("log-level", "info", "trace, debug, info, warn or error")
		control  = fs.Bool("control", false, "the scenario runner's farm: configuration and requests as JSON lines on stdin (excludes every flag but -log-level)")
	)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := hclog.New(&hclog.LoggerOptions{Level: hclog.LevelFromString(*logLevel), Output: os.Stderr})

	if *control {
		ok := true
		fs.Visit(func(f *flag.Flag) {
			if f.Name != "control" && f.Name != "log-level" {
				log.Error("-control excludes -" + f.Name)
				ok = false
			}
		})
		if !ok {
			return 2
		}
		start := func(cfg farm.Config) (*farm.Farm, error) { return farm.Start(cfg, farm.WithLogger(log)) }
		if err := scenario.ServeFarmControl(os.Stdin, os.Stdout, start); err != nil {
			log.Error("control", "error", err)
			return 1
		}
		return 0
	}

	var cfg farm.Config
	if *config != "" {
		explicit := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
		for _, n := range []string{"listen", "servers", "slots", "service", "cpu", "bytes", "seed"} {
			if explicit[n] {
				log.Error("-config excludes -" + n)
				return 2
			}
		}
		b, err := os.ReadFile(*config)
		if err != nil {
			log.Error("read config", "error", err)
			return 1
		}
		if cfg, err = farm.ParseConfig(b); err != nil {
			log.Error("config", "file", *config, "error", err)
			return 1
		}
	} else {
		io, err := farm.ParseDist(*service)
		if err != nil {
			log.Error("-service", "error", err)
			return 2
		}
		c, err := farm.ParseDist(*cpu)
		if err != nil {
			log.Error("-cpu", "error", err)
			return 2
		}
		cfg = farm.Config{
			Listen: *listen, Servers: *servers, Slots: *slots, Seed: *seed,
			Routes: []farm.Route{{Path: "/", Prefix: true, IO: io, CPU: c, Bytes: *bytes}},
		}
	}

	f, err := farm.Start(cfg, farm.WithLogger(log))
	if err != nil {
		log.Error("start", "error", err)
		return 1
	}
	defer f.Close()
	for _, a := range f.Addrs() {
		fmt.Println(a)
	}
	nc := f.Config()
	for _, r := range nc.Routes {
		capacity, _ := nc.Capacity(r.Path)
		log.Info("route", "path", r.Path, "prefix", r.Prefix, "cpu", r.CPU.String(), "io", r.IO.String(),
			"bytes", r.Bytes, "mean_service", r.MeanService(), "farm_capacity_rps", capacity)
	}
	log.Info("serving", "servers", nc.Servers, "slots", nc.Slots)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	log.Info("stopping")
	for i, s := range f.Stats() {
		log.Info("server", "index", i, "addr", s.Addr, "completed", s.Completed, "abandoned", s.Abandoned,
			"utilisation", fmt.Sprintf("%.3f", s.Utilisation), "mean_queue", s.MeanQueue())
	}
	return 0
}
