package exchange

import "testing"

// TestExStateTransitions pins the exchange state machine (state.go):
// the transitions the loop makes are legal, the ones it must never make
// are not.
func TestExStateTransitions(t *testing.T) {
	legal := []struct{ from, to State }{
		{Idle, Admitting},
		{Admitting, Parked}, {Admitting, Connecting}, {Admitting, Sending}, {Admitting, Waiting}, {Admitting, Idle},
		{Parked, Admitting}, {Parked, Idle},
		{Connecting, Sending}, {Connecting, Connecting}, {Connecting, Waiting}, {Connecting, Idle},
		{Sending, Relaying}, {Sending, Sending}, {Sending, Connecting}, {Sending, Waiting}, {Sending, Idle},
		{Relaying, Idle},
		{Waiting, Connecting}, {Waiting, Sending}, {Waiting, Waiting}, {Waiting, Idle},
	}
	ok := map[[2]State]bool{}
	for _, tr := range legal {
		ok[[2]State{tr.from, tr.to}] = true
	}
	for from := State(0); from < numStates; from++ {
		for to := State(0); to < numStates; to++ {
			if got, want := from.Legal(to), ok[[2]State{from, to}]; got != want {
				t.Errorf("%v -> %v legal = %v, want %v", from, to, got, want)
			}
		}
	}
	if State(numStates).Legal(Idle) || Idle.Legal(numStates) {
		t.Error("an out-of-range state is legal")
	}
	if s := Relaying.String(); s != "relaying" {
		t.Errorf("String = %q", s)
	}
	if s := State(200).String(); s != "invalid" {
		t.Errorf("String of an out-of-range state = %q", s)
	}
}
