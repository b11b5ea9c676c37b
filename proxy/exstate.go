package proxy

// exState is the state of an event loop's exchange on one client
// connection: the one place a reader finds where an exchange is, in place
// of the flags (busy, parked, head sent) it was once spread over.
//
//	idle ──serve──> admitting ──park──> parked
//	 ^                │    ^                 │
//	 │                │    └─────resume──────┤
//	 │                │ bind                 │ client gone (abort)
//	 │                v                      v
//	 │         connecting ⇄ sending         idle
//	 │           (connected; retry: bind again, another backend)
//	 │                         │ response head
//	 │                         v
//	 │                      relaying
//	 │                         │
//	 └── respond (reject, 502, 504), abort, finish ── from any busy state
//
// Every change goes through evloop.setState, which checks it against
// exTransitions. An illegal transition is a bug in the loop: the tests
// panic on it (strictStates); in production it is counted
// (sentry_evloop_illegal_transitions_total) and the new state taken, so
// one wrong exchange does not take the loop, and every connection on it,
// down.
type exState uint8

const (
	// exIdle: no exchange; the connection waits for a request (or writes
	// the end of the last response, or lingers).
	exIdle exState = iota
	// exAdmitting: a request was taken; it is being decided, or a backend
	// picked for it. Transient: it never lasts past one event.
	exAdmitting
	// exParked: the request waits for its batch run's decision (its
	// admission.Pending is held); the loop is woken when it is made.
	exParked
	// exConnecting: bound to a new backend connection whose connect is
	// in progress.
	exConnecting
	// exSending: bound to a connected backend connection: the request is
	// being written, or waits for the response head.
	exSending
	// exRelaying: the response head went to the client; the body is
	// relayed. Nothing but the end of the exchange follows.
	exRelaying
	numExStates
)

var exStateNames = [numExStates]string{
	exIdle:       "idle",
	exAdmitting:  "admitting",
	exParked:     "parked",
	exConnecting: "connecting",
	exSending:    "sending",
	exRelaying:   "relaying",
}

// String names the state (test and debug output).
func (s exState) String() string {
	if s < numExStates {
		return exStateNames[s]
	}
	return "invalid"
}

// exTransitions[from] is the set of states from may go to, as bits.
var exTransitions = [numExStates]uint8{
	exIdle:       1 << exAdmitting,
	exAdmitting:  1<<exParked | 1<<exConnecting | 1<<exSending | 1<<exIdle,
	exParked:     1<<exAdmitting | 1<<exIdle,
	exConnecting: 1<<exSending | 1<<exConnecting | 1<<exIdle,
	exSending:    1<<exRelaying | 1<<exConnecting | 1<<exSending | 1<<exIdle,
	exRelaying:   1 << exIdle,
}

// legal tells whether an exchange may go from s to to.
func (s exState) legal(to exState) bool {
	return s < numExStates && to < numExStates && exTransitions[s]&(1<<to) != 0
}

// strictStates makes an illegal transition panic (set by the tests).
var strictStates = false
