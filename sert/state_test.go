package sert

import (
	"strings"
	"testing"
	"time"
)

// TestStateRoundTrip: a class's F comes back by name and places the
// threshold within the new configuration's bounds; a class that does not
// terminate, or an F out of [0, 1], is left out and said.
func TestStateRoundTrip(t *testing.T) {
	cfg := Config{Params: DefaultParams(), Classes: []*ClassConfig{{Name: "bronze", Lower: 100 * time.Millisecond, Upper: time.Second}}}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Classes[0].Upper = 2 * time.Second
	c, _ := New(cfg)
	ignored := c.Restore([]ClassState{{Class: "bronze", F: 0.5, P: 0.2}, {Class: "gold", F: 0.1}, {Class: "bronze", F: 3}})
	if got := c.Class(0).Threshold(); got != 1050*time.Millisecond {
		t.Errorf("threshold %v, want LB + 0.5·(UB − LB) = 1.05s", got)
	}
	if st := c.State(); len(st) != 1 || st[0].F != 0.5 || st[0].P != 0.2 {
		t.Errorf("state %+v", st)
	}
	if len(ignored) != 2 || !strings.Contains(ignored[0], `"gold": the class does not terminate`) || !strings.Contains(ignored[1], "out of range") {
		t.Errorf("ignored %q", ignored)
	}
	if st := b.State(); len(st) != 1 || st[0].F != 1 {
		t.Errorf("a fresh controller's state %+v", st)
	}
}
