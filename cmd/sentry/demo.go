package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sentry-proxy/sentry/e2e/farm"
	"github.com/sentry-proxy/sentry/policy"
)

// demoFarm is the embedded default farm: three servers with eight worker
// slots each, a fast page, a slow search and a static image.
func demoFarm() farm.Config {
	return farm.Config{
		Servers: 3,
		Slots:   8,
		Seed:    1,
		Routes: []farm.Route{
			{Path: "/", Prefix: true, IO: farm.Dist{Kind: farm.Exponential, Mean: 10 * time.Millisecond}, Bytes: 512},
			{Path: "/search", IO: farm.Dist{Kind: farm.Exponential, Mean: 80 * time.Millisecond}, Bytes: 2048},
			{Path: "/static/", Prefix: true, Bytes: 64 << 10},
		},
	}
}

func cmdDemo(args []string) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "proxy listen `ADDR`")
	admin := fs.String("admin", "127.0.0.1:9901", "admin listen `ADDR`")
	duration := fs.Duration("duration", 0, "stop after this long (0 = until interrupted)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "sentry", Level: hclog.Info, Output: os.Stderr})
	f, err := farm.Start(demoFarm(), farm.WithLogger(log.Named("farm")))
	if err != nil {
		log.Error("demo farm failed to start", "error", err)
		return 1
	}
	defer f.Close()
	snap, err := policy.FromFlags(*listen, f.Addrs(), *admin)
	if err != nil {
		printPolicyErrors(os.Stderr, err)
		return 1
	}
	d, err := startDaemon(snap, log, nil, nil)
	if err != nil {
		log.Error("start failed", "error", err)
		return 1
	}
	fmt.Printf(`sentry demo is running: %d simulated backends behind the proxy.

Try:
  curl -i http://%[2]s/            a fast page (~10 ms)
  curl -i http://%[2]s/search      a slow page (~80 ms)
  curl -o /dev/null http://%[2]s/static/logo.png   a 64 KiB static file
  curl http://%[3]s/metrics        Prometheus metrics
  curl http://%[3]s/readyz         readiness

Backends: %v
Press Ctrl-C to stop.
`, len(f.Addrs()), *listen, *admin, f.Addrs())

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	var timeout <-chan time.Time
	if *duration > 0 {
		timeout = time.After(*duration)
	}
	select {
	case <-sig:
	case <-timeout:
	}
	d.shutdown(5 * time.Second)
	return 0
}
