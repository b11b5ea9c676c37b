package estimator

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestExportRestore: a fresh estimator given another's state (through
// JSON, as a handover carries it) estimates every key, class prior, Q and
// arrival rate as the first one does; a class the new policy lacks is
// left out and reported, a new one starts afresh.
func TestExportRestore(t *testing.T) {
	c := newClock()
	a := mustNew(t, Config{}, "gold", "silver", "bronze")
	for i := range 400 {
		c.advance(10 * time.Millisecond)
		for cl, base := range []float64{5, 20, 80} {
			key := []byte(fmt.Sprintf("/c%d/k%d", cl, i%40))
			a.Arrive(cl, c.now())
			a.Observe(cl, key, ms(base+float64(i%40)), ms(3), c.now())
		}
	}
	a.Observe(0, []byte("/bad\xff"), ms(7), -1, c.now()) // not UTF-8
	st := a.Export(c.now())
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back State
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	c.advance(50 * time.Millisecond) // the handover's gap

	// The new policy: silver renamed, a new class, order changed.
	b := mustNew(t, Config{}, "bronze", "gold", "argent")
	rep := b.Restore(back, c.now())
	if rep.Classes != 2 || rep.Keys != 81 {
		t.Errorf("restored %d classes, %d keys; want 2, 81 (%v)", rep.Classes, rep.Keys, rep.Ignored)
	}
	if len(rep.Ignored) != 1 || !strings.Contains(rep.Ignored[0], `class "silver": not in the policy (40 keys)`) {
		t.Errorf("ignored: %q", rep.Ignored)
	}
	for _, m := range []struct{ from, to int }{{0, 1}, {2, 0}} {
		for i := range 40 {
			key := []byte(fmt.Sprintf("/c%d/k%d", m.from, i))
			sa, _ := a.Estimate(m.from, key)
			sb, _ := b.Estimate(m.to, key)
			if sa != sb {
				t.Fatalf("class %d key %s: %v, restored %v", m.from, key, sa, sb)
			}
		}
		ma, da, wa := a.ClassStats(m.from)
		mb, db, wb := b.ClassStats(m.to)
		if ma != mb || relErr(db, da) > 0.01 || !near(wa, wb, 0.01) || ma == 0 {
			t.Errorf("class %d: mean %v sd %v w %v; restored %v %v %v", m.from, ma, da, wa, mb, db, wb)
		}
		if ra, rb := a.Rate(m.from, c.now()), b.Rate(m.to, c.now()); !near(ra, rb, 0.25) || rb == 0 {
			// a's current window closed at the advance; b's restarts
			t.Errorf("class %d: rate %v, restored %v", m.from, ra, rb)
		}
	}
	if sa, _ := a.Estimate(0, []byte("/bad\xff")); sa == 0 {
		t.Fatal("no estimate for the non-UTF-8 key")
	} else if sb, _ := b.Estimate(1, []byte("/bad\xff")); sb != sa {
		t.Errorf("non-UTF-8 key: %v, restored %v", sa, sb)
	}
	if qa, qb := a.Q(), b.Q(); relErr(qb, qa) > 0.02 || qa == 0 {
		t.Errorf("Q %v, restored %v", qa, qb)
	}
	if s, _, w := b.ClassStats(2); s != 0 || w != 0 {
		t.Errorf("the new class has a prior: %v (weight %v)", s, w)
	}
	// A key the old estimator never saw gets the class's prior.
	pa, _ := a.Estimate(2, []byte("/unseen"))
	pb, _ := b.Estimate(0, []byte("/unseen"))
	if pa != pb || pa == 0 {
		t.Errorf("unseen key: %v, restored %v", pa, pb)
	}
}

// TestRestoreAged: a state read long after it was taken (a state file
// after a stop) claims no old load: the rates have decayed as if nothing
// had arrived; the service times, a property of the URLs, are kept.
func TestRestoreAged(t *testing.T) {
	c := newClock()
	a := mustNew(t, Config{})
	for i := range 300 {
		c.advance(20 * time.Millisecond)
		a.Arrive(0, c.now())
		a.Observe(0, []byte(fmt.Sprint("/k", i%5)), ms(10), -1, c.now())
	}
	st := a.Export(c.now())
	c.advance(10 * time.Minute)
	b := mustNew(t, Config{})
	b.Restore(st, c.now())
	if r := b.Rate(0, c.now()); r > 1e-6 {
		t.Errorf("rate after 10 minutes: %v", r)
	}
	if s, _ := b.Estimate(0, []byte("/k1")); relErr(s, ms(10)) > 0.01 {
		t.Errorf("estimate after 10 minutes: %v", s)
	}
}

// TestRestoreRejectsBadValues: values no estimator could have made are
// left out, reported, and never reach an estimate.
func TestRestoreRejectsBadValues(t *testing.T) {
	c := newClock()
	b := mustNew(t, Config{MaxKeys: 1})
	st := State{At: c.now().UnixNano(), Q: Stat{W: -1}, Classes: []ClassState{
		{Name: "gold", Prior: Stat{W: 1, Mean: -5}},
		{Name: "bronze", Prior: Stat{W: 1, Mean: 1e6}, Samples: Stat{W: 1, Mean: 1e6}, Rate: 3, Keys: []KeyState{
			{Key: "/a", Stat: Stat{W: 1, Mean: 2e6}}, {Key: "/b", Stat: Stat{W: 1, Mean: 3e6}}, {Key: "/c", Stat: Stat{W: -2}}}},
	}}
	rep := b.Restore(st, c.now())
	want := []string{`class "gold": a value out of range`, "queueing delay: a value out of range", "1 keys: a value out of range",
		"1 keys: the key table is full (estimator.max_keys)"}
	if rep.Classes != 1 || rep.Keys != 1 || strings.Join(rep.Ignored, "|") != strings.Join(want, "|") {
		t.Errorf("classes %d keys %d ignored %q", rep.Classes, rep.Keys, rep.Ignored)
	}
	if s, _, _ := b.ClassStats(0); s != 0 {
		t.Errorf("gold took a negative prior: %v", s)
	}
}
