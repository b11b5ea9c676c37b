package pipeline

import (
	"testing"
)

// TestTryAgain pins the one retry policy both engines use.
func TestTryAgain(t *testing.T) {
	for _, tc := range []struct {
		f          Failure
		replayable bool
		attempts   int
		responded  bool
		want       bool
	}{
		{FailConnect, false, 1, false, true}, // nothing was sent: even a POST
		{FailConnect, true, 2, false, true},
		{FailConnect, true, MaxAttempts, false, false}, // the budget is spent
		{FailBroken, true, 1, false, true},             // nginx's proxy_next_upstream error
		{FailBroken, false, 1, false, false},           // not idempotent, or a streamed body
		{FailBroken, true, 1, true, false},             // part of a response came back
		{FailBroken, true, MaxAttempts, false, false},
		{FailNoRetry, true, 1, false, false}, // the explicit no-retry
	} {
		if got := TryAgain(tc.f, tc.replayable, tc.attempts, tc.responded); got != tc.want {
			t.Errorf("tryAgain(%d, replayable %v, attempts %d, responded %v) = %v, want %v", tc.f, tc.replayable, tc.attempts, tc.responded, got, tc.want)
		}
	}
}
