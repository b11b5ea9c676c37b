package policy

import (
	"strconv"
	"strings"
	"time"

	"github.com/sentry-proxy/sentry/adaptive"
	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/batchac"
	"github.com/sentry-proxy/sentry/estimator"
	"github.com/sentry-proxy/sentry/fairshare"
	"github.com/sentry-proxy/sentry/thresholdac"
	"gopkg.in/yaml.v3"
)

// This file holds the sections that tune admission control: server_timing,
// sla, estimator and admission. Their defaults come from the libraries that
// run them, written out in full so that a snapshot shows the values in use.

func defaultSLA() SLA {
	return SLA{
		Percentile: 95,
		Targets: []SLABand{
			{Below: 1000, Target: time.Second},
			{Below: 10000, Target: 2 * time.Second},
			{Target: 3 * time.Second},
		},
	}
}

func defaultEstimator() estimator.Config {
	return estimator.Config{
		HalfLife:      estimator.DefaultHalfLife,
		QueueHalfLife: estimator.DefaultQueueHalfLife,
		MaxKeys:       estimator.DefaultMaxKeys,
		Alpha:         estimator.DefaultAlpha,
		// A copy: a snapshot must not share a slice with the library.
		Edges:         append([]time.Duration(nil), estimator.DefaultEdges...),
		RateWindow:    estimator.DefaultRateWindow,
		RateSmoothing: estimator.DefaultRateSmoothing,
		Refresh:       estimator.DefaultRefresh,
		ProbeInterval: estimator.DefaultProbeInterval,
	}
}

func defaultAdmission() Admission {
	return Admission{
		Mode:         admission.ModeAuto.String(),
		Reserve:      true,
		ReserveFloor: batchac.DefaultReserveFloor,
		Batch:        BatchAdmission{QueueCap: batchac.DefaultQueueCap, ImpliedQueue: true},
		Threshold:    ThresholdAdmission{Recompute: thresholdac.DefaultPeriod},
		Switch: ModeSwitch{
			CPUHigh:     admission.DefaultCPUHigh,
			CPULow:      admission.DefaultCPULow,
			Hold:        admission.DefaultHold,
			RevertAfter: admission.DefaultRevertAfter,
		},
		Adaptive: AdaptiveAdmission{
			NReq:     adaptive.DefaultNReq,
			Timeout:  adaptive.DefaultTimeout,
			Alpha:    adaptive.DefaultAlpha,
			ErrD:     adaptive.DefaultErrD,
			ErrI:     adaptive.DefaultErrI,
			AdjD:     adaptive.DefaultAdjD,
			AdjI:     adaptive.DefaultAdjI,
			CI:       adaptive.DefaultCI,
			RateMin:  adaptive.DefaultRateMin,
			RateMax:  adaptive.DefaultRateMax,
			AdjLo:    adaptive.DefaultAdjLo,
			LCThresh: adaptive.DefaultLCThresh,
			Burst:    adaptive.DefaultBurst,
			Rule:     AdaptiveRuleScaled,
			// Decision: on by default (docs/algorithms.md §7, "The
			// in-flight limit").
			InFlightLimit: true,
		},
		Fallback: Fallback{
			Enabled:       true,
			MissWindows:   DefaultFallbackMissWindows,
			NoTimingShare: DefaultFallbackNoTimingShare,
			ReturnWindows: DefaultFallbackReturnWindows,
			ReturnRatio:   DefaultFallbackReturnRatio,
		},
		// Decision: on by default (docs/algorithms.md §12).
		FairShare: FairShare{
			Enabled:    true,
			Client:     FairClientAddress,
			IPv6Prefix: fairshare.DefaultIPv6Prefix,
			MaxClients: fairshare.DefaultSlots,
			Rotate:     fairshare.DefaultRotate,
		},
	}
}

// Defaults of admission.fallback.
const (
	DefaultFallbackMissWindows   = 3
	DefaultFallbackNoTimingShare = 0.5
	DefaultFallbackReturnWindows = 3
	DefaultFallbackReturnRatio   = 0.8
)

// Limits beyond which a value is a mistake, not a wish.
const (
	maxEstimatorKeys = 100_000_000
	maxBucketEdges   = 255 // estimator.NewBuckets
	maxQueueCap      = 1 << 20
	maxParallelism   = 4096 // batchac refuses more
	maxAdaptiveRuns  = 1_000_000
	maxWindows       = 3600
)

func (d *decoder) serverTimingFields(st *ServerTiming) []field {
	return []field{
		{"strip", d.boolField(&st.Strip)},
	}
}

