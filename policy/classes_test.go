package policy

import (
	"net/netip"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/classify"
	"github.com/sentry-proxy/sentry/estimator"
	"gopkg.in/yaml.v3"
)

// fakeRequest is a classify.Request for the example tests.
type fakeRequest struct {
	method, path, host string
	headers, cookies   map[string]string
}

func (r fakeRequest) Method() []byte { return []byte(r.method) }
func (r fakeRequest) Path() []byte   { return []byte(r.path) }
func (r fakeRequest) Host() []byte   { return []byte(r.host) }
func (r fakeRequest) Peek(h string) []byte {
	for k, v := range r.headers {
		if strings.EqualFold(k, h) {
			return []byte(v)
		}
	}
	return nil
}
func (r fakeRequest) Cookie(name string) []byte { return []byte(r.cookies[name]) }

// TestThreeClassesExample: deploy/examples/three-classes.yaml does what its
// comments say, from YAML to snapshot to classifier and estimator.
func TestThreeClassesExample(t *testing.T) {
	s, err := Load(filepath.Join("..", "deploy", "examples", "three-classes.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	a := s.Apps[0]
	c, err := classify.Compile(a.Classes)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Names(); !reflect.DeepEqual(got, []string{"gold", "silver", "bronze"}) || c.Default() != 2 {
		t.Fatalf("classes %q, default %d", got, c.Default())
	}
	if p := []time.Duration{c.Class(0).Period, c.Class(1).Period, c.Class(2).Period}; !reflect.DeepEqual(p, []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond}) {
		t.Errorf("periods %v", p)
	}
	for _, tc := range []struct {
		req   fakeRequest
		class string
		key   string
	}{
		{fakeRequest{method: "GET", path: "/checkout/cart"}, "gold", "/checkout/cart"},
		{fakeRequest{method: "POST", path: "/api/v2/payments"}, "gold", "/api/v2/payments"},
		{fakeRequest{method: "GET", path: "/api/v2/payments?x=1"}, "silver", "/api"},
		{fakeRequest{method: "GET", path: "/", headers: map[string]string{"x-tier": "gold"}}, "gold", "/"},
		{fakeRequest{method: "GET", path: "/", cookies: map[string]string{"plan": "premium"}}, "gold", "/"},
		{fakeRequest{method: "GET", path: "/", cookies: map[string]string{"plan": "basic", "session": "abc"}}, "silver", "/"},
		{fakeRequest{method: "GET", path: "/api/items"}, "silver", "/api"},
		{fakeRequest{method: "GET", path: "/static/site.css"}, "bronze", "/static/site.css"},
		{fakeRequest{method: "GET", path: "/", headers: map[string]string{"X-Tier": "silver"}}, "bronze", "/"},
	} {
		i, key := c.Classify(tc.req, netip.Addr{})
		if got := c.Names()[i]; got != tc.class || string(key) != tc.key {
			t.Errorf("%+v: class %s key %q, want %s %q", tc.req, got, key, tc.class, tc.key)
		}
	}
	if _, err := estimator.New(a.Estimator, c.Names()); err != nil {
		t.Errorf("estimator: %v", err)
	}
	if a.SLA.Target(100) != 500*time.Millisecond || a.SLA.Target(500) != time.Second || a.SLA.Target(1e6) != 2*time.Second {
		t.Errorf("sla %+v", a.SLA)
	}
	if a.Admission.Mode != "auto" || !a.ServerTiming.Strip || a.SLA.Revenue != 0.02 {
		t.Errorf("admission %+v server timing %+v", a.Admission, a.ServerTiming)
	}
}

// TestLibraryBackstops: should the decoder's own checks ever miss a
// problem that classify.Compile or estimator.New finds, it is still
// reported, at the class or section it concerns.
func TestLibraryBackstops(t *testing.T) {
	d := newDecoder("t.yaml", "", nodeBudget)
	at := &yaml.Node{Line: 3}
	classes := []classify.ClassConfig{
		{Name: "gold", Rules: []classify.Rule{{Path: "/a"}}},
		{Name: "gold"},
	}
	d.compileClasses(classes, []pos{{4, 0}, {7, 0}}, at, "apps[0].classes")
	d.compileClasses([]classify.ClassConfig{{Name: "a", Rules: []classify.Rule{{}}}, {Name: "b"}}, []pos{{4, 0}, {7, 0}}, at, "apps[0].classes")
	d.compileClasses(nil, nil, at, "apps[0].classes")
	d.compileClasses([]classify.ClassConfig{{Name: "a"}}, []pos{{4, 0}}, at, "apps[0].classes") // valid
	a := defaultApp()
	a.Estimator.HalfLife = -time.Second
	d.checkEstimator(a, []string{"default"}, &yaml.Node{Line: 9}, "apps[0].estimator")
	d.checkEstimator(defaultApp(), []string{"x", "x"}, &yaml.Node{Line: 9}, "apps[0].estimator")
	d.checkEstimator(defaultApp(), []string{"default"}, &yaml.Node{Line: 9}, "apps[0].estimator") // valid
	matchErrors(t, asErrors(t, d.err()), []string{
		`7: apps[0].classes: class "gold": duplicate name`,
		`4: apps[0].classes: class "a" rules[0]: no conditions`,
		`3: apps[0].classes: no classes`,
		`9: apps[0].estimator: half_life -1s is negative`,
		`9: apps[0].estimator: duplicate class "x"`,
	})
}
