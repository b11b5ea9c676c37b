package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/sim/farm"
	"github.com/sentry-proxy/sentry/sim/load"
	"github.com/sentry-proxy/sentry/status"
)

// The demo's SLA: the 95th percentile of admitted requests within 500 ms.
const (
	demoTarget = 500 * time.Millisecond
	demoCycle  = 60 * time.Second
)

// demoFarm is the embedded farm: three servers with three worker slots
// each and sleep-based service: a fast page, checkout, a slow search and a
// static image. Its capacity is 9 slot-seconds per second.
func demoFarm() farm.Config {
	exp := func(mean time.Duration) farm.Dist { return farm.Dist{Kind: farm.Exponential, Mean: mean} }
	return farm.Config{
		Servers: 3,
		Slots:   3,
		Seed:    1,
		Routes: []farm.Route{
			{Path: "/", Prefix: true, IO: exp(20 * time.Millisecond), Bytes: 2 << 10},
			{Path: "/checkout", Prefix: true, IO: exp(50 * time.Millisecond), Bytes: 1 << 10},
			{Path: "/search", IO: exp(100 * time.Millisecond), Bytes: 4 << 10},
			{Path: "/static/", Prefix: true, Bytes: 32 << 10, ContentType: "image/png"},
		},
	}
}

// demoPolicyYAML is the demo's policy: one app in front of the farm, three
// classes told apart by path (or an X-Tier header), a 500 ms p95 target
// and automatic admission. It is YAML so it is validated like a file.
func demoPolicyYAML(listen, admin string, backends []string, slots int) []byte {
	q := strconv.Quote
	var bs []string
	for _, b := range backends {
		bs = append(bs, q(b))
	}
	return fmt.Appendf(nil, `# sentry demo policy (built in code)
admin:
  listen: %s
apps:
  - name: demo
    listen: %s
    backends:
      static: [%s]
    classes:
      - name: gold
        rules:
          - path_prefix: /checkout
          - headers: [{name: X-Tier, value: gold}]
      - name: silver
        rules:
          - path_prefix: /search
          - headers: [{name: X-Tier, value: silver}]
      - name: bronze
        default: true
    sla:
      percentile: 95
      targets:
        - {target: %s}
    admission:
      mode: auto
      batch:
        parallelism: %d   # the farm's worker slots per server
`, q(admin), q(listen), strings.Join(bs, ", "), demoTarget, slots)
}

// demoClass is one class of the demo's load.
type demoClass struct {
	name  string
	paths []load.Path
	share float64       // of the farm's capacity at 1× load
	mult  load.Schedule // load as a multiple of the class's 1× share
}

// demoClasses: the cycle goes from 0.5× to 2.5× capacity and back, bronze
// rising first, then silver, then gold.
func demoClasses() []demoClass {
	seq := func(parts ...load.Schedule) load.Schedule {
		var s load.Schedule
		for _, p := range parts {
			s = append(s, p...)
		}
		return s
	}
	lo, hi, ten := 0.5, 2.5, 10*time.Second
	return []demoClass{
		{name: "gold", paths: []load.Path{{Path: "/checkout/cart"}, {Path: "/checkout/pay"}}, share: 0.2,
			mult: seq(load.Constant(lo, 2*ten), load.Ramp(lo, hi, ten), load.Constant(hi, ten), load.Ramp(hi, lo, ten), load.Constant(lo, ten))},
		{name: "silver", paths: []load.Path{{Path: "/search?q=shoes"}}, share: 0.4,
			mult: seq(load.Constant(lo, ten), load.Ramp(lo, hi, ten), load.Constant(hi, 2*ten), load.Ramp(hi, lo, ten), load.Constant(lo, ten))},
		{name: "bronze", paths: []load.Path{{Path: "/", Weight: 2}, {Path: "/products/42", Weight: 2}, {Path: "/static/logo.png"}}, share: 0.4,
			mult: seq(load.Ramp(lo, hi, ten), load.Constant(hi, 3*ten), load.Ramp(hi, lo, ten), load.Constant(lo, ten))},
	}
}

// demoLoad is one cycle of the looping load: open loop, Poisson arrivals.
type demoLoad struct {
	cfg    load.Config
	shares []float64 // class shares of capacity at 1×
	mults  []load.Schedule
	rate1x float64 // requests/s at 1× capacity
}

