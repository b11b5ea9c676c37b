package admission

// Mode switch (Cataclysm §3.3, last paragraph; docs/algorithms.md §4): see Switch.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// Mode is an admission mode. ModeAuto is only a configured mode: the
// current mode of a Switch is always batch, threshold, adaptive or off.
type Mode uint32

const (
	// ModeAuto starts in batch mode and switches on CPU utilisation.
	ModeAuto Mode = iota
	// ModeBatch is batch admission (batchac), Cataclysm §3.1–3.2.
	ModeBatch
	// ModeThreshold is threshold admission (thresholdac), Cataclysm §3.3.
	ModeThreshold
	// ModeOff admits every request.
	ModeOff
	// ModeAdaptive is SEDA's response-time controller (package adaptive):
	// a token bucket per class whose rate follows the measured percentile.
	// Auto mode falls back to it when the batch model is known to be wrong
	// (Switch.Fallback; see control's doc.go for the rule).
	ModeAdaptive
	numModes
)

var modeNames = [numModes]string{
	ModeAuto:      "auto",
	ModeBatch:     "batch",
	ModeThreshold: "threshold",
	ModeOff:       "off",
	ModeAdaptive:  "adaptive",
}

// String returns the mode's configuration and metric label value.
func (m Mode) String() string {
	if m < numModes {
		return modeNames[m]
	}
	return "unknown"
}

// ParseMode parses "auto", "batch", "threshold", "adaptive" or "off".
func ParseMode(s string) (Mode, error) {
	for m, name := range modeNames {
		if s == name {
			return Mode(m), nil
		}
	}
	return 0, fmt.Errorf("admission: unknown mode %q (want auto, batch, threshold, adaptive or off)", s)
}

// Defaults for SwitchConfig (docs/algorithms.md §4).
const (
	DefaultCPUHigh        = 0.85
	DefaultCPULow         = 0.6
	DefaultHold           = 2 * time.Second
	DefaultRevertAfter    = 30 * time.Second
	DefaultSampleInterval = 500 * time.Millisecond
)

// SwitchConfig configures a Switch. Zero values mean the defaults.
type SwitchConfig struct {
	// Mode is the configured mode. Default ModeAuto.
	Mode Mode
	// CPUHigh is the utilisation (fraction of GOMAXPROCS CPUs) above which
	// batch mode gives way to threshold mode. Default 0.85; in (CPULow, 1].
	CPUHigh float64
	// CPULow is the utilisation below which threshold mode reverts to batch
	// mode. Default 0.6; in (0, CPUHigh).
	CPULow float64
	// Hold is how long utilisation must stay above CPUHigh. Default 2s.
	Hold time.Duration
	// RevertAfter is how long utilisation must stay below CPULow. Default 30s.
	RevertAfter time.Duration
	// MaxRevertAfter caps the relapse backoff of RevertAfter. Default
	// 8×RevertAfter; at least RevertAfter.
	MaxRevertAfter time.Duration
	// Rate, if set, returns the total arrival rate at the sentry in
	// requests per second; it anchors the revert (see the package notes).
	// Nil disables the anchor. Called only by the sampler.
	Rate func() float64
	// CPU reads the process's CPU time. Nil means ProcessCPUTime.
	CPU func() (time.Duration, error)
	// Procs returns the number of usable CPUs. Nil means UsableCPUs
	// (GOMAXPROCS, or a smaller cgroup CPU quota).
	Procs func() int
	// Now is the sampler's clock. Nil means time.Now.
	Now func() time.Time
	// Logger receives switch and sampler messages. Nil means no logging.
	Logger hclog.Logger
	// Registerer receives the switch's metrics. Nil means none.
	Registerer prometheus.Registerer
	// OnSwitch, if set, is called after each switch, outside any lock, on
	// the goroutine that called Observe.
	OnSwitch func(from, to Mode, at time.Time)
}

