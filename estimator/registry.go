package estimator

import (
	"fmt"
	"sort"
	"sync"
)

// Registry keeps one Estimator per app across policy reloads, so what was
// learned survives them. Safe for concurrent use; lock order: Registry, then
// Estimator.
type Registry struct {
	mu   sync.Mutex
	apps map[string]*Estimator
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{apps: make(map[string]*Estimator)} }

// Get returns app's estimator, creating it, or reconfiguring the existing
// one with cfg and classes. The same *Estimator comes back on every call.
func (r *Registry) Get(app string, cfg Config, classes []string) (*Estimator, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.apps[app]; e != nil {
		if err := e.Reconfigure(cfg, classes); err != nil {
			return nil, fmt.Errorf("app %q: %w", app, err)
		}
		return e, nil
	}
	e, err := New(cfg, classes)
	if err != nil {
		return nil, fmt.Errorf("app %q: %w", app, err)
	}
	r.apps[app] = e
	return e, nil
}

// Lookup returns app's estimator, or nil.
func (r *Registry) Lookup(app string) *Estimator {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.apps[app]
}

// Retain forgets every app not named, after a reload removed them.
func (r *Registry) Retain(apps ...string) {
	keep := make(map[string]bool, len(apps))
	for _, a := range apps {
		keep[a] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for a := range r.apps {
		if !keep[a] {
			delete(r.apps, a)
		}
	}
}

// AppEstimator pairs an app name with its estimator.
type AppEstimator struct {
	App       string
	Estimator *Estimator
}

// Apps returns the registered apps sorted by name.
func (r *Registry) Apps() []AppEstimator {
	r.mu.Lock()
	out := make([]AppEstimator, 0, len(r.apps))
	for a, e := range r.apps {
		out = append(out, AppEstimator{a, e})
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].App < out[j].App })
	return out
}