func newDemoLoad(target string, fc farm.Config) (*demoLoad, error) {
	fc, err := fc.Normalize()
	if err != nil {
		return nil, err
	}
	slots := float64(fc.Servers * fc.Slots) // capacity, slot-seconds per second
	dl := &demoLoad{cfg: load.Config{Targets: []string{target}, Timeout: 5 * time.Second, MaxInFlight: 2000}}
	for _, c := range demoClasses() {
		// Mean service time of the class's request mix.
		var s, w float64
		for _, p := range c.paths {
			path, _, _ := strings.Cut(p.Path, "?")
			r, ok := fc.Route(path)
			if !ok {
				return nil, fmt.Errorf("demo: no farm route for %s", p.Path)
			}
			wt := max(p.Weight, 1)
			s += wt * r.MeanService().Seconds()
			w += wt
		}
		rate := c.share * slots / (s / w) // requests/s at 1×
		dl.rate1x += rate
		dl.shares = append(dl.shares, c.share)
		dl.mults = append(dl.mults, c.mult)
		dl.cfg.Classes = append(dl.cfg.Classes, load.Class{
			Name: c.name, SLA: demoTarget, Request: load.Request{Paths: c.paths},
			Open: &load.Open{Rate: c.mult.Scale(rate)},
		})
	}
	if _, err := dl.cfg.Normalize(); err != nil {
		return nil, err
	}
	return dl, nil
}

// offered is the offered load at t into a cycle, as a multiple of the
// farm's capacity, and in requests/s.
func (dl *demoLoad) offered(t time.Duration) (mult, rate float64) {
	for i, m := range dl.mults {
		mult += dl.shares[i] * m.At(t)
		rate += dl.cfg.Classes[i].Open.Rate.At(t)
	}
	return mult, rate
}

// loop runs cycles until ctx ends; each cycle is a bounded load.Run.
func (dl *demoLoad) loop(ctx context.Context, log hclog.Logger, cycle *atomic.Int64, started *atomic.Int64) {
	client := load.NewClient(dl.cfg)
	defer client.CloseIdle()
	for n := int64(1); ctx.Err() == nil; n++ {
		cfg := dl.cfg
		cfg.Seed = uint64(n)
		cycle.Store(n)
		started.Store(time.Now().UnixNano())
		if _, err := load.Run(ctx, cfg, load.WithClient(client)); err != nil {
			log.Error("demo load stopped", "error", err)
			return
		}
	}
}

