package scenario

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sentry-proxy/sentry/internal/stall"
	"github.com/sentry-proxy/sentry/lb"
	"github.com/sentry-proxy/sentry/sim/farm"
	"github.com/sentry-proxy/sentry/sim/load"
)

// SentriesConfig is the several-sentries experiment (issue 15, the shape of
// Cataclysm's Fig. 9): 1, 2, 3 … sentries in front of one farm, each with
// `partition: {index: i, count: k}` and every farm server in its static
// list, so each admits for the servers it owns; the load is spread evenly
// across them (round robin).
//
// Two measurements, chosen by Wrk:
//
//   - goodput (Wrk false): the open-loop generator at Level × the farm's
//     capacity; aggregate goodput (2xx within SLA) and the admitted p95 over
//     the run after Warmup.
//   - decisions (Wrk true): wrk, as fast as it goes, on every sentry at
//     once, for the admission decisions per second the sentries make
//     together (sentry_admission_decisions_total). With Pin each sentry is
//     pinned to one core (taskset); with CPUQuota each is held to that
//     share of a core by a CPU cgroup, so it is CPU-bound even where the
//     machine has fewer cores than sentries and load generator.
type SentriesConfig struct {
	// Sentry is the sentry binary; Dir receives each run's policies and
	// logs. Both required.
	Sentry, Dir string
	// Servers, Slots and Service describe the farm (default 6 servers ×
	// 4 slots, exponential 80 ms: 300 req/s).
	Servers, Slots int
	Service        time.Duration
	// Counts are the numbers of sentries to run, one run each (default 1,
	// 2, 3).
	Counts []int
	// Shared gives every sentry the whole farm (no partition), for
	// comparison: each then admits as if it were alone.
	Shared bool
	// Level is the offered load in units of the farm's capacity (default 3).
	Level float64
	// Duration of each run and the Warmup excluded from its figures
	// (default 30 s and 5 s).
	Duration, Warmup time.Duration
	// SLA is the p95 target (default 500 ms).
	SLA time.Duration
	// Wrk drives the sentries with wrk instead (decisions per second);
	// WrkConns connections per sentry (default 1000: far more than the
	// farm holds within the SLA, capacity × SLA = 150, so most requests
	// are rejected at once and the sentries, not the farm, are the limit).
	Wrk      bool
	WrkConns int
	// Pin pins sentry i to CPU i mod Cores (taskset -c); Cores defaults
	// to the CPUs this process may use.
	Pin   bool
	Cores int
	// CPUQuota, when > 0, holds each sentry to this many cores (a CFS
	// quota in its own cgroup; needs root).
	CPUQuota float64
	Seed     uint64
	// Progress, when set, gets a line per run.
	Progress func(string)
}

// Normalize fills the defaults in and checks c; RunSentries calls it.
func (c *SentriesConfig) Normalize() error {
	if c.Sentry == "" || c.Dir == "" {
		return errors.New("sentries: Sentry and Dir are required")
	}
	if c.Servers == 0 {
		c.Servers = 6
	}
	if c.Slots == 0 {
		c.Slots = 4
	}
	if c.Service == 0 {
		c.Service = 80 * time.Millisecond
	}
	if len(c.Counts) == 0 {
		c.Counts = []int{1, 2, 3}
	}
	if c.Level == 0 {
		c.Level = 3
	}
	if c.Duration == 0 {
		c.Duration = 30 * time.Second
	}
	if c.Warmup == 0 {
		c.Warmup = 5 * time.Second
	}
	if c.SLA == 0 {
		c.SLA = 500 * time.Millisecond
	}
	if c.WrkConns == 0 {
		c.WrkConns = 1000
	}
	if c.Cores == 0 {
		c.Cores = cpusAllowed()
	}
	if c.Warmup >= c.Duration {
		return errors.New("sentries: Warmup must be shorter than Duration")
	}
	for _, k := range c.Counts {
		if k < 1 || k > 64 {
			return fmt.Errorf("sentries: %d sentries: want 1 to 64", k)
		}
	}
	return nil
}

// Capacity is the farm's capacity in req/s.
func (c SentriesConfig) Capacity() float64 {
	return float64(c.Servers*c.Slots) / c.Service.Seconds()
}

