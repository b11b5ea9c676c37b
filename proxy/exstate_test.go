package proxy

import "testing"

// The tests run the loops with strictStates: an illegal exchange
// transition panics there, instead of being counted.
func init() { strictStates = true }

// TestExStateTransitions pins the exchange state machine (exstate.go):
// the transitions the loop makes are legal, the ones it must never make
// are not.
func TestExStateTransitions(t *testing.T) {
	legal := []struct{ from, to exState }{
		{exIdle, exAdmitting},
		{exAdmitting, exParked}, {exAdmitting, exConnecting}, {exAdmitting, exSending}, {exAdmitting, exIdle},
		{exParked, exAdmitting}, {exParked, exIdle},
		{exConnecting, exSending}, {exConnecting, exConnecting}, {exConnecting, exIdle},
		{exSending, exRelaying}, {exSending, exSending}, {exSending, exConnecting}, {exSending, exIdle},
		{exRelaying, exIdle},
	}
	ok := map[[2]exState]bool{}
	for _, tr := range legal {
		ok[[2]exState{tr.from, tr.to}] = true
	}
	for from := exState(0); from < numExStates; from++ {
		for to := exState(0); to < numExStates; to++ {
			if got, want := from.legal(to), ok[[2]exState{from, to}]; got != want {
				t.Errorf("%v -> %v legal = %v, want %v", from, to, got, want)
			}
		}
	}
	if exState(numExStates).legal(exIdle) || exIdle.legal(numExStates) {
		t.Error("an out-of-range state is legal")
	}
	if s := exRelaying.String(); s != "relaying" {
		t.Errorf("String = %q", s)
	}
	if s := exState(200).String(); s != "invalid" {
		t.Errorf("String of an out-of-range state = %q", s)
	}
}