// SwitchStatus is a snapshot of a Switch for status pages.
type SwitchStatus struct {
	Configured Mode
	Mode       Mode
	// Forced: the operator holds Mode (Force); the switch's rules wait.
	Forced bool
	// Since is when the current mode was entered (zero if never switched).
	Since time.Time
	// Utilization is the last observed utilisation (NaN before the first).
	Utilization float64
	// ToThreshold and ToBatch count CPU switches in each direction
	// (ToBatch includes returns from adaptive); ToAdaptive counts
	// fall-backs to adaptive mode (Fallback).
	ToThreshold, ToBatch, ToAdaptive uint64
	// RevertAfter is the current revert wait, after relapse backoff.
	RevertAfter time.Duration
}

// Switch chooses between batch and threshold admission from the sentry's
// CPU utilisation, with hysteresis. Mode is one atomic load; Observe and Run
// are for the sampler. All methods are safe for concurrent use.
//
// The sentry runs the accurate batch admission (batchac) while it can afford
// it and falls back to the cheap threshold admission (thresholdac) when its
// own CPU saturates. A Switch holds the current mode in an atomic; Switched
// dispatches each request on it with one atomic load. A sampler goroutine
// (Switch.Run) measures the process's CPU utilisation, ΔCPU/(Δwall ×
// GOMAXPROCS) from getrusage, and feeds Switch.Observe, which applies the
// hysteresis:
//
//   - batch → threshold when utilisation stays above CPUHigh (0.85) for Hold
//     (2s): every sample from the first one above CPUHigh to one at least
//     Hold later is above it. A sample at or below CPUHigh restarts the wait.
//   - threshold → batch when utilisation stays below CPULow (0.6) for
//     RevertAfter (30s), measured the same way; a sample at or above CPULow
//     restarts it.
//
// Saturation episode. An episode starts with a switch to threshold mode and
// ends with the next revert to batch mode. Within an episode there is at
// most one switch each way by construction (the machine has two states and
// each transition needs its own uninterrupted run of samples), and an
// episode lasts at least RevertAfter, so noise oscillating around either
// threshold cannot make the mode flap: oscillating around CPUHigh never
// stays above it for Hold, and oscillating around CPULow never stays below
// it for RevertAfter.
//
// Mode-induced relapse. Threshold mode is several times cheaper than batch
// mode (×4.75 in the paper), so under a sustained overload the sentry's CPU
// falls below CPULow *because* it switched, and a naive switch would revert
// after RevertAfter, saturate again within Hold and switch again, for ever.
// Two guards stop that:
//
//   - Rate anchor (when SwitchConfig.Rate is set): the arrival rate is a
//     load signal that does not depend on the mode. At the switch the
//     utilisation u₀ and arrival rate r₀ are recorded; the revert also
//     requires the predicted batch-mode utilisation u₀·r/r₀ to be below
//     CPULow, i.e. the overload that caused the switch has really gone.
//   - Relapse backoff: a switch to threshold less than RevertAfter after the
//     previous revert counts as a relapse and doubles the wait for the next
//     revert (up to MaxRevertAfter, default 8×RevertAfter); a switch after a
//     longer calm resets it to RevertAfter. Without a rate, a sustained
//     overload then switches 2 times per 30s, 60s, 120s, …, and at most 2
//     times per MaxRevertAfter + Hold once the cap is reached.
//
// Forced modes (batch, threshold, adaptive, off) never switch; the sampler still runs
// so that the utilisation gauge stays live. The same holds for a mode the
// operator forces at run time (Force, until Unforce), whatever the
// configured mode.
//
// Requests already waiting in a batch queue when the mode flips are still
// decided by the batch policer; only new requests see the new mode.
//
// Visibility: every switch is logged at info level with key/value pairs
// (from, to, utilization, held, rate, revert_after), counted in
// sentry_admission_mode_switches_total{direction="to_threshold"|"to_batch"},
// and the current mode is the gauge sentry_admission_mode{mode=...} (1 for
// the active mode, 0 for the others). sentry_cpu_utilization_ratio is the
// last sample and sentry_admission_revert_after_seconds the current revert
// wait. All are read at scrape time from atomics.
//
// Lock order: Switch.mu is a leaf; nothing is called under it (logging and
// OnSwitch run after it is released). Admit never takes it.
//
// Usage:
//
//	sw, err := admission.NewSwitch(admission.SwitchConfig{
//		Logger: logger, Registerer: reg, Rate: estimator.TotalRate,
//	})
//	go sw.Run(ctx, 250*time.Millisecond)
//	var a admission.Admitter = &admission.Switched{Batch: batch, Threshold: threshold, Switch: sw}
type Switch struct {
	mode       atomic.Uint32
	forced     atomic.Bool   // Force holds mode; observe and Fallback leave it
	util       atomic.Uint64 // math.Float64bits of the last utilisation
	toThr      atomic.Uint64
	toBatch    atomic.Uint64
	toAdaptive atomic.Uint64
	revertWait atomic.Int64 // current RevertAfter, ns

	cfg SwitchConfig
	log hclog.Logger

	mu struct {
		sync.Mutex
		since              time.Time // entered the current mode
		runStart           time.Time // first sample of the current run above CPUHigh / below CPULow
		inRun              bool
		lastRevert         time.Time
		reverted           bool
		anchorU, anchorR   float64 // utilisation and rate at the last switch to threshold
		revertAfter        time.Duration
		lastSample         time.Time
		lastSampleRecorded bool
	}
}