// SentriesRow is one run: k sentries.
type SentriesRow struct {
	Sentries int
	// Shares: the farm servers each sentry owns.
	Shares []int
	// Over the run after the warm-up: offered req/s, goodput req/s (2xx
	// within SLA) and its ratio to the farm's capacity, the admitted p95,
	// the rejected share and the errors (goodput runs only).
	Offered, Goodput, GoodputRatio float64
	P95                            time.Duration
	Rejected                       float64
	Errors                         int
	// FarmCapacity is the capacity the farm showed over the same window,
	// req/s: each server's slots over its mean slot-holding time (busy
	// slot-seconds per completion). It falls below Capacity when the
	// machine is too loaded for the farm's timers to hold its model
	// (farm.Stats.Compensation); 0 when nothing completed.
	FarmCapacity float64
	// The load generator's own delays, which every latency above
	// includes: LagP95 is how late it sent (p95), RejectP95 the p95
	// latency of rejections, which sentry answers at once -- the floor
	// of what this run could measure.
	LagP95, RejectP95 time.Duration
	// Stall is how long this process (the farm and the load generator)
	// went without running over the window (package internal/stall): on
	// a machine starved by other work, the sentries are too, and the
	// figures above measure the machine.
	Stall stall.Result
	// Decisions per second, all sentries together, and each one's.
	Decisions float64
	PerSentry []float64
	// CPU is each sentry's CPU use over the window, in cores (from
	// /proc/PID/stat; NaN where it cannot be read), and PerCore the
	// decisions per CPU-second of all of them together.
	CPU     []float64
	PerCore float64
	Pinned  []string // the CPU list each sentry was pinned to ("" unpinned)
}

