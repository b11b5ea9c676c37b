package load

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// stallWatch measures how long this process went without running a
// goroutine: one goroutine wakes every 2 ms and keeps the largest gap
// beyond that. On a shared 2-core machine another job can starve the test
// process for seconds; timing assertions are meaningless then.
type stallWatch struct {
	max  atomic.Int64
	stop chan struct{}
	done chan struct{}
}

func watchStalls() *stallWatch {
	w := &stallWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		const tick = 2 * time.Millisecond
		tk := time.NewTicker(tick)
		defer tk.Stop()
		last := time.Now()
		for n := 0; n < 1e7; n++ { // ≈ 5 h at the tick; stop ends it first
			select {
			case <-w.stop:
				return
			case now := <-tk.C:
				if gap := now.Sub(last) - tick; gap > time.Duration(w.max.Load()) {
					w.max.Store(int64(gap))
				}
				last = now
			}
		}
	}()
	return w
}

// Stop ends the watch and returns the longest stall seen.
func (w *stallWatch) Stop() time.Duration {
	close(w.stop)
	<-w.done
	return time.Duration(w.max.Load())
}

// checks collects timing assertions. Report fails the test with them,
// unless the process was starved (stall ≥ limit), when it skips: the
// failure then says nothing about the code.
type checks []string

func (c *checks) Add(format string, args ...any) { *c = append(*c, fmt.Sprintf(format, args...)) }

func (c checks) Report(t *testing.T, stall, limit time.Duration) {
	t.Helper()
	if len(c) == 0 {
		return
	}
	if stall >= limit {
		t.Skipf("process starved for %v (≥ %v) by other load on the machine; timing checks not meaningful: %q", stall, limit, []string(c))
	}
	for _, m := range c {
		t.Error(m)
	}
}
