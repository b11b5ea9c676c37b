package scenario

import (
	"fmt"
	"math"
	"time"

	"github.com/sentry-proxy/sentry/sim/farm"
	"github.com/sentry-proxy/sentry/sim/load"
)

// Capacity is the farm's capacity for the scenario's request mix.
type Capacity struct {
	// Rate in requests per second (+Inf when the mix has no service time).
	Rate float64
	// MeanService is the mix's mean service time (0 with an explicit
	// rate).
	MeanService time.Duration
	// Source says how Rate was found: "explicit", "mix" or "classes".
	Source string
	// Paths are the mix's paths with their normalised weights and the
	// capacity if every request went to that path alone.
	Paths []PathCapacity
	// Classes is each class's capacity for its own path mix (+Inf for a
	// class with no service time), in class order.
	Classes []float64
	// Slots is servers × slots.
	Slots int
}

// PathCapacity is one path of the capacity mix.
type PathCapacity struct {
	Path        string
	Weight      float64 // normalised: the weights sum to 1
	MeanService time.Duration
	Rate        float64 // farm.Config.Capacity(path)
}

// ComputeCapacity works out the capacity reference from the farm (Servers
// × Slots / mean service time of the mix) or takes capacity.rate.
func (sc *Scenario) ComputeCapacity() (Capacity, error) {
	fc, err := sc.Farm.Normalize()
	if err != nil {
		return Capacity{}, err
	}
	c := Capacity{Slots: fc.Servers * fc.Slots}
	mixCap := func(paths []load.Path) (float64, time.Duration, []PathCapacity, error) {
		total := 0.0
		for _, p := range paths {
			w := p.Weight
			if w == 0 {
				w = 1
			}
			total += w
		}
		if !(total > 0) {
			return 0, 0, nil, fmt.Errorf("capacity: the mix has no weight")
		}
		var mean float64 // seconds
		var out []PathCapacity
		for _, p := range paths {
			w := p.Weight
			if w == 0 {
				w = 1
			}
			r, ok := fc.Route(pathOnly(p.Path))
			if !ok {
				return 0, 0, nil, fmt.Errorf("capacity: no farm route serves %q", p.Path)
			}
			rate, _ := fc.Capacity(pathOnly(p.Path))
			s := r.MeanService()
			mean += w / total * s.Seconds()
			out = append(out, PathCapacity{Path: p.Path, Weight: w / total, MeanService: s, Rate: rate})
		}
		if mean <= 0 {
			return math.Inf(1), 0, out, nil
		}
		return float64(c.Slots) / mean, time.Duration(mean * float64(time.Second)), out, nil
	}
	for _, k := range sc.Classes {
		paths := k.Request.Paths
		if len(paths) == 0 {
			paths = []load.Path{{Path: "/", Weight: 1}}
		}
		r, _, _, err := mixCap(paths)
		if err != nil {
			return c, fmt.Errorf("class %q: %w", k.Name, err)
		}
		c.Classes = append(c.Classes, r)
	}
	switch {
	case sc.Capacity.Rate > 0:
		c.Rate, c.Source = sc.Capacity.Rate, "explicit"
		return c, nil
	case len(sc.Capacity.Mix) > 0:
		c.Source = "mix"
		c.Rate, c.MeanService, c.Paths, err = mixCap(sc.Capacity.Mix)
		return c, err
	}
	// Default: every class's paths, weighted by the class's expected share
	// of the requests. Open-loop classes weigh by their schedule's integral
	// (expected arrivals; the same in rps or capacity units as long as the
	// classes share a unit, which is the common case); closed-loop classes
	// count only when there is no open-loop class, each equally.
	c.Source = "classes"
	var mix []load.Path
	open := false
	for _, k := range sc.Classes {
		if k.Open != nil {
			open = true
		}
	}
	for _, k := range sc.Classes {
		var w float64
		switch {
		case open && k.Open != nil:
			w = k.Open.Rate.Integral(k.Open.Rate.Duration())
		case !open:
			w = 1
		}
		if w <= 0 {
			continue
		}
		paths := k.Request.Paths
		if len(paths) == 0 {
			paths = []load.Path{{Path: "/", Weight: 1}}
		}
		sum := 0.0
		for _, p := range paths {
			sum += weight(p)
		}
		for _, p := range paths {
			mix = append(mix, load.Path{Path: p.Path, Weight: w * weight(p) / sum})
		}
	}
	if len(mix) == 0 {
		return c, fmt.Errorf("capacity: no load to weigh the mix by; give capacity.rate or capacity.mix")
	}
	c.Rate, c.MeanService, c.Paths, err = mixCap(mix)
	return c, err
}

