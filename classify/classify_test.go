package classify

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"path"
	"strings"
	"testing"
	"time"
)

// fakeReq is a minimal Request for tests and benchmarks.
type fakeReq struct {
	method, path, host string
	headers            [][2]string
	cookies            [][2]string
}

func (f *fakeReq) Method() []byte { return []byte(f.method) }
func (f *fakeReq) Path() []byte   { return []byte(f.path) }
func (f *fakeReq) Host() []byte   { return []byte(f.host) }
func (f *fakeReq) Peek(name string) []byte {
	for _, h := range f.headers {
		if strings.EqualFold(h[0], name) {
			return []byte(h[1])
		}
	}
	return nil
}
func (f *fakeReq) Cookie(name string) []byte {
	for _, c := range f.cookies {
		if c[0] == name {
			return []byte(c[1])
		}
	}
	return nil
}

// bytesReq avoids the string->[]byte conversions of fakeReq so benchmarks
// measure the classifier, not the fake.
type bytesReq struct {
	method, path, host []byte
	hname, hval        []string
	hvalb              [][]byte
}

func (b *bytesReq) Method() []byte { return b.method }
func (b *bytesReq) Path() []byte   { return b.path }
func (b *bytesReq) Host() []byte   { return b.host }
func (b *bytesReq) Peek(name string) []byte {
	for i, n := range b.hname {
		if n == name {
			return b.hvalb[i]
		}
	}
	return nil
}
func (b *bytesReq) Cookie(string) []byte { return nil }

func mustCompile(t testing.TB, cs []ClassConfig) *Classifier {
	t.Helper()
	c, err := Compile(cs)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestPrecedence(t *testing.T) {
	cs := []ClassConfig{
		{Name: "admin", Rules: []Rule{
			// AND within a rule: path prefix, POST and the header must all hold.
			{PathPrefix: "/admin/", Methods: []string{"post"}, Headers: []HeaderMatch{{Name: "X-Admin"}}},
		}},
		{Name: "gold", Period: 10 * time.Millisecond, Rules: []Rule{
			// OR across rules.
			{Cookies: []CookieMatch{{Name: "tier", Value: "gold"}}},
			{Networks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}},
			{PathPrefix: "/search", Key: "/search"},
		}},
		{Name: "api", Rules: []Rule{
			{PathPrefix: "/api/"},                 // shadowed for /admin/ by nothing; for 10/8 by gold
			{PathPrefix: "/admin/", Key: "admin"}, // admin requests that failed class admin's AND
		}},
		{Name: "bulk", Default: true},
		{Name: "static", Rules: []Rule{{PathGlob: "/static/**/*.css"}}},
	}
	c := mustCompile(t, cs)
	if c.Default() != 3 || !c.Class(3).Default || c.Class(1).Period != 10*time.Millisecond {
		t.Fatalf("default %d, classes %+v", c.Default(), c.classes)
	}
	v4 := netip.MustParseAddr("10.1.2.3")
	other := netip.MustParseAddr("192.0.2.1")
	tests := []struct {
		name   string
		r      fakeReq
		client netip.Addr
		class  string
		key    string
	}{
		{"AND all hold", fakeReq{method: "POST", path: "/admin/x", headers: [][2]string{{"x-admin", "1"}}}, other, "admin", "/admin/x"},
		{"AND method fails", fakeReq{method: "GET", path: "/admin/x", headers: [][2]string{{"x-admin", "1"}}}, other, "api", "admin"},
		{"AND header fails", fakeReq{method: "POST", path: "/admin/x"}, other, "api", "admin"},
		{"AND empty header is absent", fakeReq{method: "POST", path: "/admin/x", headers: [][2]string{{"X-Admin", ""}}}, other, "api", "admin"},
		{"first class wins over later", fakeReq{method: "POST", path: "/admin/x", headers: [][2]string{{"X-Admin", "y"}}}, v4, "admin", "/admin/x"},
		{"OR rule 1 cookie", fakeReq{method: "GET", path: "/api/v", cookies: [][2]string{{"tier", "gold"}}}, other, "gold", "/api/v"},
		{"cookie value differs", fakeReq{method: "GET", path: "/api/v", cookies: [][2]string{{"tier", "silver"}}}, other, "api", "/api/v"},
		{"OR rule 2 network", fakeReq{method: "GET", path: "/api/v"}, v4, "gold", "/api/v"},
		{"network 4in6", fakeReq{method: "GET", path: "/x"}, netip.AddrFrom16(v4.As16()), "gold", "/x"},
		{"OR rule 3 key", fakeReq{method: "GET", path: "/search/books"}, other, "gold", "/search"},
		{"query stripped", fakeReq{method: "GET", path: "/api/v?x=1"}, other, "api", "/api/v"},
		{"default class", fakeReq{method: "GET", path: "/nothing"}, other, "bulk", "/nothing"},
		{"zero client", fakeReq{method: "GET", path: "/nothing"}, netip.Addr{}, "bulk", "/nothing"},
		{"class after default still matches", fakeReq{method: "GET", path: "/static/a/b/site.css"}, other, "static", "/static/a/b/site.css"},
		{"glob miss", fakeReq{method: "GET", path: "/static/a/site.js"}, other, "bulk", "/static/a/site.js"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ci, key := c.Classify(&tc.r, tc.client)
			if got := c.Names()[ci]; got != tc.class || string(key) != tc.key {
				t.Errorf("got (%s, %q), want (%s, %q)", got, key, tc.class, tc.key)
			}
		})
	}
}

