//go:build linux

package evloop

import "testing"

// TestStreamStateTransitions pins a stream connection's state machine
// (stream_linux.go): the moves the loop makes are legal, the others not.
func TestStreamStateTransitions(t *testing.T) {
	legal := map[[2]streamState]bool{
		{ssTaken, ssRefused}: true, {ssTaken, ssRunning}: true,
		{ssRunning, ssHead}: true, {ssRunning, ssEnded}: true,
		{ssHead, ssEnded}: true,
		{ssEnded, ssTail}: true,
	}
	for from := streamState(0); from < numStreamStates; from++ {
		for to := streamState(0); to < numStreamStates; to++ {
			if got := from.legal(to); got != legal[[2]streamState{from, to}] {
				t.Errorf("%v -> %v legal = %v", from, to, got)
			}
		}
	}
	if numStreamStates.legal(ssTaken) || ssTaken.legal(numStreamStates) || numStreamStates.String() != "invalid" {
		t.Error("an out-of-range state is legal, or named")
	}
	if s := (&h2str{state: ssHead}); !s.started() || s.ended() || !(&h2str{state: ssTail}).ended() || (&h2str{state: ssRefused}).started() {
		t.Error("started or ended misread")
	}
}
