package estimator

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Config tunes one app's estimator. The zero value gives every default. The
// policy package converts its YAML into this type.
type Config struct {
	// HalfLife is the time after which a service-time sample (per key and per
	// class) counts half as much as a new one. Default 30s; zero means the
	// default; negative is an error.
	HalfLife time.Duration
	// QueueHalfLife is the half-life of the queueing-delay estimate Q.
	// Default 5s (decision: Q follows load, S is a property of the URL, so Q
	// must move faster than S for the fallback split measured = S + Q to put
	// a load change into Q). Zero means the default; negative is an error.
	QueueHalfLife time.Duration
	// MaxKeys caps the number of keys kept (all classes together). Default
	// 10000; zero means the default; negative is an error. The cap is split
	// evenly over the table's shards, so eviction may start a little before
	// the whole table is full; it is never exceeded.
	MaxKeys int
	// Alpha weights io time: S = cpu + α·io (Cataclysm eq. 3). Default 1;
	// zero means the default (use a tiny positive value to ignore io);
	// negative or non-finite is an error.
	Alpha float64
	// FitAlpha, when true, replaces Alpha by an online least-squares fit of
	// measured − queue − cpu = c + α·io over responses that report both cpu
	// and io, once the fit has the weight of 20 samples and io varies; the
	// fitted α is clamped at 0. Default false.
	FitAlpha bool
	// Edges are the bucket edges s_1 < … < s_b (see Buckets). Default ×4 from
	// 1ms (DefaultEdges); nil or empty means the default.
	Edges []time.Duration
	// RateWindow is the window arrivals are counted over. Default 1s; zero
	// means the default; negative is an error.
	RateWindow time.Duration
	// RateSmoothing is the time constant of the exponential smoothing of the
	// per-window rates: each window's rate enters with weight
	// 1 − exp(−RateWindow/RateSmoothing). Default 5s; zero means the default;
	// negative is an error.
	RateSmoothing time.Duration
	// ProbeInterval paces probes (see Estimator.Probe): at most one request
	// per class per interval is let through despite a rejection, and only
	// for a key (or, for an unseen key, a class) that has had no sample for
	// an interval. Default 1s; zero means the default; negative is an error.
	ProbeInterval time.Duration
	// Refresh is how often (in the time given to Observe) the per-class
	// means, Q and the α fit are recombined from the shards. Default 100ms;
	// zero means the default; negative is an error.
	Refresh time.Duration
}

// Defaults.
const (
	DefaultHalfLife      = 30 * time.Second
	DefaultQueueHalfLife = 5 * time.Second
	DefaultMaxKeys       = 10000
	DefaultAlpha         = 1.0
	DefaultRateWindow    = time.Second
	DefaultRateSmoothing = 5 * time.Second
	DefaultRefresh       = 100 * time.Millisecond
	DefaultProbeInterval = time.Second
)

func (c Config) withDefaults() (Config, error) {
	durs := []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"half_life", &c.HalfLife, DefaultHalfLife},
		{"queue_half_life", &c.QueueHalfLife, DefaultQueueHalfLife},
		{"rate_window", &c.RateWindow, DefaultRateWindow},
		{"rate_smoothing", &c.RateSmoothing, DefaultRateSmoothing},
		{"refresh", &c.Refresh, DefaultRefresh},
		{"probe_interval", &c.ProbeInterval, DefaultProbeInterval},
	}
	for _, d := range durs {
		if *d.v < 0 {
			return c, fmt.Errorf("estimator: %s %v is negative", d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.MaxKeys < 0 {
		return c, fmt.Errorf("estimator: max_keys %d is negative", c.MaxKeys)
	}
	if c.MaxKeys == 0 {
		c.MaxKeys = DefaultMaxKeys
	}
	if c.Alpha < 0 || math.IsNaN(c.Alpha) || math.IsInf(c.Alpha, 0) {
		return c, fmt.Errorf("estimator: alpha %v must be a finite number ≥ 0", c.Alpha)
	}
	if c.Alpha == 0 {
		c.Alpha = DefaultAlpha
	}
	if len(c.Edges) == 0 {
		c.Edges = DefaultEdges
	}
	return c, nil
}

func checkClasses(classes []string) error {
	if len(classes) == 0 {
		return errors.New("estimator: no classes")
	}
	seen := make(map[string]bool, len(classes))
	for _, n := range classes {
		if n == "" {
			return errors.New("estimator: empty class name")
		}
		if seen[n] {
			return fmt.Errorf("estimator: duplicate class %q", n)
		}
		seen[n] = true
	}
	return nil
}