func TestLastClassIsDefault(t *testing.T) {
	c := mustCompile(t, []ClassConfig{
		{Name: "a", Rules: []Rule{{Path: "/a"}}},
		{Name: "rest"},
	})
	if ci, _ := c.Classify(&fakeReq{path: "/b"}, netip.Addr{}); ci != 1 {
		t.Fatalf("class %d", ci)
	}
	// The last class may have rules and still take the rest.
	c = mustCompile(t, []ClassConfig{
		{Name: "a", Rules: []Rule{{Path: "/a"}}},
		{Name: "b", Rules: []Rule{{Path: "/b"}}},
	})
	if ci, _ := c.Classify(&fakeReq{path: "/zzz"}, netip.Addr{}); ci != 1 || c.Default() != 1 {
		t.Fatalf("class %d", ci)
	}
}

func TestConditions(t *testing.T) {
	tests := []struct {
		rule Rule
		r    fakeReq
		want bool
	}{
		{Rule{Path: "/a"}, fakeReq{path: "/a"}, true},
		{Rule{Path: "/a"}, fakeReq{path: "/a/"}, false},
		{Rule{PathPrefix: "/api"}, fakeReq{path: "/apix"}, true},
		{Rule{PathRegexp: `^/u/[0-9]+$`}, fakeReq{path: "/u/42"}, true},
		{Rule{PathRegexp: `^/u/[0-9]+$`}, fakeReq{path: "/u/42/x"}, false},
		{Rule{Methods: []string{"GET", "head"}}, fakeReq{method: "HEAD"}, true},
		{Rule{Methods: []string{"GET"}}, fakeReq{method: "get"}, false},
		{Rule{Hosts: []string{"Example.COM"}}, fakeReq{host: "example.com:8080"}, true},
		{Rule{Hosts: []string{"example.com"}}, fakeReq{host: "EXAMPLE.com."}, true},
		{Rule{Hosts: []string{"example.com"}}, fakeReq{host: "www.example.com"}, false},
		{Rule{Hosts: []string{"*.example.com"}}, fakeReq{host: "a.b.example.com"}, true},
		{Rule{Hosts: []string{"*.example.com"}}, fakeReq{host: "example.com"}, false},
		{Rule{Hosts: []string{"*.example.com"}}, fakeReq{host: "badexample.com"}, false},
		{Rule{Hosts: []string{"::1"}}, fakeReq{host: "[::1]:80"}, true},
		{Rule{Headers: []HeaderMatch{{Name: "X-A", Value: "v"}}}, fakeReq{headers: [][2]string{{"x-a", "v"}}}, true},
		{Rule{Headers: []HeaderMatch{{Name: "X-A", Value: "v"}}}, fakeReq{headers: [][2]string{{"x-a", "V"}}}, false},
		{Rule{Headers: []HeaderMatch{{Name: "X-A", Regexp: "^mobile"}}}, fakeReq{headers: [][2]string{{"x-a", "mobile/1"}}}, true},
		{Rule{Headers: []HeaderMatch{{Name: "X-A", Regexp: "^$"}}}, fakeReq{}, false},
		{Rule{Headers: []HeaderMatch{{Name: "X-A"}, {Name: "X-B"}}}, fakeReq{headers: [][2]string{{"x-a", "1"}}}, false},
		{Rule{Cookies: []CookieMatch{{Name: "s"}}}, fakeReq{cookies: [][2]string{{"s", "1"}}}, true},
		{Rule{Cookies: []CookieMatch{{Name: "s"}}}, fakeReq{cookies: [][2]string{{"S", "1"}}}, false},
		{Rule{Networks: []netip.Prefix{netip.MustParsePrefix("2001:db8::/32"), netip.MustParsePrefix("192.0.2.0/24")}}, fakeReq{}, true},
		{Rule{Networks: []netip.Prefix{netip.MustParsePrefix("::ffff:198.51.100.0/120")}}, fakeReq{}, false},
	}
	client := netip.MustParseAddr("192.0.2.77")
	for i, tc := range tests {
		c := mustCompile(t, []ClassConfig{{Name: "m", Rules: []Rule{tc.rule}}, {Name: "rest"}})
		ci, _ := c.Classify(&tc.r, client)
		if got := ci == 0; got != tc.want {
			t.Errorf("%d: %+v on %+v: got %v, want %v", i, tc.rule, tc.r, got, tc.want)
		}
	}
}

