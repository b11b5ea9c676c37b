package control

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/internal/scripttest"
)

// TestRecoveryScripts runs testdata/recovery-*.txt: the whole App in a
// mode, on the simulated farm of recsim_test.go and a manual clock,
// through an event and its end (issue 31), printing second by second
// what the farm answered within the target:
//
//	sim case=size-shift|capacity-undo|return mode=auto|batch|adaptive seed=N show=A-B
//
// prints seconds A to B−1: goodput (responses within the target, counted
// when they finished) and its share of the capacity after the event, the
// p95 of those responses (– under 20), what was admitted, the mode at the
// second's end.
func TestRecoveryScripts(t *testing.T) {
	scripttest.RunAll(t, "testdata/recovery-*.txt", func(t *testing.T, path string) scripttest.Exec {
		return func(line int, cmd string) []string {
			fields := strings.Fields(cmd)
			args := scripttest.Args(fields[1:])
			if fields[0] != "sim" {
				t.Fatalf("%s:%d: unknown command %q", path, line, fields[0])
			}
			rc, ok := recCaseNamed(args["case"])
			if !ok {
				t.Fatalf("%s:%d: unknown case %q", path, line, args["case"])
			}
			seed, err := strconv.ParseUint(args["seed"], 10, 64)
			if err != nil {
				t.Fatalf("%s:%d: seed: %v", path, line, err)
			}
			var from, to int
			if _, err := fmt.Sscanf(args["show"], "%d-%d", &from, &to); err != nil {
				t.Fatalf("%s:%d: show: %v", path, line, err)
			}
			s := rc.build(true)
			newCtlSim(t, s, args["mode"])
			s.run(t, rc.length, seed)
			var out []string
			for i := from; i < to && i < len(s.secs); i++ {
				x := s.secs[i]
				p95 := "–"
				if d := s.p95(i); d > 0 {
					p95 = d.Round(time.Millisecond).String()
				}
				out = append(out, fmt.Sprintf("s=%d good=%d (%.2f×) p95=%s admitted=%d mode=%v",
					i, x.good, float64(x.good)/rc.capacity, p95, x.admitted, x.mode))
			}
			return out
		}
	})
}

// TestRecoveryEveryMode: after each event's end (recCases), every mode
// gives the farm its goodput back within a second, and its p95 misses
// no more seconds after the end than the same run without the event
// (issue 31's targets). On the simulated farm and the manual clock,
// summed over seeds, as the size shift's heavy tail makes single seconds
// noisy: a run without any shift has seconds at 0.7× the capacity and,
// in batch mode, p95s over 250 ms. So the second after the end is
// measured against what the run without the event gave over the six
// seconds after it, and one missed second in all the seeds' is allowed
// as noise. The numbers are logged.
func TestRecoveryEveryMode(t *testing.T) {
	const seeds = 3
	for _, rc := range recCases {
		misses := map[string]int{}
		for _, mode := range []string{"adaptive", "batch", "auto"} {
			var next, early, base float64
			miss, baseMiss := 0, 0
			for seed := uint64(1); seed <= seeds; seed++ {
				s := rc.build(true)
				newCtlSim(t, s, mode)
				s.run(t, rc.length, seed)
				b := rc.build(false)
				newCtlSim(t, b, mode)
				b.run(t, rc.length, seed)
				next += float64(s.secs[rc.end+1].good) / rc.capacity / seeds
				for i := rc.end; i < rc.end+6; i++ {
					early += float64(s.secs[i].good) / rc.capacity / 6 / seeds
				}
				for i := rc.end + 1; i < rc.end+7; i++ {
					base += float64(b.secs[i].good) / rc.capacity / 6 / seeds
					if s.p95(i) > s.target {
						miss++
					}
					if b.p95(i) > b.target {
						baseMiss++
					}
				}
			}
			t.Logf("%s, %s: the second after the end %.2f× capacity (without the event %.2f×), the 6 s from the end %.2f×; seconds over the target after it %d, without the event %d",
				rc.name, mode, next, base, early, miss, baseMiss)
			if next < 0.9*base {
				t.Errorf("%s, %s: the second after the end %.2f× capacity, want ≥ 0.9 × %.2f (without the event)", rc.name, mode, next, base)
			}
			if early < 0.8*base {
				t.Errorf("%s, %s: the 6 s from the end %.2f× capacity, want ≥ 0.8 × %.2f (without the event)", rc.name, mode, early, base)
			}
			misses[mode] = miss
			// auto after its fall-back: the return to batch must cost no
			// second that the fall-back's mode alone does not miss (a
			// return into the queue adaptive mode holds under the
			// overload; doc.go, "the return").
			if mode == "auto" && miss > misses["adaptive"]+1 {
				t.Errorf("%s, auto: %d seconds over the target after the end, adaptive mode alone %d", rc.name, miss, misses["adaptive"])
			}
			if miss > baseMiss+1 {
				t.Errorf("%s, %s: %d seconds over the target after the end, %d without the event", rc.name, mode, miss, baseMiss)
			}
		}
	}
}

