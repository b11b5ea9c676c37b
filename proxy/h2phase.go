package proxy

// h2phase.go: where a worker's h2 stream is (ownStream.phase), as a
// checked state, by the rule package exchange's State follows: an
// illegal move is a bug, which panics under the tests (strictStates) and
// is counted otherwise (sentry_h2_illegal_transitions_total), so that one
// wrong stream does not take its connection down.

// streamPhase is the response side of a stream a worker runs:
//
//	open ──body awaited──> continued ──┐
//	  │                                v
//	  └──────────response head──────> head ───> ended ──> released
//	open, continued, head ──a write to the client failed──> broken ──> ended
//	any but released ──the worker gave it back──> released
//
// continued: the body was first awaited, and 100 Continue sent if the
// client asked for it (never after the response head). ended: the
// response's end (END_STREAM or a reset) is in the core. released: the
// worker is done (ownConn.release); the core may give the h2srv.Stream to
// another stream. The request body's side (ownStream.stopped) and the
// reset (the context's cut) are other goroutines' and stay apart.
type streamPhase uint8

const (
	phOpen streamPhase = iota
	phContinued
	phHead
	phBroken
	phEnded
	phReleased
	numPhases
)

var phaseNames = [numPhases]string{phOpen: "open", phContinued: "continued", phHead: "head",
	phBroken: "broken", phEnded: "ended", phReleased: "released"}

func (s streamPhase) String() string {
	if s < numPhases {
		return phaseNames[s]
	}
	return "invalid"
}

// phaseMoves[from] is the set of phases a stream may go to, as bits.
var phaseMoves = [numPhases]uint8{
	phOpen:      1<<phContinued | 1<<phHead | 1<<phBroken | 1<<phEnded | 1<<phReleased,
	phContinued: 1<<phHead | 1<<phBroken | 1<<phEnded | 1<<phReleased,
	phHead:      1<<phBroken | 1<<phEnded | 1<<phReleased,
	phBroken:    1<<phEnded | 1<<phReleased,
	phEnded:     1 << phReleased,
}

// legal tells whether a stream may go from s to to.
func (s streamPhase) legal(to streamPhase) bool {
	return s < numPhases && to < numPhases && phaseMoves[s]&(1<<to) != 0
}

// strictStates makes an illegal move panic (set by the package's tests).
var strictStates bool

// setPhase moves st to phase to, checking the move; under ownConn.mu
// (the worker writes the phase; the h2 backend's transport, reading the
// body after the worker, reads it under the lock).
func (st *ownStream) setPhase(to streamPhase) {
	if !st.phase.legal(to) {
		st.oc.fe.own.illegal.Add(1)
		if strictStates {
			panic("proxy: illegal h2 stream transition " + st.phase.String() + " -> " + to.String())
		}
	}
	st.phase = to
}

// headSent tells whether the response head is in the core. (A broken
// stream's end writes nothing more: endLocked finds it closed, or the
// connection's writes failed.)
func (st *ownStream) headSent() bool { return st.phase == phHead || st.phase == phEnded }
