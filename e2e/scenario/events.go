package scenario

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sentry-proxy/sentry/sim/farm"
)

// Event changes the farm, or the peer, at a time of the run: exactly one
// of Route, Speed, Kill, Restart and Upgrade. Events are listed in time
// order; the runner's time scale stretches At as it does the schedules.
//
//	events:
//	  - {at: 20s, route: {path: /search, heavy_share: 0.10}}
//	  - {at: 20s, route: {path: /search, io: "exp:8ms"}}
//	  - {at: 30s, speed: {server: 1, factor: 0.5}}   # half speed
//	  - {at: 40s, kill: 2}
//	  - {at: 50s, restart: 2}
//	  - {at: 55s, upgrade: true}                     # the peer's binary upgrade
type Event struct {
	// At is the time from the start of the load, ≤ the scenario's
	// duration.
	At time.Duration `yaml:"at"`
	// Route changes one farm route's service model.
	Route *RouteEvent `yaml:"route,omitempty"`
	// Speed sets one server's speed.
	Speed *SpeedEvent `yaml:"speed,omitempty"`
	// Kill stops server i (0-based) as a crash would
	// (farm.Farm.Kill): its requests in service get no response.
	Kill *int `yaml:"kill,omitempty"`
	// Restart serves a killed server i again on its address.
	Restart *int `yaml:"restart,omitempty"`
	// Upgrade upgrades the peer's binary in place (sentry: SIGUSR2, the
	// same binary, until the new process is ready); a peer that cannot
	// fails the event, which the summary notes. The farm is untouched.
	Upgrade bool `yaml:"upgrade,omitempty"`
}

// RouteEvent changes the farm route configured with Path and Prefix: each
// field given replaces the route's; the rest stay.
type RouteEvent struct {
	// Path and Prefix name the route as the farm's routes list does.
	Path   string `yaml:"path"`
	Prefix bool   `yaml:"prefix,omitempty"`
	// CPU and IO replace the light (ordinary) cost.
	CPU *farm.Dist `yaml:"cpu,omitempty"`
	IO  *farm.Dist `yaml:"io,omitempty"`
	// HeavyShare sets the share of heavy requests, in [0, 1].
	HeavyShare *float64 `yaml:"heavy_share,omitempty"`
	// HeavyCPU and HeavyIO replace the heavy cost.
	HeavyCPU *farm.Dist `yaml:"heavy_cpu,omitempty"`
	HeavyIO  *farm.Dist `yaml:"heavy_io,omitempty"`
}

// SpeedEvent sets a server's speed (farm.Farm.SetSpeed): drawn times are
// divided by Factor, so 0.5 is twice as slow and 1 is as configured.
type SpeedEvent struct {
	Server int     `yaml:"server"`
	Factor float64 `yaml:"factor"`
}

// apply changes r as the event says.
func (e *RouteEvent) apply(r *farm.Route) {
	if e.CPU != nil {
		r.CPU = *e.CPU
	}
	if e.IO != nil {
		r.IO = *e.IO
	}
	if e.HeavyShare != nil {
		r.Heavy.Share = *e.HeavyShare
	}
	if e.HeavyCPU != nil {
		r.Heavy.CPU = *e.HeavyCPU
	}
	if e.HeavyIO != nil {
		r.Heavy.IO = *e.HeavyIO
	}
}

// String describes the event for progress lines and notes.
func (e Event) String() string {
	switch {
	case e.Route != nil:
		r := e.Route
		var parts []string
		add := func(k string, d *farm.Dist) {
			if d != nil {
				parts = append(parts, fmt.Sprintf("%s=%s", k, distString(*d)))
			}
		}
		add("cpu", r.CPU)
		add("io", r.IO)
		if r.HeavyShare != nil {
			parts = append(parts, fmt.Sprintf("heavy_share=%g", *r.HeavyShare))
		}
		add("heavy_cpu", r.HeavyCPU)
		add("heavy_io", r.HeavyIO)
		p := r.Path
		if r.Prefix {
			p += "*"
		}
		return fmt.Sprintf("route %s %s", p, strings.Join(parts, " "))
	case e.Speed != nil:
		return fmt.Sprintf("server %d speed %g", e.Speed.Server, e.Speed.Factor)
	case e.Kill != nil:
		return fmt.Sprintf("kill server %d", *e.Kill)
	case e.Restart != nil:
		return fmt.Sprintf("restart server %d", *e.Restart)
	case e.Upgrade:
		return "upgrade the peer"
	}
	return "nothing"
}

func distString(d farm.Dist) string {
	if d.IsZero() {
		return "none"
	}
	if d.Kind == "" || d.Kind == farm.Fixed {
		return d.Mean.String()
	}
	return fmt.Sprintf("%s:%v", d.Kind, d.Mean)
}

