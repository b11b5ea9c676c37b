package adaptive

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/internal/scripttest"
)

// TestScripts runs testdata/*.txt: the controller on a manual clock, with
// the expected numbers worked out by hand in each script's comments.
//
//	init targets=D,D,... [rate=R] [nreq=N] [lc_thresh=N] [burst=D] [rate_min=R] [rate_max=R] [timeout=D] [cut_all_lower] [scaled]
//	observe class=I n=N rt=D          n samples of rt each (a run may follow)
//	observe class=I n=N step=D        n samples 1·step, 2·step, ..., n·step
//	end class=I n=N                   n admitted requests ended without a sample (Ended: cut by termination)
//	idle class=I n=N rt=D             n requests admitted over target completed in rt (ObserveIdle)
//	advance D                         move the clock; then Tick
//	admit class=I n=N                 n requests: how many were admitted
//	state                             every class: rate, tokens, cur (ms), err, runs, lc, samples
//	farm idle=true|false              what Config.Idle answers (the owner's view of the
//	                                  farm; false until set: the scripts' samples are
//	                                  not paired with admissions, so the own count says nothing)
//	admitted class=I                  the class's admissions and those over target
//
// An admission by the work-conserving rule (Decision.OverTarget) prints as
// "over_target N" after the admit count.
func TestScripts(t *testing.T) {
	scripttest.RunAll(t, "testdata/*.txt", func(t *testing.T, path string) scripttest.Exec {
		var c *Controller
		var idle atomic.Bool
		ck := &clock{t: time.Unix(1000, 0)}
		return func(line int, cmd string) []string {
			fields := strings.Fields(cmd)
			args := scripttest.Args(fields[1:])
			dur := func(k string) time.Duration {
				d, err := time.ParseDuration(args[k])
				if err != nil {
					t.Fatalf("%s:%d: %s: %v", path, line, k, err)
				}
				return d
			}
			num := func(k string) float64 {
				v, err := strconv.ParseFloat(args[k], 64)
				if err != nil {
					t.Fatalf("%s:%d: %s: %v", path, line, k, err)
				}
				return v
			}
			has := func(k string) bool { _, ok := args[k]; return ok }
			switch fields[0] {
			case "init":
				cfg := Config{Now: ck.now, Idle: idle.Load}
				idle.Store(false)
				for _, s := range strings.Split(args["targets"], ",") {
					d, err := time.ParseDuration(s)
					if err != nil {
						t.Fatalf("%s:%d: %v", path, line, err)
					}
					cfg.Targets = append(cfg.Targets, d)
				}
				if has("rate") {
					cfg.InitialRate = num("rate")
				}
				if has("nreq") {
					cfg.NReq = int(num("nreq"))
				}
				if has("lc_thresh") {
					cfg.LCThresh = int(num("lc_thresh"))
				}
				if has("timeout") {
					cfg.Timeout = dur("timeout")
				}
				if has("burst") {
					cfg.Burst = dur("burst")
				}
				if has("rate_min") {
					cfg.RateMin = num("rate_min")
				}
				cfg.CutAllLower = has("cut_all_lower")
				cfg.Scaled = has("scaled")
				cfg.InFlightLimit = has("in_flight_limit")
				if has("percentile") {
					cfg.Percentile = num("percentile")
				}
				if has("rate_max") {
					cfg.RateMax = num("rate_max")
				}
				var err error
				if c, err = New(cfg); err != nil {
					return []string{"error: " + err.Error()}
				}
				return nil
			case "observe":
				cl, n := int(num("class")), int(num("n"))
				runs := c.State(cl).Runs
				for i := 1; i <= n; i++ {
					if has("step") {
						c.Observe(cl, time.Duration(i)*dur("step"))
					} else {
						c.Observe(cl, dur("rt"))
					}
				}
				if r := c.State(cl).Runs; r != runs {
					return []string{fmt.Sprintf("ran: %d", r-runs)}
				}
				return nil
			case "idle":
				for i := 0; i < int(num("n")); i++ {
					c.ObserveIdle(int(num("class")), dur("rt"))
				}
				return nil
			case "end":
				for i := 0; i < int(num("n")); i++ {
					c.Ended(int(num("class")))
				}
				return nil
			case "advance":
				ck.add(mustDur(t, fields[1]))
				before := make([]uint64, c.Classes())
				for i := range before {
					before[i] = c.State(i).Runs
				}
				c.Tick(ck.now())
				var out []string
				for i := range before {
					if c.State(i).Runs != before[i] {
						out = append(out, fmt.Sprintf("ran: class %d", i))
					}
				}
				return out
			case "admit":
				cl, n := int(num("class")), int(num("n"))
				ok, over, last := 0, 0, admission.Decision{}
				for i := 0; i < n; i++ {
					if d := c.Admit(&admission.Request{Class: cl}); d.Verdict == admission.Admit {
						ok++
						if d.OverTarget {
							over++
						}
					} else {
						last = d
					}
				}
				out := []string{fmt.Sprintf("admitted %d of %d", ok, n)}
				if over > 0 {
					out[0] += fmt.Sprintf(" over_target %d", over)
				}
				if ok < n {
					out = append(out, fmt.Sprintf("rejected: %v retry_after=%v", last.Verdict, last.RetryAfter))
				}
				return out
			case "farm":
				idle.Store(args["idle"] == "true")
				return nil
			case "admitted":
				st := c.State(int(num("class")))
				return []string{fmt.Sprintf("admitted=%d over_target=%d rejected=%d", st.Admitted, st.OverTarget, st.Rejected)}
			case "limit":
				lim, in := c.Limit()
				return []string{fmt.Sprintf("limit=%d in_flight=%d", lim, in)}
			case "state":
				var out []string
				for i := 0; i < c.Classes(); i++ {
					st := c.State(i)
					out = append(out, fmt.Sprintf("class %d: rate=%s tokens=%s cur=%sms err=%s runs=%d lc=%d samples=%d",
						i, g(st.Rate), g(st.Tokens), g(float64(st.Cur)/1e6), g(st.Err), st.Runs, st.LC, st.Samples))
				}
				return out
			}
			t.Fatalf("%s:%d: unknown command %q", path, line, cmd)
			return nil
		}
	})
}

func mustDur(t *testing.T, s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// g prints a number to 6 significant digits, so hand-computed values
// compare exactly.
func g(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