func (d *decoder) slaFields(s *SLA) []field {
	return []field{
		{"percentile", d.numField(&s.Percentile, numRange{lo: 0, hi: 100, loOpen: true, hiOpen: true})},
		{"targets", val{
			set: func(v *yaml.Node, p string) {
				if t, ok := d.slaTargets(v, p); ok {
					s.Targets = t
				}
			},
			get: func() *yaml.Node {
				return emitList(len(s.Targets), false, func(i int) []field { return d.bandFields(&s.Targets[i], new(bandState)) })
			},
			kind: listOf(mapKind(func() []field { return d.bandFields(&SLABand{}, new(bandState)) }), 1, unbounded),
		}},
		{"revenue", d.numField(&s.Revenue, atLeast(0))},
	}
}

// bandState is where a band's below was written, and whether it decoded.
type bandState struct {
	below   *yaml.Node
	belowOK bool
}

func (d *decoder) bandFields(b *SLABand, st *bandState) []field {
	return []field{
		{"below", val{
			set: func(v *yaml.Node, p string) {
				st.below = v
				b.Below, st.belowOK = d.numberIn(v, p, above(0))
			},
			get: func() *yaml.Node {
				if b.Below == 0 { // the last band: no upper bound
					return nil
				}
				return numNode(b.Below)
			},
			kind: numKind(above(0)),
		}},
		{"target", d.durationField(&b.Target, time.Nanosecond).need("the response-time target in this band, e.g. 1s")},
	}
}

// slaTargets decodes the QoS table: bands in increasing order of below,
// the last one without below. ok is false when anything was reported.
func (d *decoder) slaTargets(n *yaml.Node, path string) (out []SLABand, ok bool) {
	mark := d.reports
	r := resolve(n)
	switch {
	case isNull(r) || r.Kind == yaml.SequenceNode && len(r.Content) == 0:
		d.errorf(n, path, "empty; give at least one band ({target: 1s}), or leave targets out for the default table")
		return nil, false
	case r.Kind != yaml.SequenceNode:
		d.errorf(n, path, "expected a list of {below: REQ/S, target: DURATION}, got %s", describe(r))
		return nil, false
	}
	prev, prevLine := 0.0, 0 // the last valid below, and its line
	for i, e := range r.Content {
		if !d.spend() {
			return nil, false
		}
		p := path + "[" + strconv.Itoa(i) + "]"
		last := i == len(r.Content)-1
		var b SLABand
		var st bandState
		if !d.mapping(e, p, d.bandFields(&b, &st)) {
			continue
		}
		switch {
		case last && st.below != nil:
			d.errorf(st.below, joinPath(p, "below"), "leave below out of the last band: it takes every rate above the band before it")
		case !last && st.below == nil:
			d.errorf(e, p, "below is required (the arrival rate in req/s under which this band applies); only the last band leaves it out")
		case st.belowOK && prevLine > 0 && b.Below <= prev:
			d.errorf(st.below, joinPath(p, "below"), "below %s is not above the previous band's %s (line %d); list bands by increasing rate",
				fmtNum(b.Below), fmtNum(prev), prevLine)
		}
		if st.belowOK {
			prev, prevLine = b.Below, line(st.below)
		}
		out = append(out, b)
	}
	if d.reported(mark) {
		return nil, false
	}
	return out, true
}

// estimatorFields is the estimator section's key table. Each value is
// checked here, so that its line is known; Parse then also hands the
// result to estimator.New.
func (d *decoder) estimatorFields(c *estimator.Config) []field {
	return []field{
		{"half_life", d.durationField(&c.HalfLife, time.Nanosecond)},
		{"queue_half_life", d.durationField(&c.QueueHalfLife, time.Nanosecond)},
		{"max_keys", d.intField(&c.MaxKeys, 1, maxEstimatorKeys)},
		{"alpha", val{
			set: func(v *yaml.Node, p string) {
				x, ok := d.numberIn(v, p, atLeast(0))
				switch {
				case !ok:
				case x == 0:
					d.errorf(v, p, "0 is out of range; must be greater than 0 (to ignore io time, use a tiny value such as 1e-9)")
				default:
					c.Alpha = x
				}
			},
			get:  func() *yaml.Node { return numNode(c.Alpha) },
			kind: numKind(above(0)),
		}},
		{"fit_alpha", d.boolField(&c.FitAlpha)},
		{"buckets", val{
			set: func(v *yaml.Node, p string) {
				if e, ok := d.bucketEdges(v, p); ok {
					c.Edges = e
				}
			},
			get: func() *yaml.Node {
				n := seqNode()
				n.Style = yaml.FlowStyle
				for _, e := range c.Edges {
					n.Content = append(n.Content, durNode(e))
				}
				return n
			},
			kind: listOf(&kind{t: kDuration, minDur: time.Nanosecond}, 1, maxBucketEdges),
		}},
		{"rate_window", d.durationField(&c.RateWindow, time.Nanosecond)},
		{"rate_smoothing", d.durationField(&c.RateSmoothing, time.Nanosecond)},
		{"probe_interval", d.durationField(&c.ProbeInterval, time.Nanosecond)},
	}
}

