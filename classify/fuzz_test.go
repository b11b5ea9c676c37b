package classify

import (
	"net/netip"
	"path"
	"strings"
	"testing"
)

// FuzzClassify compiles a fixed rule set plus rules built from the fuzzed
// glob and regexp, then classifies a fuzzed request. Matching must never
// panic, the class must be a valid index, and a "**"-free glob must agree
// with path.Match (where the documented class difference cannot arise).
func FuzzClassify(f *testing.F) {
	f.Add("/static/**/*.css", `^/u/\d+$`, "GET", "/static/a/b.css", "Example.com:80", "t1", "gold", []byte{10, 1, 2, 3})
	f.Add("/a/*/c", "(", "POST", "/a/b/c?q=1", "[::1]:8080", "", "", []byte{})
	f.Add("**", "x*", "", "", "", "", "", []byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add("/[a-", ".*", "get", "//", ".", "\x00", "\xff", []byte{255, 255, 255, 255})
	base := []ClassConfig{
		{Name: "a", Rules: []Rule{
			{PathPrefix: "/admin", Methods: []string{"POST"}, Headers: []HeaderMatch{{Name: "X-Admin"}}},
			{Hosts: []string{"*.example.com", "::1"}, Cookies: []CookieMatch{{Name: "tier", Value: "gold"}}},
		}},
		{Name: "b", Rules: []Rule{
			{Networks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}},
			{Headers: []HeaderMatch{{Name: "X-T", Regexp: "^t[0-9]$"}}, Key: "/k"},
			{GRPCService: "pkg.*", GRPCMethod: "Get?"},
		}},
		{Name: "d", Default: true},
	}
	f.Fuzz(func(t *testing.T, glob, re, method, p, host, hval, cookie string, ip []byte) {
		cs := append([]ClassConfig(nil), base...)
		extra := ClassConfig{Name: "x"}
		extra.Rules = append(extra.Rules, Rule{PathGlob: glob}, Rule{PathRegexp: re, Methods: []string{"GET"}})
		cs = append(cs, extra)
		c, err := Compile(cs)
		if err != nil {
			// Fall back to the rules that compile.
			cs = cs[:len(base)]
			if g, gerr := compileGlob(glob); gerr == nil {
				_ = g
				cs = append(cs, ClassConfig{Name: "x", Rules: []Rule{{PathGlob: glob}}})
			}
			if c, err = Compile(cs); err != nil {
				t.Fatal(err)
			}
		}
		var client netip.Addr
		if a, ok := netip.AddrFromSlice(ip); ok {
			client = a
		}
		r := &fakeReq{method: method, path: p, host: host,
			headers: [][2]string{{"X-T", hval}, {"X-Admin", hval}},
			cookies: [][2]string{{"tier", cookie}}}
		ci, key := c.Classify(r, client)
		if ci < 0 || ci >= c.Len() {
			t.Fatalf("class %d of %d", ci, c.Len())
		}
		// The prefilter never changes the answer.
		slow := *c
		slow.filtered = false
		if ci2, key2 := slow.Classify(r, client); ci2 != ci || string(key2) != string(key) {
			t.Fatalf("prefilter (%d, %q) vs linear (%d, %q)", ci, key, ci2, key2)
		}
		if string(key) != "/k" && !strings.HasPrefix(p, string(key)) {
			t.Fatalf("key %q is not a prefix of path %q", key, p)
		}
		if g, err := compileGlob(glob); err == nil && !strings.Contains(glob, "**") && !strings.Contains(glob, "[") {
			want, perr := path.Match(glob, p)
			if got := g.match([]byte(p)); perr == nil && got != want {
				t.Fatalf("glob %q on %q: got %v, path.Match %v", glob, p, got, want)
			}
		}
	})
}
