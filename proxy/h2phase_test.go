package proxy

import "testing"

// The package's tests run the h2 streams' phase machine strictly: an
// illegal move panics where it happens (h2phase.go).
func init() { strictStates = true }

func TestStreamPhaseMoves(t *testing.T) {
	legal := map[[2]streamPhase]bool{
		{phOpen, phContinued}: true, {phOpen, phHead}: true, {phContinued, phHead}: true,
		{phHead, phEnded}: true, {phOpen, phBroken}: true, {phHead, phBroken}: true,
		{phBroken, phEnded}: true, {phEnded, phReleased}: true, {phOpen, phReleased}: true,
		{phContinued, phBroken}: true, {phContinued, phEnded}: true, {phOpen, phEnded}: true,
		{phContinued, phReleased}: true, {phHead, phReleased}: true, {phBroken, phReleased}: true,
	}
	for from := range numPhases + 1 {
		for to := range numPhases + 1 {
			if got := from.legal(to); got != legal[[2]streamPhase{from, to}] {
				t.Errorf("%v -> %v: legal %v", from, to, got)
			}
		}
	}
	// An illegal move panics under the tests and is counted.
	fe := &frontend{}
	st := &ownStream{oc: &ownConn{fe: fe}, phase: phReleased}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("released -> head did not panic")
			}
		}()
		st.setPhase(phHead)
	}()
	if fe.own.illegal.Load() != 1 {
		t.Errorf("illegal moves counted: %d, want 1", fe.own.illegal.Load())
	}
}
