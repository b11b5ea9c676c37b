package scenario

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/sim/load"
)

// series builds a series by hand: cells[t][c] = {offered, overflow,
// admitted}.
func series(classes []string, cells [][][3]int) *Series {
	s := &Series{Classes: classes, Seconds: len(cells)}
	s.Rows = make([]Row, len(cells)*(len(classes)+1))
	for t, row := range cells {
		for c, v := range row {
			r := s.At(t, c)
			r.T, r.Class = t, classes[c]
			r.Offered, r.Overflow, r.Admitted = v[0], v[1], v[2]
		}
	}
	return s
}

func TestCheckPriority(t *testing.T) {
	s := series([]string{"gold", "silver", "bronze"}, [][][3]int{
		{{100, 0, 100}, {100, 0, 50}, {100, 0, 10}}, // 0: in order
		{{100, 0, 90}, {100, 0, 95}, {100, 0, 0}},   // 1: silver above gold by 5 points
		{{0, 0, 0}, {0, 0, 0}, {100, 0, 40}},        // 2: one class sent: not judged
		{{110, 10, 100}, {0, 0, 0}, {100, 0, 50}},   // 3: overflow is not sent; silver absent; in order
		{{100, 0, 20}, {0, 0, 0}, {100, 0, 50}},     // 4: bronze above gold by 30 points, across absent silver
		{{100, 0, 100}, {100, 0, 10}, {100, 0, 30}}, // 5: bronze above silver (not gold) by 20 points
		{{5, 5, 0}, {100, 0, 100}, {100, 0, 100}},   // 6: gold only overflowed (sent nothing); silver = bronze
	})
	pc := CheckPriority(s, 0, s.Seconds)
	if pc.SecondsJudged != 6 || pc.SecondsViolated != 3 || math.Abs(pc.WorstGap-0.3) > 1e-12 || pc.WorstSecond != 4 || pc.WorstClass != "bronze" {
		t.Errorf("whole series: %+v, want 3 of 6 violated, worst 0.3 in second 4 by bronze", pc)
	}
	// A window: seconds 2 and 3 only.
	pc = CheckPriority(s, 2, 4)
	if pc.SecondsJudged != 1 || pc.SecondsViolated != 0 || pc.WorstGap != 0 || pc.WorstSecond != -1 || pc.WorstClass != "" {
		t.Errorf("seconds 2–3: %+v, want 0 of 1 violated, no worst", pc)
	}
	// A window past the end is clipped.
	if pc = CheckPriority(s, 5, 100); pc.SecondsJudged != 2 || pc.SecondsViolated != 1 {
		t.Errorf("seconds 5–: %+v", pc)
	}
}

