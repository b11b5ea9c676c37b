package scenario

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sentry-proxy/sentry/sim/farm"
	"github.com/sentry-proxy/sentry/sim/load"
)

// Options are how Run runs a scenario.
type Options struct {
	// Peers to run, in turn. Default: every peer in PeerNames.
	Peers []string
	// OutDir gets OutDir/<scenario>/<peer>/ and OutDir/<scenario>/summary.md.
	OutDir string
	// SentryBin is the sentry binary for the sentry and off peers.
	SentryBin string
	// FarmBin is the farm binary (e2e/cmd/farm), run with -control in a
	// process of its own (doc.go, "The farm's process"). Required.
	FarmBin string
	// Scaling changes the load for this run.
	Scaling Scaling
	// Progress gets one line per step (nil: none).
	Progress io.Writer
	// SkipUpgrades plays no upgrade event: the control run of an upgrade
	// scenario, the same load without the upgrade.
	SkipUpgrades bool
}

// PeerResult is one peer's outcome.
type PeerResult struct {
	Peer string
	// Skipped says why the peer did not run (not installed); empty if it
	// ran.
	Skipped string
	// Err is a failure to run (the peer would not start, …).
	Err     error
	Summary *PeerSummary
	Dir     string
}

// Run runs the scenario once per peer, one at a time, each with a fresh
// farm (same seed), writes each peer's series.csv, plots and summary.json,
// then summary.md. It returns an error only when nothing could be written;
// per-peer failures are in the results.
func Run(ctx context.Context, sc *Scenario, o Options) ([]PeerResult, error) {
	if len(o.Peers) == 0 {
		o.Peers = PeerNames
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	sdir := filepath.Join(o.OutDir, sc.Name)
	if err := os.MkdirAll(sdir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(sdir, "scenario.yaml"), sc.Raw, 0o644); err != nil {
		return nil, err
	}
	capa, err := sc.ComputeCapacity()
	if err != nil {
		return nil, err
	}
	if o.FarmBin == "" {
		return nil, errors.New("scenario: no farm binary (Options.FarmBin)")
	}
	fmt.Fprintf(o.Progress, "scenario %s: capacity %.0f req/s (%s), duration %v\n", sc.Name, capa.Rate, capa.Source, sc.ScaledDuration(o.Scaling))
	var results []PeerResult
	skipped := map[string]string{}
	for _, name := range o.Peers {
		if ctx.Err() != nil {
			break
		}
		res := PeerResult{Peer: name, Dir: filepath.Join(sdir, name)}
		peer, err := NewPeer(name, o.SentryBin)
		if err == nil {
			if why := peer.Available(); why != nil {
				res.Skipped = why.Error()
				skipped[name] = res.Skipped
				fmt.Fprintf(o.Progress, "peer %s: skipped: %s\n", name, res.Skipped)
				results = append(results, res)
				continue
			}
			fmt.Fprintf(o.Progress, "peer %s: running\n", name)
			res.Summary, err = runPeer(ctx, sc, peer, res.Dir, capa, o)
		}
		if err != nil {
			res.Err = err
			fmt.Fprintf(o.Progress, "peer %s: failed: %v\n", name, err)
		} else {
			t := res.Summary.Total()
			fmt.Fprintf(o.Progress, "peer %s: goodput %.1f/s (%.2f× capacity), rejected %s, errors %s, p95 %v\n",
				name, t.GoodputRate, res.Summary.GoodputOverCapacity, pct(t.RejectedFrac), pct(t.ErrorFrac), fmtDur(t.P95, t.Samples))
			if f := res.Summary.Fairness; f != nil {
				fmt.Fprintf(o.Progress, "peer %s: fairness: %s\n", name, f)
			}
			for _, n := range res.Summary.Notes {
				fmt.Fprintf(o.Progress, "peer %s: note: %s\n", name, n)
			}
		}
		results = append(results, res)
	}
	if err := WriteScenarioSummary(sc, capa, o.Scaling, o.OutDir, skipped); err != nil {
		return results, err
	}
	fmt.Fprintf(o.Progress, "wrote %s\n", filepath.Join(sdir, "summary.md"))
	return results, nil
}

// Key identifies a scenario file and scaling, so that summaries of runs
// with different inputs are not mixed up.
func (sc *Scenario) Key(s Scaling) string {
	s = s.norm()
	h := sha256.New()
	h.Write(sc.Raw)
	fmt.Fprintf(h, "|%g|%g", s.Level, s.Time)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// WriteScenarioSummary writes OutDir/<scenario>/summary.md from every
// peer's summary.json in that directory that ran this scenario file with
// this scaling, in PeerNames order.
func WriteScenarioSummary(sc *Scenario, capa Capacity, s Scaling, outDir string, skipped map[string]string) error {
	sdir := filepath.Join(outDir, sc.Name)
	key := sc.Key(s)
	var peers []PeerSummary
	for _, name := range PeerNames {
		b, err := os.ReadFile(filepath.Join(sdir, name, "summary.json"))
		if err != nil {
			continue
		}
		var ps PeerSummary
		if json.Unmarshal(b, &ps) != nil || ps.Key != key {
			continue
		}
		peers = append(peers, ps)
	}
	f, err := os.Create(filepath.Join(sdir, "summary.md"))
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	err = WriteMarkdown(w, SummaryInfo{Scenario: sc, Capacity: capa, Scaling: s, Duration: sc.ScaledDuration(s), Skipped: skipped}, peers)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// sampler records the farm's state every second until stopped. Bounded:
// at most maxSamples samples.
type sampler struct {
	mu      sync.Mutex
	at      []time.Time
	samples []FarmSample
	comp    time.Duration
	missed  int   // samples the farm did not answer
	err     error // the first of their errors
}

func (s *sampler) take(stats func() ([]farm.Stats, error)) {
	now := time.Now()
	sts, err := stats()
	if err != nil {
		// No sample for this second: the series shows the gap, and the
		// summary's notes the count and the first error.
		s.mu.Lock()
		s.missed++
		if s.err == nil {
			s.err = err
		}
		s.mu.Unlock()
		return
	}
	var fs FarmSample
	var comp time.Duration
	for _, st := range sts {
		fs.BusyTime += st.BusyTime
		fs.Completed += st.Completed
		fs.Abandoned += st.Abandoned
		fs.Busy += st.Busy
		fs.Waiting += st.Waiting
		comp = max(comp, st.Compensation)
	}
	s.mu.Lock()
	s.at = append(s.at, now)
	s.samples = append(s.samples, fs)
	s.comp = max(s.comp, comp)
	s.mu.Unlock()
}

func (s *sampler) run(ctx context.Context, stats func() ([]farm.Stats, error), maxSamples int) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	s.take(stats)
	for i := 1; i < maxSamples; i++ {
		select {
		case <-ctx.Done():
			s.take(stats)
			return
		case <-t.C:
			s.take(stats)
		}
	}
}

// relative returns the samples with At relative to start.
func (s *sampler) relative(start time.Time) ([]FarmSample, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]FarmSample, len(s.samples))
	for i := range s.samples {
		out[i] = s.samples[i]
		out[i].At = s.at[i].Sub(start)
	}
	return out, s.comp
}

