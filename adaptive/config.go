package adaptive

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Config configures a Controller. Zero values take the paper's defaults
// (Welsh & Culler, Fig. 4 and §3.3), listed with each field.
type Config struct {
	// Targets is the response-time target of each class, most important
	// first; at least one, each > 0. The controller keeps each class's
	// Percentile of response times (measured from arrival at sentry) at or
	// below its target.
	Targets []time.Duration
	// Percentile of the samples compared with the target, in (0, 100).
	// Default 90.
	Percentile float64
	// NReq is how many completions of a class trigger its controller run
	// (nreq). Default 100.
	NReq int
	// Timeout runs a class's controller even with fewer than NReq samples,
	// once at least one sample exists and Timeout has passed since its last
	// run. Default 1s.
	Timeout time.Duration
	// Alpha is the EWMA constant of the smoothed percentile: cur = α·cur +
	// (1−α)·samp. In [0, 1). Default 0.7.
	Alpha float64
	// ErrD: err above it cuts the rate (multiplicative decrease). Default 0.
	ErrD float64
	// ErrI: err at or below it raises the rate (additive increase).
	// Default −0.5. Must be below ErrD.
	ErrI float64
	// AdjD is the multiplicative decrease factor, > 1. Default 1.2.
	AdjD float64
	// AdjI is the additive increase weight, > 0: rate += AdjI·(−(err − CI)).
	// Default 2.
	AdjI float64
	// CI weights the increase: at err = CI it is 0. Default −0.1.
	CI float64
	// RateMin and RateMax bound each class's rate, in requests per second.
	// Defaults 0.05 and 5000 (the paper used 2000; sentry fronts farms).
	RateMin, RateMax float64
	// AdjLo divides the rate of every less important class when a class is
	// over its target. Default 10.
	AdjLo float64
	// CutAllLower is the paper's rule: a class over target divides the
	// rate of every less important class by AdjLo. Default false: only the
	// least important class still above RateMin is cut at each run, so a
	// class is cut only once every class below it is at the minimum (the
	// priority guarantee; see doc.go).
	CutAllLower bool
	// LCThresh is how many runs over target, with every less important
	// class already at RateMin, before the class's own rate is cut. Default
	// 20.
	LCThresh int
	// Burst is the token bucket's depth in seconds of the class's rate (at
	// least one token): how large a burst above the rate is admitted. The
	// paper does not say; default 100ms.
	Burst time.Duration
	// InitialRate is every class's rate before its first run. Default
	// RateMax: admit everything until the response times say otherwise
	// (with Scaled, the first run brings the rate down to the ceiling the
	// class's offered rate sets).
	InitialRate float64
	// Scaled replaces the paper's absolute additive increase and flat cuts
	// by rules scaled to what the class is measured doing (doc.go, "The
	// scaled rule"): an increase proportional to the rate, a rate never
	// raised above Headroom times the offered rate (plus HeadroomMin), and
	// cuts that start from the measured completion rate. Default false
	// (the paper's rule, which the script tests pin); sentry's policy
	// defaults to true (admission.adaptive.rule: scaled).
	Scaled bool
	// Shared runs one controller and one token bucket for every class,
	// the baseline of the paper's comparison (§3.3, Fig. 9: a single
	// controller against one per class): every class admits from the same
	// bucket, their samples are pooled, and the target is the smallest of
	// Targets. The multiclass rules do not apply; State(i) is the shared
	// state for every i. Default false (a controller per class).
	Shared bool
	// InFlightLimit adds the in-flight limit, a rule beyond the paper
	// (doc.go, "The in-flight limit"): besides its class's token, a
	// request needs the farm to hold fewer requests admitted and not
	// completed than InFlightShare × its completion rate × the target
	// (Little's law), so that no queue builds while the percentile, which
	// sees a request only when it completes, lags. Default false (the
	// scripts pin the rules without it); sentry's policy defaults to true
	// (admission.adaptive.in_flight_limit).
	InFlightLimit bool
	// InFlight, when set, is the farm's count of requests in flight as
	// the owner keeps it (sentry: the load balancer's, which every end of
	// an exchange releases); the backlog rules and the in-flight limit
	// read it instead of the controller's own count (admitted less
	// Observe and Ended), which never sees an admitted request that ends
	// without a response (a backend error, a timeout, a client gone):
	// each such request would stay in the own count, and enough of them
	// would hold the limit shut. It must be safe for concurrent use and
	// cheap (Admit calls it). Default nil.
	InFlight func() int64
	// Idle, when set, tells whether one more request would harm nobody
	// now (doc.go, "Work conservation"): the owner knows the farm (sentry:
	// a backend with nothing in service). A request its token or the
	// in-flight limit refuses is then admitted anyway, marked
	// admission.Decision.OverTarget. Nil: the farm holds nothing admitted
	// and not completed (the in-flight count above is 0 or less). It must
	// be safe for concurrent use and cheap (Admit calls it, only to
	// refuse). Set NoIdle to turn the rule off.
	Idle func() bool
	// NoIdle turns the work-conserving rule off: a request without a token
	// is refused even on an idle farm (the paper's rule). Default false.
	NoIdle bool
	// Queueing, when set, tells whether the farm's backends are queueing
	// now (sentry: the queue the latest completions met, estimator.QNow,
	// is over a tenth of the target). The slow start climbs only while
	// they are not, and ends at the farm's completion rate once they are
	// (doc.go, "Slow start"); while they are, no increase takes a rate
	// above what the farm completes. Nil: never (the controller knows no
	// slot count, and a busy farm is not a queueing one). Called at Ticks
	// and runs, with the controller's lock held: it must not call the
	// controller, and must be safe for concurrent use.
	Queueing func() bool
	// ShareRates, when set, is class's arrival rate within its clients'
	// fair shares and that of the over-share clients in their turns, in
	// requests per second (package fairshare; docs/algorithms.md §12): a
	// request of the over-share tier (admission.OverShare) leaves the
	// within-share rate's tokens in the bucket, and that share of the
	// in-flight limit; one of the marginal tier (admission.Marginal)
	// leaves a quarter of the turns' rate's tokens besides, and a quarter
	// of what is left of the in-flight limit. Called only for such requests; must be safe for
	// concurrent use and cheap. Nil: those tiers are decided as their
	// class.
	ShareRates func(class int) (within, turns float64)
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Defaults (Welsh & Culler, Fig. 4; §3.3 for AdjLo and LCThresh).
const (
	DefaultPercentile = 90
	DefaultNReq       = 100
	DefaultTimeout    = time.Second
	DefaultAlpha      = 0.7
	DefaultErrD       = 0.0
	DefaultErrI       = -0.5
	DefaultAdjD       = 1.2
	DefaultAdjI       = 2.0
	DefaultCI         = -0.1
	DefaultRateMin    = 0.05
	DefaultRateMax    = 5000
	DefaultAdjLo      = 10
	DefaultLCThresh   = 20
	DefaultBurst      = 100 * time.Millisecond
)

// The scaled rule's constants (doc.go, "The scaled rule").
const (
	// ScaledGain: besides the paper's AdjI·(−(err − c_i)), an increase
	// adds ScaledGain·y·rate per Timeout elapsed, where y in [0, 1] is the
	// room left under the raise threshold, (err_i − err)/(1 + err_i), of
	// the smoothed and the last percentile, whichever is less: at most
	// ×1.5 a second, whatever the farm's size.
	ScaledGain = 0.5
	// SlowStartRoom: the slow start (doc.go, "Slow start") applies while
	// the in-flight limit is more than SlowStartRoom times the farm's mean
	// in-flight count: the farm holds under half of what the limit
	// allows, so the limit, not the percentile, is the brake.
	SlowStartRoom = 2
	// QueueGrowth: the proportional increase is skipped while the farm
	// (every class together) admitted more than QueueGrowth times what
	// completed since the class's last run: its queue is growing, and the
	// percentile will show it only about one response time later.
	QueueGrowth = 1.1
	// Headroom and HeadroomMin: an increase never takes the rate above
	// Headroom × the class's offered rate since its last run +
	// HeadroomMin per second; a bucket at that rate rarely empties under
	// Poisson arrivals.
	Headroom    = 4
	HeadroomMin = 10
	// BandGain: between the thresholds, while the farm's queue is not
	// growing, the rate rises by BandGain·y·rate per Timeout, y =
	// (err_d − e)/(err_d − err_i) in (0, 1] the room left under the
	// target: at most +25% a second, nothing at the target.
	BandGain = 0.25
	// BacklogShare: the farm holds a backlog when the requests admitted
	// and not completed (every class) exceed its completion rate times
	// BacklogShare × the target -- by Little's law, a mean response time
	// of half the target. A class is then held to what it completes and
	// its bucket owes the excess (doc.go, "The scaled rule").
	BacklogShare = 0.5
	// Surge: under err_i a backlog is drained only when the last sample
	// is above err_i too, or the farm (every class) was admitted more
	// than Surge times what it completed since the class's last run: a
	// step in the load, not a ramp (doc.go, "The scaled rule").
	Surge = 2
	// InFlightMin: the in-flight limit is never below it (a farm idle or
	// starting completes next to nothing, and Little's law would hold it
	// at one request at a time).
	InFlightMin = 10
)

// InFlightShare is the share of the target the in-flight limit allows as
// a mean response time (doc.go, "The in-flight limit"), for the
// percentile p in (0, 100): 1/(−ln(1 − p/100)), the mean over the p-th
// percentile of an exponential distribution. 0.33 for the 95th, 0.43 for
// the 90th, 0.22 for the 99th.
func InFlightShare(p float64) float64 {
	return -1 / math.Log1p(-p/100)
}

// MaxClasses bounds the number of classes.
const MaxClasses = 64

func (c Config) withDefaults() (Config, error) {
	if len(c.Targets) == 0 {
		return c, errors.New("adaptive: no classes")
	}
	if len(c.Targets) > MaxClasses {
		return c, fmt.Errorf("adaptive: %d classes, at most %d", len(c.Targets), MaxClasses)
	}
	c.Targets = append([]time.Duration(nil), c.Targets...)
	for i, t := range c.Targets {
		if t <= 0 {
			return c, fmt.Errorf("adaptive: class %d: target %v must be positive", i, t)
		}
	}
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Percentile, DefaultPercentile)
	def(&c.Alpha, DefaultAlpha)
	def(&c.ErrI, DefaultErrI)
	def(&c.AdjD, DefaultAdjD)
	def(&c.AdjI, DefaultAdjI)
	def(&c.CI, DefaultCI)
	def(&c.RateMin, DefaultRateMin)
	def(&c.RateMax, DefaultRateMax)
	def(&c.AdjLo, DefaultAdjLo)
	if c.NReq == 0 {
		c.NReq = DefaultNReq
	}
	if c.LCThresh == 0 {
		c.LCThresh = DefaultLCThresh
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Burst == 0 {
		c.Burst = DefaultBurst
	}
	if c.InitialRate == 0 {
		c.InitialRate = c.RateMax
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	bad := func(name string, v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }
	for name, v := range map[string]float64{"percentile": c.Percentile, "alpha": c.Alpha, "err_d": c.ErrD,
		"err_i": c.ErrI, "adj_d": c.AdjD, "adj_i": c.AdjI, "c_i": c.CI, "rate_min": c.RateMin,
		"rate_max": c.RateMax, "adj_lo": c.AdjLo, "initial rate": c.InitialRate} {
		if bad(name, v) {
			return c, fmt.Errorf("adaptive: %s is %v", name, v)
		}
	}
	switch {
	case c.Percentile <= 0 || c.Percentile >= 100:
		return c, fmt.Errorf("adaptive: percentile %v must be in (0, 100)", c.Percentile)
	case c.NReq < 1:
		return c, fmt.Errorf("adaptive: nreq %d must be at least 1", c.NReq)
	case c.Timeout < 0:
		return c, fmt.Errorf("adaptive: timeout %v must be positive", c.Timeout)
	case c.Alpha < 0 || c.Alpha >= 1:
		return c, fmt.Errorf("adaptive: alpha %v must be in [0, 1)", c.Alpha)
	case c.ErrI >= c.ErrD:
		return c, fmt.Errorf("adaptive: err_i %v must be below err_d %v", c.ErrI, c.ErrD)
	case c.AdjD <= 1:
		return c, fmt.Errorf("adaptive: adj_d %v must be above 1", c.AdjD)
	case c.AdjI <= 0:
		return c, fmt.Errorf("adaptive: adj_i %v must be positive", c.AdjI)
	case c.RateMin <= 0 || c.RateMax < c.RateMin:
		return c, fmt.Errorf("adaptive: rates [%v, %v] must satisfy 0 < min ≤ max", c.RateMin, c.RateMax)
	case c.AdjLo <= 1:
		return c, fmt.Errorf("adaptive: adj_lo %v must be above 1", c.AdjLo)
	case c.LCThresh < 1:
		return c, fmt.Errorf("adaptive: lc_thresh %d must be at least 1", c.LCThresh)
	case c.Burst < 0:
		return c, fmt.Errorf("adaptive: burst %v must not be negative", c.Burst)
	case c.InitialRate < c.RateMin || c.InitialRate > c.RateMax:
		return c, fmt.Errorf("adaptive: initial rate %v outside [%v, %v]", c.InitialRate, c.RateMin, c.RateMax)
	}
	return c, nil
}
