package provision

import "time"

// TriggerConfig holds the reactive trigger's settings (Cataclysm §5).
type TriggerConfig struct {
	// Window is the span the drop fraction is measured over (default 5m).
	Window time.Duration
	// FDrop is the drop fraction above which the trigger asks (default
	// 0.5; the comparison is strict).
	FDrop float64
	// Spacing is the least time between two asks (δ, default 5m).
	Spacing time.Duration
	// MaxStep is the most servers one ask asks for (Δ, default 1).
	MaxStep int
}

// Trigger defaults.
const (
	DefaultWindow  = 5 * time.Minute
	DefaultFDrop   = 0.5
	DefaultSpacing = 5 * time.Minute
	DefaultMaxStep = 1
)

// maxSamples bounds the trigger's history: with more samples in the window
// than this, the oldest are dropped and the window is measured from the
// oldest kept one that is at least Window old (the fraction is then over a
// slightly longer span, never a shorter one).
const maxSamples = 4096

type sample struct {
	at               time.Time
	offered, dropped uint64 // cumulative
}

// Trigger decides the reactive asks of one app. Feed it the app's
// cumulative offered and dropped counts once per tick with Observe. Not safe
// for concurrent use: its owner (one app's monitor) calls it.
type Trigger struct {
	cfg     TriggerConfig
	hist    []sample // oldest first
	lastAsk time.Time
	asked   bool
}

// NewTrigger returns a trigger with cfg's zero fields set to their defaults.
func NewTrigger(cfg TriggerConfig) *Trigger {
	t := &Trigger{}
	t.SetConfig(cfg)
	return t
}

// SetConfig changes the settings and keeps the history and the time of the
// last ask (a policy reload does not reopen the spacing).
func (t *Trigger) SetConfig(cfg TriggerConfig) {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.FDrop <= 0 {
		cfg.FDrop = DefaultFDrop
	}
	if cfg.Spacing <= 0 {
		cfg.Spacing = DefaultSpacing
	}
	if cfg.MaxStep <= 0 {
		cfg.MaxStep = DefaultMaxStep
	}
	t.cfg = cfg
}

// Config returns the settings in force, defaults filled in.
func (t *Trigger) Config() TriggerConfig { return t.cfg }

// Observe records the cumulative counts at now. A count that went
// backwards (a counter reset) restarts the history.
func (t *Trigger) Observe(now time.Time, offered, dropped uint64) {
	if n := len(t.hist); n > 0 {
		last := t.hist[n-1]
		if offered < last.offered || dropped < last.dropped || !now.After(last.at) {
			if offered < last.offered || dropped < last.dropped {
				t.hist = t.hist[:0]
			} else {
				return
			}
		}
	}
	t.hist = append(t.hist, sample{now, offered, dropped})
	// Keep one sample at or before now − Window: the window's start.
	cut := now.Add(-t.cfg.Window)
	i := 0
	for i+1 < len(t.hist) && !t.hist[i+1].at.After(cut) {
		i++
	}
	if over := len(t.hist) - i - maxSamples; over > 0 {
		i += over
	}
	if i > 0 {
		t.hist = append(t.hist[:0], t.hist[i:]...)
	}
}

// DropFraction returns the dropped share of the requests offered over the
// window ending at the latest sample, and whether the history covers the
// whole window yet. It is 0 when nothing was offered.
func (t *Trigger) DropFraction() (frac float64, full bool) {
	if len(t.hist) < 2 {
		return 0, false
	}
	first, last := t.hist[0], t.hist[len(t.hist)-1]
	full = last.at.Sub(first.at) >= t.cfg.Window
	off := last.offered - first.offered
	if off == 0 {
		return 0, full
	}
	return float64(last.dropped-first.dropped) / float64(off), full
}

// Ask returns how many servers to ask for at now, or 0: it asks when the
// history covers the window, the drop fraction exceeds FDrop, the last ask
// is at least Spacing old, and the app is below its ceiling. The ask is
// needed − current, at least 1 (the drops are evidence even when the model
// disagrees) and at most MaxStep and maxServers − current (maxServers ≤ 0:
// no ceiling). A non-zero answer counts as an ask: the spacing restarts.
func (t *Trigger) Ask(now time.Time, current, needed, maxServers int) int {
	frac, full := t.DropFraction()
	if !full || frac <= t.cfg.FDrop {
		return 0
	}
	if t.asked && now.Sub(t.lastAsk) < t.cfg.Spacing {
		return 0
	}
	n := max(needed-current, 1)
	n = min(n, t.cfg.MaxStep)
	if maxServers > 0 {
		n = min(n, maxServers-current)
	}
	if n <= 0 {
		return 0
	}
	t.asked, t.lastAsk = true, now
	return n
}
