package control

import (
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/sentry-proxy/sentry/admission"
)

// overCount reads sentry_admitted_over_target_total{app,class} from reg.
func overCount(t *testing.T, g interface {
	Gather() ([]*dto.MetricFamily, error)
}, app, class string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sentry_admitted_over_target_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["app"] == app && l["class"] == class {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("sentry_admitted_over_target_total{app=%q,class=%q} not exported", app, class)
	return 0
}

// TestOverTargetEveryMode is issue 29's first outage on the manual clock:
// a class whose service time (1.5s) exceeds its target (1s), offered one
// request at a time to an idle farm, is admitted in every admission mode
// (the work-conserving rule), counted by sentry_admitted_over_target_total,
// and warned about once a minute per class; its completions stay out of
// the SLA windows. On a busy farm the mode's own verdict stands.
func TestOverTargetEveryMode(t *testing.T) {
	for _, tc := range []struct {
		mode string
		// byToken: adaptive mode's bucket admits some by token, not by
		// the rule: its one initial token, and one more that 0.05/s
		// refills over the 24s of the sequence.
		byToken int
		busy    admission.Verdict
	}{
		{"batch", 0, admission.RejectTest},
		{"auto", 0, admission.RejectTest},
		{"threshold", 0, admission.RejectThreshold},
		{"adaptive", 2, admission.RejectAdaptive},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			m, reg, ck, buf := manualManager(t)
			pool := &fakePool{}
			pool.healthy.Store(1)
			ac := adaptiveApp(tc.mode)
			ac.Admission.Adaptive.InitialRate = 0.05 // one token (depth at least 1)
			a, err := m.Build(ac, pool)
			if err != nil {
				t.Fatal(err)
			}
			a.rsla.Store(int64(time.Second))
			key := []byte("/checkout/slow")
			// The estimator learns the key's 1.5s from one completion.
			a.Done(&admission.Ticket{Class: 0, Key: key, Arrival: ck.now().Add(-1500 * time.Millisecond), Mode: a.Mode()},
				admission.Result{ServerTiming: []byte("cpu;dur=1500"), Measured: 1500 * time.Millisecond, InService: 1, End: ck.now()})
			a.win.n.Store(0)
			a.win.over.Store(0)
			a.lat.drain(0.95)

			admit := func() admission.Decision {
				s, b := a.Estimate(0, key, ck.now())
				if s < time.Second {
					t.Fatalf("estimate %v, want the learned 1.5s", s)
				}
				return a.Admit(&admission.Request{Class: 0, Bucket: b, S: s, Key: key})
			}
			over := 0
			for i := range 16 {
				d := admit()
				if d.Verdict != admission.Admit {
					t.Fatalf("request %d on an idle farm: %v, want admitted", i, d.Verdict)
				}
				if d.OverTarget {
					over++
				}
				// It is served (the pool counts it while in flight) and
				// completes as the pipeline reports it.
				pool.inflight.Store(1)
				ck.add(1500 * time.Millisecond)
				pool.inflight.Store(0)
				a.Done(&admission.Ticket{Class: 0, Key: key, S: 1500 * time.Millisecond, Arrival: ck.now().Add(-1500 * time.Millisecond), Mode: d.Mode, OverTarget: d.OverTarget},
					admission.Result{ServerTiming: []byte("cpu;dur=1500"), Measured: 1500 * time.Millisecond, InService: 1, End: ck.now()})
			}
			if want := 16 - tc.byToken; over != want {
				t.Fatalf("%d of 16 admitted over target, want %d", over, want)
			}
			if got := overCount(t, reg, "shop", "gold"); got != float64(over) {
				t.Fatalf("sentry_admitted_over_target_total = %v, want %d", got, over)
			}
			if got := overCount(t, reg, "shop", "bronze"); got != 0 {
				t.Fatalf("bronze over target %v, want 0", got)
			}
			// The over-target completions are kept out of the SLA feedback
			// (auto's fall-back window, the admitted percentile).
			if n, o := a.win.n.Load(), a.win.over.Load(); n != int64(tc.byToken) || o != int64(tc.byToken) {
				t.Fatalf("fall-back window n=%d over=%d, want %d each (only the token's request)", n, o, tc.byToken)
			}
			if n, _ := a.lat.drain(0.95); n != uint64(tc.byToken) {
				t.Fatalf("admitted percentile window holds %d, want %d", n, tc.byToken)
			}
			const warn = "admitted requests over their target"
			if c := strings.Count(buf.String(), warn); c != 1 {
				t.Fatalf("%d WARN lines in 24s, want 1:\n%s", c, buf)
			}
			line := buf.String()[strings.Index(buf.String(), warn):]
			for _, kv := range []string{"[WARN]", "app=shop", "class=gold", "mode=" + a.Mode().String(), "admitted_over_target=1", "target=1s"} {
				if !strings.Contains(buf.String(), kv) {
					t.Fatalf("WARN line lacks %q:\n%s", kv, line)
				}
			}

			// A minute after the first WARN, the next over-target admission
			// logs again, with the count since.
			ck.add(time.Minute)
			// (In adaptive mode the bucket has refilled its one token.)
			if d := admit(); !d.OverTarget && (tc.byToken == 0 || !admit().OverTarget) {
				t.Fatalf("after a minute: %+v, want admitted over target", d)
			}
			if c := strings.Count(buf.String(), warn); c != 2 {
				t.Fatalf("%d WARN lines after a minute, want 2:\n%s", c, buf)
			}
			if !strings.Contains(buf.String(), "admitted_over_target="+strconv.Itoa(over)) {
				t.Fatalf("second WARN lacks the count since the first (%d):\n%s", over, buf)
			}
			a.Done(&admission.Ticket{Class: 0, Key: key, S: 1500 * time.Millisecond, Arrival: ck.now().Add(-1500 * time.Millisecond), OverTarget: true, Mode: a.Mode()},
				admission.Result{ServerTiming: []byte("cpu;dur=1500"), Measured: 1500 * time.Millisecond, InService: 1, End: ck.now()})

			// A busy farm (its one slot taken twice over: P is learned, and
			// the rule's probe fills up to 2P): the mode's own verdict.
			pool.inflight.Store(2)
			before := overCount(t, reg, "shop", "gold")
			if d := admit(); d.Verdict != tc.busy {
				t.Fatalf("busy farm: %+v, want %v", d, tc.busy)
			}
			if got := overCount(t, reg, "shop", "gold"); got != before {
				t.Fatalf("busy farm counted over target: %v → %v", before, got)
			}
		})
	}
}
