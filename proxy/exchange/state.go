package exchange

// State is where one exchange (a request and its response) is: the one
// place a reader finds it, for every driver.
//
//	idle ──serve──> admitting ──park──> parked
//	 ^                │    ^                 │
//	 │                │    └─────resume──────┤
//	 │                │ bind                 │ client gone (abort)
//	 │                v                      v
//	 │         connecting ⇄ sending         idle
//	 │           (connected; retry: bind again, another backend)
//	 │       waiting ──bind──> connecting, sending
//	 │        (max_conns_per_backend reached: from admitting, or a retry)
//	 │                         │ response head
//	 │                         v
//	 │                      relaying
//	 │                         │
//	 └── respond (reject, 502, 504), abort, finish ── from any busy state
//
// Every change goes through one function that checks it with Legal (the
// package doc says what an illegal one does).
type State uint8

const (
	// Idle: no exchange in progress (the connection or stream waits
	// for a request, or writes the end of the last response).
	Idle State = iota
	// Admitting: a request was taken; it is being decided, or a backend
	// picked for it. Transient: it never lasts past one event.
	Admitting
	// Parked: the request waits for its batch run's decision (its
	// admission.Pending is held); the driver is woken when it is made.
	Parked
	// Connecting: bound to a new backend connection whose connect is
	// in progress.
	Connecting
	// Sending: bound to a connected backend connection: the request is
	// being written, or waits for the response head.
	Sending
	// Relaying: the response head went to the client; the body is
	// relayed. Nothing but the end of the exchange follows.
	Relaying
	// Waiting: a backend is picked, but its connections are at
	// max_conns_per_backend; the exchange waits (at most timeouts.connect)
	// for one to be given back or for room to dial.
	Waiting
	numStates
)

var stateNames = [numStates]string{
	Idle:       "idle",
	Admitting:  "admitting",
	Parked:     "parked",
	Connecting: "connecting",
	Sending:    "sending",
	Relaying:   "relaying",
	Waiting:    "waiting",
}

// String names the state (test and debug output).
func (s State) String() string {
	if s < numStates {
		return stateNames[s]
	}
	return "invalid"
}

// transitions[from] is the set of states from may go to, as bits.
var transitions = [numStates]uint8{
	Idle:       1 << Admitting,
	Admitting:  1<<Parked | 1<<Connecting | 1<<Sending | 1<<Waiting | 1<<Idle,
	Parked:     1<<Admitting | 1<<Idle,
	Connecting: 1<<Sending | 1<<Connecting | 1<<Waiting | 1<<Idle,
	Sending:    1<<Relaying | 1<<Connecting | 1<<Sending | 1<<Waiting | 1<<Idle,
	Relaying:   1 << Idle,
	Waiting:    1<<Connecting | 1<<Sending | 1<<Waiting | 1<<Idle,
}

// Legal tells whether an exchange may go from s to to.
func (s State) Legal(to State) bool {
	return s < numStates && to < numStates && transitions[s]&(1<<to) != 0
}