// NewSwitch validates cfg, fills defaults, registers the metrics and returns
// a switch in the configured mode (batch for auto).
func NewSwitch(cfg SwitchConfig) (*Switch, error) {
	if cfg.Mode >= numModes {
		return nil, fmt.Errorf("admission: mode %d is not valid", cfg.Mode)
	}
	if cfg.CPUHigh == 0 {
		cfg.CPUHigh = DefaultCPUHigh
	}
	if cfg.CPULow == 0 {
		cfg.CPULow = DefaultCPULow
	}
	if !(cfg.CPULow > 0 && cfg.CPULow < cfg.CPUHigh && cfg.CPUHigh <= 1) {
		return nil, fmt.Errorf("admission: want 0 < cpu_low < cpu_high ≤ 1, got cpu_low %v, cpu_high %v", cfg.CPULow, cfg.CPUHigh)
	}
	if cfg.Hold < 0 || cfg.RevertAfter < 0 || cfg.MaxRevertAfter < 0 {
		return nil, errors.New("admission: hold, revert_after and max_revert_after must not be negative")
	}
	if cfg.Hold == 0 {
		cfg.Hold = DefaultHold
	}
	if cfg.RevertAfter == 0 {
		cfg.RevertAfter = DefaultRevertAfter
	}
	if cfg.MaxRevertAfter == 0 {
		cfg.MaxRevertAfter = 8 * cfg.RevertAfter
	}
	if cfg.MaxRevertAfter < cfg.RevertAfter {
		return nil, fmt.Errorf("admission: max_revert_after %v is below revert_after %v", cfg.MaxRevertAfter, cfg.RevertAfter)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Switch{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = hclog.NewNullLogger()
	}
	s.log = s.log.Named("modeswitch")
	cur := cfg.Mode
	if cur == ModeAuto {
		cur = ModeBatch
	}
	s.mode.Store(uint32(cur))
	s.util.Store(math.Float64bits(math.NaN()))
	s.mu.revertAfter = cfg.RevertAfter
	s.revertWait.Store(int64(cfg.RevertAfter))
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(newSwitchCollector(s)); err != nil {
			return nil, fmt.Errorf("admission: registering mode switch metrics: %w", err)
		}
	}
	return s, nil
}

// Mode returns the current mode (batch, threshold, adaptive or off) with one atomic load.
func (s *Switch) Mode() Mode { return Mode(s.mode.Load()) }

// Configured returns the configured mode.
func (s *Switch) Configured() Mode { return s.cfg.Mode }

