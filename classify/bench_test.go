package classify

import (
	"fmt"
	"net/netip"
	"testing"
)

// benchSetup builds 20 rules over 10 classes (prefix, header and CIDR, no
// regexps) and a request that matches none of them, so every rule is tried.
func benchSetup(t testing.TB) (*Classifier, *bytesReq) {
	var cs []ClassConfig
	for i := 0; i < 10; i++ {
		cs = append(cs, ClassConfig{Name: fmt.Sprintf("c%d", i), Rules: []Rule{
			{PathPrefix: fmt.Sprintf("/svc%d/", i), Headers: []HeaderMatch{{Name: "X-Tenant", Value: fmt.Sprintf("t%d", i)}}},
			{Networks: []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("10.%d.0.0/16", i))}, Headers: []HeaderMatch{{Name: "X-Canary"}}},
		}})
	}
	cs = append(cs, ClassConfig{Name: "rest"})
	c := mustCompile(t, cs)
	r := &bytesReq{
		method: []byte("GET"), path: []byte("/svc9/items/123"), host: []byte("shop.example.com"),
		hname: []string{"X-Tenant", "Accept"}, hvalb: [][]byte{[]byte("t8"), []byte("*/*")},
	}
	return c, r
}

func BenchmarkClassify20Rules(b *testing.B) {
	c, r := benchSetup(b)
	client := netip.MustParseAddr("203.0.113.9")
	b.ReportAllocs()
	for b.Loop() {
		c.Classify(r, client)
	}
}

// BenchmarkClassify20RulesMatchLast matches the 20th rule.
func BenchmarkClassify20RulesMatchLast(b *testing.B) {
	c, r := benchSetup(b)
	r.hname = append(r.hname, "X-Canary")
	r.hvalb = append(r.hvalb, []byte("1"))
	client := netip.MustParseAddr("10.9.1.1")
	if ci, _ := c.Classify(r, client); ci != 9 {
		b.Fatalf("class %d", ci)
	}
	b.ReportAllocs()
	for b.Loop() {
		c.Classify(r, client)
	}
}

func BenchmarkClassifyRegexpGlob(b *testing.B) {
	c := mustCompile(b, []ClassConfig{
		{Name: "re", Rules: []Rule{{PathRegexp: `^/x/[0-9]+$`}}},
		{Name: "gl", Rules: []Rule{{PathGlob: "/static/**/*.png"}}},
		{Name: "rest"},
	})
	r := &bytesReq{method: []byte("GET"), path: []byte("/static/img/a/b.png")}
	b.ReportAllocs()
	for b.Loop() {
		c.Classify(r, netip.Addr{})
	}
}