// bucketEdges decodes the service-time bucket edges: positive durations in
// strictly increasing order. ok is false when anything was reported.
func (d *decoder) bucketEdges(n *yaml.Node, path string) (out []time.Duration, ok bool) {
	mark := d.reports
	r := resolve(n)
	switch {
	case isNull(r) || r.Kind == yaml.SequenceNode && len(r.Content) == 0:
		d.errorf(n, path, "empty; give at least one edge, or leave buckets out for the default")
		return nil, false
	case r.Kind != yaml.SequenceNode:
		d.errorf(n, path, "expected a list of durations, got %s", describe(r))
		return nil, false
	case len(r.Content) > maxBucketEdges:
		d.errorf(n, path, "%d edges; at most %d", len(r.Content), maxBucketEdges)
		return nil, false
	}
	prevLine := 0
	for i, e := range r.Content {
		if !d.spend() {
			return nil, false
		}
		p := path + "[" + strconv.Itoa(i) + "]"
		x, good := d.duration(e, p, time.Nanosecond)
		if !good {
			continue
		}
		if k := len(out); k > 0 && x <= out[k-1] {
			d.errorf(e, p, "%v is not above the previous edge %v (line %d); edges must increase", x, out[k-1], prevLine)
			continue
		}
		out = append(out, x)
		prevLine = line(e)
	}
	if d.reported(mark) {
		return nil, false
	}
	return out, true
}

var admissionModes = []string{
	admission.ModeAuto.String(), admission.ModeBatch.String(),
	admission.ModeThreshold.String(), admission.ModeAdaptive.String(), admission.ModeOff.String(),
}

func (d *decoder) admissionFields(a *Admission) []field {
	return []field{
		{"mode", d.enumField(&a.Mode, admissionModes...)},
		{"reserve", d.boolField(&a.Reserve)},
		{"reserve_floor", d.numField(&a.ReserveFloor, numRange{lo: 0, hi: 1, hiOpen: true})},
		{"batch", d.section(func() []field { return d.batchFields(&a.Batch) }, nil)},
		{"threshold", d.section(func() []field { return d.thresholdFields(&a.Threshold) }, nil)},
		{"switch", d.section(func() []field { return d.switchFields(&a.Switch, new(switchState)) },
			func(v *yaml.Node, p string) { d.modeSwitch(v, p, &a.Switch) })},
		{"adaptive", d.section(func() []field { return d.adaptiveFields(&a.Adaptive, new(adaptiveState)) },
			func(v *yaml.Node, p string) { d.adaptiveAdmission(v, p, &a.Adaptive) })},
		{"fallback", d.section(func() []field { return d.fallbackFields(&a.Fallback) }, nil)},
		{"fair_share", d.section(func() []field { return d.fairShareFields(&a.FairShare, new(fairState)) },
			func(v *yaml.Node, p string) { d.fairShare(v, p, &a.FairShare) })},
	}
}

// fairState is where admission.fair_share's client and name were written.
type fairState struct{ client, name *yaml.Node }

func (d *decoder) fairShareFields(f *FairShare, st *fairState) []field {
	return []field{
		{"enabled", d.boolField(&f.Enabled)},
		{"client", noting(&st.client, d.enumField(&f.Client, FairClientAddress, FairClientHeader, FairClientCookie, FairClientJWT))},
		{"name", noting(&st.name, d.textField(&f.Name, true, nil))},
		{"ipv6_prefix", d.intField(&f.IPv6Prefix, 1, 128)},
		{"max_clients", d.intField(&f.MaxClients, fairshare.MinSlots, fairshare.MaxSlots)},
		{"rotate", d.durationField(&f.Rotate, time.Second)},
	}
}

// fairShare decodes admission.fair_share: a header or cookie needs its
// name; a claim's name defaults to "sub".
func (d *decoder) fairShare(n *yaml.Node, path string, f *FairShare) {
	mark := d.reports
	var st fairState
	if !d.mapping(n, path, d.fairShareFields(f, &st)) || d.reported(mark) {
		return
	}
	switch f.Client {
	case FairClientHeader, FairClientCookie:
		if f.Name == "" {
			at := st.name
			if at == nil {
				at = st.client
			}
			d.errorf(at, joinPath(path, "name"), "client %s needs the %s's name", f.Client, f.Client)
		}
	case FairClientJWT:
		if f.Name == "" {
			f.Name = "sub"
		}
	}
}

