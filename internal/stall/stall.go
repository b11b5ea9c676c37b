// Package stall measures how long a process went without running a
// goroutine that was ready to run. A watcher goroutine wakes every Tick and
// keeps the gaps beyond it: the longest (Max) and their sum (Total). On a
// machine shared with other work, another job can starve a process for
// seconds, or for a large share of every second; so can the process's own
// goroutines, more of them ready than it has CPUs (under -race each costs
// several times its CPU). Either way every timer and every wake-up in the
// process is late by as much, and a timing assertion made meanwhile says
// nothing about the code under test.
//
// Tests that time real work (a farm's capacity, a load generator's
// schedule, an admission experiment's goodput) collect their timing
// assertions in Checks and report them with Report: failures stand on a
// process that ran when it wanted to, and are a skip, with the stall
// measured and the failed checks quoted, when it was starved. The
// assertions that do not depend on time (counts, errors, invariants) are
// made as usual and fail whatever the machine.
package stall

import (
	"fmt"
	"sync"
	"time"
)

// Tick is how often the watcher wakes. A gap counts as a stall from one
// missed tick on: the timer's own lateness on an idle machine (tens of
// microseconds a wake-up) is not starvation.
const Tick = 2 * time.Millisecond

// Watch is a running watcher; Stop ends it.
type Watch struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	res  Result
}

// Result is what a watch saw.
type Result struct {
	// Max is the longest gap beyond Tick between two wake-ups; Total
	// the sum of the gaps of at least Tick beyond it; Elapsed the
	// watch's length.
	Max, Total, Elapsed time.Duration
}

// Share is the part of the watch the process was starved, Total over
// Elapsed.
func (r Result) Share() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Total) / float64(r.Elapsed)
}

func (r Result) String() string {
	return fmt.Sprintf("longest stall %v, stalled %.0f%% of %v", r.Max.Round(time.Millisecond), 100*r.Share(), r.Elapsed.Round(time.Millisecond))
}

// Start starts a watcher. It runs until Stop, at most about 5 hours.
func Start() *Watch {
	w := &Watch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tk := time.NewTicker(Tick)
		defer tk.Stop()
		start := time.Now()
		last := start
		for n := 0; n < 1e7; n++ { // ≈ 5 h at the tick; Stop ends it first
			select {
			case <-w.stop:
				w.mu.Lock()
				w.res.Elapsed = time.Since(start)
				w.mu.Unlock()
				return
			case <-tk.C:
				now := time.Now()
				// A ticker drops the ticks a late reader missed, so the
				// gap is measured from the last wake-up, not from the
				// tick's own time.
				if gap := now.Sub(last) - Tick; gap >= Tick {
					w.mu.Lock()
					w.res.Total += gap
					w.res.Max = max(w.res.Max, gap)
					w.mu.Unlock()
				}
				last = now
			}
		}
	}()
	return w
}

// Stop ends the watch and returns what it saw.
func (w *Watch) Stop() Result {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.res
}

// Checks collects a test's timing assertions, for Report.
type Checks []string

// Add records a failed timing assertion.
func (c *Checks) Add(format string, args ...any) { *c = append(*c, fmt.Sprintf(format, args...)) }

// T is the part of testing.TB that Report uses.
type T interface {
	Helper()
	Error(args ...any)
	Skipf(format string, args ...any)
}

// Report fails t with every recorded check, unless starved says the
// process could not run when it wanted to: then it skips t with why and
// the checks, which say nothing about the code on such a machine.
func (c Checks) Report(t T, starved bool, why string) {
	t.Helper()
	if len(c) == 0 {
		return
	}
	if starved {
		t.Skipf("the process was starved (%s): its goroutines waited to run, for other load on the machine or its own; timing checks not meaningful: %q", why, []string(c))
	}
	for _, m := range c {
		t.Error(m)
	}
}