func TestGlob(t *testing.T) {
	tests := []struct {
		pat, path string
		want      bool
	}{
		{"/static/*.css", "/static/a.css", true},
		{"/static/*.css", "/static/a/b.css", false},
		{"/static/**/*.css", "/static/a.css", true},
		{"/static/**/*.css", "/static/a/b/c.css", true},
		{"/static/**/*.css", "/static/a/b/c.js", false},
		{"/static/**", "/static", true},
		{"/static/**", "/static/", true},
		{"/static/**", "/static/x/y", true},
		{"/static/**", "/staticx", false},
		{"**", "/", true},
		{"**/x", "/a/b/x", true},
		{"/a/**/b/**/c", "/a/b/c", true},
		{"/a/**/b/**/c", "/a/x/b/y/z/c", true},
		{"/a/**/b/**/c", "/a/x/y/z/c", false},
		{"/u/?", "/u/é", true},
		{"/u/[a-c]*", "/u/bob", true},
		{"/u/\\*", "/u/*", true},
		{"/u/\\*", "/u/x", false},
		{"/a//b", "/a//b", true},
	}
	for _, tc := range tests {
		g, err := compileGlob(tc.pat)
		if err != nil {
			t.Fatalf("%q: %v", tc.pat, err)
		}
		if got := g.match([]byte(tc.path)); got != tc.want {
			t.Errorf("glob %q on %q: got %v, want %v", tc.pat, tc.path, got, tc.want)
		}
		if !strings.Contains(tc.pat, "**") {
			if ref, _ := path.Match(tc.pat, tc.path); ref != tc.want {
				t.Errorf("glob %q on %q: path.Match says %v", tc.pat, tc.path, ref)
			}
		}
	}
}