// adaptiveState is where the adaptive keys checked together were written.
type adaptiveState struct{ errI, errD, rateMin, rateMax, initial *yaml.Node }

// adaptiveAdmission decodes admission.adaptive. Zero is refused where the
// controller would read it as "default" (alpha, err_i, c_i, burst), so
// that what the policy says is what runs.
func (d *decoder) adaptiveAdmission(n *yaml.Node, path string, a *AdaptiveAdmission) {
	mark := d.reports
	var st adaptiveState
	if !d.mapping(n, path, d.adaptiveFields(a, &st)) || d.reported(mark) {
		return
	}
	at := func(n *yaml.Node, key string, alt *yaml.Node, altKey string) (*yaml.Node, string) {
		if n != nil {
			return n, joinPath(path, key)
		}
		if alt != nil {
			return alt, joinPath(path, altKey)
		}
		return nil, path
	}
	if a.ErrI >= a.ErrD {
		nd, p := at(st.errI, "err_i", st.errD, "err_d")
		if nd == nil {
			nd = n
		}
		d.errorf(nd, p, "err_i %s must be below err_d %s (the rate rises only well under the target, and is cut above it)", fmtNum(a.ErrI), fmtNum(a.ErrD))
	}
	if a.RateMax < a.RateMin {
		nd, p := at(st.rateMax, "rate_max", st.rateMin, "rate_min")
		if nd == nil {
			nd = n
		}
		d.errorf(nd, p, "rate_max %s is below rate_min %s", fmtNum(a.RateMax), fmtNum(a.RateMin))
	}
	if a.InitialRate != 0 && (a.InitialRate < a.RateMin || a.InitialRate > a.RateMax) {
		d.errorf(st.initial, joinPath(path, "initial_rate"), "%s is outside [rate_min %s, rate_max %s]; 0 means rate_max",
			fmtNum(a.InitialRate), fmtNum(a.RateMin), fmtNum(a.RateMax))
	}
	if d.reported(mark) {
		return
	}
	// Backstop: the library's own validation, with one placeholder class.
	if _, err := adaptive.New(a.Config([]time.Duration{time.Second}, adaptive.DefaultPercentile)); err != nil {
		d.errorf(n, path, "%s", strings.TrimPrefix(err.Error(), "adaptive: "))
	}
}

func (d *decoder) adaptiveFields(a *AdaptiveAdmission, st *adaptiveState) []field {
	return []field{
		{"nreq", d.intField(&a.NReq, 1, maxAdaptiveRuns)},
		{"timeout", d.durationField(&a.Timeout, time.Millisecond)},
		{"alpha", d.numField(&a.Alpha, numRange{lo: 0, hi: 1, loOpen: true, hiOpen: true})},
		{"err_d", noting(&st.errD, d.numField(&a.ErrD, numRange{lo: -1, hi: 1e6}))},
		{"err_i", noting(&st.errI, d.numField(&a.ErrI, numRange{lo: -1, hi: 0, hiOpen: true}))},
		{"adj_d", d.numField(&a.AdjD, numRange{lo: 1, hi: 1e6, loOpen: true})},
		{"adj_i", d.numField(&a.AdjI, numRange{lo: 0, hi: 1e6, loOpen: true})},
		{"c_i", d.numField(&a.CI, numRange{lo: -1e6, hi: 0, hiOpen: true})},
		{"rate_min", noting(&st.rateMin, d.numField(&a.RateMin, numRange{lo: 0, hi: 1e9, loOpen: true}))},
		{"rate_max", noting(&st.rateMax, d.numField(&a.RateMax, numRange{lo: 0, hi: 1e9, loOpen: true}))},
		{"adj_lo", d.numField(&a.AdjLo, numRange{lo: 1, hi: 1e6, loOpen: true})},
		{"lc_thresh", d.intField(&a.LCThresh, 1, maxAdaptiveRuns)},
		{"cut_all_lower", d.boolField(&a.CutAllLower)},
		{"shared", d.boolField(&a.Shared)},
		{"in_flight_limit", d.boolField(&a.InFlightLimit)},
		{"rule", d.enumField(&a.Rule, AdaptiveRuleScaled, AdaptiveRulePaper)},
		{"burst", d.durationField(&a.Burst, time.Millisecond)},
		{"initial_rate", noting(&st.initial, d.numField(&a.InitialRate, numRange{lo: 0, hi: 1e9}))},
	}
}

