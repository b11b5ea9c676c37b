package control

import (
	"fmt"
	"time"

	"github.com/sentry-proxy/sentry/adaptive"
	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/estimator"
	"github.com/sentry-proxy/sentry/sert"
	"github.com/sentry-proxy/sentry/thresholdac"
)

// Learned state across processes (see doc.go, "Learned state across
// processes").

// AppState is what one app's admission stack has learned, as plain
// values: what a reload keeps by name, for a binary upgrade to hand to
// the next process and a state file to keep across a restart. Each part
// is its package's own (estimator.State, thresholdac.LearnerState, ...).
type AppState struct {
	Estimator estimator.State `json:"estimator"`
	// Parallelism is batch admission's learned P (0: P is configured).
	Parallelism float64 `json:"parallelism,omitempty"`
	// ProbeCeiling is the concurrency batch admission's probe found
	// saturated, and ProbeCeilingUntil (unix ns) when it lapses (0: none
	// holds; batchac/doc.go, "The probe").
	ProbeCeiling      int64 `json:"probe_ceiling,omitempty"`
	ProbeCeilingUntil int64 `json:"probe_ceiling_until,omitempty"`
	// Capacity is threshold mode's learned per-server capacity.
	Capacity thresholdac.LearnerState `json:"capacity"`
	// Mode and Fallback are the auto mode switch's state (nil when the
	// mode is forced).
	Mode     *admission.SwitchState `json:"mode,omitempty"`
	Fallback *FallbackState         `json:"fallback,omitempty"`
	// Adaptive is adaptive mode's controller, by class name.
	Adaptive map[string]adaptive.Learned `json:"adaptive,omitempty"`
	// Termination is selective early termination's, by class.
	Termination []sert.ClassState `json:"termination,omitempty"`
}

// FallbackState is auto's fall-back rule's memory (fallback.go).
type FallbackState struct {
	Bad      int    `json:"bad_windows,omitempty"`
	Calm     int    `json:"calm_windows,omitempty"`
	Wait     int    `json:"return_windows,omitempty"`
	Returned int64  `json:"returned,omitempty"` // unix ns; 0: never
	Last     string `json:"last_mode,omitempty"`
}

// Export returns every app's learned state at now, by app name. It
// allocates in proportion to the estimators' key tables: for a handover
// or a checkpoint, not per request.
func (m *Manager) Export(now time.Time) map[string]AppState {
	out := map[string]AppState{}
	for _, a := range m.appList() {
		out[a.name] = a.export(now)
	}
	return out
}

func (a *App) export(now time.Time) AppState {
	st := AppState{Estimator: a.est.Export(now), Capacity: a.learner.State()}
	if p, ok := a.batch.LearnedParallelism(); ok {
		st.Parallelism = p
	}
	if m, until, ok := a.batch.ProbeCeiling(); ok {
		st.ProbeCeiling, st.ProbeCeilingUntil = m, until
	}
	if sw, ok := a.sw.Load().State(); ok {
		st.Mode = &sw
		a.fb.Lock()
		st.Fallback = &FallbackState{Bad: a.fb.bad, Calm: a.fb.calm, Wait: a.fb.wait, Last: a.fb.last.String()}
		if !a.fb.returned.IsZero() {
			st.Fallback.Returned = a.fb.returned.UnixNano()
		}
		a.fb.Unlock()
	}
	a.mu.Lock()
	names := a.mu.adpNames
	a.mu.Unlock()
	c := a.adp.Load()
	st.Adaptive = make(map[string]adaptive.Learned, len(names))
	for i, n := range names {
		if i < c.Classes() {
			st.Adaptive[n] = c.Learned(i)
		}
	}
	if a.term.c != nil {
		st.Termination = a.term.c.State()
	}
	return st
}

// Restore gives app's stack what another process's had learned (Export),
// at now: the app must exist (built by the policy in force). Each part is
// matched by name -- classes, keys -- and checked; what the policy in
// force does not have, or a value out of range, is left out: ignored
// lists each, one line, for the caller to log. Nothing here is an error
// that stops a start. Meant for a stack that has not served yet (a
// process started by an upgrade, or a start with a state file): what it
// learned itself is replaced.
func (m *Manager) Restore(app string, st AppState, now time.Time) (ignored []string, err error) {
	m.mu.Lock()
	a := m.apps[app]
	m.mu.Unlock()
	if a == nil {
		return nil, fmt.Errorf("app %q is not in the policy", app)
	}
	return a.restore(st, now), nil
}

