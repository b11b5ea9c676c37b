package exchange

import (
	"net/netip"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sentry-proxy/sentry/proxy/exchange/exchangetest"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// TestRefuse: a request the driver refuses before its decision (its body
// timed out, a cap refused it, or its client went while it was read) is
// answered with
// sentry's reply for the reason, or aborted, without asking admission;
// its access record has no class, and the exchange is idle after Done.
func TestRefuse(t *testing.T) {
	ctl := &exchangetest.Control{Printf: func(string, ...any) {}}
	a := exchangetest.App(t, ctl)
	var got []pipeline.AccessEntry
	env := &Env{IDs: testIDs(), Log: hclog.NewNullLogger(), Strict: true,
		Access: func(e *pipeline.AccessEntry) { got = append(got, *e) }}
	var sc Scratch
	var ex Exchange
	ex.Init(env, &sc)
	peer := netip.MustParseAddr("192.0.2.1")
	now := time.Unix(1000, 0)

	h := h2Head("POST", "/up", "a.test", "content-length", "5")
	if act := ex.Refuse(a, h, peer, pipeline.OutBodyTimeout, true, now); act != Reply {
		t.Fatalf("body timeout: %v, want reply", act)
	}
	if r := ex.Reply(); r.Status != 408 || len(ex.ID()) == 0 {
		t.Errorf("body timeout: status %d, id %q", r.Status, ex.ID())
	}
	ex.Done(now)
	if ex.Busy() || len(got) != 1 || got[0].Class != -1 || got[0].Status != 408 || got[0].Outcome != pipeline.OutBodyTimeout {
		t.Fatalf("after Done: busy %v, records %+v", ex.Busy(), got)
	}

	// The body caps (max_body_bytes): 413 over it, 411 without a length.
	for _, c := range []struct {
		o      pipeline.Outcome
		status int
	}{{pipeline.OutBodyTooLarge, 413}, {pipeline.OutLengthRequired, 411}} {
		n := len(got)
		if act := ex.Refuse(a, h, peer, c.o, true, now); act != Reply || ex.Reply().Status != c.status {
			t.Fatalf("%v: %v %d, want reply %d", c.o, act, ex.Reply().Status, c.status)
		}
		ex.Done(now)
		if len(got) != n+1 || got[n].Class != -1 || got[n].Status != c.status || got[n].Outcome != c.o || got[n].Backend != nil {
			t.Errorf("%v: records %+v", c.o, got[n:])
		}
	}

	n := len(got)
	if act := ex.Refuse(a, h, peer, pipeline.OutClientGone, true, now); act != Abort {
		t.Fatalf("client gone: %v, want abort", act)
	}
	ex.Done(now)
	if ex.Busy() || len(got) != n {
		t.Errorf("a reset stream's refusal: busy %v, %d records (want no line)", ex.Busy(), len(got)-n)
	}
}
