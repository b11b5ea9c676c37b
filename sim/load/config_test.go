package load

import (
	"strings"
	"testing"
	"time"
)

func TestNormalizeDefaults(t *testing.T) {
	c, err := Config{Classes: []Class{{Name: "a", Open: &Open{Rate: Constant(10, 2*time.Second)}}}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	k := c.Classes[0]
	if c.Timeout != 10*time.Second || c.MaxRequests != 1000000 || c.MaxInFlight != 10000 || c.RetryAfter != 5*time.Second ||
		c.MaxDuration != 13*time.Second || k.SLA != time.Second || k.Request.Method != "GET" ||
		len(k.Request.Paths) != 1 || k.Request.Paths[0] != (Path{Path: "/", Weight: 1}) || k.Open.Arrivals != Poisson {
		t.Fatalf("defaults: %+v / %+v", c, k)
	}
}

func TestNormalizeErrors(t *testing.T) {
	open := &Open{Rate: Constant(1, time.Second)}
	cls := func(k Class) Config { return Config{Classes: []Class{k}} }
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no classes", Config{}, "no classes"},
		{"bad target", Config{Targets: []string{"127.0.0.1:80"}, Classes: []Class{{Name: "a", Open: open}}}, "target 0"},
		{"no name", cls(Class{Open: open}), "name required"},
		{"reserved name", cls(Class{Name: TotalClass, Open: open}), "name required"},
		{"dup", Config{Classes: []Class{{Name: "a", Open: open}, {Name: "a", Open: open}}}, "duplicate"},
		{"neither", cls(Class{Name: "a"}), "exactly one"},
		{"both", cls(Class{Name: "a", Open: open, Closed: &Closed{Users: Constant(1, time.Second)}}), "exactly one"},
		{"arrivals", cls(Class{Name: "a", Open: &Open{Arrivals: "bursty", Rate: Constant(1, time.Second)}}), "arrivals"},
		{"empty rate", cls(Class{Name: "a", Open: &Open{}}), "rate: schedule is empty"},
		{"zero segment", cls(Class{Name: "a", Open: &Open{Rate: Constant(1, 0)}}), "duration must be > 0"},
		{"path", cls(Class{Name: "a", Open: open, Request: Request{Paths: []Path{{Path: "x"}}}}), "must start with /"},
		{"weight", cls(Class{Name: "a", Open: open, Request: Request{Paths: []Path{{Path: "/", Weight: -1}}}}), "weight"},
		{"too many users", Config{MaxInFlight: 10, Classes: []Class{{Name: "a", Closed: &Closed{Users: Ramp(1, 11, time.Second)}}}}, "peak users"},
		{"negative timeout", Config{Timeout: -1, Classes: []Class{{Name: "a", Open: open}}}, "≥ 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.cfg.Normalize()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want containing %q", err, tc.want)
			}
		})
	}
}

// A scenario-style YAML: two open classes and a flash crowd.
func TestParseConfig(t *testing.T) {
	src := `
seed: 42
timeout: 5s
max_requests: 50000
classes:
  - name: gold
    sla: 500ms
    request:
      paths: [{path: /checkout, weight: 1}, {path: /cart, weight: 3}]
      headers: {X-Class: gold}
      cookies: {session: abc}
    open:
      arrivals: uniform
      rate:
        - {duration: 10s, from: 100}
        - {duration: 5s, from: 100, to: 300}
  - name: bronze
    request: {method: POST, paths: [{path: /search}], body: "q=x"}
    open:
      rate: [{duration: 15s, from: 50}]
  - name: crowd
    closed:
      think: 1s
      users:
        - {duration: 5s, from: 3}
        - {duration: 1s, from: 3, to: 1000}
        - {duration: 9s, from: 1000}
`
	c, err := ParseConfig([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Classes) != 3 || c.Classes[0].Open.Rate.At(12500*time.Millisecond) != 200 ||
		c.Classes[1].Request.Method != "POST" || c.Classes[2].Closed.Users.Peak() != 1000 ||
		c.MaxDuration != 21*time.Second {
		t.Fatalf("%+v", c)
	}
	if _, err := ParseConfig([]byte("classes:\n  - name: a\n    open: {rate: [{duration: 1s, form: 3}]}\n")); err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("misspelt key: err = %v", err)
	}
}