// TestSizeShiftEndPerSecond checks the size shift's end (recCases'
// size-shift, e2e/scenarios/recover-size.yaml) second by second in every
// mode, over seeds:
//
//   - from the second after the end on, the farm is full: its
//     utilisation (the share of its slots' time spent serving) at least
//     0.95 on average over the seeds, every second; and its goodput in
//     the second after the end at least 0.95× the capacity on average;
//   - the p95 of the admitted requests is within the target in every
//     second after the end that the run without the event meets (batch
//     mode, which misses about a third of the seconds at this load with
//     or without the event: no more seconds than that run misses);
//   - adaptive mode's rate (adaptive and auto) at a second's end while
//     the backends queue is never at its ceiling (at most 2.5× the
//     capacity; RateMax is 3.1×), and at most 1.25× the capacity in
//     three quarters of those seconds: the slow start climbs only while
//     the farm is not queueing, and what it raised comes back to what
//     the farm completes once it queues (adaptive's doc.go, "Slow
//     start").
//
// Utilisation is the check that separates admission from the farm's own
// noise: at 0.5% of 500 ms requests a second at full utilisation
// completes 1,605 requests on average, but one with a few more of them
// 1,300 (the run without the event has seconds at 0.8×).
func TestSizeShiftEndPerSecond(t *testing.T) {
	const seeds = 6
	rc, _ := recCaseNamed("size-shift")
	for _, mode := range []string{"adaptive", "auto", "batch"} {
		util := make([]float64, 7)
		good := make([]float64, 7)
		miss, baseMiss, queued, high := 0, 0, 0, 0
		for seed := uint64(1); seed <= seeds; seed++ {
			s := rc.build(true)
			newCtlSim(t, s, mode)
			s.run(t, rc.length, seed)
			b := rc.build(false)
			newCtlSim(t, b, mode)
			b.run(t, rc.length, seed)
			for k := range util {
				i := rc.end + k
				util[k] += s.util(i) / seeds
				good[k] += float64(s.secs[i].good) / rc.capacity / seeds
				if k == 0 {
					continue // the end's own second: the slow requests admitted before it
				}
				over, baseOver := s.p95(i) > s.target, b.p95(i) > b.target
				if over {
					miss++
				}
				if baseOver {
					baseMiss++
				}
				if over && !baseOver && mode == "adaptive" {
					t.Errorf("%s, seed %d, second %d after the end: p95 %v over the target %v (the run without the event: %v)",
						mode, seed, k, s.p95(i), s.target, b.p95(i))
				}
				if x := s.secs[i]; mode != "batch" && x.queueing {
					queued++
					if x.rate > 1.25*rc.capacity {
						high++
					}
					if x.rate > 2.5*rc.capacity {
						t.Errorf("%s, seed %d, second %d after the end: rate %.0f/s while the backends queue, over 2.5× the capacity (%.0f/s)",
							mode, seed, k, x.rate, rc.capacity)
					}
				}
			}
		}
		t.Logf("%s: seconds from the end's: utilisation %.2f, goodput/capacity %.2f; p95 over the target in %d seconds after it (%d without the event); rate over 1.25× the capacity in %d of %d seconds ending with the backends queueing",
			mode, util, good, miss, baseMiss, high, queued)
		for k := 1; k < len(util); k++ {
			if util[k] < 0.95 {
				t.Errorf("%s: second %d after the end: utilisation %.2f on average, want ≥ 0.95", mode, k, util[k])
			}
		}
		if good[1] < 0.95 {
			t.Errorf("%s: the second after the end: goodput %.2f× the capacity on average, want ≥ 0.95", mode, good[1])
		}
		if miss > baseMiss {
			t.Errorf("%s: p95 over the target in %d seconds after the end, %d without the event", mode, miss, baseMiss)
		}
		if 4*high > queued {
			t.Errorf("%s: rate over 1.25× the capacity in %d of %d seconds ending with the backends queueing, want at most a quarter", mode, high, queued)
		}
	}
}