func (a *App) restore(st AppState, now time.Time) (ignored []string) {
	rep := a.est.Restore(st.Estimator, now)
	ignored = append(ignored, rep.Ignored...)
	cfg := a.cfg.Load()
	var rate float64
	for c := range cfg.names {
		rate += a.est.Rate(c, now)
	}
	a.rsla.Store(int64(cfg.sla.Target(rate)))
	if st.Parallelism != 0 && !a.batch.RestoreParallelism(st.Parallelism) {
		if _, learns := a.batch.LearnedParallelism(); learns {
			ignored = append(ignored, fmt.Sprintf("parallelism %v: out of range", st.Parallelism))
		} else {
			ignored = append(ignored, "parallelism: admission.batch.parallelism is configured")
		}
	}
	if st.ProbeCeiling != 0 && !a.batch.RestoreProbeCeiling(st.ProbeCeiling, st.ProbeCeilingUntil) {
		ignored = append(ignored, fmt.Sprintf("probe ceiling %d until %d: out of range, or P is configured", st.ProbeCeiling, st.ProbeCeilingUntil))
	}
	if !a.learner.Restore(st.Capacity) {
		ignored = append(ignored, "capacity: out of range")
	}
	if st.Mode != nil {
		if err := a.sw.Load().Restore(*st.Mode); err != nil {
			ignored = append(ignored, "mode switch: "+err.Error())
		} else if st.Fallback != nil {
			a.restoreFallback(*st.Fallback)
		}
	}
	if len(st.Adaptive) > 0 {
		a.mu.Lock()
		names := a.mu.adpNames
		a.mu.Unlock()
		c := a.adp.Load()
		have := map[string]bool{}
		for i, n := range names {
			have[n] = true
			if l, ok := st.Adaptive[n]; ok && !c.Restore(i, l) {
				ignored = append(ignored, fmt.Sprintf("adaptive class %q: a value out of range", n))
			}
		}
		for n := range st.Adaptive {
			if !have[n] {
				ignored = append(ignored, fmt.Sprintf("adaptive class %q: not in the policy", n))
			}
		}
	}
	if a.term.c != nil {
		ignored = append(ignored, a.term.c.Restore(st.Termination)...)
	} else if len(st.Termination) > 0 {
		ignored = append(ignored, "termination: no class terminates in the policy")
	}
	return ignored
}

func (a *App) restoreFallback(f FallbackState) {
	if f.Bad < 0 || f.Calm < 0 || f.Wait < 0 {
		return
	}
	a.fb.Lock()
	defer a.fb.Unlock()
	a.fb.bad, a.fb.calm, a.fb.wait = f.Bad, f.Calm, f.Wait
	a.fb.returned = time.Time{}
	if f.Returned != 0 {
		a.fb.returned = time.Unix(0, f.Returned)
	}
	// The window in progress belongs to the mode restored (fallbackWindow
	// treats a mode change within a window as no window at all).
	a.fb.last = a.sw.Load().Mode()
}

// SetPeerInflight sets the requests the other process of a binary upgrade
// in progress has in flight to app's backends, as it reports them over
// the handover: the old process's while the new one starts, the new
// one's while the old one drains. The admission tests count them as the
// farm's load (App.Inflight), so that two processes serving one farm at
// once do not each admit a whole farm's worth of work. 0 when the
// upgrade is over. An unknown app is ignored.
func (m *Manager) SetPeerInflight(app string, n int64) {
	m.mu.Lock()
	a := m.apps[app]
	m.mu.Unlock()
	if a != nil {
		a.peer.Store(max(n, 0))
	}
}

// Inflight returns app's requests in flight as its admission sees them
// (this process's and its upgrade peer's), and false for an unknown app.
func (m *Manager) Inflight(app string) (int64, bool) {
	m.mu.Lock()
	a := m.apps[app]
	m.mu.Unlock()
	if a == nil {
		return 0, false
	}
	return a.Inflight(), true
}

// OwnInflight returns every app's requests in flight from this process
// alone (what it reports to its upgrade peer).
func (m *Manager) OwnInflight() map[string]int64 {
	out := map[string]int64{}
	for _, a := range m.appList() {
		out[a.name] = a.pool.Load().Inflight()
	}
	return out
}
