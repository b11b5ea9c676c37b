package h2srv

import (
	"math"
	"time"
)

// ResetMeter is the rapid-reset rule (CVE-2023-44487 and its paced
// variant; MadeYouReset, CVE-2025-8671, counts through it too) as a
// rate: the streams a connection opened and the ones it reset are both
// counted with exponential decay, time constant Window, and
//
//   - past Limit (decayed) resets that are also more than a quarter of
//     the (decayed) streams, the connection is flooded (Reset reports it:
//     GOAWAY ENHANCE_YOUR_CALM);
//   - while more than one (decayed) stream in eight was reset, it is
//     Suspect (the driver holds a new stream a moment before dispatch).
//
// A client resetting at a steady rate of ρ per second holds about ρ·Window
// decayed resets, never more: under Limit per Window, a connection that
// cancels as a habit (a typeahead search cancelling the last query at
// every keystroke) lives forever, while a burst of more than Limit resets
// within a small part of Window still ends it, as does any rate above
// Limit per Window. A meter whose clock does not move counts as the
// lifetime rule it replaces did (the same thresholds, no decay).
//
// The decay is applied when a count changes, at most once a millisecond
// (time accumulates until then); the clock is the caller's, so the meter
// is tested on a manual one. The zero value is unusable: set Limit and
// Window. Not safe for concurrent use.
type ResetMeter struct {
	// Limit is the resets tolerated within about Window; 0 or negative:
	// never flooded (Suspect still works).
	Limit int
	// Window is the decay's time constant.
	Window time.Duration

	resets, streams float64
	at              time.Time
}

// decay brings the counts to now.
func (m *ResetMeter) decay(now time.Time) {
	if m.at.IsZero() || m.resets == 0 && m.streams == 0 {
		m.at = now
		return
	}
	dt := now.Sub(m.at)
	if dt < time.Millisecond {
		return // too soon to matter: the time accumulates
	}
	f := math.Exp(-float64(dt) / float64(m.Window))
	m.resets *= f
	m.streams *= f
	m.at = now
}

// Stream counts a stream the client opened and the server took on.
func (m *ResetMeter) Stream(now time.Time) {
	m.decay(now)
	m.streams++
}

// Reset counts one reset and reports whether the connection is now
// flooded.
func (m *ResetMeter) Reset(now time.Time) bool {
	m.decay(now)
	m.resets++
	return m.Limit > 0 && m.resets > float64(m.Limit) && m.resets*4 > m.streams
}

// Suspect reports whether more than one recent stream in eight was reset.
func (m *ResetMeter) Suspect() bool { return m.resets > 0 && m.resets*8 > m.streams }