// Config is the adaptive controller's configuration for the app's
// classes: targets (one per class, most important first) and the SLA's
// percentile. Every field is explicit; the clock is left to the caller.
func (a AdaptiveAdmission) Config(targets []time.Duration, percentile float64) adaptive.Config {
	return adaptive.Config{
		Targets: targets, Percentile: percentile,
		NReq: a.NReq, Timeout: a.Timeout, Alpha: a.Alpha, ErrD: a.ErrD, ErrI: a.ErrI,
		AdjD: a.AdjD, AdjI: a.AdjI, CI: a.CI, RateMin: a.RateMin, RateMax: a.RateMax,
		AdjLo: a.AdjLo, LCThresh: a.LCThresh, CutAllLower: a.CutAllLower, Burst: a.Burst,
		InitialRate: a.InitialRate, Scaled: a.Rule != AdaptiveRulePaper, Shared: a.Shared,
		InFlightLimit: a.InFlightLimit,
	}
}

func (d *decoder) fallbackFields(f *Fallback) []field {
	return []field{
		{"enabled", d.boolField(&f.Enabled)},
		{"miss_windows", d.intField(&f.MissWindows, 1, maxWindows)},
		{"no_timing_share", d.numField(&f.NoTimingShare, numRange{lo: 0, hi: 1, loOpen: true})},
		{"return_windows", d.intField(&f.ReturnWindows, 1, maxWindows)},
		{"return_ratio", d.numField(&f.ReturnRatio, numRange{lo: 0, hi: 1, loOpen: true})},
	}
}

func (d *decoder) batchFields(b *BatchAdmission) []field {
	return []field{
		{"queue_cap", d.intField(&b.QueueCap, 1, maxQueueCap)},
		{"all_or_nothing", d.boolField(&b.AllOrNothing)},
		{"strict_periods", d.boolField(&b.StrictPeriods)},
		{"implied_queue", d.boolField(&b.ImpliedQueue)},
		{"parallelism", val{
			set: func(v *yaml.Node, p string) {
				x, ok := d.number(v, p)
				switch {
				case !ok:
				case x != 0 && (x < 1 || x > maxParallelism):
					d.errorf(v, p, "%s is out of range; use 0 to learn it, or a value from 1 to %d", fmtNum(x), maxParallelism)
				default:
					b.Parallelism = x
				}
			},
			get: func() *yaml.Node { return numNode(b.Parallelism) },
			// 0, or 1 to maxParallelism: the schema says the whole range.
			kind: numKind(numRange{lo: 0, hi: maxParallelism}),
		}},
	}
}

func (d *decoder) thresholdFields(t *ThresholdAdmission) []field {
	return []field{
		{"recompute", d.durationField(&t.Recompute, time.Nanosecond)},
		{"capacity", d.numField(&t.Capacity, atLeast(0))},
	}
}

// switchState is where the CPU bounds were written.
type switchState struct{ high, low *yaml.Node }

func (d *decoder) modeSwitch(n *yaml.Node, path string, s *ModeSwitch) {
	mark := d.reports
	var st switchState
	if !d.mapping(n, path, d.switchFields(s, &st)) || d.reported(mark) {
		return
	}
	if s.CPULow >= s.CPUHigh {
		at, key := st.low, "cpu_low"
		if at == nil {
			at, key = st.high, "cpu_high"
		}
		d.errorf(at, joinPath(path, key), "cpu_low %s must be below cpu_high %s (the switch back to batch needs a lower utilisation than the switch away)",
			fmtNum(s.CPULow), fmtNum(s.CPUHigh))
	}
}

func (d *decoder) switchFields(s *ModeSwitch, st *switchState) []field {
	return []field{
		{"cpu_high", noting(&st.high, d.numField(&s.CPUHigh, numRange{lo: 0, hi: 1, loOpen: true}))},
		{"cpu_low", noting(&st.low, d.numField(&s.CPULow, numRange{lo: 0, hi: 1, loOpen: true, hiOpen: true}))},
		{"hold", d.durationField(&s.Hold, time.Nanosecond)},
		{"revert_after", d.durationField(&s.RevertAfter, time.Nanosecond)},
	}
}

// checkEstimator hands an app's estimator settings to estimator.New, the
// library's own validation, with the app's class names. The decoder has
// checked every value already, so this is a backstop: an error is
// reported at the estimator key, or the app when there is none.
func (d *decoder) checkEstimator(a *App, names []string, at *yaml.Node, path string) {
	if _, err := estimator.New(a.Estimator, names); err != nil {
		d.errorf(at, path, "%s", strings.TrimPrefix(err.Error(), "estimator: "))
	}
}
