package control

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sentry-proxy/sentry/adaptive"
	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/policy"
)

// Adaptive mode and auto's fall-back to it (see doc.go, "Adaptive mode").

// fallbackState is the fall-back rule's memory across windows; the
// monitor (tick) uses it, once per second.
type fallbackState struct {
	sync.Mutex
	bad, calm int            // consecutive windows against / for the batch model
	last      admission.Mode // the mode at the previous window's end
	// wait is how many calm windows the next return to batch needs:
	// fallback.return_windows, doubled by each relapse (a fall-back
	// within relapseWithin of the last return), at most maxReturnFactor
	// times it. 0: not set yet (return_windows).
	wait int
	// returned is when auto last returned to batch (zero: never).
	returned time.Time
}

// The relapse backoff of auto's return to batch (doc.go, "Adaptive mode
// and auto's fall-back"): a fall-back less than relapseWithin after the
// last return doubles the calm windows the next return needs, up to
// maxReturnFactor × fallback.return_windows; a later one restarts from
// return_windows.
const (
	relapseWithin   = time.Minute
	maxReturnFactor = 16
)

// fallbackWindow drains the window's counts and applies auto's rule for
// one window (n completions, admitted percentile q from the histogram).
func (a *App) fallbackWindow(now time.Time, cfg *appConfig, n uint64, q time.Duration) {
	a.fb.Lock()
	defer a.fb.Unlock()
	cn, over, noTiming := a.win.n.Swap(0), a.win.over.Swap(0), a.win.noTiming.Swap(0)
	admits, probes := a.win.admits.Swap(0), a.win.probes.Swap(0)
	probes += a.win.spare.Swap(0) // admitted by the work-conserving rule, not by the test
	estS, gotS := a.win.estS.Swap(0), a.win.gotS.Swap(0)
	sw := a.sw.Load()
	mode := sw.Mode()
	last := a.fb.last
	a.fb.last = mode
	f := cfg.fallback
	if _, forced := sw.Forced(); forced || sw.Configured() != admission.ModeAuto || !f.Enabled || mode != last {
		// Not auto (or the operator holds a mode: Force), or the mode
		// changed within the window: the window belongs to no one mode.
		a.fb.bad, a.fb.calm = 0, 0
		return
	}
	rsla := time.Duration(a.rsla.Load())
	noTimingShare := 0.0
	if cn > 0 {
		noTimingShare = float64(noTiming) / float64(cn)
	}
	switch mode {
	case admission.ModeBatch:
		if cn < minSamples {
			a.fb.bad = 0
			return
		}
		// The admitted percentile missed R_sla exactly when more than
		// (1 − p) of the admitted completions were over it.
		missed := 100*float64(over) > (100-cfg.percentile)*float64(cn) && admits-probes > 0
		blind := noTimingShare > f.NoTimingShare
		// The service times the backends report jumped: together more
		// than jumpRatio times the estimates their requests were
		// admitted with (the farm became slower; the estimator's
		// averages follow over tens of seconds). Decision: a window
		// against the model whatever the percentile did; see doc.go.
		jumped := estS > 0 && float64(gotS) > jumpRatio*float64(estS)
		if !missed && !blind && !jumped {
			a.fb.bad = 0
			return
		}
		if a.fb.bad++; a.fb.bad < f.MissWindows {
			return
		}
		reason := "percentile_missed"
		switch {
		case missed:
		case jumped:
			reason = "service_time_jump"
		default:
			reason = "no_service_time"
		}
		a.seedAdaptive(q)
		wait := f.ReturnWindows
		if !a.fb.returned.IsZero() && now.Sub(a.fb.returned) < relapseWithin {
			wait = min(2*max(a.fb.wait, f.ReturnWindows), maxReturnFactor*f.ReturnWindows)
		}
		if sw.Fallback(now, admission.ModeAdaptive, reason, "windows", a.fb.bad, "over_share", float64(over)/float64(cn),
			"no_timing_share", noTimingShare, "service_over_estimate", ratio(gotS, estS), "rsla", rsla.String(), "percentile", cfg.percentile,
			"return_windows", wait) {
			a.fb.last = admission.ModeAdaptive
			a.fb.wait = wait
			// The requests batch mode left in flight are the farm's load:
			// the controller counts them (their completions come to it
			// as Ended, Done), for its backlog and in-flight limit.
			done := 0.0
			for _, cs := range *a.classes.Load() {
				done += math.Float64frombits(cs.doneRate.Load())
			}
			a.adp.Load().SetInFlight(a.Inflight(), done)
		}
		a.fb.bad = 0
	case admission.ModeAdaptive:
		// Calm: the fall-back's reasons have cleared. The admitted
		// percentile is well within R_sla, the responses carry service
		// times, and those the backends reported agree with the
		// estimates they were admitted with (not jumpRatio times more:
		// the estimator has caught up with a slower farm, or the farm is
		// fast again), and the backends are not queueing now (QNow ≤
		// R_sla/10): batch does not take over the queue adaptive mode
		// holds under a lasting overload (doc.go).
		jumped := estS > 0 && float64(gotS) > jumpRatio*float64(estS)
		calm := cn < minSamples || n > 0 && float64(q) <= f.ReturnRatio*float64(rsla) && noTimingShare <= f.NoTimingShare && !jumped && a.QNow() <= rsla/10
		if !calm {
			a.fb.calm = 0
			return
		}
		wait := a.fb.wait
		if wait < f.ReturnWindows {
			wait = f.ReturnWindows
		}
		if a.fb.calm++; a.fb.calm < wait {
			return
		}
		if sw.Fallback(now, admission.ModeBatch, "model_usable", "windows", a.fb.calm, "percentile_seconds", q.Seconds(),
			"rsla", rsla.String(), "no_timing_share", noTimingShare, "service_over_estimate", ratio(gotS, estS)) {
			a.fb.last = admission.ModeBatch
			a.fb.returned = now
		}
		a.fb.calm = 0
	default:
		a.fb.bad, a.fb.calm = 0, 0
	}
}

