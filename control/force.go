package control

import (
	"math"
	"time"

	"github.com/sentry-proxy/sentry/admission"
)

// A mode the operator forces at run time (the admin API; doc.go, "Forced
// modes").

// App returns the admission stack of the app named name, or nil.
func (m *Manager) App(name string) *App {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.apps[name]
}

// Force holds the app's admission in mode m (batch, threshold, adaptive
// or off) until Unforce, or until a reload rebuilds the mode switch; it
// returns the mode left. Forced into adaptive mode from another, the
// controller starts as auto's fall-back starts it: seeded with what was
// admitted and completed over the last window, and told the requests
// already in flight (seedAdaptive, SetInFlight).
func (a *App) Force(m admission.Mode) (from admission.Mode, err error) {
	a.fb.Lock() // lock order: fb, then the Switch's
	defer a.fb.Unlock()
	sw := a.sw.Load()
	cur := sw.Mode()
	if m == admission.ModeAdaptive && cur != admission.ModeAdaptive {
		a.seedAdaptive(time.Duration(a.lastQuantile.Load()))
		done := 0.0
		for _, cs := range *a.classes.Load() {
			done += math.Float64frombits(cs.doneRate.Load())
		}
		a.adp.Load().SetInFlight(a.Inflight(), done)
	}
	from, err = sw.Force(m, a.now())
	if err == nil {
		a.fb.bad, a.fb.calm = 0, 0
		a.fb.last = m
	}
	return from, err
}

// Unforce ends a Force: the app's admission goes back to the policy's
// mode (auto starts over in batch mode). It returns the mode left and
// whether a Force held it.
func (a *App) Unforce() (from admission.Mode, was bool) {
	a.fb.Lock()
	defer a.fb.Unlock()
	from, was = a.sw.Load().Unforce(a.now())
	if was {
		a.fb.bad, a.fb.calm = 0, 0
		a.fb.last = a.sw.Load().Mode()
	}
	return from, was
}

// Forced returns the mode a Force holds, if one does.
func (a *App) Forced() (admission.Mode, bool) { return a.sw.Load().Forced() }

// ConfiguredMode is the policy's admission.mode (auto included).
func (a *App) ConfiguredMode() admission.Mode { return a.cfg.Load().mode }
