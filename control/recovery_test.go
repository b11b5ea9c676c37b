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
