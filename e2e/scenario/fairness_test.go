package scenario

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

const clientsYAML = `name: c
farm:
  servers: 1
  slots: 4
  routes:
    - {path: /, prefix: true, io: 10ms}
classes:
  - name: gold
    source: 127.0.0.2
    open: {rate: [{duration: 10s, from: 5}]}
  - name: c
    clients: 12
    source: 127.0.0.250
    unit: capacity
    request: {headers: {X-A: b}}
    open: {rate: [{duration: 10s, from: 3}, {duration: 5s, from: 3, to: 6}]}
fairness: {start: 2s, end: 12s, group: c}
`

// TestExpandClients: a class with clients: N becomes N classes on N
// consecutive source addresses (across an octet), each with 1/N of the
// entry's schedule; other classes are left as they are; errors point at
// the entry's line.
func TestExpandClients(t *testing.T) {
	sc, err := Parse("c.yaml", []byte(clientsYAML))
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.Classes) != 13 {
		t.Fatalf("%d classes, want 1 + 12", len(sc.Classes))
	}
	if g := sc.Classes[0]; g.Name != "gold" || g.Group != "" || g.Source != "127.0.0.2" || g.Open.Rate.Peak() != 5 {
		t.Errorf("class 0 changed: %+v", g)
	}
	for j, k := range sc.Classes[1:] {
		wantName := fmt.Sprintf("c-%02d", j+1)
		wantSrc := fmt.Sprintf("127.0.%d.%d", (250+j)/256, (250+j)%256)
		if k.Name != wantName || k.Source != wantSrc || k.Group != "c" || k.Clients != 0 || k.Unit != UnitCapacity || k.Request.Headers["X-A"] != "b" {
			t.Errorf("client %d: name %q source %q group %q clients %d unit %q headers %v; want %q %q", j, k.Name, k.Source, k.Group, k.Clients, k.Unit, k.Request.Headers, wantName, wantSrc)
		}
		r := k.Open.Rate
		if len(r) != 2 || math.Abs(r.Peak()-0.5) > 1e-12 || math.Abs(r.At(0)-0.25) > 1e-12 || r.Duration() != 15*time.Second {
			t.Errorf("client %d: schedule %+v, want the entry's / 12", j, r)
		}
	}
	// The load config: 3× capacity (400 req/s) in total over the clients.
	cfg, err := sc.LoadConfig([]string{"http://127.0.0.1:1"}, Scaling{})
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, k := range cfg.Classes[1:] {
		total += k.Open.Rate.At(0)
	}
	if math.Abs(total-1200) > 1e-6 {
		t.Errorf("the clients' total at the start %v req/s, want 3 × 400", total)
	}
	from, to, window, clients := sc.fairnessSpan(1)
	if from != 2 || to != 12 || window != 10 || len(clients) != 12 || clients[0] != 1 {
		t.Errorf("fairness span %d–%d window %d clients %v", from, to, window, clients)
	}
	if _, _, _, all := (&Scenario{Classes: sc.Classes, Fairness: &FairnessSpec{}, Duration: 15 * time.Second}).fairnessSpan(1); len(all) != 13 {
		t.Errorf("no group: %d clients, want every class", len(all))
	}

	for _, tc := range []struct{ name, from, to, want string }{
		{"closed loop", "    open: {rate: [{duration: 10s, from: 3}, {duration: 5s, from: 3, to: 6}]}\n", "    closed: {users: [{duration: 10s, from: 3}]}\n", `c.yaml:12: class "c": clients: open-loop classes only`},
		{"no source", "    source: 127.0.0.250\n", "", `c.yaml:11: class "c": clients: give the first client's source`},
		{"not loopback", "source: 127.0.0.250", "source: 10.0.0.1", `c.yaml:13: class "c": source "10.0.0.1": clients need an IPv4 loopback`},
		{"past the range", "source: 127.0.0.250", "source: 127.255.255.250", `c.yaml:13: class "c": source "127.255.255.250": 12 clients run past`},
		{"negative", "clients: 12", "clients: -2", `c.yaml:12: class "c": clients -2`},
		{"expanded name taken", "name: gold", "name: c-03", `c.yaml:11: class "c-03": duplicate name`},
		{"fairness window longer than the span", "end: 12s", "end: 11s", "c.yaml:17: fairness: the span 2s–11s holds no 10s window"},
		{"fairness group unknown", "group: c}", "group: d}", `c.yaml:17: fairness: group "d": fewer than two clients`},
		{"fairness end past the duration", "end: 12s", "end: 16s", "fairness: end 16s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			y := strings.Replace(clientsYAML, tc.from, tc.to, 1)
			if y == clientsYAML {
				t.Fatalf("the case changed nothing")
			}
			_, err := Parse("c.yaml", []byte(y))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestComputeFairness on a hand-made series of four clients over 6
// seconds, windows of 3 s (starts 0..3, so 4 windows):
//
//	a: 10 sent, 10 admitted every second: all in every window.
//	b: admitted 10 in s 0–2, then 0: windows 1 and 2 are partial (20/30,
//	   10/30); 30 admitted in all.
//	c: 0 admitted in s 0–2, 10 in s 3–5, 10 sent a second, but 2 of
//	   s 4's arrivals overflowed (not sent): windows 1 and 2 partial.
//	d: 20 sent a second, 1 admitted a second (5%: none), so windows all
//	   count; 6 admitted in all.
//
// Admitted over the span: a 60, b 30, c 30, d 6; mean 31.5: a and d are
// outside ±10% of it, b and c (0.95×) within.
func TestComputeFairness(t *testing.T) {
	cell := func(off, over, adm int) [3]int { return [3]int{off, over, adm} }
	var cells [][][3]int
	for t := range 6 {
		a := cell(10, 0, 10)
		b, c := cell(10, 0, 10), cell(10, 0, 0)
		if t >= 3 {
			b, c = cell(10, 0, 0), cell(10, 0, 10)
		}
		if t == 4 {
			c = cell(12, 2, 10)
		}
		cells = append(cells, [][3]int{a, b, c, cell(20, 0, 1)})
	}
	s := series([]string{"a", "b", "c", "d"}, cells)
	for t := range 6 {
		s.At(t, 4).Goodput = 20 // the "all" row
	}
	f, ok := ComputeFairness(s, nil, 0, 6, 3, 40)
	if !ok {
		t.Fatal("not ok")
	}
	mean := 31.5
	near := func(x, y float64) bool { return math.Abs(x-y) < 1e-9 }
	if f.From != 0 || f.To != 6 || f.Clients != 4 || !near(f.MeanAdmitted, mean) {
		t.Errorf("span %d–%d, %d clients, mean %v; want 0–6, 4, %v", f.From, f.To, f.Clients, f.MeanAdmitted, mean)
	}
	// Admitted of sent: a 1, b 0.5, c 0.5, d 0.05.
	if !near(f.MeanAdmittedFrac, (1+0.5+0.5+0.05)/4) {
		t.Errorf("mean admitted fraction %v", f.MeanAdmittedFrac)
	}
	if !near(f.MinRatio, 6/mean) || !near(f.MaxRatio, 60/mean) || !near(f.MaxDeviation, 60/mean-1) || f.Outside != 2 {
		t.Errorf("spread: min %v max %v dev %v outside %d", f.MinRatio, f.MaxRatio, f.MaxDeviation, f.Outside)
	}
	// Windows 0 and 3: all four; windows 1 and 2: a and d only.
	if f.Window != 3 || f.Windows != 4 || !near(f.WorstConsistent, 0.5) || f.WorstWindow != 1 || f.Under != 2 || !near(f.MeanConsistent, 0.75) || !near(f.AlwaysConsistent, 0.5) {
		t.Errorf("consistency: window %d, %d windows, worst %v at %d, %d under the target, mean %v, always %v", f.Window, f.Windows, f.WorstConsistent, f.WorstWindow, f.Under, f.MeanConsistent, f.AlwaysConsistent)
	}
	if !near(f.GoodputOverCapacity, 0.5) {
		t.Errorf("goodput / capacity %v, want 20/40", f.GoodputOverCapacity)
	}

	// Equal clients, all within ±10%: a 100 sent 50 admitted, b 46, c 54.
	eq := series([]string{"a", "b", "c"}, [][][3]int{{cell(100, 0, 50), cell(100, 0, 46), cell(100, 0, 54)}})
	f, _ = ComputeFairness(eq, []int{0, 1, 2}, 0, 1, 1, 0)
	if f.Outside != 0 || !near(f.MaxDeviation, 0.08) || !near(f.WorstConsistent, 0) || f.GoodputOverCapacity != 0 {
		t.Errorf("equal clients: outside %d dev %v worst %v goodput %v", f.Outside, f.MaxDeviation, f.WorstConsistent, f.GoodputOverCapacity)
	}
	// A subset, and a span clipped to the series.
	f, ok = ComputeFairness(s, []int{0, 3}, 2, 100, 3, 0)
	if !ok || f.To != 6 || f.Windows != 2 || f.WorstConsistent != 1 || f.Clients != 2 {
		t.Errorf("a and d, from s 2: %+v", f)
	}
	if _, ok := ComputeFairness(s, nil, 4, 6, 3, 0); ok {
		t.Error("a span shorter than the window is ok")
	}
}