func TestCompileErrors(t *testing.T) {
	r := []Rule{{Path: "/x"}}
	tests := []struct {
		cs   []ClassConfig
		want string
	}{
		{nil, "no classes"},
		{[]ClassConfig{{Name: ""}}, "classes[0]: empty name"},
		{[]ClassConfig{{Name: "a", Rules: r}, {Name: "a"}}, `class "a": duplicate name`},
		{[]ClassConfig{{Name: "a", Rules: r, Period: -1}, {Name: "b"}}, "negative period"},
		{[]ClassConfig{{Name: "a", Default: true}, {Name: "b", Default: true}}, "marked default"},
		{[]ClassConfig{{Name: "a"}, {Name: "b"}}, `class "a": no rules`},
		{[]ClassConfig{{Name: "a", Default: true}, {Name: "b"}}, `class "b": no rules`},
		{[]ClassConfig{{Name: "g", Rules: []Rule{{Path: "/a"}, {}}}, {Name: "b"}}, `class "g" rules[1]: no conditions`},
		{[]ClassConfig{{Name: "g", Rules: []Rule{{Path: "/a", PathPrefix: "/b"}}}, {Name: "b"}}, "at most one of path"},
		{[]ClassConfig{{Name: "g", Rules: []Rule{{PathRegexp: "("}}}, {Name: "b"}}, `class "g" rules[0]: path_regexp`},
		{[]ClassConfig{{Name: "g", Rules: []Rule{{PathGlob: "/a/[x"}}}, {Name: "b"}}, `path_glob "/a/[x"`},
		{[]ClassConfig{{Name: "g", Rules: []Rule{{Methods: []string{"G T"}}}}, {Name: "b"}}, "methods"},
		{[]ClassConfig{{Name: "g", Rules: []Rule{{Hosts: []string{"*."}}}}, {Name: "b"}}, "hosts"},
		{[]ClassConfig{{Name: "g", Rules: []Rule{{Hosts: []string{"a:80"}}}}, {Name: "b"}}, "hosts"},
		{[]ClassConfig{{Name: "g", Rules: []Rule{{Networks: []netip.Prefix{{}}}}}, {Name: "b"}}, "networks"},
		{[]ClassConfig{{Name: "g", Rules: []Rule{{Headers: []HeaderMatch{{Name: ""}}}}}, {Name: "b"}}, "headers[0]"},
		{[]ClassConfig{{Name: "g", Rules: []Rule{{Headers: []HeaderMatch{{Name: "a", Value: "x", Regexp: "y"}}}}}, {Name: "b"}}, "not both"},
		{[]ClassConfig{{Name: "g", Rules: []Rule{{Headers: []HeaderMatch{{Name: "a", Regexp: "["}}}}}, {Name: "b"}}, "regexp"},
		{[]ClassConfig{{Name: "g", Rules: []Rule{{Cookies: []CookieMatch{{Name: "a b"}}}}}, {Name: "b"}}, "cookies[0]"},
	}
	for i, tc := range tests {
		_, err := Compile(tc.cs)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%d: got %v, want error containing %q", i, err, tc.want)
		}
	}
}

func TestClassifyAllocs(t *testing.T) {
	c, r := benchSetup(t)
	client := netip.MustParseAddr("203.0.113.9")
	if n := testing.AllocsPerRun(100, func() { c.Classify(r, client) }); n != 0 {
		t.Fatalf("%v allocs", n)
	}
	// Regexp and glob paths too (after the regexp machine pool is warm).
	c2 := mustCompile(t, []ClassConfig{
		{Name: "re", Rules: []Rule{{PathRegexp: `^/x/[0-9]+$`}, {Headers: []HeaderMatch{{Name: "User-Agent", Regexp: "bot"}}}}},
		{Name: "gl", Rules: []Rule{{PathGlob: "/**/*.png"}}},
		{Name: "rest"},
	})
	c2.Classify(r, client)
	if n := testing.AllocsPerRun(100, func() { c2.Classify(r, client) }); n != 0 {
		t.Fatalf("regexp/glob: %v allocs", n)
	}
}

