package scenario

import (
	"math"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sentry-proxy/sentry/sim/load"
)

// TestCapacityAfterEvents: a phase with capacity: events is measured
// against the farm as the events left it: route costs in the mix, server
// speeds by their mean, a killed server as 0 until it restarts.
func TestCapacityAfterEvents(t *testing.T) {
	// minimal: 2 servers × 4 slots, 20 ms: 400 req/s.
	sc, err := Parse("t.yaml", []byte(minimal+`events:
  - {at: 2s, speed: {server: 0, factor: 0.5}}
  - {at: 3s, route: {path: /, prefix: true, io: 40ms}}
  - {at: 4s, kill: 1}
  - {at: 5s, restart: 1}
phases:
  - {name: a, start: 0s, end: 2s, capacity: events}
  - {name: b, start: 2s, end: 3s, capacity: events}
  - {name: c, start: 3s, end: 4s, capacity: events}
  - {name: d, start: 4s, end: 5s, capacity: events}
  - {name: e, start: 5s, end: 6s, capacity: events}
  - {name: f, start: 5s, end: 6s}
`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := sc.PhaseCapacities(400)
	if err != nil {
		t.Fatal(err)
	}
	// a: 400; b: speeds 0.5 and 1, mean 0.75: 300; c: 40 ms, 200 × 0.75 =
	// 150; d: server 1 killed, mean 0.25: 50; e: restarted: 150; f: the
	// scenario's 400.
	want := []float64{400, 300, 150, 50, 150, 400}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-9 {
			t.Errorf("phase %s: capacity %v, want %v", sc.Phases[i].Name, got[i], want[i])
		}
	}
	if _, err := Parse("t.yaml", []byte(minimal+"phases: [{name: a, start: 0s, end: 2s, capacity: new}]\n")); err == nil ||
		!strings.Contains(err.Error(), `capacity "new"`) {
		t.Errorf("bad phase capacity: %v", err)
	}
}

// TestRecovery: the seconds from a phase's start to the first second from
// which every judged second met its SLA, the misses, and the overshoot.
func TestRecovery(t *testing.T) {
	ms := time.Millisecond
	var rs []load.Result
	// Seconds 0–5, 20 samples each (MinSamples): p95 over the 100 ms SLA
	// in seconds 0, 1 and 3 (300 ms, 200 ms, 150 ms), within it in 2, 4
	// and 5; second 6 has too few samples to judge.
	lat := []time.Duration{300 * ms, 200 * ms, 50 * ms, 150 * ms, 50 * ms, 50 * ms}
	for sec, l := range lat {
		for i := 0; i < MinSamples; i++ {
			start := time.Duration(sec)*time.Second + time.Duration(i)*ms
			rs = append(rs, ok(0, start, l))
		}
	}
	rs = append(rs, ok(0, 6*time.Second, 500*ms))
	rep := report(rs...)
	slas := []time.Duration{100 * ms, time.Second}
	s := Aggregate(rep, slas, nil, 8, 7)
	phases := []Phase{
		{Name: "all", Start: 0, End: 7 * time.Second, Recovery: true},
		{Name: "late", Start: 2 * time.Second, End: 4 * time.Second, Recovery: true},
		{Name: "none", Start: 4 * time.Second, End: 7 * time.Second},
	}
	ps := SummarizePhases(rep, s, slas, 10, phases)
	// Back for good after 4 s; 3 met in a row never (2 and 4–5 are runs
	// of 1 and 2: second 6 is not judged).
	if r := ps[0].Recovery; r == nil || r.Seconds != 4 || r.First != -1 || r.Missed != 3 || r.Judged != 6 || math.Abs(r.WorstP95Ratio-3) > 1e-9 {
		t.Errorf("phase all: %+v, want back for good after 4 s, no 3 in a row, 3 of 6 missed, worst 3×", r)
	}
	if r := ps[1].Recovery; r == nil || r.Seconds != -1 || r.Missed != 1 || r.Judged != 2 {
		t.Errorf("phase late (its last judged second missed): %+v, want never", r)
	}
	// Seconds 0–2 over, then 3 within: back after 3 s, for good too.
	var rs2 []load.Result
	for sec, l := range []time.Duration{300 * ms, 300 * ms, 300 * ms, 50 * ms, 50 * ms, 50 * ms, 50 * ms} {
		for i := 0; i < MinSamples; i++ {
			rs2 = append(rs2, ok(0, time.Duration(sec)*time.Second+time.Duration(i)*ms, l))
		}
	}
	rep2 := report(rs2...)
	s2 := Aggregate(rep2, slas, nil, 8, 7)
	if r := SummarizePhases(rep2, s2, slas, 10, phases[:1])[0].Recovery; r.First != 3 || r.Seconds != 3 {
		t.Errorf("recovery after 3 s: %+v", r)
	}
	if ps[2].Recovery != nil {
		t.Errorf("phase none: recovery %+v without asking", ps[2].Recovery)
	}
}

// TestRecoveryToCapacity: the seconds from a phase's start to the first
// second whose goodput (by completion) reached 95% of the phase's
// capacity, and the goodput over its first 6 seconds against it; and
// the seconds to the first second the farm was 95% busy.
func TestRecoveryToCapacity(t *testing.T) {
	ms := time.Millisecond
	var rs []load.Result
	// Goodput per second 2, 5, 9, 10, 10, 3, 10, 10 against a capacity of
	// 10/s; each second also has one late answer (not goodput).
	for sec, n := range []int{2, 5, 9, 10, 10, 3, 10, 10} {
		for i := 0; i < n; i++ {
			rs = append(rs, ok(0, time.Duration(sec)*time.Second+time.Duration(i)*ms, 10*ms))
		}
		rs = append(rs, ok(0, time.Duration(sec)*time.Second+500*ms, 300*ms))
	}
	rep := report(rs...)
	slas := []time.Duration{100 * ms, time.Second}
	s := Aggregate(rep, slas, nil, 8, 8)
	ps := SummarizePhases(rep, s, slas, 10, []Phase{
		{Name: "all", Start: 0, End: 8 * time.Second, Recovery: true},
		{Name: "late", Start: time.Second, End: 8 * time.Second, Recovery: true},
		{Name: "short", Start: 5 * time.Second, End: 8 * time.Second, Recovery: true},
	})
	for i, want := range []struct {
		to    int
		early float64
	}{{3, 39.0 / 60}, {2, 47.0 / 60}, {1, 23.0 / 30}} {
		if r := ps[i].Recovery; r == nil || r.ToCapacity != want.to || math.Abs(r.Early-want.early) > 1e-9 {
			t.Errorf("phase %s: %+v, want to capacity %d s, first 6 s %.3f", ps[i].Name, r, want.to, want.early)
		}
	}
	if r := SummarizePhases(rep, s, slas, 20, []Phase{{Name: "x", Start: 0, End: 8 * time.Second, Recovery: true}})[0].Recovery; r.ToCapacity != -1 || r.ToBusy != -1 {
		t.Errorf("capacity 20/s never reached, no farm samples: %+v", r)
	}

	// The farm's utilisation per second (8 slots): 0.5, 0.9, 0.97, 0.6,
	// 1, 1, 1, 1. "busy" is the first second at 95% or more, counted from
	// each phase's start; before the farm is full, and when it never is.
	var samples []FarmSample
	var busy time.Duration
	for sec, u := range []float64{0.5, 0.9, 0.97, 0.6, 1, 1, 1, 1} {
		samples = append(samples, FarmSample{At: time.Duration(sec) * time.Second, BusyTime: busy})
		busy += time.Duration(u * 8 * float64(time.Second))
	}
	samples = append(samples, FarmSample{At: 8 * time.Second, BusyTime: busy})
	sf := Aggregate(rep, slas, samples, 8, 8)
	ps = SummarizePhases(rep, sf, slas, 10, []Phase{
		{Name: "all", Start: 0, End: 8 * time.Second, Recovery: true},
		{Name: "late", Start: 3 * time.Second, End: 8 * time.Second, Recovery: true},
		{Name: "early", Start: 0, End: 2 * time.Second, Recovery: true},
	})
	for i, want := range []int{2, 1, -1} {
		if r := ps[i].Recovery; r == nil || r.ToBusy != want {
			t.Errorf("phase %s: %+v, want busy after %d s", ps[i].Name, r, want)
		}
	}
}

// TestSentryModePeers: sentry-auto, sentry-batch and sentry-adaptive set
// admission.mode and keep the rest of the fragment's admission section;
// sentry-shared also sets admission.adaptive.shared; the scenario's
// fragment is left as it was.
func TestSentryModePeers(t *testing.T) {
	sc, err := Parse("t.yaml", []byte(minimal+`sentry:
  sla: {targets: [{target: 500ms}]}
  admission: {mode: batch, adaptive: {nreq: 50}}
`))
	if err != nil {
		t.Fatal(err)
	}
	type pol struct {
		Apps []struct {
			Admission struct {
				Mode     string
				Adaptive map[string]any
			}
		}
	}
	for peer, want := range map[string]string{"sentry": "batch", "sentry-auto": "auto", "sentry-batch": "batch", "sentry-adaptive": "adaptive", "sentry-shared": "adaptive"} {
		b, err := SentryPolicyFor(peer, sc, "127.0.0.1:1000", "127.0.0.1:1001", []string{"127.0.0.1:2000"})
		if err != nil {
			t.Fatal(err)
		}
		var p pol
		if err := yaml.Unmarshal(b, &p); err != nil {
			t.Fatalf("%s: %v\n%s", peer, err, b)
		}
		a := p.Apps[0].Admission
		if a.Mode != want || a.Adaptive["nreq"] != 50 || (a.Adaptive["shared"] == true) != (peer == "sentry-shared") {
			t.Errorf("%s: admission %+v, want mode %s with nreq kept\n%s", peer, a, want, b)
		}
	}
	// No admission section: the peer adds one.
	sc2, _ := Parse("t.yaml", []byte(minimal+"sentry:\n  sla: {targets: [{target: 500ms}]}\n"))
	b, _ := SentryPolicyFor("sentry-adaptive", sc2, "127.0.0.1:1000", "127.0.0.1:1001", []string{"127.0.0.1:2000"})
	var p pol
	if err := yaml.Unmarshal(b, &p); err != nil || p.Apps[0].Admission.Mode != "adaptive" {
		t.Errorf("no admission section: %v\n%s", err, b)
	}
	b, _ = SentryPolicyFor("sentry", sc, "127.0.0.1:1000", "127.0.0.1:1001", []string{"127.0.0.1:2000"})
	if strings.Contains(string(b), "shared") || !strings.Contains(string(b), "mode: batch") {
		t.Errorf("the fragment was changed by another peer:\n%s", b)
	}
}
