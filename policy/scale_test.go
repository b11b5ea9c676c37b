package policy

import (
	"fmt"
	"strings"
	"testing"
)

// The overlap check compares each listener with the wildcards of its port
// only (and a wildcard with its port's earlier addresses): for 16,000
// listeners the number of pairs compared is linear, not the 128 million
// of every pair, and it still finds every overlap, in order.
func TestOverlapCheckLinear(t *testing.T) {
	listeners := func(n, ports int) []*Listener {
		var ls []*Listener
		for i := range n {
			ls = append(ls, &Listener{Addr: fmt.Sprintf("10.0.%d.%d:%d", i/250, i%250, 10000+i%ports)})
		}
		// Three wildcards on port 10000, shared by n/ports specific addresses.
		ls = append(ls, &Listener{Addr: "0.0.0.0:10000"}, &Listener{Addr: "[::]:10000"}, &Listener{Addr: ":10000"})
		return append(ls, &Listener{Addr: "10.9.9.9:10000"})
	}
	ls := listeners(16000, 4000)
	var overlapsFound int
	compared := overlapping(ls, func(x, y *Listener) { overlapsFound++ })
	if compared > 2*len(ls) || overlapsFound != 3*4+3+3 {
		t.Errorf("%d pairs compared for %d listeners, %d overlaps", compared, len(ls), overlapsFound)
	}
	// On fewer listeners, every pair checked by brute force gives the same
	// overlaps in the same order.
	ls = listeners(1000, 250)
	var got []string
	overlapping(ls, func(x, y *Listener) { got = append(got, x.Addr+">"+y.Addr) })
	var want []string
	for i, x := range ls {
		for _, y := range ls[:i] {
			if overlaps(x.Addr, y.Addr) {
				want = append(want, x.Addr+">"+y.Addr)
			}
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("overlaps differ from every-pair check:\n got %d %.300v\nwant %d %.300v", len(got), got, len(want), want)
	}
	if len(want) != 3*4+3+3 { // each wildcard × the 4 specific + earlier wildcards; the last specific × 3 wildcards
		t.Errorf("%d overlaps: %v", len(want), want)
	}
}

// sentry check on 16,000 apps: every app on its own address, and every app
// on one shared address with its own host. Both must validate; the overlap
// check (the one that compared every pair) is bounded by
// TestOverlapCheckLinear.
func TestManyApps(t *testing.T) {
	if testing.Short() {
		t.Skip("16,000 apps")
	}
	for _, shared := range []bool{false, true} {
		var b strings.Builder
		b.WriteString("apps:\n")
		for i := range 16000 {
			if shared {
				fmt.Fprintf(&b, "  - {name: app%d, listen: 127.0.0.1:8080, hosts: [h%d.example], backends: {static: [\"h:1\"]}}\n", i, i)
			} else {
				fmt.Fprintf(&b, "  - {name: app%d, listen: 127.0.%d.%d:%d, backends: {static: [\"h:1\"]}}\n", i, i/250, i%250, 10000+i)
			}
		}
		s, err := Parse("many.yaml", []byte(b.String()))
		if err != nil {
			t.Fatalf("shared %v: %.500v", shared, err)
		}
		if len(s.Apps) != 16000 {
			t.Fatalf("%d apps", len(s.Apps))
		}
	}
}
