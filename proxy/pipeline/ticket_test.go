package pipeline

import (
	"net/netip"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/classify"
)

// modeController decides with a fixed decision and records the ticket
// Done is told.
type modeController struct {
	d    admission.Decision
	done admission.Ticket
}

func (c *modeController) Classes() []string { return []string{"all"} }
func (c *modeController) Classify(classify.Request, netip.Addr) (int, []byte) {
	return 0, nil
}
func (c *modeController) Estimate(int, []byte, time.Time) (time.Duration, int) { return 0, 0 }
func (c *modeController) Done(t *admission.Ticket, _ admission.Result)         { c.done = *t }
func (c *modeController) StripServerTiming() bool                              { return false }
func (c *modeController) Park(*admission.Request, admission.Waker) (admission.Decision, admission.Pending, bool) {
	return c.d, nil, true
}

// TestTicketCarriesMode: Admitted copies the mode that took the decision
// (admission.Decision.Mode) into the ticket, and the outcome reaches the
// controller with it (Observe), so that the completion goes back to the
// mode that admitted the request whatever mode is in force by then.
func TestTicketCarriesMode(t *testing.T) {
	for _, m := range []admission.Mode{admission.ModeBatch, admission.ModeAdaptive} {
		c := &modeController{d: admission.Decision{Verdict: admission.Admit, Mode: m}}
		a := &App{Controller: c}
		var tk Ticket
		d, _, decided := a.Decide(&tk, nil, netip.Addr{}, time.Unix(1, 0), nil, false, nil)
		if !decided || a.Admitted(&tk, d) != OutRelayed {
			t.Fatalf("mode %v: not relayed", m)
		}
		a.Observe(&tk, admission.Result{End: time.Unix(2, 0)})
		if c.done.Mode != m {
			t.Errorf("Done told mode %v, want %v (the decision's)", c.done.Mode, m)
		}
	}
}