// Status returns a snapshot for status pages.
func (s *Switch) Status() SwitchStatus {
	s.mu.Lock()
	since := s.mu.since
	s.mu.Unlock()
	return SwitchStatus{
		Configured:  s.cfg.Mode,
		Mode:        s.Mode(),
		Forced:      s.forced.Load(),
		Since:       since,
		Utilization: math.Float64frombits(s.util.Load()),
		ToThreshold: s.toThr.Load(),
		ToBatch:     s.toBatch.Load(),
		ToAdaptive:  s.toAdaptive.Load(),
		RevertAfter: time.Duration(s.revertWait.Load()),
	}
}

// Observe feeds one utilisation sample taken at now (samples must come in
// time order; NaN is ignored). In auto mode it may switch the mode.
func (s *Switch) Observe(now time.Time, utilization float64) {
	s.observe(now, utilization, math.NaN())
}

// ObserveRate is Observe with the arrival rate (requests per second) at
// now, which anchors the revert; NaN or ≤ 0 means unknown.
func (s *Switch) ObserveRate(now time.Time, utilization, rate float64) {
	s.observe(now, utilization, rate)
}

// switchEvent describes a switch, for logging after the lock is released.
type switchEvent struct {
	from, to    Mode
	held        time.Duration
	revertAfter time.Duration
	relapse     bool
}

func (s *Switch) observe(now time.Time, u, rate float64) {
	if math.IsNaN(u) {
		return
	}
	s.util.Store(math.Float64bits(u))
	if s.cfg.Mode != ModeAuto || s.forced.Load() {
		return
	}
	if !(rate > 0) || math.IsInf(rate, 0) {
		rate = math.NaN()
	}

	var ev *switchEvent
	s.mu.Lock()
	if s.mu.lastSampleRecorded && now.Before(s.mu.lastSample) {
		s.mu.Unlock()
		return // out of order: ignore rather than corrupt the runs
	}
	s.mu.lastSample, s.mu.lastSampleRecorded = now, true
	if s.forced.Load() { // re-read under mu: Force holds it and resets the runs
		s.mu.Unlock()
		return
	}

	switch cur := s.Mode(); cur {
	case ModeBatch:
		if u > s.cfg.CPUHigh {
			if !s.mu.inRun {
				s.mu.runStart, s.mu.inRun = now, true
			}
			if held := now.Sub(s.mu.runStart); held >= s.cfg.Hold {
				ev = &switchEvent{from: cur, to: ModeThreshold, held: held}
				// Relapse: saturated again soon after reverting.
				if s.mu.reverted && now.Sub(s.mu.lastRevert) < s.cfg.RevertAfter {
					ev.relapse = true
					s.mu.revertAfter = min(2*s.mu.revertAfter, s.cfg.MaxRevertAfter)
				} else {
					s.mu.revertAfter = s.cfg.RevertAfter
				}
				ev.revertAfter = s.mu.revertAfter
				s.mu.anchorU, s.mu.anchorR = u, rate
				s.enter(ModeThreshold, now)
				s.toThr.Add(1)
			}
		} else {
			s.mu.inRun = false
		}
	case ModeThreshold:
		below := u < s.cfg.CPULow
		if below && !math.IsNaN(s.mu.anchorR) && !math.IsNaN(rate) {
			// Predicted batch-mode utilisation at the current rate.
			below = s.mu.anchorU*rate/s.mu.anchorR < s.cfg.CPULow
		}
		if below {
			if !s.mu.inRun {
				s.mu.runStart, s.mu.inRun = now, true
			}
			if held := now.Sub(s.mu.runStart); held >= s.mu.revertAfter {
				ev = &switchEvent{from: cur, to: ModeBatch, held: held, revertAfter: s.mu.revertAfter}
				s.mu.lastRevert, s.mu.reverted = now, true
				s.enter(ModeBatch, now)
				s.toBatch.Add(1)
			}
		} else {
			s.mu.inRun = false
		}
	}
	s.mu.Unlock()

	if ev == nil {
		return
	}
	kv := []any{
		"from", ev.from.String(), "to", ev.to.String(),
		"utilization", u, "held", ev.held.String(),
		"cpu_high", s.cfg.CPUHigh, "cpu_low", s.cfg.CPULow,
		"revert_after", ev.revertAfter.String(),
	}
	if !math.IsNaN(rate) {
		kv = append(kv, "rate", rate)
	}
	if ev.relapse {
		kv = append(kv, "relapse", true)
	}
	s.log.Info("admission mode switched", kv...)
	if s.cfg.OnSwitch != nil {
		s.cfg.OnSwitch(ev.from, ev.to, now)
	}
}