func TestSummarizePhases(t *testing.T) {
	ms := time.Millisecond
	rs := []load.Result{
		ok(0, 500*ms, 10*ms),   // before the phase
		ok(0, 1200*ms, 10*ms),  // gold in the phase, good
		ok(0, 1300*ms, 150*ms), // gold in the phase, over its 100 ms SLA
		{Class: 1, Start: 1500 * ms, Latency: ms, Status: 503, Rejected: true, Reason: "r", RetryAfter: 1},
		ok(1, 1700*ms, 20*ms), // bronze in the phase, good
		ok(1, 2000*ms, 20*ms), // at the phase's end: outside
		{Class: 1, Start: 2500 * ms, Latency: ms, Status: 503, Rejected: true, Reason: "r", RetryAfter: 1},
		ok(0, 2600*ms, 10*ms),
	}
	rep := report(rs...)
	slas := []time.Duration{100 * ms, time.Second}
	s := Aggregate(rep, slas, nil, 8, 3)
	phases := []Phase{{Name: "one", Start: time.Second, End: 2 * time.Second}, {Name: "rest", Start: 2 * time.Second, End: 3 * time.Second}}
	ps := SummarizePhases(rep, s, slas, 10, phases)
	if len(ps) != 2 {
		t.Fatalf("%d phases", len(ps))
	}
	one := ps[0]
	gold, bronze, tot := one.Classes[0], one.Classes[1], one.Total()
	if gold.Offered != 2 || gold.AdmittedFrac != 1 || gold.Goodput != 1 || gold.P95 != 150*ms || gold.GoodputOverCapacity != 0.1 {
		t.Errorf("phase one, gold: %+v", gold)
	}
	if bronze.Offered != 2 || bronze.AdmittedFrac != 0.5 || bronze.Goodput != 1 || bronze.P95 != 20*ms {
		t.Errorf("phase one, bronze: %+v", bronze)
	}
	if tot.Offered != 4 || tot.GoodputRate != 2 || one.GoodputOverCapacity != 0.2 {
		t.Errorf("phase one, all: %+v, goodput/capacity %v", *tot, one.GoodputOverCapacity)
	}
	if one.Priority == nil || one.Priority.SecondsJudged != 1 || one.Priority.SecondsViolated != 0 {
		t.Errorf("phase one, priority: %+v", one.Priority)
	}
	// Second 2: gold 1 of 1, bronze 1 of 2: in order.
	rest := ps[1]
	if rest.Classes[1].AdmittedFrac != 0.5 || rest.Classes[0].Offered != 1 || rest.Priority.SecondsViolated != 0 || rest.Priority.SecondsJudged != 1 {
		t.Errorf("phase rest: %+v %+v", rest.Classes, rest.Priority)
	}
	// An inversion: bronze all in, gold half rejected, in the phase.
	rep2 := report(
		ok(0, 1100*ms, 10*ms),
		load.Result{Class: 0, Start: 1200 * ms, Latency: ms, Status: 503, RetryAfter: -1},
		ok(1, 1300*ms, 10*ms),
	)
	MarkPeerRejects(rep2.Results)
	s2 := Aggregate(rep2, slas, nil, 8, 3)
	p2 := SummarizePhases(rep2, s2, slas, 10, phases[:1])[0]
	if p2.Priority.SecondsViolated != 1 || p2.Priority.WorstClass != "bronze" || math.Abs(p2.Priority.WorstGap-0.5) > 1e-12 {
		t.Errorf("inversion not caught: %+v", p2.Priority)
	}
}

func TestScaledPhases(t *testing.T) {
	sc, err := Parse("t.yaml", []byte(minimal+"phases: [{name: x, start: 2s, end: 6s}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := sc.ScaledPhases(Scaling{Time: 0.5})
	if len(got) != 1 || got[0].Start != time.Second || got[0].End != 3*time.Second || got[0].Name != "x" {
		t.Errorf("scaled phases %+v", got)
	}
}

func TestMarkdownPriority(t *testing.T) {
	src := strings.Replace(minimal, "classes:\n", "classes:\n  - name: gold\n    open: {rate: [{duration: 10s, from: 10}]}\n", 1) +
		"phases: [{name: flood, start: 1s, end: 2s}]\n"
	sc, err := Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	capa, _ := sc.ComputeCapacity()
	ms := time.Millisecond
	rep := report(
		ok(0, 1100*ms, 10*ms),
		load.Result{Class: 0, Start: 1200 * ms, Latency: ms, Status: 503, RetryAfter: -1},
		ok(1, 1300*ms, 30*ms),
	)
	rep.Config.Classes[1].Name = "a"
	MarkPeerRejects(rep.Results)
	slas := []time.Duration{time.Second, time.Second}
	s := Aggregate(rep, slas, nil, 8, 10)
	ps := Summarize(rep, s, slas, capa.Rate, 10*time.Second)
	ps.Phases = SummarizePhases(rep, s, slas, capa.Rate, sc.ScaledPhases(Scaling{}))
	ps.Peer = "haproxy"
	var b strings.Builder
	if err := WriteMarkdown(&b, SummaryInfo{Scenario: sc, Capacity: capa, Duration: sc.Duration}, []PeerSummary{ps}); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"## Priority",
		"### Whole run\n\n| peer | gold | a | goodput / capacity | share monotone: violated s / judged s (worst) |",
		"| haproxy | 50.0% · 10ms · 0.00 | 100.0% · 30ms · 0.00 | 0.00 | 1 / 1 (50.0 points, s 1, a) |",
		"### Phase flood (1s–2s in the file's time)",
		// In the 1 s phase, one good answer per class: 1/s = 1/400 of capacity.
		"| haproxy | 50.0% · 10ms · 0.00 | 100.0% · 30ms · 0.00 | 0.01 | 1 / 1 (50.0 points, s 1, a) |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("summary.md lacks %q:\n%s", want, md)
		}
	}
}
