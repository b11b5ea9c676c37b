package policy

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/sert"
)

// TestTerminationValidation: every bad terminate or termination value is
// reported at its line, and nothing else.
func TestTerminationValidation(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"class terminate values", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    classes:
      - name: search
        rules: [{path_prefix: /search}]
        terminate:
          lower: 0s
          upper: 20
          methods: []
          retry: true
      - name: rest
`, []string{
			`8: apps[0].classes[0].terminate.lower: 0s is too short; must be at least 1ms`,
			`9: apps[0].classes[0].terminate.upper: duration "20" has no unit`,
			`10: apps[0].classes[0].terminate.methods: empty list; give at least one entry, or leave methods out`,
			`11: apps[0].classes[0].terminate: unknown key "retry"`,
		}},
		{"upper below lower", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    classes:
      - name: search
        terminate: {lower: 2s, upper: 1s}
`, []string{`6: apps[0].classes[0].terminate.upper: upper 1s is below lower 2s`}},
		{"lower above the default upper", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    classes:
      - name: search
        terminate:
          lower: 20s
`, []string{`7: apps[0].classes[0].terminate.lower: upper 15s is below lower 20s`}},
		{"upper too long, bad method, duplicate", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    classes:
      - name: search
        terminate:
          upper: 2h
      - name: rest
        terminate:
          methods: [GET, "G T", get]
`, []string{
			`7: apps[0].classes[0].terminate.upper: 2h0m0s is above 1h0m0s`,
			`10: apps[0].classes[1].terminate.methods[1]: "G T" is not a method name`,
			`10: apps[0].classes[1].terminate.methods[2]: GET is listed twice`,
		}},
		{"terminate not a mapping", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    classes:
      - name: search
        terminate: 5s
`, []string{`6: apps[0].classes[0].terminate: expected a mapping`}},
		{"termination section values", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    termination:
      alpha: 0
      low_water: 1
      high_water: 1.5
      interval: 0s
      min_arrivals: 0
      hw: 0.2
      max_rise: 1
`, []string{
			`5: apps[0].termination.alpha: 0 is out of range; must be greater than 0`,
			`6: apps[0].termination.low_water: 1 is out of range`,
			`7: apps[0].termination.high_water: 1.5 is out of range`,
			`8: apps[0].termination.interval: 0s is too short; must be at least 1ms`,
			`9: apps[0].termination.min_arrivals: 0 is out of range`,
			`10: apps[0].termination: unknown key "hw" (known keys: alpha, high_water, interval, low_water, max_rise, min_arrivals)`,
			`11: apps[0].termination.max_rise: 1 would hold the threshold down for good`,
		}},
		{"max rise below 1, negative, not a number", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    termination: {max_rise: 0.5}
  - name: b
    listen: 127.0.0.1:8081
    backends: {static: ["h:2"]}
    termination:
      max_rise: -2
  - name: c
    listen: 127.0.0.1:8082
    backends: {static: ["h:3"]}
    termination:
      max_rise: twice
`, []string{
			`4: apps[0].termination.max_rise: 0.5 would hold the threshold down for good; want 0 (no bound: the paper's rule) or a factor greater than 1`,
			`9: apps[1].termination.max_rise: -2 is out of range; must be at least 0`,
			`14: apps[2].termination.max_rise: expected a number, got the string "twice"`,
		}},
		{"low water not below high water", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    termination:
      low_water: 0.2
`, []string{`5: apps[0].termination.low_water: low_water 0.2 must be below high_water 0.15`}},
		{"high water at low water", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    termination: {low_water: 0.1, high_water: 0.1}
`, []string{`4: apps[0].termination.low_water: low_water 0.1 must be below high_water 0.1`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse("t.yaml", []byte(strings.TrimPrefix(tc.src, "\n")))
			if err == nil || s != nil {
				t.Fatalf("got snapshot %v, error %v; want errors %q", s != nil, err, tc.want)
			}
			matchErrors(t, asErrors(t, err), tc.want)
		})
	}
}