// jumpRatio: a window in batch mode counts against the model when the
// service times the backends reported (Server-Timing) add up to more than
// jumpRatio times the estimates their requests were admitted with.
const jumpRatio = 2

// ratio is a/b, 0 when b is 0 (for the log line).
func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// seedAdaptive starts the adaptive controller, as auto falls back to it,
// for each class at the larger of what batch mode admitted and what
// completed per second over the last window (at least rate_min), and
// holds its cuts for one response time (the window's percentile q): the
// controller then cuts from there, as the percentile it misses says,
// instead of from rate_max (adaptive.Controller.Seed).
//
// Decision: the completions too, not the admissions alone. When the farm
// slows down, batch mode has already cut its admissions below what the
// farm finishes by the window the fall-back comes in (15/s against 66/s
// in e2e/scenarios/shift.yaml), and the controller, seeded there and cut
// again by the late responses of batch's queue, took 10 s to climb back.
//
// With admission.adaptive.shared the one controller is seeded with the
// sum over the classes.
func (a *App) seedAdaptive(q time.Duration) {
	c := a.adp.Load()
	shared := c.Config().Shared
	sum := 0.0
	for i, cs := range *a.classes.Load() {
		r := max(math.Float64frombits(cs.admRate.Load()), math.Float64frombits(cs.doneRate.Load()))
		if !shared {
			c.Seed(i, r, q)
		}
		sum += r
	}
	if shared {
		c.Seed(0, sum, q)
	}
}

// adaptiveTargets gives every class the R_sla in force: the app's SLA
// has one target, which follows the arrival rate (QoS table).
func (a *App) adaptiveTargets() {
	c := a.adp.Load()
	ts := make([]time.Duration, c.Classes())
	for i := range ts {
		ts[i] = time.Duration(a.rsla.Load())
	}
	_ = c.SetTargets(ts) // one per class, > 0: cannot fail
}

// startAdaptive (re)builds the adaptive controller when its settings or
// the classes changed, carrying each class's learned rate and percentile
// by name; a.mu held.
func (a *App) startAdaptive(ac *policy.App, names []string, percentile float64) error {
	old := a.adp.Load()
	if old != nil && a.mu.adpCfg == ac.Admission.Adaptive && equalNames(a.mu.adpNames, names) &&
		old.Config().Percentile == percentile {
		return nil
	}
	ts := make([]time.Duration, len(names))
	for i := range ts {
		ts[i] = time.Duration(a.rsla.Load())
	}
	cfg := ac.Admission.Adaptive.Config(ts, percentile)
	cfg.Now = a.now
	// The farm's in-flight count is the pool's: every end of an exchange
	// releases it, where the controller's own count sees only the
	// requests that got a response (adaptive.Config.InFlight).
	cfg.InFlight = a.Inflight
	cfg.Idle = a.Idle
	cfg.Queueing = a.Queueing
	cfg.ShareRates = a.shareRates // fair share's tiers (fairshare.go)
	c, err := adaptive.New(cfg)
	if err != nil {
		return fmt.Errorf("adaptive: %w", err)
	}
	if old != nil {
		byName := map[string]int{}
		for j, n := range a.mu.adpNames {
			byName[n] = j
		}
		for i, n := range names {
			if j, ok := byName[n]; ok {
				c.Carry(i, old, j)
			}
		}
		if sw := a.sw.Load(); sw != nil && sw.Mode() == admission.ModeAdaptive {
			// The old controller's requests in flight complete here.
			c.Inherit(old)
		}
	}
	if a.mu.adpCancel != nil {
		a.mu.adpCancel()
	}
	ctx, cancel := context.WithCancel(a.ctx)
	a.mu.adpCancel, a.mu.adpCfg, a.mu.adpNames = cancel, ac.Admission.Adaptive, append([]string(nil), names...)
	a.adp.Store(c)
	if !a.noLoops {
		a.wg.Add(1)
		go func() { defer a.wg.Done(); _ = c.Run(ctx) }()
	}
	return nil
}

func equalNames(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// adaptiveMetrics exports every app's adaptive controller (rate, tokens,
// cur, err, samples, runs, lc, decisions; adaptive.Collector) with the
// labels app and class, both from the policy. It describes nothing (an
// unchecked collector), since the set of apps follows reloads.
type adaptiveMetrics struct{ m *Manager }

func (c adaptiveMetrics) Describe(chan<- *prometheus.Desc) {}

func (c adaptiveMetrics) Collect(ch chan<- prometheus.Metric) {
	apps := c.m.appList()
	for _, a := range apps {
		a.mu.Lock()
		names := a.mu.adpNames
		a.mu.Unlock()
		adaptive.NewCollector(a.adp.Load(), names, prometheus.Labels{"app": a.name}).Collect(ch)
	}
}