// CapacityAfterEvents is the capacity (req/s, the same mix as
// ComputeCapacity) of the farm as it is at time at of the file: every
// event at or before at applied. A route event changes its route's cost
// in the mix; the servers' speeds (a killed server counts 0) scale the
// result by their mean. With an explicit capacity.rate only the speeds
// apply.
func (sc *Scenario) CapacityAfterEvents(at time.Duration) (float64, error) {
	next := *sc
	next.Farm.Routes = append([]farm.Route(nil), sc.Farm.Routes...)
	speed := make([]float64, max(sc.Farm.Servers, 1))
	for i := range speed {
		speed[i] = 1
	}
	killedSpeed := map[int]float64{}
	for _, e := range sc.Events {
		if e.At > at {
			break
		}
		switch {
		case e.Route != nil:
			for j := range next.Farm.Routes {
				if r := &next.Farm.Routes[j]; r.Path == e.Route.Path && r.Prefix == e.Route.Prefix {
					e.Route.apply(r)
				}
			}
		case e.Speed != nil && e.Speed.Server < len(speed):
			if _, dead := killedSpeed[e.Speed.Server]; dead {
				killedSpeed[e.Speed.Server] = e.Speed.Factor
			} else {
				speed[e.Speed.Server] = e.Speed.Factor
			}
		case e.Kill != nil && *e.Kill < len(speed):
			killedSpeed[*e.Kill] = speed[*e.Kill]
			speed[*e.Kill] = 0
		case e.Restart != nil && *e.Restart < len(speed):
			speed[*e.Restart] = killedSpeed[*e.Restart]
			delete(killedSpeed, *e.Restart)
		}
	}
	c, err := next.ComputeCapacity()
	if err != nil {
		return 0, err
	}
	sum := 0.0
	for _, v := range speed {
		sum += v
	}
	return c.Rate * sum / float64(len(speed)), nil
}

// PhaseCapacities is the capacity each phase's goodput is measured
// against (Phase.Capacity): base, or the capacity after the events up to
// the phase's start.
func (sc *Scenario) PhaseCapacities(base float64) ([]float64, error) {
	out := make([]float64, len(sc.Phases))
	for i, ph := range sc.Phases {
		out[i] = base
		if ph.Capacity == PhaseCapacityEvents {
			c, err := sc.CapacityAfterEvents(ph.Start)
			if err != nil {
				return nil, fmt.Errorf("phase %q: %w", ph.Name, err)
			}
			out[i] = c
		}
	}
	return out, nil
}

func weight(p load.Path) float64 {
	if p.Weight == 0 {
		return 1
	}
	return p.Weight
}

// Scaling changes a scenario's load for one run without editing the file.
type Scaling struct {
	// Level multiplies every level (on top of the file's scale). 0 means 1.
	Level float64
	// Time multiplies every schedule duration and the scenario duration
	// (0.1 runs a 90 s scenario in 9 s). 0 means 1.
	Time float64
}

func (s Scaling) norm() Scaling {
	if s.Level == 0 {
		s.Level = 1
	}
	if s.Time == 0 {
		s.Time = 1
	}
	return s
}

// LoadConfig builds the load generator's configuration for the targets:
// units applied, levels and durations scaled.
func (sc *Scenario) LoadConfig(targets []string, s Scaling) (load.Config, error) {
	s = s.norm()
	if !(s.Level > 0) || !(s.Time > 0) {
		return load.Config{}, fmt.Errorf("scaling factors must be > 0")
	}
	capa, err := sc.ComputeCapacity()
	if err != nil {
		return load.Config{}, err
	}
	cfg := load.Config{
		Targets:     targets,
		Seed:        sc.Seed,
		Timeout:     sc.Load.Timeout,
		MaxRequests: sc.Load.MaxRequests,
		MaxInFlight: sc.Load.MaxInFlight,
		RetryAfter:  sc.Load.RetryAfter,
	}
	for _, k := range sc.Classes {
		lc := k.Class
		f := sc.Scale * s.Level
		if k.Unit == UnitCapacity {
			f *= capa.Rate
		}
		if lc.Open != nil {
			o := *lc.Open
			o.Rate = scaleTime(o.Rate.Scale(f), s.Time)
			lc.Open = &o
		} else {
			cl := *lc.Closed
			cl.Users = scaleTime(cl.Users.Scale(f), s.Time)
			lc.Closed = &cl
		}
		cfg.Classes = append(cfg.Classes, lc)
	}
	return cfg.Normalize()
}

// Duration is the scenario's length under the time scaling.
func (sc *Scenario) ScaledDuration(s Scaling) time.Duration {
	s = s.norm()
	return time.Duration(float64(sc.Duration) * s.Time)
}

// ScaledPhases are the scenario's phases under the time scaling.
func (sc *Scenario) ScaledPhases(s Scaling) []Phase {
	s = s.norm()
	out := make([]Phase, len(sc.Phases))
	for i, ph := range sc.Phases {
		out[i] = ph
		out[i].Start, out[i].End = time.Duration(float64(ph.Start)*s.Time), time.Duration(float64(ph.End)*s.Time)
	}
	return out
}

func scaleTime(sch load.Schedule, k float64) load.Schedule {
	out := make(load.Schedule, len(sch))
	for i, g := range sch {
		out[i] = g
		out[i].Duration = max(time.Duration(float64(g.Duration)*k), time.Millisecond)
	}
	return out
}