// dialable turns a listen address into one a client can reach: an
// unspecified host becomes loopback.
func dialable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip, err := netip.ParseAddr(host); host == "" || (err == nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if err == nil && ip.Is6() {
			host = "::1"
		}
	}
	return net.JoinHostPort(host, port)
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func cmdDemo(args []string) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "proxy listen `ADDR`")
	admin := fs.String("admin", "127.0.0.1:9901", "admin listen `ADDR` (metrics, health, the status page)")
	duration := fs.Duration("duration", 0, "stop after this long (0 = until interrupted)")
	noLoad := fs.Bool("no-load", false, "start the farm and the proxy only, without the looping load")
	quiet := fs.Bool("quiet", false, "no live view in the terminal")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "sentry demo: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "sentry", Level: hclog.Info, Output: os.Stderr})
	fc := demoFarm()
	f, err := farm.Start(fc, farm.WithLogger(log.Named("farm")))
	if err != nil {
		log.Error("demo farm failed to start", "error", err)
		return 1
	}
	defer f.Close()
	snap, err := policy.Parse("demo-policy.yaml", demoPolicyYAML(*listen, *admin, f.Addrs(), fc.Slots))
	if err != nil {
		printPolicyErrors(os.Stderr, err)
		return 1
	}
	proxyURL := "http://" + dialable(*listen)
	dl, err := newDemoLoad(proxyURL, fc)
	if err != nil {
		log.Error("demo load", "error", err)
		return 1
	}

	// The status page reads the daemon's registry, which exists once the
	// daemon has started; until then it shows nothing.
	var dref atomic.Pointer[daemon]
	gather := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		if d := dref.Load(); d != nil {
			return d.reg.Gather()
		}
		return nil, nil
	})
	sopts := status.Options{Title: "sentry demo", Policy: func() *policy.Snapshot { return snap }}
	d, err := startDaemon(snap, log, nil, status.Routes(gather, sopts), nil)
	if err != nil {
		log.Error("start failed", "error", err)
		return 1
	}
	dref.Store(d)
	adminURL := "http://" + dialable(*admin)

	loadLine := fmt.Sprintf("a %.0f s cycle from 0.5× to 2.5× capacity and back (≈ %.0f req/s at 1×), bronze rising first, looping.", demoCycle.Seconds(), dl.rate1x)
	if *noLoad {
		loadLine = "off (-no-load): send your own."
	}
	fmt.Printf(`sentry demo is running: %d simulated backends (%d slots each) behind the proxy.
Classes: gold (/checkout/…, or X-Tier: gold), silver (/search), bronze (everything else).
SLA: p95 of admitted requests within %v; admission mode auto.
Load: %s

Live status page: %s/status

Try:
  curl -i %[6]s/                   a fast page (~20 ms), bronze
  curl -i %[6]s/search             a slow search (~100 ms), silver
  curl -i %[6]s/checkout/cart      checkout (~50 ms), gold
  curl -i -H 'X-Tier: gold' %[6]s/ the fast page as gold
  curl -o /dev/null %[6]s/static/logo.png   a 32 KiB static image
  curl %[5]s/status.json       the status page's data
  curl %[5]s/metrics           Prometheus metrics

Backends: %[7]v
Press Ctrl-C to stop.
`, fc.Servers, fc.Slots, demoTarget, loadLine, adminURL, proxyURL, f.Addrs())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var cycle, cycleStart atomic.Int64
	if !*noLoad {
		wg.Go(func() { dl.loop(ctx, log, &cycle, &cycleStart) })
	}
	if !*quiet {
		v := &demoView{out: os.Stdout, tty: isTerminal(os.Stdout), gather: gather, opts: sopts,
			adminURL: adminURL, proxyURL: proxyURL, start: time.Now()}
		if !*noLoad {
			v.load, v.cycle, v.cycleStart = dl, &cycle, &cycleStart
		}
		wg.Go(func() { v.run(ctx) })
	}

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
	cancel()
	wg.Wait()
	d.shutdown(5*time.Second, false)
	return 0
}

// demoView prints the live table every second.
type demoView struct {
	out                io.Writer
	tty                bool
	gather             prometheus.Gatherer
	opts               status.Options
	adminURL, proxyURL string
	start              time.Time

	load              *demoLoad // nil with -no-load
	cycle, cycleStart *atomic.Int64
}

func (v *demoView) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var prev *status.Snapshot
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur, err := status.Collect(v.gather, v.opts)
		if err != nil {
			continue
		}
		if prev != nil {
			_, _ = v.out.Write(v.frame(prev, cur))
		}
		prev = cur
	}
}

// frame renders one view: on a terminal the screen is cleared and redrawn
// in place; otherwise the lines are appended.
func (v *demoView) frame(prev, cur *status.Snapshot) []byte {
	var b bytes.Buffer
	now := time.Now()
	if v.tty {
		b.WriteString("\x1b[H\x1b[2J")
		fmt.Fprintf(&b, "sentry demo · %s · up %v · Ctrl-C to stop\nstatus page %s/status · proxy %s/\n",
			now.Format("15:04:05"), now.Sub(v.start).Round(time.Second), v.adminURL, v.proxyURL)
	} else {
		fmt.Fprintf(&b, "--- %s\n", now.Format("15:04:05"))
	}
	if v.load != nil {
		if n := v.cycle.Load(); n > 0 {
			in := min(now.Sub(time.Unix(0, v.cycleStart.Load())), demoCycle-time.Millisecond) // a cycle's drain counts as its end
			m, r := v.load.offered(in)
			fmt.Fprintf(&b, "load: cycle %d, %2d s of %.0f s, offered %.1f× capacity (%.0f req/s)\n", n, int(in/time.Second), demoCycle.Seconds(), m, r)
		}
	} else {
		b.WriteString("load: off (-no-load)\n")
	}
	_ = status.WriteText(&b, prev, cur)
	return b.Bytes()
}