// TestPrefilterMatchesLinear compares the prefiltered Classify with the
// plain linear scan on random rule sets and requests.
func TestPrefilterMatchesLinear(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	paths := []string{"/", "/a", "/a/", "/a/b", "/ab", "/abcdefgh", "/abcdefghi", "/abcdefghij/k", "/b", "/static/x.css", ""}
	nets := []string{"10.0.0.0/8", "10.1.0.0/16", "192.0.2.0/24", "2001:db8::/32", "::/0", "0.0.0.0/0", "10.1.2.3/32"}
	addrs := []string{"10.1.2.3", "10.2.0.1", "192.0.2.9", "2001:db8::1", "::ffff:10.1.2.3", "198.51.100.1", ""}
	methods := []string{"GET", "POST"}
	for round := range 300 {
		var cs []ClassConfig
		for ci := range 1 + rng.IntN(6) {
			cc := ClassConfig{Name: fmt.Sprint("c", ci)}
			for range 1 + rng.IntN(4) {
				var r Rule
				switch rng.IntN(3) {
				case 0:
					r.PathPrefix = paths[rng.IntN(len(paths)-1)]
				case 1:
					r.Path = paths[rng.IntN(len(paths)-1)]
				}
				if rng.IntN(3) == 0 {
					for range 1 + rng.IntN(2) {
						r.Networks = append(r.Networks, netip.MustParsePrefix(nets[rng.IntN(len(nets))]))
					}
				}
				if rng.IntN(3) == 0 {
					r.Methods = []string{methods[rng.IntN(2)]}
				}
				if rng.IntN(4) == 0 {
					r.Headers = []HeaderMatch{{Name: "X-A"}}
				}
				if r.Path == "" && r.PathPrefix == "" && r.Networks == nil && r.Methods == nil && r.Headers == nil {
					r.PathGlob = "/a/*"
				}
				cc.Rules = append(cc.Rules, r)
			}
			cs = append(cs, cc)
		}
		cs = append(cs, ClassConfig{Name: "rest"})
		c := mustCompile(t, cs)
		slow := *c
		slow.filtered = false
		for range 50 {
			r := &fakeReq{method: methods[rng.IntN(2)], path: paths[rng.IntN(len(paths))]}
			if rng.IntN(2) == 0 {
				r.headers = [][2]string{{"X-A", "1"}}
			}
			var client netip.Addr
			if a := addrs[rng.IntN(len(addrs))]; a != "" {
				client = netip.MustParseAddr(a)
			}
			c1, k1 := c.Classify(r, client)
			c2, k2 := slow.Classify(r, client)
			if c1 != c2 || string(k1) != string(k2) {
				t.Fatalf("round %d: %+v from %v: prefilter (%d, %q), linear (%d, %q); classes %+v", round, r, client, c1, k1, c2, k2, cs)
			}
		}
	}
}

// TestManyRules exercises the linear path used beyond maxFiltered rules.
func TestManyRules(t *testing.T) {
	var cs []ClassConfig
	for i := range 300 {
		cs = append(cs, ClassConfig{Name: fmt.Sprint("c", i), Rules: []Rule{{Path: fmt.Sprint("/p", i)}}})
	}
	cs = append(cs, ClassConfig{Name: "rest"})
	c := mustCompile(t, cs)
	if c.filtered {
		t.Fatal("expected the linear path")
	}
	for _, i := range []int{0, 255, 256, 299} {
		if ci, _ := c.Classify(&fakeReq{path: fmt.Sprint("/p", i)}, netip.Addr{}); ci != i {
			t.Fatalf("/p%d: class %d", i, ci)
		}
	}
	if ci, _ := c.Classify(&fakeReq{path: "/zz"}, netip.Addr{}); ci != 300 {
		t.Fatalf("default: %d", ci)
	}
}
