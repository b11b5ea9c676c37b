package scenario

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/sim/load"
)

const minimal = `name: t
farm:
  servers: 2
  slots: 4
  routes:
    - {path: /, prefix: true, io: 20ms}
classes:
  - name: a
    unit: capacity
    open:
      rate: [{duration: 10s, from: 0.5, to: 2}]
`

func TestParseMinimal(t *testing.T) {
	sc, err := Parse("t.yaml", []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if sc.Duration != 10*time.Second || sc.Scale != 1 || sc.Classes[0].Unit != UnitCapacity {
		t.Errorf("defaults: duration %v scale %v unit %q", sc.Duration, sc.Scale, sc.Classes[0].Unit)
	}
	c, err := sc.ComputeCapacity()
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(c.Rate-400) > 1e-9 { // 2 × 4 / 20 ms
		t.Errorf("capacity %v, want 400", c.Rate)
	}
	cfg, err := sc.LoadConfig([]string{"http://127.0.0.1:1"}, Scaling{Level: 0.5, Time: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Classes[0].Open.Rate
	if r.Duration() != time.Second {
		t.Errorf("scaled duration %v, want 1s", r.Duration())
	}
	// 0.5 capacity × 400 × level 0.5 = 100 req/s at the start, 400 at the end.
	if got := r.At(0); math.Abs(got-100) > 1e-9 {
		t.Errorf("start rate %v, want 100", got)
	}
	if got := r.Peak(); math.Abs(got-400) > 1e-9 {
		t.Errorf("peak rate %v, want 400", got)
	}
	if sc.ScaledDuration(Scaling{Time: 0.1}) != time.Second {
		t.Errorf("ScaledDuration %v", sc.ScaledDuration(Scaling{Time: 0.1}))
	}
}

func TestParseErrorsHaveLines(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"unknown top-level key", minimal + "colour: red\n", "t.yaml:12: field colour not found"},
		{"unknown class key (inline load.Class)", strings.Replace(minimal, "    unit: capacity\n", "    unit: capacity\n    sla_ms: 5\n", 1), "t.yaml:10: field sla_ms not found"},
		{"unknown farm key", strings.Replace(minimal, "  slots: 4\n", "  slots: 4\n  workers: 3\n", 1), "t.yaml:5: field workers not found"},
		{"bad dist", strings.Replace(minimal, "io: 20ms", "io: exp:twenty", 1), "t.yaml:6: dist"},
		{"bad unit", strings.Replace(minimal, "unit: capacity", "unit: furlongs", 1), `t.yaml:9: class "a": unit "furlongs"`},
		{"closed with capacity unit", strings.Replace(minimal, "    open:\n      rate: [{duration: 10s, from: 0.5, to: 2}]\n", "    closed:\n      users: [{duration: 10s, from: 5}]\n", 1), `t.yaml:9: class "a": unit "capacity": a closed-loop class counts users`},
		{"schedule error from package load", strings.Replace(minimal, "duration: 10s", "duration: 0s", 1), `t.yaml:8: class "a": rate: segment 0: duration must be > 0`},
		{"duplicate class", minimal + "  - name: a\n    open: {rate: [{duration: 1s, from: 1}]}\n", `t.yaml:12: class "a": duplicate name`},
		{"path without a route", strings.Replace(minimal, "prefix: true, ", "", 1) + "    request: {paths: [{path: /x}]}\n", `t.yaml:12: class "a": path "/x": no farm route`},
		{"duration too short", "duration: 5s\n" + minimal, "t.yaml:1: duration 5s is shorter"},
		{"bad name", strings.Replace(minimal, "name: t\n", "name: Fig 5\n", 1), `t.yaml:1: name "Fig 5"`},
		{"sentry sets listen", minimal + "sentry:\n  admission: {mode: batch}\n  listen: 127.0.0.1:80\n", "t.yaml:14: sentry.listen: the runner sets it"},
		{"sentry not a mapping", minimal + "sentry: [1]\n", "t.yaml:12: sentry: expected a mapping"},
		{"capacity rate and mix", minimal + "capacity: {rate: 5, mix: [{path: /}]}\n", "t.yaml:12: capacity: give rate or mix"},
		{"farm not local", strings.Replace(minimal, "  servers: 2\n", "  servers: 2\n  listen: 10.0.0.1:8000\n", 1), "t.yaml:4: farm.listen must be on 127.0.0.1"},
		{"bad route", strings.Replace(minimal, "path: /,", "path: x,", 1), `t.yaml:6: farm: route 0 ("x"): path must start with /`},
		{"two documents", minimal + "---\nname: u\n", "t.yaml:12: more than one YAML document"},
		{"phase end after duration", minimal + "phases: [{name: x, start: 2s, end: 11s}]\n", `t.yaml:12: phase "x": end 11s is after the scenario's duration 10s`},
		{"phase end before start", minimal + "phases:\n  - {name: x, start: 2s, end: 1s}\n", `t.yaml:13: phase "x": end 1s must be after start 2s`},
		{"phase duplicate", minimal + "phases:\n  - {name: x, end: 1s}\n  - {name: x, end: 2s}\n", `t.yaml:14: phase "x": duplicate name`},
		{"phase bad name", minimal + "phases:\n  - {name: 3 x, end: 1s}\n", `t.yaml:13: phase "3 x": name`},
		{"phase unknown key", minimal + "phases:\n  - {name: x, stop: 1s}\n", `t.yaml:13: field stop not found`},
		{"farm route with status 0 and capacity unit", strings.Replace(minimal, "io: 20ms", "bytes: 10", 1), `t.yaml:9: class "a": unit capacity, but the capacity is +Inf`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatalf("no error for\n%s", tc.yaml)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

func TestCapacityMix(t *testing.T) {
	y := `name: mix
farm:
  servers: 2
  slots: 5
  routes:
    - {path: /fast, io: 10ms}
    - {path: /slow, io: 90ms}
    - {path: /file, bytes: 100}
classes:
  - name: f
    request: {paths: [{path: /fast}]}
    open: {rate: [{duration: 1s, from: 30}]}
  - name: s
    request: {paths: [{path: /slow}, {path: /file}]}
    open: {rate: [{duration: 1s, from: 10}]}
`
	sc, err := Parse("mix.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	c, err := sc.ComputeCapacity()
	if err != nil {
		t.Fatal(err)
	}
	// Weights: f 30 → /fast 0.75; s 10 → /slow 0.125, /file 0.125.
	// Mean = 0.75·10 + 0.125·90 + 0 = 18.75 ms; 10 slots / 18.75 ms.
	if want := 10 / 0.01875; math.Abs(c.Rate-want) > 1e-6 || c.Source != "classes" {
		t.Errorf("capacity %v (%s), want %v (classes)", c.Rate, c.Source, want)
	}
	if want := 10 / 0.045; math.Abs(c.Classes[1]-want) > 1e-6 { // s alone: (90+0)/2
		t.Errorf("class s capacity %v, want %v", c.Classes[1], want)
	}
	sc.Capacity.Mix = []load.Path{{Path: "/slow", Weight: 1}}
	if c, _ = sc.ComputeCapacity(); math.Abs(c.Rate-10/0.09) > 1e-6 || c.Source != "mix" {
		t.Errorf("mix capacity %v (%s)", c.Rate, c.Source)
	}
	sc.Capacity = CapacitySpec{Rate: 123}
	if c, _ = sc.ComputeCapacity(); c.Rate != 123 || c.Source != "explicit" {
		t.Errorf("explicit capacity %v (%s)", c.Rate, c.Source)
	}
}

// report builds a run by hand: two classes with SLA 100ms and 1s.
func report(results ...load.Result) *load.Report {
	return &load.Report{
		Config: load.Config{Classes: []load.Class{
			{Name: "gold", SLA: 100 * time.Millisecond, Open: &load.Open{Rate: load.Constant(1, 3*time.Second)}},
			{Name: "bronze", SLA: time.Second, Open: &load.Open{Rate: load.Constant(1, 3*time.Second)}},
		}},
		Stop:    load.StopSchedule,
		Results: results,
	}
}

func ok(class int, start, latency time.Duration) load.Result {
	return load.Result{Class: class, Start: start, Latency: latency, Status: 200, RetryAfter: -1}
}

func TestAggregateAndSummarize(t *testing.T) {
	ms := time.Millisecond
	var rs []load.Result
	// Second 0: gold, 20 fast answers (50..145 ms) → p95 = 140 ms > 100 ms.
	for i := 0; i < 20; i++ {
		rs = append(rs, ok(0, time.Duration(i)*10*ms, time.Duration(50+5*i)*ms))
	}
	// Second 1: gold, 20 answers of 10 ms → within target.
	for i := 0; i < 20; i++ {
		rs = append(rs, ok(0, time.Second+time.Duration(i)*ms, 10*ms))
	}
	// Bronze: one good, one slow (ends in second 2), one rejected by a
	// peer's plain 503, one sentry reject, one 502, one timeout, one
	// overflow.
	rs = append(rs,
		ok(1, 100*ms, 200*ms),
		ok(1, 200*ms, 1900*ms),
		load.Result{Class: 1, Start: 300 * ms, Latency: ms, Status: 503, RetryAfter: -1},
		load.Result{Class: 1, Start: 400 * ms, Latency: ms, Status: 503, Rejected: true, Reason: "rejected_test", RetryAfter: 1},
		load.Result{Class: 1, Start: 500 * ms, Latency: 5 * ms, Status: 502, RetryAfter: -1},
		load.Result{Class: 1, Start: 600 * ms, Latency: 3 * time.Second, Err: load.ErrTimeout, RetryAfter: -1},
		load.Result{Class: 1, Start: 700 * ms, Err: load.ErrOverflow, RetryAfter: -1},
	)
	rep := report(rs...)
	MarkPeerRejects(rep.Results)
	slas := []time.Duration{100 * ms, time.Second}
	samples := []FarmSample{
		{At: -5 * ms, BusyTime: 0},
		{At: time.Second, BusyTime: 4 * time.Second},      // 4 of 8 slot-seconds
		{At: 2 * time.Second, BusyTime: 12 * time.Second}, // 8 of 8
	}
	s := Aggregate(rep, slas, samples, 8, 3)
	if s.Seconds != 4 { // the timeout ends at 3.6 s
		t.Fatalf("seconds %d, want 4", s.Seconds)
	}
	if got := strings.Join(s.Reasons, ","); got != "peer_503,rejected_test" {
		t.Errorf("reasons %q", got)
	}
	g0, g1 := s.At(0, 0), s.At(1, 0)
	if g0.Offered != 20 || g0.Admitted != 20 || g0.Completed != 20 || g0.Samples != 20 || g0.P95 != 140*ms || g0.P50 != 95*ms {
		t.Errorf("gold second 0: %+v", *g0)
	}
	if j, met := g0.MeetsTarget(); !j || met {
		t.Errorf("gold second 0 judged %v met %v, want judged and missed", j, met)
	}
	if j, met := g1.MeetsTarget(); !j || !met || g1.Goodput != 20 {
		t.Errorf("gold second 1 judged %v met %v goodput %d", j, met, g1.Goodput)
	}
	// Gold second 0: answers ≤ 100 ms are the 11 of 50..100 ms.
	if g0.Goodput != 11 {
		t.Errorf("gold second 0 goodput %d, want 11", g0.Goodput)
	}
	b0 := s.At(0, 1)
	if b0.Offered != 7 || b0.Overflow != 1 || b0.Admitted != 4 || b0.Rejected != 2 || b0.Errors != 1 || b0.Completed != 1 ||
		b0.Reasons["peer_503"] != 1 || b0.Reasons["rejected_test"] != 1 || b0.Goodput != 1 {
		t.Errorf("bronze second 0: %+v", *b0)
	}
	if b2 := s.At(2, 1); b2.Completed != 1 || b2.Goodput != 0 {
		t.Errorf("bronze second 2 (the slow answer): %+v", *b2)
	}
	if b3 := s.At(3, 1); b3.Errors != 1 || b3.Samples != 1 || b3.P95 != 3*time.Second {
		t.Errorf("bronze second 3 (the timeout): %+v", *b3)
	}
	if u := s.At(0, 2).Util; math.Abs(u-4.0/(8*1.005)) > 1e-9 {
		t.Errorf("util second 0 %v", u)
	}
	if u := s.At(1, 0).Util; math.Abs(u-1) > 1e-9 {
		t.Errorf("util second 1 %v", u)
	}
	if u := s.At(2, 0).Util; !math.IsNaN(u) {
		t.Errorf("util second 2 %v, want NaN (no sample after it)", u)
	}

	sum := Summarize(rep, s, slas, 10, 2*time.Second)
	tot := sum.Total()
	if tot.Offered != 47 || tot.Overflow != 1 || tot.Rejected != 2 || tot.Errors != 2 || tot.Completed != 42 || tot.Admitted != 44 || tot.Goodput != 32 {
		t.Errorf("total: %+v", *tot)
	}
	if math.Abs(tot.RejectedFrac-2.0/46) > 1e-12 || math.Abs(tot.ErrorFrac-2.0/46) > 1e-12 {
		t.Errorf("fractions: rejected %v errors %v", tot.RejectedFrac, tot.ErrorFrac)
	}
	if tot.GoodputRate != 16 || math.Abs(sum.GoodputOverCapacity-1.6) > 1e-12 {
		t.Errorf("goodput rate %v (/cap %v), want 16 (1.6)", tot.GoodputRate, sum.GoodputOverCapacity)
	}
	gold := sum.Classes[0]
	if gold.SecondsJudged != 2 || gold.SecondsMet != 1 || tot.SecondsJudged != 2 || tot.SecondsMet != 1 {
		t.Errorf("seconds: gold %d/%d, all %d/%d", gold.SecondsMet, gold.SecondsJudged, tot.SecondsMet, tot.SecondsJudged)
	}
	if gold.P95 != 135*ms || gold.Samples != 40 {
		t.Errorf("gold p95 %v samples %d", gold.P95, gold.Samples)
	}
	if math.Abs(sum.MeanUtil-(4.0/(8*1.005)+1)/2) > 1e-9 {
		t.Errorf("mean util %v", sum.MeanUtil)
	}
	if len(sum.Notes) != 1 || !strings.Contains(sum.Notes[0], "overflowed") {
		t.Errorf("notes %q", sum.Notes)
	}

	var csv strings.Builder
	if err := s.WriteCSV(&csv); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(csv.String()), "\n")
	if len(lines) != 1+4*3 {
		t.Fatalf("%d CSV lines", len(lines))
	}
	if want := "t_s,class,offered,overflow,admitted,completed,rejected,rejected_peer_503,rejected_rejected_test,errors,goodput,samples,p50_ms,p95_ms,p99_ms,target_ms,util,farm_completed,farm_abandoned,farm_busy,farm_waiting"; lines[0] != want {
		t.Errorf("header\n%s\nwant\n%s", lines[0], want)
	}
	if want := "0,gold,20,0,20,20,0,0,0,0,11,20,95.000,140.000,145.000,100.000,0.4975,0,0,0,0"; lines[1] != want {
		t.Errorf("row 1\n%s\nwant\n%s", lines[1], want)
	}
	if want := "2,bronze,0,0,0,1,0,0,0,0,0,1,1900.000,1900.000,1900.000,1000.000,,,,,"; lines[8] != want {
		t.Errorf("row 8\n%s\nwant\n%s", lines[8], want)
	}
}

func TestPercentile(t *testing.T) {
	var l []time.Duration
	for i := 1; i <= 100; i++ {
		l = append(l, time.Duration(i))
	}
	if Percentile(l, 0.95) != 95 || Percentile(l, 0.5) != 50 || Percentile(l[:1], 0.99) != 1 || Percentile(nil, 0.5) != 0 {
		t.Error("percentile")
	}
}

func TestMarkdown(t *testing.T) {
	sc, err := Parse("t.yaml", []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	capa, _ := sc.ComputeCapacity()
	rep := report(ok(0, 0, 10*time.Millisecond), ok(1, 0, 10*time.Millisecond))
	rep.Config.Classes = rep.Config.Classes[:1]
	rep.Results = rep.Results[:1]
	s := Aggregate(rep, []time.Duration{time.Second}, nil, 8, 10)
	ps := Summarize(rep, s, []time.Duration{time.Second}, capa.Rate, 10*time.Second)
	ps.Peer = "off"
	var b strings.Builder
	if err := WriteMarkdown(&b, SummaryInfo{Scenario: sc, Capacity: capa, Duration: sc.Duration, Skipped: map[string]string{"nginx": "nginx is not installed"}}, []PeerSummary{ps}); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{"# Scenario t", "**400 req/s**", "| off | 0.1 | 0.00 |", "| gold | 1s | 1 | 0.1 | 1 (100.0%) |", "- nginx: nginx is not installed"} {
		if !strings.Contains(md, want) {
			t.Errorf("summary.md lacks %q:\n%s", want, md)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(minimal))
	f.Add([]byte(withSentry))
	f.Add([]byte(""))
	f.Add([]byte("name: x\nclasses: [{name: a, closed: {users: [{duration: 1s, from: 1}]}}]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		sc, err := Parse("f.yaml", b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.yaml") {
				t.Fatalf("error without the file name: %v", err)
			}
			return
		}
		if _, err := sc.ComputeCapacity(); err != nil {
			t.Fatalf("parsed but no capacity: %v", err)
		}
		if _, err := sc.LoadConfig([]string{"http://127.0.0.1:1"}, Scaling{}); err != nil {
			t.Fatalf("parsed but no load config: %v", err)
		}
	})
}
