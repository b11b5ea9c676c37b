package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/sentry-proxy/sentry/policy"
)

// The outcomes of reloads and upgrades, for the admin listener's
// /last-reload and /last-upgrade, which `sentry reload` and `sentry
// upgrade` read to say why a policy or a new process was refused
// (docs/operations.md). Decision: an endpoint, not the log: the commands
// run where the log may not be readable (another user, a container), and
// the admin port is where they already read the outcome.

// reloadReport is the last reload's outcome.
type reloadReport struct {
	PID int `json:"pid"`
	// Seq counts the reload attempts of this process (0: none yet).
	Seq uint64 `json:"seq"`
	// Result is "none" (no attempt yet), "success" or "error".
	Result string    `json:"result"`
	At     time.Time `json:"at,omitzero"`
	// Errors are the reasons of a refusal, one per line, policy errors as
	// FILE:LINE:COLUMN: message.
	Errors []string `json:"errors,omitempty"`
}

// upgradeReport is this process's part in binary upgrades.
type upgradeReport struct {
	PID int `json:"pid"`
	// Parent is the PID of the process whose upgrade started this one
	// (0: started otherwise).
	Parent int `json:"parent,omitempty"`
	// Seq counts the upgrades this process started (SIGUSR2 acted on).
	Seq uint64 `json:"seq"`
	// State is "none", "in_progress", "failed" (this process kept
	// serving), or "succeeded" (a new process is ready; this one drains).
	State string    `json:"state"`
	At    time.Time `json:"at,omitzero"`
	// Error is why the last upgrade failed, with the new process's own
	// reason when it gave one.
	Error string `json:"error,omitempty"`
	// Learned is what this process restored at its start.
	Learned learnedReport `json:"learned"`
}

// learnedReport says where this process's learned state came from.
type learnedReport struct {
	// Source is "handover" (from the previous process of an upgrade),
	// "state_file", or "none".
	Source string `json:"source"`
	// Apps restored, and items left out (each logged).
	Apps    int `json:"apps"`
	Ignored int `json:"ignored"`
	// Why is why nothing was restored, when something could have been.
	Why string `json:"why,omitempty"`
}

// lifecycle holds both reports. Its mutex is a leaf lock.
type lifecycle struct {
	mu      sync.Mutex
	reload  reloadReport
	upgrade upgradeReport
}

func newLifecycle() *lifecycle {
	pid := os.Getpid()
	return &lifecycle{reload: reloadReport{PID: pid, Result: "none"},
		upgrade: upgradeReport{PID: pid, State: "none", Learned: learnedReport{Source: "none"}}}
}

// reloaded records a reload attempt's outcome (err nil: applied).
func (l *lifecycle) reloaded(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reload.Seq++
	l.reload.At = time.Now().UTC()
	l.reload.Result, l.reload.Errors = "success", nil
	if err != nil {
		l.reload.Result, l.reload.Errors = "error", errorLines(err)
	}
}

// errorLines splits a policy error into its FILE:LINE:COLUMN lines.
func errorLines(err error) []string {
	var list policy.Errors
	if errors.As(err, &list) {
		out := make([]string, len(list))
		for i, e := range list {
			out[i] = e.Error()
		}
		return out
	}
	return []string{err.Error()}
}

// upgradeStarted, upgradeFailed and upgradeSucceeded record an upgrade's
// course.
func (l *lifecycle) upgradeStarted() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.upgrade.Seq++
	l.upgrade.State, l.upgrade.Error, l.upgrade.At = "in_progress", "", time.Now().UTC()
}

func (l *lifecycle) upgradeFailed(why string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.upgrade.State, l.upgrade.Error, l.upgrade.At = "failed", why, time.Now().UTC()
}

func (l *lifecycle) upgradeSucceeded() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.upgrade.State, l.upgrade.At = "succeeded", time.Now().UTC()
}

func (l *lifecycle) setParent(pid int) {
	l.mu.Lock()
	l.upgrade.Parent = pid
	l.mu.Unlock()
}

func (l *lifecycle) setLearned(r learnedReport) {
	l.mu.Lock()
	l.upgrade.Learned = r
	l.mu.Unlock()
}

func (l *lifecycle) reports() (reloadReport, upgradeReport) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.reload
	r.Errors = append([]string(nil), r.Errors...)
	return r, l.upgrade
}

// routes are the admin listener's /last-reload and /last-upgrade.
func (l *lifecycle) routes(mux *http.ServeMux) {
	serve := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(v)
	}
	mux.HandleFunc("GET /last-reload", func(w http.ResponseWriter, r *http.Request) {
		rel, _ := l.reports()
		serve(w, rel)
	})
	mux.HandleFunc("GET /last-upgrade", func(w http.ResponseWriter, r *http.Request) {
		_, up := l.reports()
		serve(w, up)
	})
}