// RunSentries runs one measurement per count in c.Counts.
func RunSentries(ctx context.Context, c SentriesConfig) ([]SentriesRow, error) {
	if err := c.Normalize(); err != nil {
		return nil, err
	}
	if c.Wrk {
		if _, err := exec.LookPath("wrk"); err != nil {
			return nil, fmt.Errorf("sentries: wrk: %w", err)
		}
	}
	if c.Pin {
		if _, err := exec.LookPath("taskset"); err != nil {
			return nil, fmt.Errorf("sentries: taskset: %w", err)
		}
	}
	var rows []SentriesRow
	for _, k := range c.Counts {
		row, err := runSentriesOnce(ctx, c, k)
		if err != nil {
			return rows, fmt.Errorf("%d sentries: %w", k, err)
		}
		if c.Progress != nil {
			c.Progress(row.String(c))
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func (r SentriesRow) String(c SentriesConfig) string {
	if c.Wrk {
		return fmt.Sprintf("%d sentries (shares %v, pinned %v): %.0f decisions/s (each %v), sentry CPU %v cores, %.0f decisions per CPU-second",
			r.Sentries, r.Shares, r.Pinned, r.Decisions, fmtRates(r.PerSentry), fmtCores(r.CPU), r.PerCore)
	}
	return fmt.Sprintf("%d sentries (shares %v): offered %.0f req/s, goodput %.0f req/s = %.3f × capacity %.0f (the farm showed %.0f), admitted p95 %v (target %v), rejected %.1f%%, errors %d, %.0f decisions/s; load generator: send lag p95 %v, rejection latency p95 %v, %v",
		r.Sentries, r.Shares, r.Offered, r.Goodput, r.GoodputRatio, c.Capacity(), r.FarmCapacity, r.P95.Round(time.Millisecond), c.SLA, 100*r.Rejected, r.Errors, r.Decisions,
		r.LagP95.Round(time.Millisecond), r.RejectP95.Round(time.Millisecond), r.Stall)
}

func fmtCores(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return "[" + strings.Join(s, " ") + "]"
}

func fmtRates(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', 0, 64)
	}
	return "[" + strings.Join(s, " ") + "]"
}

// sentriesPolicy is sentry i of k's policy.
func sentriesPolicy(c SentriesConfig, i, k int, listen, admin string, backends []string) []byte {
	part := fmt.Sprintf("\n    partition: {index: %d, count: %d}", i, k)
	if c.Shared {
		part = ""
	}
	return fmt.Appendf(nil, `# Generated by the several-sentries run (e2e/scenario/sentries.go): sentry %d of %d.
admin: {listen: %s}
log: {level: warn}
server: {shutdown_timeout: 5s}
apps:
  - name: farm
    listen: %s
    backends: {static: [%s]}%s
    sla:
      percentile: 95
      targets: [{target: %s}]
    admission:
      mode: batch
      batch: {parallelism: %d}
`, i, k, admin, listen, strings.Join(backends, ", "), part, c.SLA, c.Slots)
}

type runningSentry struct {
	proc          *process
	listen, admin string
	cpus          string
	limit         *cpuLimit
}

func runSentriesOnce(ctx context.Context, c SentriesConfig, k int) (SentriesRow, error) {
	row := SentriesRow{Sentries: k}
	dir := filepath.Join(c.Dir, fmt.Sprintf("%d", k))
	if c.Wrk {
		dir += "-wrk"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return row, err
	}
	f, err := farm.Start(farm.Config{Servers: c.Servers, Slots: c.Slots, Seed: c.Seed,
		Routes: []farm.Route{{Path: "/", Prefix: true, IO: farm.Dist{Kind: farm.Exponential, Mean: c.Service}}}})
	if err != nil {
		return row, err
	}
	defer f.Close()
	addrs := f.Addrs()
	var ss []*runningSentry
	defer func() {
		for _, s := range ss {
			s.proc.stop(syscall.SIGTERM, 8*time.Second)
			s.limit.remove()
		}
	}()
	for i := 0; i < k; i++ {
		share := len(addrs)
		if !c.Shared {
			share = len(lb.Partition{Index: i, Count: k}.Filter(addrs))
		}
		row.Shares = append(row.Shares, share)
		listen, err := freeAddr()
		if err != nil {
			return row, err
		}
		admin, err := freeAddr()
		if err != nil {
			return row, err
		}
		pol := filepath.Join(dir, fmt.Sprintf("policy-%d.yaml", i))
		if err := os.WriteFile(pol, sentriesPolicy(c, i, k, listen, admin, addrs), 0o644); err != nil {
			return row, err
		}
		name, args := c.Sentry, []string{"run", "-config", pol}
		s := &runningSentry{listen: listen, admin: admin}
		if c.Pin {
			s.cpus = strconv.Itoa(i % c.Cores)
			name, args = "taskset", append([]string{"-c", s.cpus, c.Sentry}, args...)
		}
		row.Pinned = append(row.Pinned, s.cpus)
		if s.proc, err = startProcess(filepath.Join(dir, fmt.Sprintf("sentry-%d.log", i)), name, args...); err != nil {
			return row, err
		}
		ss = append(ss, s)
		if c.CPUQuota > 0 {
			name := fmt.Sprintf("sentry-scenario-%d-%d", os.Getpid(), s.proc.cmd.Process.Pid)
			if s.limit, err = limitCPU(s.proc.cmd.Process.Pid, c.CPUQuota, name); err != nil {
				return row, fmt.Errorf("sentry %d: %w", i, err)
			}
		}
		if err := waitReady(ctx, s.proc, "http://"+admin+"/readyz", 10*time.Second); err != nil {
			return row, fmt.Errorf("sentry %d: %w", i, err)
		}
	}
	targets := make([]string, k)
	for i, s := range ss {
		targets[i] = "http://" + s.listen
	}
	window := (c.Duration - c.Warmup).Seconds()
	var before []float64
	var cpu0 []float64
	cpuSnap := func() []float64 {
		out := make([]float64, k)
		for i, s := range ss {
			out[i] = procCPUSeconds(s.proc.cmd.Process.Pid)
		}
		return out
	}
	snap := func() ([]float64, error) {
		if cpu0 == nil {
			cpu0 = cpuSnap()
		} else {
			cpu1 := cpuSnap()
			for i := range cpu1 {
				cpu1[i] -= cpu0[i]
			}
			cpu0 = cpu1 // now the deltas
		}
		out := make([]float64, k)
		for i, s := range ss {
			v, err := scrapeSum(ctx, "http://"+s.admin+"/metrics", "sentry_admission_decisions_total")
			if err != nil {
				return nil, fmt.Errorf("sentry %d: %w", i, err)
			}
			out[i] = v
		}
		return out, nil
	}
	if c.Wrk {
		var wg sync.WaitGroup
		errs := make([]error, k)
		for i, t := range targets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cmd := exec.CommandContext(ctx, "wrk", "-t1", "-c"+strconv.Itoa(c.WrkConns), "-d"+strconv.Itoa(int(c.Duration.Seconds()))+"s", t+"/")
				out, err := cmd.CombinedOutput()
				_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("wrk-%d.txt", i)), out, 0o644)
				errs[i] = err
			}()
		}
		select {
		case <-ctx.Done():
		case <-time.After(c.Warmup):
		}
		var err error
		if before, err = snap(); err != nil {
			wg.Wait()
			return row, err
		}
		t0 := time.Now()
		select {
		case <-ctx.Done():
		case <-time.After(c.Duration - c.Warmup - 500*time.Millisecond):
		}
		after, err := snap()
		window = time.Since(t0).Seconds()
		wg.Wait()
		if err != nil {
			return row, err
		}
		if err := errors.Join(errs...); err != nil {
			return row, fmt.Errorf("wrk: %w", err)
		}
		row.fillDecisions(before, after, window)
		row.fillCPU(cpu0, window)
		return row, nil
	}

	lc := load.Config{
		Targets: targets, Seed: c.Seed, Timeout: 10 * time.Second, MaxInFlight: 6000, MaxRequests: 2000000,
		Classes: []load.Class{{Name: "web", SLA: c.SLA, Open: &load.Open{Rate: load.Schedule{{Duration: c.Duration, From: c.Level * c.Capacity()}}}}},
	}
	var rep *load.Report
	done := make(chan error, 1)
	go func() {
		var err error
		rep, err = load.Run(ctx, lc)
		done <- err
	}()
	select {
	case <-ctx.Done():
	case <-time.After(c.Warmup):
	}
	before, err = snap()
	if err != nil {
		<-done
		return row, err
	}
	farm0 := f.Stats()
	watch := stall.Start()
	t0 := time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(c.Duration - c.Warmup):
	}
	row.Stall = watch.Stop()
	after, err := snap()
	row.FarmCapacity = shownCapacity(farm0, f.Stats())
	window = time.Since(t0).Seconds()
	if rerr := <-done; rerr != nil {
		return row, rerr
	}
	if err != nil {
		return row, err
	}
	row.fillDecisions(before, after, window)
	row.fillCPU(cpu0, window)
	var sent, good, rejected int
	var lat, rejLat, lag []time.Duration
	for i := range rep.Results {
		r := &rep.Results[i]
		if r.Start < c.Warmup || r.Start >= c.Duration || r.Err == load.ErrOverflow {
			continue
		}
		sent++
		lag = append(lag, r.Lag)
		switch {
		case r.Rejected:
			rejected++
			rejLat = append(rejLat, r.Latency)
		case r.Failed():
			row.Errors++
		}
		if r.Good(c.SLA) {
			good++
		}
		if !r.Rejected && (r.Status > 0 || r.Err == load.ErrTimeout) {
			lat = append(lat, r.Latency)
		}
	}
	span := (c.Duration - c.Warmup).Seconds()
	row.Offered, row.Goodput = float64(sent)/span, float64(good)/span
	row.GoodputRatio = row.Goodput / c.Capacity()
	if sent > 0 {
		row.Rejected = float64(rejected) / float64(sent)
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		row.P95 = Percentile(lat, 0.95)
	}
	if len(rejLat) > 0 {
		slices.Sort(rejLat)
		row.RejectP95 = Percentile(rejLat, 0.95)
	}
	if len(lag) > 0 {
		slices.Sort(lag)
		row.LagP95 = Percentile(lag, 0.95)
	}
	return row, nil
}

