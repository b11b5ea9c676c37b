package policy

import (
	"time"

	"github.com/sentry-proxy/sentry/sert"
	"gopkg.in/yaml.v3"
)

// This file holds selective early termination (package sert): a class's
// terminate range and the app's termination section.

// Terminate is one class's termination range (apps[].classes[].terminate).
// Declaring it turns termination on for the class.
type Terminate struct {
	// Lower is LB, the least a request may run at the backend before it
	// can be cut; > 0. Default 500ms.
	Lower time.Duration
	// Upper is UB, the threshold while there is no overload; ≥ Lower.
	// Default 15s.
	Upper time.Duration
	// Methods that may be terminated, upper-cased. Nil (the default)
	// means GET and HEAD.
	Methods []string
}

// Termination is the app's termination controller (apps[].termination):
// T = LB + F(p)·(UB − LB) every Interval from the loss fraction p.
type Termination struct {
	// Alpha is F's scaling factor α; > 0. Default 4.
	Alpha float64
	// LowWater is LW, the loss fraction at or below which T = UB; in
	// [0, 1), below HighWater. Default 0.05.
	LowWater float64
	// HighWater is HW, the loss fraction at or above which T = LB; in
	// (0, 1]. Default 0.15.
	HighWater float64
	// Interval between recomputations; > 0. Default 10s.
	Interval time.Duration
	// MinArrivals is the fewest arrivals of a class in an interval for
	// its threshold to change; ≥ 1. Default 100.
	MinArrivals int
	// MaxRise is the most one update may multiply a threshold by; a fall
	// is never bounded. 0 means no bound (the paper's rule), otherwise
	// > 1. Default 2.
	MaxRise float64
}

// Default termination range of a class that writes terminate: {}.
const (
	DefaultTerminateLower = 500 * time.Millisecond
	DefaultTerminateUpper = 15 * time.Second
)

func defaultTermination() Termination {
	return Termination{
		Alpha:       sert.DefaultAlpha,
		LowWater:    sert.DefaultLowWater,
		HighWater:   sert.DefaultHighWater,
		Interval:    sert.DefaultInterval,
		MinArrivals: sert.DefaultMinArrivals,
		MaxRise:     sert.DefaultMaxRise,
	}
}

// Params converts the section to the library's parameters.
func (t Termination) Params() sert.Params {
	return sert.Params{Alpha: t.Alpha, LowWater: t.LowWater, HighWater: t.HighWater,
		Interval: t.Interval, MinArrivals: uint64(max(t.MinArrivals, 0)), MaxRise: t.MaxRise}
}

// ClassTerminate returns class i's termination range, or nil when the
// class does not declare one.
func (a *App) ClassTerminate(i int) *Terminate {
	if uint(i) >= uint(len(a.Terminate)) {
		return nil
	}
	return a.Terminate[i]
}

// SertConfig is the app's sert.Config: its termination parameters and the
// range of every class that declares one (nil entries for the others). A
// zero Termination (an App built in code, not by Parse) means the
// defaults.
func (a *App) SertConfig() sert.Config {
	t := a.Termination
	if t == (Termination{}) {
		t = defaultTermination()
	}
	cfg := sert.Config{Params: t.Params(), Classes: make([]*sert.ClassConfig, len(a.Classes))}
	for i, c := range a.Classes {
		if t := a.ClassTerminate(i); t != nil {
			cfg.Classes[i] = &sert.ClassConfig{Name: c.Name, Lower: t.Lower, Upper: t.Upper, Methods: t.Methods}
		}
	}
	return cfg
}

// maxTerminateUpper bounds a termination range: beyond an hour it is not
// a threshold but a typo.
const maxTerminateUpper = time.Hour

func newTerminate() *Terminate {
	return &Terminate{Lower: DefaultTerminateLower, Upper: DefaultTerminateUpper}
}

// terminateState is where a terminate range's bounds were written.
type terminateState struct{ lower, upper *yaml.Node }

// terminate decodes a class's terminate section; nil after an error.
func (d *decoder) terminate(n *yaml.Node, path string) *Terminate {
	mark := d.reports
	t := newTerminate()
	var st terminateState
	if !d.mapping(n, path, d.terminateFields(t, &st)) || d.reported(mark) {
		return nil
	}
	switch {
	case t.Upper > maxTerminateUpper:
		at := st.upper
		if at == nil {
			at = n
		}
		d.errorf(at, joinPath(path, "upper"), "%v is above %v; leave terminate out for no termination", t.Upper, maxTerminateUpper)
	case t.Upper < t.Lower:
		at, key := st.upper, "upper"
		if at == nil {
			at, key = st.lower, "lower"
		}
		d.errorf(at, joinPath(path, key), "upper %v is below lower %v; the threshold moves from upper (no overload) down to lower", t.Upper, t.Lower)
	}
	if d.reported(mark) {
		return nil
	}
	return t
}

func (d *decoder) terminateFields(t *Terminate, st *terminateState) []field {
	return []field{
		{"lower", noting(&st.lower, d.durationField(&t.Lower, time.Millisecond))},
		{"upper", noting(&st.upper, d.durationField(&t.Upper, time.Millisecond))},
		{"methods", val{
			set: func(v *yaml.Node, p string) { t.Methods = d.methods(v, p) },
			get: func() *yaml.Node {
				if t.Methods == nil {
					return nil // the default, GET and HEAD (sert)
				}
				return strSeq(t.Methods)
			},
			kind: listOf(kindString, 1, unbounded),
		}},
	}
}

// terminationState is where the water marks were written.
type terminationState struct{ low, high *yaml.Node }

// termination decodes the app's termination section.
func (d *decoder) termination(n *yaml.Node, path string, t *Termination) {
	mark := d.reports
	var st terminationState
	if !d.mapping(n, path, d.terminationFields(t, &st)) || d.reported(mark) {
		return
	}
	if t.LowWater >= t.HighWater {
		at, key := st.low, "low_water"
		if at == nil {
			at, key = st.high, "high_water"
		}
		d.errorf(at, joinPath(path, key), "low_water %s must be below high_water %s (F falls from 1 at low water to 0 at high water)",
			fmtNum(t.LowWater), fmtNum(t.HighWater))
	}
}

func (d *decoder) terminationFields(t *Termination, st *terminationState) []field {
	return []field{
		{"alpha", d.numField(&t.Alpha, above(0))},
		{"low_water", noting(&st.low, d.numField(&t.LowWater, numRange{lo: 0, hi: 1, hiOpen: true}))},
		{"high_water", noting(&st.high, d.numField(&t.HighWater, numRange{lo: 0, hi: 1, loOpen: true}))},
		{"interval", d.durationField(&t.Interval, time.Millisecond)},
		{"min_arrivals", d.intField(&t.MinArrivals, 1, 1<<40)},
		{"max_rise", val{
			set: func(v *yaml.Node, p string) {
				if x, ok := d.numberIn(v, p, atLeast(0)); ok {
					if x != 0 && !(x > 1) {
						d.errorf(v, p, "%s would hold the threshold down for good; want 0 (no bound: the paper's rule) or a factor greater than 1", fmtNum(x))
						return
					}
					t.MaxRise = x
				}
			},
			get: func() *yaml.Node { return numNode(t.MaxRise) },
			// 0, or greater than 1: the schema says at least 0.
			kind: numKind(atLeast(0)),
		}},
	}
}
