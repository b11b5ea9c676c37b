package control

import (
	"time"

	"github.com/sentry-proxy/sentry/admission"
)

// The work-conserving rule's accounting (doc.go, "Work conservation").

// overWarnEvery is the least time between two WARN lines about one class's
// over-target admissions.
const overWarnEvery = time.Minute

// overTarget counts one admission by the work-conserving rule for class
// cs (mode took it; s is the request's estimate) and logs a WARN at most
// once every overWarnEvery per class, with the count since the last one.
// The count is one atomic add; the clock is read per over-target
// admission, and a compare-and-swap picks the one caller that logs, so
// concurrent admissions log once.
func (a *App) overTarget(cs *classStats, mode admission.Mode, s time.Duration) {
	n := cs.over.Add(1)
	now := a.now().UnixNano()
	last := cs.overWarned.Load()
	if last != 0 && now-last < int64(overWarnEvery) {
		return
	}
	if !cs.overWarned.CompareAndSwap(last, now) {
		return
	}
	since := n - cs.overLogged.Swap(n)
	a.log.Warn("admitted requests over their target: their own service time misses the class's target, and the farm had room that no one else was waiting for",
		"class", cs.name, "mode", mode.String(), "estimate", s, "target", a.RSLA(),
		"admitted_over_target", since, "total", n, "next_warning_after", overWarnEvery)
}
