package admission

import (
	"fmt"
	"math"
	"time"
)

// SwitchState is what an auto Switch has concluded, to carry it to
// another process (a binary upgrade, a state file): the mode it is in and
// since when, and the memory of its hysteresis -- the revert wait after
// relapse backoff, the utilisation and rate anchored at the last switch to
// threshold mode (0: none), the last revert. Times are unix nanoseconds,
// RevertAfter nanoseconds. A sample run in progress is not carried: the
// new process measures its own CPU.
type SwitchState struct {
	Mode        string  `json:"mode"`
	Since       int64   `json:"since,omitempty"`
	RevertAfter int64   `json:"revert_after"`
	AnchorU     float64 `json:"anchor_utilization,omitempty"`
	AnchorR     float64 `json:"anchor_rate,omitempty"`
	LastRevert  int64   `json:"last_revert,omitempty"`
}

// State returns the switch's state. ok is false for a mode the policy
// forces, which has nothing to carry. An auto switch that the operator
// holds in a mode at run time (Force) gives the state Unforce would leave
// -- batch mode, as at NewSwitch, with its hysteresis memory -- and not
// the held mode: a runtime override is not learned, and ends with the
// process as it ends with a reload (docs/operations.md, "Runtime
// control").
func (s *Switch) State() (st SwitchState, ok bool) {
	if s.cfg.Mode != ModeAuto {
		return st, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st = SwitchState{Mode: s.Mode().String(), RevertAfter: int64(s.mu.revertAfter), AnchorU: s.mu.anchorU}
	if s.forced.Load() {
		st.Mode = ModeBatch.String()
	} else if !s.mu.since.IsZero() {
		st.Since = s.mu.since.UnixNano()
	}
	if r := s.mu.anchorR; r > 0 && !math.IsInf(r, 0) {
		st.AnchorR = r
	}
	if s.mu.reverted {
		st.LastRevert = s.mu.lastRevert.UnixNano()
	}
	return st, true
}

// Restore puts an auto switch where another process's was (State): in
// the same mode -- batch, threshold or adaptive -- with its revert wait
// (within [RevertAfter, MaxRevertAfter] of this configuration), anchor
// and last revert. It returns an error, and changes nothing, for a forced
// mode (the policy decides; nothing is carried) or a state that is not
// valid. It is not a switch: nothing is counted, logged or called.
func (s *Switch) Restore(st SwitchState) error {
	if s.cfg.Mode != ModeAuto {
		return fmt.Errorf("the mode is forced to %s", s.cfg.Mode)
	}
	m, err := ParseMode(st.Mode)
	if err != nil || (m != ModeBatch && m != ModeThreshold && m != ModeAdaptive) {
		return fmt.Errorf("mode %q is not one auto switches to", st.Mode)
	}
	if !(st.AnchorU >= 0) || math.IsInf(st.AnchorU, 0) || !(st.AnchorR >= 0) || math.IsInf(st.AnchorR, 0) || st.RevertAfter < 0 {
		return fmt.Errorf("a value out of range")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.revertAfter = min(max(time.Duration(st.RevertAfter), s.cfg.RevertAfter), s.cfg.MaxRevertAfter)
	s.mu.anchorU, s.mu.anchorR = st.AnchorU, st.AnchorR
	if st.AnchorR == 0 {
		s.mu.anchorR = math.NaN()
	}
	s.mu.reverted = st.LastRevert != 0
	if s.mu.reverted {
		s.mu.lastRevert = time.Unix(0, st.LastRevert)
	}
	s.mode.Store(uint32(m))
	s.mu.since = time.Time{}
	if st.Since != 0 {
		s.mu.since = time.Unix(0, st.Since)
	}
	s.mu.inRun = false
	s.revertWait.Store(int64(s.mu.revertAfter))
	return nil
}