// TestTerminationDefaults: terminate: {} is the paper's range for GET and
// HEAD; the section's defaults are the library's; SertConfig builds a
// config the library accepts, with nil for classes without a range.
func TestTerminationDefaults(t *testing.T) {
	s, err := Parse("t.yaml", []byte(`
apps:
  - name: a
    backends: {static: ["h:1"]}
    classes:
      - name: search
        rules: [{path_prefix: /search}]
        terminate: {}
      - name: rest
`))
	if err != nil {
		t.Fatal(err)
	}
	a := s.Apps[0]
	want := []*Terminate{{Lower: 500 * time.Millisecond, Upper: 15 * time.Second}, nil}
	if !reflect.DeepEqual(a.Terminate, want) {
		t.Fatalf("Terminate = %+v, want %+v", a.Terminate, want)
	}
	if a.ClassTerminate(1) != nil || a.ClassTerminate(5) != nil || a.ClassTerminate(0) == nil {
		t.Fatal("ClassTerminate")
	}
	// The paper's parameters, and sentry's bound on a rise (the package
	// doc of sert, Rise).
	wantParams := sert.DefaultParams()
	wantParams.MaxRise = sert.DefaultMaxRise
	if a.Termination.Params() != wantParams {
		t.Fatalf("params %+v, want %+v", a.Termination.Params(), wantParams)
	}
	c, err := sert.New(a.SertConfig())
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Class(0)
	if cl == nil || c.Class(1) != nil || cl.Name() != "search" || cl.Threshold() != 15*time.Second ||
		!cl.Terminable("GET") || !cl.Terminable("HEAD") || cl.Terminable("POST") {
		t.Fatalf("controller from the snapshot: class 0 %+v, class 1 %v", cl, c.Class(1))
	}

	// No class declares a range: Terminate is nil, the config has no
	// terminating class.
	s, err = Parse("t.yaml", []byte(`apps: [{name: a, backends: {static: ["h:1"]}}]`))
	if err != nil {
		t.Fatal(err)
	}
	if s.Apps[0].Terminate != nil {
		t.Fatalf("Terminate = %v, want nil", s.Apps[0].Terminate)
	}
	for _, cc := range s.Apps[0].SertConfig().Classes {
		if cc != nil {
			t.Fatal("a class terminates without terminate")
		}
	}
}

// FuzzTermination: whatever the terminate and termination sections hold,
// Parse either fails with line-sorted errors or gives a snapshot whose
// termination config sert.New accepts, with ranges in order.
func FuzzTermination(f *testing.F) {
	for _, s := range [][2]string{
		{"{}", "{}"},
		{"{lower: 500ms, upper: 15s, methods: [GET, HEAD, POST]}", "{alpha: 4, low_water: 0.05, high_water: 0.15, interval: 10s, min_arrivals: 100}"},
		{"{lower: 2s, upper: 1s}", "{low_water: 0.2}"},
		{"{upper: 2h}", "{alpha: 0, interval: 0s}"},
		{"5s", "[1]"},
		{"{methods: []}", "{min_arrivals: -1, high_water: 1}"},
		{"{lower: 1ms, upper: 1ms}", "{low_water: 0, high_water: 1e-9, alpha: 1e300}"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, term, section string) {
		src := "apps:\n  - name: a\n    backends: {static: [\"h:1\"]}\n    classes:\n      - name: c\n        rules: [{path: /c}]\n        terminate: " +
			term + "\n      - name: d\n    termination: " + section + "\n"
		s, err := Parse("t.yaml", []byte(src))
		if err != nil {
			var es Errors
			if s != nil || !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("bad failure: snapshot %v, error %T %v", s != nil, err, err)
			}
			for i, e := range es {
				if e.Msg == "" || e.Line < 0 || i > 0 && es[i-1].Line > e.Line {
					t.Fatalf("bad errors:\n%v", err)
				}
			}
			return
		}
		checkInvariants(t, s)
		a := s.Apps[0]
		if len(a.Terminate) != 0 && len(a.Terminate) != len(a.Classes) {
			t.Fatalf("%d ranges for %d classes", len(a.Terminate), len(a.Classes))
		}
		for _, tr := range a.Terminate {
			if tr != nil && !(tr.Lower > 0 && tr.Lower <= tr.Upper) {
				t.Fatalf("range %+v", tr)
			}
		}
		if _, err := sert.New(a.SertConfig()); err != nil {
			t.Fatalf("valid snapshot, but sert.New: %v", err)
		}
	})
}

// TestTerminationMaxRise: max_rise reaches the library's parameters; 0 is
// the paper's rule (no bound), left out it is DefaultMaxRise.
func TestTerminationMaxRise(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want float64
	}{
		{"", sert.DefaultMaxRise},
		{"termination: {max_rise: 0}", 0},
		{"termination: {max_rise: 3.5}", 3.5},
	} {
		s, err := Parse("t.yaml", []byte(`
apps:
  - name: a
    backends: {static: ["h:1"]}
    classes: [{name: search, terminate: {}}]
    `+tc.src+"\n"))
		if err != nil {
			t.Fatalf("%q: %v", tc.src, err)
		}
		cfg := s.Apps[0].SertConfig()
		if cfg.MaxRise != tc.want {
			t.Fatalf("%q: MaxRise %v, want %v", tc.src, cfg.MaxRise, tc.want)
		}
		if _, err := sert.New(cfg); err != nil {
			t.Fatalf("%q: the library refuses the config: %v", tc.src, err)
		}
	}
}