// validateEvents checks the events in order against the farm they will
// change: one kind each, in time order, within the run, on a route and
// servers that exist, every route change valid as the farm would take it,
// a kill of a running server and a restart of a killed one.
func (sc *Scenario) validateEvents(root *yaml.Node) error {
	cfg := sc.Farm
	killed := map[int]bool{}
	var prev time.Duration
	for i := range sc.Events {
		e := &sc.Events[i]
		at := func(msg string, path ...any) error {
			return sc.errAt(root, fmt.Sprintf("events[%d]: %s", i, msg), append([]any{"events", i}, path...)...)
		}
		n := 0
		for _, set := range []bool{e.Route != nil, e.Speed != nil, e.Kill != nil, e.Restart != nil, e.Upgrade} {
			if set {
				n++
			}
		}
		switch {
		case n != 1:
			return at("give exactly one of route, speed, kill, restart and upgrade")
		case e.At < 0:
			return at("at must be ≥ 0", "at")
		case e.At > sc.Duration:
			return at(fmt.Sprintf("at %v is after the scenario's duration %v", e.At, sc.Duration), "at")
		case e.At < prev:
			return at(fmt.Sprintf("at %v is before the previous event's %v; list events in time order", e.At, prev), "at")
		}
		prev = e.At
		server := func(i int, key string, path ...any) error {
			if i < 0 || i >= cfg.Servers {
				return at(fmt.Sprintf("%s: no server %d (the farm has %d, numbered from 0)", key, i, cfg.Servers), path...)
			}
			return nil
		}
		switch {
		case e.Route != nil:
			r := e.Route
			k := -1
			for j, fr := range cfg.Routes {
				if fr.Path == r.Path && fr.Prefix == r.Prefix {
					k = j
				}
			}
			if k < 0 {
				return at(fmt.Sprintf("route: the farm has no route %q with prefix %v", r.Path, r.Prefix), "route", "path")
			}
			if r.CPU == nil && r.IO == nil && r.HeavyShare == nil && r.HeavyCPU == nil && r.HeavyIO == nil {
				return at("route: change something (cpu, io, heavy_share, heavy_cpu or heavy_io)", "route")
			}
			next := cfg
			next.Routes = append([]farm.Route(nil), cfg.Routes...)
			r.apply(&next.Routes[k])
			nc, err := next.Normalize()
			if err != nil {
				return at("route: "+err.Error(), "route")
			}
			cfg = nc
		case e.Speed != nil:
			if err := server(e.Speed.Server, "speed.server", "speed", "server"); err != nil {
				return err
			}
			if !(e.Speed.Factor > 0) || e.Speed.Factor > 1e6 {
				return at(fmt.Sprintf("speed.factor must be > 0, got %v", e.Speed.Factor), "speed", "factor")
			}
		case e.Kill != nil:
			if err := server(*e.Kill, "kill", "kill"); err != nil {
				return err
			}
			if killed[*e.Kill] {
				return at(fmt.Sprintf("kill: server %d is already killed", *e.Kill), "kill")
			}
			killed[*e.Kill] = true
		case e.Restart != nil:
			if err := server(*e.Restart, "restart", "restart"); err != nil {
				return err
			}
			if !killed[*e.Restart] {
				return at(fmt.Sprintf("restart: server %d is not killed", *e.Restart), "restart")
			}
			delete(killed, *e.Restart)
		}
	}
	return nil
}

// ApplyFarmEvent makes one farm event (Route, Speed, Kill or Restart)
// happen on f; an upgrade is the peer's, not the farm's, and is an error
// here.
func ApplyFarmEvent(f *farm.Farm, e Event) error {
	switch {
	case e.Upgrade:
		return fmt.Errorf("an upgrade is not a farm event")
	case e.Route != nil:
		return f.UpdateRoute(e.Route.Path, e.Route.Prefix, e.Route.apply)
	case e.Speed != nil:
		return f.SetSpeed(e.Speed.Server, e.Speed.Factor)
	case e.Kill != nil:
		return f.Kill(*e.Kill)
	case e.Restart != nil:
		return f.Restart(*e.Restart)
	}
	return nil
}

// AppliedEvent is an event as the runner played it.
type AppliedEvent struct {
	Event Event
	// At is when it was applied, from the start of the load.
	At  time.Duration
	Err error
}

// eventPlayer plays a scenario's events against a farm on its own
// goroutine, owned by runPeer: start, then stop (which waits for it).
type eventPlayer struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	played []AppliedEvent
}

// playEvents starts playing events (times multiplied by timeScale) from
// start; onFarm applies a farm event, upgrade upgrades the peer; progress
// gets one line per event.
func playEvents(ctx context.Context, onFarm func(Event) error, events []Event, timeScale float64, start time.Time, upgrade func() error, progress func(string)) *eventPlayer {
	ctx, cancel := context.WithCancel(ctx)
	p := &eventPlayer{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for _, e := range events {
			due := start.Add(time.Duration(float64(e.At) * timeScale))
			t := time.NewTimer(time.Until(due))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			var err error
			if e.Upgrade {
				err = upgrade()
			} else {
				err = onFarm(e)
			}
			a := AppliedEvent{Event: e, At: time.Since(start), Err: err}
			p.mu.Lock()
			p.played = append(p.played, a)
			p.mu.Unlock()
			msg := fmt.Sprintf("event at %v: %s", a.At.Round(time.Millisecond), e)
			if err != nil {
				msg += ": " + err.Error()
			}
			progress(msg)
		}
	}()
	return p
}

// stop ends the player and returns what it played.
func (p *eventPlayer) stop() []AppliedEvent {
	p.cancel()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.played
}
