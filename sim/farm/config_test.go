package farm

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestNormalizeDefaults(t *testing.T) {
	c, err := Config{}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:0" || c.Servers != 1 || c.Slots != 8 || len(c.Routes) != 1 {
		t.Fatalf("defaults: %+v", c)
	}
	r := c.Routes[0]
	if r.Path != "/" || !r.Prefix || r.IO.Kind != Fixed || r.IO.Mean != 20*time.Millisecond || r.Status != 200 {
		t.Fatalf("default route: %+v", r)
	}
	capacity, err := c.Capacity("/anything")
	if err != nil || math.Abs(capacity-400) > 1e-9 {
		t.Fatalf("capacity = %v, %v; want 8/20ms = 400", capacity, err)
	}
	// Normalize twice is harmless.
	if c2, err := c.Normalize(); err != nil || c2.Routes[0] != c.Routes[0] {
		t.Fatalf("second normalize: %+v, %v", c2, err)
	}
}

func TestNormalizeErrors(t *testing.T) {
	route := func(r Route) Config { return Config{Routes: []Route{r}} }
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no host", Config{Listen: ":0"}, "host required"},
		{"bad listen", Config{Listen: "localhost"}, "listen"},
		{"too many servers", Config{Servers: MaxServers + 1}, "servers"},
		{"negative slots", Config{Slots: -1}, "slots"},
		{"port overflow", Config{Listen: "127.0.0.1:65535", Servers: 2}, "exceed"},
		{"relative path", route(Route{Path: "x"}), "start with /"},
		{"healthz", route(Route{Path: "/healthz"}), "reserved"},
		{"farm stats", route(Route{Path: "/_farm/", Prefix: true}), "reserved"},
		{"big body", route(Route{Path: "/f", Bytes: MaxBytes + 1}), "bytes"},
		{"status", route(Route{Path: "/f", Status: 99}), "status"},
		{"bad cpu", route(Route{Path: "/f", CPU: Dist{Kind: "gamma", Mean: 1}}), "cpu: dist: unknown kind"},
		{"pareto no shape", route(Route{Path: "/f", IO: Dist{Kind: Pareto, Mean: time.Millisecond}}), "io: dist pareto: shape"},
		{"exp with shape", route(Route{Path: "/f", IO: Dist{Kind: Exponential, Mean: 1, Shape: 2}}), "pareto only"},
		{"duplicate", Config{Routes: []Route{{Path: "/a"}, {Path: "/a"}}}, "duplicate"},
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

func TestParseConfig(t *testing.T) {
	src := `
servers: 2
slots: 4
seed: 7
routes:
  - path: /
    prefix: true
    io: exp:20ms
  - path: /search
    cpu: 1ms
    io: {kind: pareto, mean: 40ms, shape: 1.5, max: 2s}
  - path: /static/
    prefix: true
    bytes: 65536
`
	c, err := ParseConfig([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if c.Servers != 2 || c.Slots != 4 || c.Seed != 7 || len(c.Routes) != 3 {
		t.Fatalf("%+v", c)
	}
	for path, want := range map[string]string{
		"/search": "/search", "/search/x": "/", "/static/a.css": "/static/", "/": "/",
	} {
		r, ok := c.Route(path)
		if !ok || r.Path != want {
			t.Errorf("route(%q) = %q, %v; want %q", path, r.Path, ok, want)
		}
	}
	if r, _ := c.Route("/static/x"); r.ContentType != "application/octet-stream" || r.Bytes != 65536 {
		t.Errorf("static route: %+v", r)
	}
	capacity, _ := c.Capacity("/x")
	if math.Abs(capacity-400) > 1e-6 { // 2·4/20ms
		t.Errorf("capacity = %v, want 400", capacity)
	}
	if _, err := ParseConfig([]byte("servers: 2\nslot: 4\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("misspelt key: err = %v", err)
	}
}
