package thresholdac

import (
	"fmt"
	"math"
	"sync"
)

// Observation is what the sentry saw during one measurement interval
// (typically the recompute period).
type Observation struct {
	// Work is the admitted work rate Σ_j λ_admitted,j·s_j over the whole
	// farm during the interval, in server-seconds per second.
	Work float64
	// SLAMet is whether admitted requests met R_sla (at its percentile)
	// during the interval. The caller decides what counts; it should
	// require a minimum number of completions so that one slow request at
	// low load is not taken as evidence of saturation.
	SLAMet bool
	// Healthy is n during the interval. Observations with n ≤ 0 are ignored.
	Healthy int
	// Limited is whether admission control turned requests away during
	// the interval, i.e. the admitted work was capped by the controller
	// rather than by demand. Only limited intervals may probe upward.
	Limited bool
}

// LearnerConfig tunes a Learner. Zero values mean the defaults.
type LearnerConfig struct {
	// Initial is the per-server capacity (server-seconds/s) assumed before
	// any observation. Zero means unknown: PerServer reports !ok.
	Initial float64
	// Floor is the lowest estimate a violation can cut to. Zero means no
	// floor (only positive values are ever reported as known).
	Floor float64
	// Rise is the fraction of the gap closed when an SLA-meeting interval
	// sustained more work than the estimate. Default 0.25; in (0, 1].
	Rise float64
	// Backoff is the multiplicative cut after an SLA violation:
	// estimate = min(estimate, w)·(1 − Backoff). Default 0.05; in [0, 1).
	Backoff float64
	// Probe is the multiplicative increase after a limited, SLA-meeting
	// interval that used the estimate: estimate ×= 1 + Probe.
	// Default 0.01; ≥ 0 (0 disables probing).
	Probe float64
	// ProbeSlack bounds probing: it applies only when the interval's
	// per-server work w ≥ (1 − ProbeSlack)·estimate, so the estimate never
	// exceeds the largest sustained w by more than a factor
	// (1 + Probe)/(1 − ProbeSlack). Default 0.1; in (0, 1).
	ProbeSlack float64
}

// Learner learns the per-server capacity, in server-seconds per second,
// from per-interval observations of admitted work and SLA compliance
// (docs/algorithms.md §3, Capacity K: the admitted work rate Σ S/interval
// per backend, in intervals that met the SLA, raises the estimate; one that
// missed it cuts the estimate).
//
// With w = Work/Healthy, the per-server work of an interval:
//
//   - SLA met, w above the estimate: move toward w by Rise (the first
//     observation sets the estimate to w). Sustained work is a lower bound
//     on capacity; Rise damps a single lucky interval.
//   - SLA met, Limited, and w ≥ (1−ProbeSlack)·estimate: multiply by
//     1+Probe. Without this the estimate could never exceed what was once
//     sustained, and threshold mode (which admits ≈ K) would keep it stuck
//     low forever.
//   - SLA missed with w > 0: estimate = max(Floor, min(estimate, w)·(1−Backoff)).
//     Missing the SLA at w is evidence that capacity is below w.
//
// This is additive-increase/multiplicative-decrease in spirit: a sawtooth
// just under the work rate at which the SLA starts to be missed. A time-
// decayed maximum was rejected because it forgets the capacity during quiet
// periods, which is exactly when the next overload arrives, and it cannot
// learn from violations.
//
// Learner is safe for concurrent use; it is not on the request path.
type Learner struct {
	cfg LearnerConfig
	mu  sync.Mutex
	est float64 // guarded by mu; 0 means unknown
	n   uint64  // observations used, guarded by mu
}

var _ CapacitySource = (*Learner)(nil)

// NewLearner validates cfg, fills defaults and returns a learner.
func NewLearner(cfg LearnerConfig) (*Learner, error) {
	bad := func(name string, v float64, want string) error {
		return fmt.Errorf("thresholdac: learner %s is %v, want %s", name, v, want)
	}
	finiteNonNeg := func(v float64) bool { return v >= 0 && !math.IsInf(v, 0) } // false for NaN
	if !finiteNonNeg(cfg.Initial) {
		return nil, bad("Initial", cfg.Initial, "a finite value ≥ 0")
	}
	if !finiteNonNeg(cfg.Floor) {
		return nil, bad("Floor", cfg.Floor, "a finite value ≥ 0")
	}
	if cfg.Rise == 0 {
		cfg.Rise = 0.25
	}
	if !(cfg.Rise > 0 && cfg.Rise <= 1) {
		return nil, bad("Rise", cfg.Rise, "a value in (0, 1]")
	}
	if cfg.Backoff == 0 {
		cfg.Backoff = 0.05
	}
	if !(cfg.Backoff >= 0 && cfg.Backoff < 1) {
		return nil, bad("Backoff", cfg.Backoff, "a value in [0, 1)")
	}
	if cfg.Probe == 0 {
		cfg.Probe = 0.01
	}
	if !finiteNonNeg(cfg.Probe) {
		return nil, bad("Probe", cfg.Probe, "a finite value ≥ 0")
	}
	if cfg.ProbeSlack == 0 {
		cfg.ProbeSlack = 0.1
	}
	if !(cfg.ProbeSlack > 0 && cfg.ProbeSlack < 1) {
		return nil, bad("ProbeSlack", cfg.ProbeSlack, "a value in (0, 1)")
	}
	return &Learner{cfg: cfg, est: max(cfg.Initial, cfg.Floor)}, nil
}

// Observe folds one interval into the estimate. Observations with n ≤ 0,
// or a Work that is negative, NaN or infinite, are ignored; it reports
// whether o was used.
func (l *Learner) Observe(o Observation) bool {
	if o.Healthy <= 0 || !(o.Work >= 0) || math.IsInf(o.Work, 0) {
		return false
	}
	w := o.Work / float64(o.Healthy)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case !o.SLAMet:
		if w == 0 {
			return false // nothing admitted: the verdict says nothing about capacity
		}
		l.est = max(l.cfg.Floor, min(l.est, w)*(1-l.cfg.Backoff))
		if l.est == 0 { // unknown before: the violation is the first evidence
			l.est = w * (1 - l.cfg.Backoff)
		}
	case l.est == 0:
		if w == 0 {
			return false
		}
		l.est = w
	default:
		if w > l.est {
			l.est += l.cfg.Rise * (w - l.est)
		}
		if o.Limited && w >= (1-l.cfg.ProbeSlack)*l.est {
			l.est *= 1 + l.cfg.Probe
		}
	}
	l.n++
	return true
}

// PerServer returns the current estimate in server-seconds per second; ok
// is false until the first usable observation (or a non-zero Initial).
func (l *Learner) PerServer() (float64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.est, l.est > 0
}

// Observations returns how many observations have been used.
func (l *Learner) Observations() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// LearnerState is what a Learner has learned, to carry it to another
// process: the estimate (server-seconds per second; 0: unknown) and the
// observations behind it.
type LearnerState struct {
	PerServer    float64 `json:"per_server"`
	Observations uint64  `json:"observations"`
}

// State returns the learner's state.
func (l *Learner) State() LearnerState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return LearnerState{PerServer: l.est, Observations: l.n}
}

// Restore takes in a state another process exported. It reports false,
// and changes nothing, for an estimate that is not finite and ≥ 0; one
// below the Floor is raised to it.
func (l *Learner) Restore(s LearnerState) bool {
	if !(s.PerServer >= 0) || math.IsInf(s.PerServer, 0) {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.est, l.n = s.PerServer, s.Observations
	if l.est > 0 {
		l.est = max(l.est, l.cfg.Floor)
	}
	return true
}