func runPeer(ctx context.Context, sc *Scenario, peer Peer, dir string, capa Capacity, o Options) (*PeerSummary, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// Outputs of an earlier run must not pass for this one's.
	for _, f := range []string{"series.csv", "summary.json", ArrivalPNG, P95PNG, UtilPNG, "metrics.txt"} {
		os.Remove(filepath.Join(dir, f))
	}
	flog, err := os.Create(filepath.Join(dir, "farm.log"))
	if err != nil {
		return nil, err
	}
	defer flog.Close()
	f, err := startFarmProc(ctx, o.FarmBin, sc.Farm, flog)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	running, err := peer.Start(ctx, PeerEnv{Dir: dir, Scenario: sc, Backends: f.Addrs()})
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			running.Stop()
		}
	}()
	cfg, err := sc.LoadConfig([]string{"http://" + running.Addr()}, o.Scaling)
	if err != nil {
		return nil, err
	}
	smp := &sampler{}
	sctx, stopSampler := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		smp.run(sctx, f.Stats, int(cfg.MaxDuration/time.Second)+10)
	}()
	started := time.Now()
	upgrade := func() error { return fmt.Errorf("peer %s cannot upgrade", peer.Name()) }
	if u, ok := running.(Upgrader); ok {
		upgrade = func() error { return u.Upgrade(ctx) }
	}
	events := sc.Events
	if o.SkipUpgrades {
		events = nil
		for _, e := range sc.Events {
			if !e.Upgrade {
				events = append(events, e)
			}
		}
	}
	player := playEvents(ctx, f.Apply, events, o.Scaling.norm().Time, started, upgrade, func(m string) { fmt.Fprintln(o.Progress, m) })
	rep, err := load.Run(ctx, cfg)
	played := player.stop()
	stopSampler()
	<-done
	if err != nil {
		return nil, err
	}
	running.Collect(ctx)
	running.Stop()
	stopped = true

	if !peer.MarksRejects() {
		MarkPeerRejects(rep.Results)
	}
	slas := make([]time.Duration, len(cfg.Classes))
	for i, k := range cfg.Classes {
		slas[i] = k.SLA
	}
	samples, comp := smp.relative(rep.Start)
	dur := sc.ScaledDuration(o.Scaling)
	fc := f.Config()
	series := Aggregate(rep, slas, samples, fc.Servers*fc.Slots, int(dur/time.Second))
	sum := Summarize(rep, series, slas, capa.Rate, dur)
	phases := sc.ScaledPhases(o.Scaling)
	if caps, err := sc.PhaseCapacities(capa.Rate); err == nil {
		for i := range phases {
			if sc.Phases[i].Capacity == PhaseCapacityEvents {
				phases[i].rate = caps[i]
			}
		}
	}
	sum.Phases = SummarizePhases(rep, series, slas, capa.Rate, phases)
	if sc.Fairness != nil {
		from, to, window, clients := sc.fairnessSpan(o.Scaling.norm().Time)
		if f, ok := ComputeFairness(series, clients, from, to, window, capa.Rate); ok {
			sum.Fairness = &f
		}
	}
	sum.Scenario, sum.Peer, sum.Key, sum.Started = sc.Name, peer.Name(), sc.Key(o.Scaling), started
	sum.FarmCompensationMax = comp
	for _, a := range played {
		n := fmt.Sprintf("event at %v: %s", a.At.Round(time.Millisecond), a.Event)
		if a.Err != nil {
			n += ": failed: " + a.Err.Error()
		}
		sum.Notes = append(sum.Notes, n)
	}
	if len(played) < len(events) {
		sum.Notes = append(sum.Notes, fmt.Sprintf("%d of %d events did not happen (the run ended first)", len(events)-len(played), len(events)))
	}
	if len(events) < len(sc.Events) {
		sum.Notes = append(sum.Notes, fmt.Sprintf("%d upgrade events skipped (-skip-upgrades): the control run", len(sc.Events)-len(events)))
	}
	if smp.missed > 0 {
		sum.Notes = append(sum.Notes, fmt.Sprintf("%d farm samples missing (the series has gaps): %v", smp.missed, smp.err))
	}
	if err := f.Close(); err != nil {
		sum.Notes = append(sum.Notes, err.Error())
	}
	if comp >= 10*time.Millisecond {
		sum.Notes = append(sum.Notes, fmt.Sprintf("farm timer compensation reached %v: the machine was too loaded for the farm to hold its service times", comp.Round(time.Millisecond)))
	}
	if t := sum.Total(); t.Errors > 0 {
		sum.Notes = append(sum.Notes, fmt.Sprintf("errors by kind: %s", errorKinds(rep)))
	}

	var errs []error
	if err := writeFileWith(filepath.Join(dir, "series.csv"), series.WriteCSV); err != nil {
		errs = append(errs, err)
	}
	if err := WritePlots(dir, series, PlotInfo{Scenario: sc.Name, Peer: peer.Name(), Capacity: capa.Rate, Duration: dur}); err != nil {
		errs = append(errs, err)
	}
	b, err := json.MarshalIndent(sum, "", "  ")
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "summary.json"), b, 0o644)
	}
	if err != nil {
		errs = append(errs, err)
	}
	return &sum, errors.Join(errs...)
}

func writeFileWith(path string, fn func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	err = fn(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
