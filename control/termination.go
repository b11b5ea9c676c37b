package control

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/sert"
)

// termination is an App's selective early termination (package sert): one
// threshold controller per app, built from the snapshot
// (policy.App.SertConfig) and reconfigured in place on reload, so each
// class's counters, loss fraction and threshold survive by class name.
// Its Run goroutine is owned by the App (a.ctx, a.wg), like the threshold
// controller's.
//
// Counting, decided here so that the proxy's hook is only the cut: an
// arrival is counted where the estimator counts it (Estimate), a
// rejection where the App counts its own (account, and a parked request's
// Cancel). The proxy counts terminations (sert.Class.Terminate) and the
// server-seconds they reclaim (sert.Class.Reclaim), and reports a
// terminated request's measured time as sert.Sample.
type termination struct {
	c   *sert.Controller
	col *sert.Collector
}

// Terminator returns the termination state of class, or nil when the
// class declares no terminate range (or is out of range): one atomic
// load, no allocation. A class's threshold is Terminator(class).Threshold().
func (a *App) Terminator(class int) *sert.Class {
	if a.term.c == nil {
		return nil
	}
	return a.term.c.Class(class)
}

// Termination returns the app's threshold controller (for status pages
// and tests).
func (a *App) Termination() *sert.Controller { return a.term.c }

// startTermination builds the app's termination controller, registers its
// collector and starts its Run; on create only.
func (a *App) startTermination(ac *policy.App, reg prometheus.Registerer) error {
	cfg := ac.SertConfig()
	cfg.Now = a.now
	c, err := sert.New(cfg)
	if err != nil {
		return fmt.Errorf("termination: %w", err)
	}
	col := sert.NewCollector(c, prometheus.Labels{"app": ac.Name})
	if err := reg.Register(col); err != nil {
		return fmt.Errorf("termination metrics: %w", err)
	}
	a.term = termination{c: c, col: col}
	a.wg.Add(1)
	go func(ctx context.Context) { defer a.wg.Done(); c.Run(ctx) }(a.ctx)
	return nil
}

// reconfigureTermination applies a reload's ranges and parameters; Run
// follows a changed interval from its next tick.
func (a *App) reconfigureTermination(ac *policy.App) error {
	if err := a.term.c.Reconfigure(ac.SertConfig()); err != nil {
		return fmt.Errorf("termination: %w", err)
	}
	return nil
}

// stopTermination unregisters the collector; Run ends with a.ctx.
func (a *App) stopTermination(reg prometheus.Registerer) {
	if a.term.col != nil {
		reg.Unregister(a.term.col)
	}
}

// termArrive and termReject count for class's loss fraction; nothing when
// the class does not terminate.
func (a *App) termArrive(class int) {
	if cl := a.Terminator(class); cl != nil {
		cl.Arrive()
	}
}

func (a *App) termReject(class int) {
	if cl := a.Terminator(class); cl != nil {
		cl.Reject()
	}
}