// Fallback moves an auto switch between batch and adaptive mode on the
// health of the batch model, which the caller judges (package control
// does, once per window; its doc.go gives the rule): to = ModeAdaptive
// leaves batch mode, to = ModeBatch leaves adaptive mode. It does nothing
// and returns false in a forced mode, or when the current mode is not the
// one to leave: threshold mode belongs to the CPU rule, and the CPU rule
// does not act in adaptive mode (a token bucket costs less than threshold
// mode's draw). A switch is logged at info level with reason and the
// caller's key/value pairs, counted (to_adaptive, or to_batch), and
// OnSwitch is called, all after the lock is released.
func (s *Switch) Fallback(now time.Time, to Mode, reason string, kv ...any) bool {
	if s.cfg.Mode != ModeAuto {
		return false
	}
	var from Mode
	switch to {
	case ModeAdaptive:
		from = ModeBatch
	case ModeBatch:
		from = ModeAdaptive
	default:
		return false
	}
	s.mu.Lock()
	if s.Mode() != from || s.forced.Load() {
		s.mu.Unlock()
		return false
	}
	s.enter(to, now)
	s.mu.Unlock()
	if to == ModeAdaptive {
		s.toAdaptive.Add(1)
	} else {
		s.toBatch.Add(1)
	}
	s.log.Info("admission mode switched", append([]any{"from", from.String(), "to", to.String(), "reason", reason}, kv...)...)
	if s.cfg.OnSwitch != nil {
		s.cfg.OnSwitch(from, to, now)
	}
	return true
}

// Force holds the switch in mode m -- batch, threshold, adaptive or off
// -- until Unforce: the operator's override (the admin API), for a
// configured mode as for auto. Neither the CPU rule nor Fallback moves a
// forced switch; the sampler goes on, so the utilisation gauge stays
// live. It returns the mode left. A forced change is not a switch of the
// switch's own: it is not counted in the switches, logged or passed to
// OnSwitch (the caller logs who asked). Requests waiting in a batch queue
// are still decided there (Switched's rule).
func (s *Switch) Force(m Mode, now time.Time) (from Mode, err error) {
	switch m {
	case ModeBatch, ModeThreshold, ModeAdaptive, ModeOff:
	default:
		return s.Mode(), fmt.Errorf("admission: cannot force mode %s (want batch, threshold, adaptive or off)", m)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	from = s.Mode()
	s.forced.Store(true)
	if from != m {
		s.enter(m, now)
	}
	s.mu.inRun = false
	return from, nil
}

// Unforce ends a Force: the switch goes back to its configured mode, or,
// when that is auto, to batch mode, where the CPU rule and the fall-back
// start over (as at NewSwitch). It returns the mode it leaves and whether
// a Force held it.
func (s *Switch) Unforce(now time.Time) (from Mode, was bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	from = s.Mode()
	if !s.forced.Load() {
		return from, false
	}
	to := s.cfg.Mode
	if to == ModeAuto {
		to = ModeBatch
	}
	if from != to {
		s.enter(to, now)
	}
	s.mu.inRun = false
	s.forced.Store(false)
	return from, true
}

// Forced returns the mode a Force holds, if one does.
func (s *Switch) Forced() (Mode, bool) {
	if !s.forced.Load() {
		return 0, false
	}
	return s.Mode(), true
}

// enter moves to mode m at now; s.mu must be held.
func (s *Switch) enter(m Mode, now time.Time) {
	s.mode.Store(uint32(m))
	s.mu.since = now
	s.mu.inRun = false
	s.revertWait.Store(int64(s.mu.revertAfter))
}

// Run samples the process's CPU utilisation every interval (DefaultSampleInterval
// when ≤ 0) and feeds Observe until ctx is done. It is the switch's only
// goroutine; the caller owns it. CPU read errors are logged when they start
// and when they stop; no sample is taken meanwhile.
func (s *Switch) Run(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultSampleInterval
	}
	meter := NewCPUMeter(s.cfg.CPU, s.cfg.Procs)
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	sample := func() {
		now := s.cfg.Now()
		u, ok, err := meter.Sample(now)
		switch {
		case err != nil:
			if !failing {
				s.log.Warn("cannot read process CPU time; mode switch paused", "error", err)
				failing = true
			}
			return
		case failing:
			s.log.Info("reading process CPU time again")
			failing = false
		}
		if !ok {
			return
		}
		rate := math.NaN()
		if s.cfg.Rate != nil {
			rate = s.cfg.Rate()
		}
		s.observe(now, u, rate)
	}
	sample() // prime the meter
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			sample()
		}
	}
}

