// Package exchangetest builds what the scripts of the exchange core and
// of its drivers run against: an app as package proxy would build it from
// a policy, and an admission stack that prints what it is told and parks
// requests until the script decides. For tests only.
package exchangetest

import (
	"net/netip"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/classify"
	"github.com/sentry-proxy/sentry/lb"
	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/sentry-proxy/sentry/sert"
)

// Backend is the address of App's one backend.
const Backend = "192.0.2.10:80"

// App is the app a script serves, as package proxy would build it from a
// policy (one backend, Backend; admission by ctl; connect and response
// timeouts 50 ms and 100 ms; request IDs in X-Request-Id), with metrics
// that nothing registers.
func App(t *testing.T, ctl *Control) *pipeline.App {
	ac := &policy.App{
		Name:               "web",
		Backends:           policy.Backends{Static: []string{Backend}},
		Balance:            policy.LeastLoaded,
		Health:             policy.Health{Passive: policy.PassiveHealth{Failures: 3, Cooldown: 10 * time.Second}},
		Timeouts:           policy.Timeouts{Connect: 50 * time.Millisecond, Response: 100 * time.Millisecond},
		MaxConnsPerBackend: 1024,
		RequestIDHeader:    "X-Request-Id",
		Reject:             policy.Reject{Status: 503, Body: "sentry: overloaded, retry later\n", RetryAfter: time.Second},
		Admission:          policy.Admission{Mode: "batch"},
	}
	counter := func() prometheus.Counter { return prometheus.NewCounter(prometheus.CounterOpts{Name: "x"}) }
	m := &pipeline.AppMetrics{}
	for i := range m.None {
		m.None[i] = counter()
	}
	for i := range m.Latency {
		m.Latency[i] = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x"})
	}
	for o, r := range pipeline.OutcomeReason {
		if r != "" {
			m.Errs[o] = counter()
		}
	}
	sh := &pipeline.AppShared{Metrics: m}
	sh.Idle.Store(ac.Timeouts.Response.Nanoseconds())
	sh.Connect.Store(ac.Timeouts.Connect.Nanoseconds())
	a := &pipeline.App{Policy: ac, Name: ac.Name, ReqID: ac.RequestIDHeader, LoopOK: true,
		Shared: sh, Metrics: m, Controller: ctl,
		Reject: pipeline.RejectResponse{Status: ac.Reject.Status, Body: []byte(ac.Reject.Body), RetryAfter: 1}}
	var verdicts []prometheus.Counter
	for range admission.Verdicts() {
		verdicts = append(verdicts, counter())
	}
	a.Decisions = [][]prometheus.Counter{verdicts}
	a.Pool = lb.NewPool(lb.Options{App: ac.Name, Algorithm: lb.Algorithm(ac.Balance),
		Failures: ac.Health.Passive.Failures, Cooldown: ac.Health.Passive.Cooldown, Logger: hclog.NewNullLogger(),
		Attach: func(addr string) any {
			u := &pipeline.Upstream{Addr: addr}
			for c := range u.Reqs {
				u.Reqs[c] = counter()
			}
			return u
		},
		Detach: func(_ string, v any) { v.(*pipeline.Upstream).Closed.Store(true) },
	}, ac.Backends.Static)
	t.Cleanup(a.Pool.Close)
	return a
}

// Terminate gives a's class a termination range with upper bound upper
// and lower bound lower (methods GET and HEAD); upper 0 turns it off. The
// threshold starts at, and a change moves it to, the upper bound (F = 1
// until a tick), which is how a script moves it while a request is in
// flight.
func Terminate(a *pipeline.App, lower, upper time.Duration) error {
	if upper == 0 {
		a.Term = nil
		return nil
	}
	cfg := sert.Config{Params: sert.DefaultParams(), Classes: []*sert.ClassConfig{{Name: "gold", Lower: lower, Upper: upper}}}
	if a.Term == nil {
		c, err := sert.New(cfg)
		if err != nil {
			return err
		}
		a.Term = c
		return nil
	}
	return a.Term.Reconfigure(cfg)
}

// Control is a script's admission stack: one class, S = 10ms; it admits
// at once, or, with Parks set, parks every request until the script
// decides. It prints (Printf) what it decides and what it is told.
type Control struct {
	Printf  func(format string, args ...any)
	Parks   bool // park every request (else admit at once)
	pending []*pending
}

type pending struct {
	c        *Control
	d        admission.Decision
	ready    bool
	canceled bool
	wk       admission.Waker
}

func (p *pending) Result() (admission.Decision, bool) { return p.d, p.ready }
func (p *pending) Cancel() {
	p.canceled = true
	p.c.Printf("admission: cancel (client gone)")
}

var _ pipeline.Controller = (*Control)(nil)

func (f *Control) Build(*policy.App, *lb.Pool) (pipeline.Controller, error) { return f, nil }
func (f *Control) Retain([]string)                                          {}
func (f *Control) Classes() []string                                        { return []string{"gold"} }
func (f *Control) Classify(r classify.Request, _ netip.Addr) (int, []byte) {
	return 0, r.Path()
}
func (f *Control) Estimate(int, []byte, time.Time) (time.Duration, int) {
	return 10 * time.Millisecond, 0
}
func (f *Control) StripServerTiming() bool { return true }
func (f *Control) Park(r *admission.Request, wk admission.Waker) (admission.Decision, admission.Pending, bool) {
	if !f.Parks {
		f.Printf("admission: %s admitted at once", r.Key)
		return admission.Decision{Verdict: admission.Admit}, nil, true
	}
	f.Printf("admission: %s parked", r.Key)
	p := &pending{c: f, wk: wk}
	f.pending = append(f.pending, p)
	return admission.Decision{}, p, false
}

// Decide decides every pending request and wakes their waker once, as a
// batch run does.
func (f *Control) Decide(admit bool) {
	var wk admission.Waker
	for _, p := range f.pending {
		if p.canceled {
			continue
		}
		p.ready = true
		if admit {
			p.d = admission.Decision{Verdict: admission.Admit}
		} else {
			p.d = admission.Decision{Verdict: admission.RejectTest, RetryAfter: 2 * time.Second}
		}
		wk = p.wk
	}
	f.pending = nil
	if wk != nil {
		wk.Wake()
	}
}

func (f *Control) Done(t *admission.Ticket, r admission.Result) {
	f.Printf("admission: done %s class=%d s=%v measured=%v in_service=%d latency=%v server_timing=%q",
		t.Key, t.Class, t.S, r.Measured, r.InService, r.Latency(t), r.ServerTiming)
}
