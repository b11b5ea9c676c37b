package lb

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestHealthRoundTrip: a pool given another's health (through JSON, as a
// handover carries it) keeps the down backend out and the ejected one out
// until its ejection ends, as the first pool would; an address it lacks
// is reported.
func TestHealthRoundTrip(t *testing.T) {
	c := newClock()
	opts := Options{Now: c.Now, Failures: 2, Cooldown: 10 * time.Second, Active: &Active{Interval: time.Second, Rise: 2, Fall: 2, Timeout: time.Second,
		Probe: func(context.Context, string) error { return nil }}}
	a := NewPool(opts, addrList(4))
	bs := a.Backends()
	setDown(bs[0], true)
	for range 2 {
		a.Release(take(a, bs[1]), false) // two failures: ejected
	}
	a.Release(take(a, bs[2]), false) // one failure: counted
	if a.Healthy() != 2 {
		t.Fatalf("healthy %d, want 2", a.Healthy())
	}
	data, err := json.Marshal(a.Health())
	if err != nil {
		t.Fatal(err)
	}
	var hs []Health
	if err := json.Unmarshal(data, &hs); err != nil {
		t.Fatal(err)
	}
	hs = append(hs, Health{Addr: "10.9.9.9:80", Down: true})

	b := NewPool(opts, addrList(4)[1:]) // 10.0.0.1 left the policy
	applied, ignored := b.RestoreHealth(hs)
	if applied != 3 || strings.Join(ignored, "|") != "backend 10.0.0.1:80: not in the pool|backend 10.9.9.9:80: not in the pool" {
		t.Errorf("applied %d, ignored %q", applied, ignored)
	}
	if b.Healthy() != 2 || b.Backends()[0].Healthy() {
		t.Errorf("after restore: %d healthy, ejected backend healthy %v", b.Healthy(), b.Backends()[0].Healthy())
	}
	if got := b.Health(); got[0] != hs[1] || got[1] != hs[2] {
		t.Errorf("health %+v, want %+v %+v", got[:2], hs[1], hs[2])
	}
	// The ejection ends when it would have (with active checks, at the
	// cooldown), and the next failure of the half-open backend ejects it
	// again at once: the failure count came along.
	c.Advance(opts.Cooldown - time.Second)
	if b.Healthy() != 2 {
		t.Errorf("before the cooldown's end: %d healthy, want 2", b.Healthy())
	}
	c.Advance(time.Second)
	if b.Healthy() != 3 {
		t.Errorf("after the cooldown: %d healthy, want 3", b.Healthy())
	}
	b.Release(take(b, b.Backends()[0]), false) // one more failure
	if b.Healthy() != 2 {
		t.Errorf("the restored failure count was lost: %d healthy", b.Healthy())
	}
}

// TestRestoreHealthAgainstPolicy: a down mark without active checks and
// an ejection without passive checks are not taken (nothing would undo
// them); a DNS pool keeps an address's health until it resolves.
func TestRestoreHealthAgainstPolicy(t *testing.T) {
	c := newClock()
	p := NewPool(Options{Now: c.Now}, addrList(2))
	until := c.Now().Add(time.Minute).UnixNano()
	_, ignored := p.RestoreHealth([]Health{{Addr: "10.0.0.1:80", Down: true}, {Addr: "10.0.0.2:80", EjectedUntil: until, Consecutive: 3}})
	if p.Healthy() != 2 || len(ignored) != 2 || !strings.Contains(ignored[0], "no active checks") || !strings.Contains(ignored[1], "no passive checks") {
		t.Errorf("healthy %d, ignored %q", p.Healthy(), ignored)
	}

	d := NewPool(Options{Now: c.Now, Failures: 1, Cooldown: time.Minute, ResolveInterval: time.Second,
		Resolve: func(ctxt context.Context) ([]string, error) { return nil, nil }}, nil)
	applied, ignored := d.RestoreHealth([]Health{{Addr: "10.0.0.7:80", EjectedUntil: until, Consecutive: 1}})
	if applied != 0 || len(ignored) != 0 {
		t.Errorf("DNS pool: applied %d, ignored %q", applied, ignored)
	}
	d.SetAddrs([]string{"10.0.0.6:80", "10.0.0.7:80"}) // the first resolution
	if d.Healthy() != 1 || d.Backends()[1].Healthy() {
		t.Errorf("the resolved address did not get its ejection: %d healthy", d.Healthy())
	}
	d.SetAddrs(nil)
	c.Advance(PendingFor + time.Second)
	d.SetAddrs([]string{"10.0.0.7:80"}) // too late: nothing pending
	if d.Healthy() != 1 {
		t.Errorf("pending health applied after PendingFor")
	}
}
