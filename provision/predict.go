package provision

import (
	"math"
	"time"
)

// Predictor turns samples of the offered arrival rate (admitted plus
// rejected, per second) into λ_pred: Holt's linear smoothing, a level and a
// trend each an exponentially decayed average with a time constant, and a
// forecast Horizon ahead (doc.go, "The predictor"). Not safe for concurrent
// use: its owner (one app's monitor) calls it once per tick.
type Predictor struct {
	// Level is the time constant of the smoothed rate (default 30s).
	Level time.Duration
	// Trend is the time constant of the smoothed slope (default 60s).
	Trend time.Duration
	// Horizon is how far ahead λ_pred looks (default 30s).
	Horizon time.Duration

	started bool
	last    time.Time
	level   float64 // 1/s
	slope   float64 // 1/s per second
}

// Defaults of Predictor's fields.
const (
	DefaultLevel   = 30 * time.Second
	DefaultTrend   = 60 * time.Second
	DefaultHorizon = 30 * time.Second
)

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Observe folds in the offered rate measured at now (requests per second).
// The first sample sets the level; a sample not after the previous one is
// ignored.
func (p *Predictor) Observe(now time.Time, rate float64) {
	if math.IsNaN(rate) || rate < 0 {
		rate = 0
	}
	if !p.started {
		p.started, p.last, p.level = true, now, rate
		return
	}
	dt := now.Sub(p.last).Seconds()
	if dt <= 0 {
		return
	}
	p.last = now
	a := 1 - math.Exp(-dt/orDefault(p.Level, DefaultLevel).Seconds())
	b := 1 - math.Exp(-dt/orDefault(p.Trend, DefaultTrend).Seconds())
	prev := p.level
	// Holt: the level moves toward the sample from its own forecast, the
	// slope toward the level's latest change per second.
	p.level = a*rate + (1-a)*(p.level+p.slope*dt)
	p.slope = b*(p.level-prev)/dt + (1-b)*p.slope
}

// Rate returns the smoothed offered rate (the level).
func (p *Predictor) Rate() float64 { return p.level }

// Slope returns the smoothed trend, in requests per second per second.
func (p *Predictor) Slope() float64 { return p.slope }

// Predict returns λ_pred = max(0, level + slope·Horizon).
func (p *Predictor) Predict() float64 {
	return max(0, p.level+p.slope*orDefault(p.Horizon, DefaultHorizon).Seconds())
}