// shownCapacity is the capacity the farm showed between two snapshots,
// req/s: the sum over its servers of slots × completions ÷ busy
// slot-seconds (slots over the mean slot-holding time); 0 when nothing
// completed.
func shownCapacity(s0, s1 []farm.Stats) float64 {
	var c float64
	for i := range s1 {
		done := float64(s1[i].Completed - s0[i].Completed)
		busy := (s1[i].BusyTime - s0[i].BusyTime).Seconds()
		if done > 0 && busy > 0 {
			c += float64(s1[i].Slots) * done / busy
		}
	}
	return c
}

func (r *SentriesRow) fillDecisions(before, after []float64, window float64) {
	r.PerSentry = make([]float64, len(before))
	for i := range before {
		r.PerSentry[i] = (after[i] - before[i]) / window
		r.Decisions += r.PerSentry[i]
	}
}

func (r *SentriesRow) fillCPU(delta []float64, window float64) {
	var sum float64
	for _, d := range delta {
		r.CPU = append(r.CPU, d/window)
		sum += d
	}
	r.PerCore = r.Decisions * window / sum
}

// procCPUSeconds is the user + system CPU time of process pid, in
// seconds; NaN when /proc cannot tell (not Linux).
func procCPUSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return math.NaN()
	}
	// The command name (field 2) may hold spaces; the fields after it
	// start past its closing parenthesis.
	rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return math.NaN()
	}
	ut, err1 := strconv.ParseFloat(f[11], 64) // utime, field 14
	st, err2 := strconv.ParseFloat(f[12], 64) // stime, field 15
	if err1 != nil || err2 != nil {
		return math.NaN()
	}
	return (ut + st) / 100 // USER_HZ, 100 on Linux
}

// scrapeSum sums every series of the metric name in a Prometheus text
// scrape.
func scrapeSum(ctx context.Context, url, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 32<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var sum float64
	seen := false
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %w", name, line, err)
		}
		sum += v
		seen = true
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !seen {
		return 0, fmt.Errorf("no %s in the scrape", name)
	}
	return sum, nil
}

// cpusAllowed is the CPUs this process may run on (Go's NumCPU reads the
// affinity mask on Linux).
func cpusAllowed() int { return runtime.NumCPU() }