// Switched is an Admitter that dispatches on a Switch's current mode with
// one atomic load: batch → Batch, threshold → Threshold, adaptive →
// Adaptive, off → admit. Each must be non-nil for every mode the Switch
// can be in (auto: Batch and Threshold, and Adaptive if Fallback is used).
type Switched struct {
	Batch, Threshold, Adaptive Admitter
	Switch                     *Switch
}

var _ Admitter = (*Switched)(nil)

// Admit implements Admitter.
// The decision is marked with the mode that took it (Decision.Mode).
func (s *Switched) Admit(r *Request) Decision {
	var d Decision
	m := s.Switch.Mode()
	switch m {
	case ModeThreshold:
		d = s.Threshold.Admit(r)
	case ModeAdaptive:
		d = s.Adaptive.Admit(r)
	case ModeOff:
		d = Decision{Verdict: Admit}
	default:
		m = ModeBatch
		d = s.Batch.Admit(r)
	}
	d.Mode = m
	return d
}

// switchCollector exports a Switch's state at scrape time.
type switchCollector struct {
	s                            *Switch
	mode, switches, util, revert *prometheus.Desc
}

func newSwitchCollector(s *Switch) *switchCollector {
	return &switchCollector{
		s:        s,
		mode:     prometheus.NewDesc("sentry_admission_mode", "Current admission mode: 1 for the active mode, 0 for the others.", []string{"mode"}, nil),
		switches: prometheus.NewDesc("sentry_admission_mode_switches_total", "Admission mode switches by direction.", []string{"direction"}, nil),
		util:     prometheus.NewDesc("sentry_cpu_utilization_ratio", "Last sampled CPU utilisation of the sentry process, as a fraction of GOMAXPROCS CPUs.", nil, nil),
		revert:   prometheus.NewDesc("sentry_admission_revert_after_seconds", "Current wait below cpu_low before reverting to batch mode (grows on relapse).", nil, nil),
	}
}

func (c *switchCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.mode
	ch <- c.switches
	ch <- c.util
	ch <- c.revert
}

func (c *switchCollector) Collect(ch chan<- prometheus.Metric) {
	cur := c.s.Mode()
	for _, m := range [...]Mode{ModeBatch, ModeThreshold, ModeAdaptive, ModeOff} {
		v := 0.0
		if m == cur {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.mode, prometheus.GaugeValue, v, m.String())
	}
	ch <- prometheus.MustNewConstMetric(c.switches, prometheus.CounterValue, float64(c.s.toThr.Load()), "to_threshold")
	ch <- prometheus.MustNewConstMetric(c.switches, prometheus.CounterValue, float64(c.s.toBatch.Load()), "to_batch")
	ch <- prometheus.MustNewConstMetric(c.switches, prometheus.CounterValue, float64(c.s.toAdaptive.Load()), "to_adaptive")
	if u := math.Float64frombits(c.s.util.Load()); !math.IsNaN(u) {
		ch <- prometheus.MustNewConstMetric(c.util, prometheus.GaugeValue, u)
	}
	ch <- prometheus.MustNewConstMetric(c.revert, prometheus.GaugeValue, time.Duration(c.s.revertWait.Load()).Seconds())
}
