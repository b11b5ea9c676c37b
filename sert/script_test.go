package sert

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/internal/scripttest"
)

// The scripts in testdata/*.txt drive the threshold controller on a manual
// clock (see internal/scripttest for the file format). Commands:
//
//	f p=0.08 [alpha=4] [lw=0.05] [hw=0.15]      prints F(p)
//	t lower=500ms upper=15s p=0.08 [...]        prints T = LB + F(p)·(UB − LB)
//	sample elapsed=1s threshold=3s [terminated] prints sert.Sample
//	init classes=NAME:LB:UB[:M1+M2],plain,...    new controller at t=0; a class
//	     [alpha=] [lw=] [hw=] [interval=] [min=] without bounds does not terminate
//	     [rise=]                                 (rise: Params.MaxRise, default 0)
//	reconfigure (as init)                        Controller.Reconfigure
//	arrive class=NAME n=N                        N × Arrive
//	reject class=NAME n=N                        N × Reject
//	terminate class=NAME n=N                     N × Terminate
//	tick [advance=10s]                           advances the clock, Tick(now);
//	                                             prints each terminating class's update
//	                                             ("bounded": MaxRise held the rise)
//	look [advance=1s]                            advances the clock, Look(now); prints
//	                                             each terminating class's threshold
//	                                             and, when Look lowered it, the counts
//	threshold                                    Threshold of each class
//	terminable class=NAME method=M               Terminable and TerminableBytes
//
// Run with -rewrite to regenerate the expected output.
func TestScripts(t *testing.T) {
	scripttest.RunAll(t, "testdata/*.txt", func(t *testing.T, path string) scripttest.Exec {
		h := &harness{t: t, path: path, now: time.Unix(0, 0).UTC()}
		return func(line int, cmd string) []string {
			h.line = line
			return h.exec(cmd)
		}
	})
}

type harness struct {
	t     *testing.T
	path  string
	line  int
	now   time.Time
	t0    time.Time
	c     *Controller
	names []string
}

func (h *harness) fatalf(format string, args ...any) {
	h.t.Helper()
	h.t.Fatalf("%s:%d: %s", h.path, h.line, fmt.Sprintf(format, args...))
}

func (h *harness) dur(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		h.fatalf("bad duration %q: %v", s, err)
	}
	return d
}

func (h *harness) float(args map[string]string, k string, def float64) float64 {
	s, ok := args[k]
	if !ok {
		return def
	}
	x, err := strconv.ParseFloat(s, 64)
	if err != nil {
		h.fatalf("bad number %s=%q", k, s)
	}
	return x
}

func (h *harness) count(args map[string]string) int {
	n := 1
	if s, ok := args["n"]; ok {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			h.fatalf("bad n=%q", s)
		}
	}
	return n
}

func (h *harness) class(args map[string]string) *Class {
	name := args["class"]
	for i, n := range h.names {
		if n == name {
			if cl := h.c.Class(i); cl != nil {
				return cl
			}
			h.fatalf("class %q does not terminate", name)
		}
	}
	h.fatalf("no class %q", name)
	return nil
}

func (h *harness) config(args map[string]string) (Config, []string) {
	p := DefaultParams()
	p.Alpha = h.float(args, "alpha", p.Alpha)
	p.LowWater = h.float(args, "lw", p.LowWater)
	p.HighWater = h.float(args, "hw", p.HighWater)
	p.MaxRise = h.float(args, "rise", p.MaxRise)
	if s, ok := args["interval"]; ok {
		p.Interval = h.dur(s)
	}
	if s, ok := args["min"]; ok {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			h.fatalf("bad min=%q", s)
		}
		p.MinArrivals = n
	}
	cfg := Config{Params: p, Now: func() time.Time { return h.now }}
	var names []string
	for _, spec := range strings.Split(args["classes"], ",") {
		f := strings.Split(spec, ":")
		names = append(names, f[0])
		if len(f) == 1 {
			cfg.Classes = append(cfg.Classes, nil)
			continue
		}
		cc := &ClassConfig{Name: f[0], Lower: h.dur(f[1]), Upper: h.dur(f[2])}
		if len(f) > 3 {
			cc.Methods = strings.Split(f[3], "+")
		}
		cfg.Classes = append(cfg.Classes, cc)
	}
	return cfg, names
}

func (h *harness) exec(line string) []string {
	fields := strings.Fields(line)
	args := scripttest.Args(fields[1:])
	lw, hw, alpha := h.float(args, "lw", DefaultLowWater), h.float(args, "hw", DefaultHighWater), h.float(args, "alpha", DefaultAlpha)
	switch fields[0] {
	case "f":
		return []string{fmt.Sprintf("F=%.4f", F(h.float(args, "p", 0), alpha, lw, hw))}
	case "t":
		f := F(h.float(args, "p", 0), alpha, lw, hw)
		return []string{fmt.Sprintf("T=%v", Threshold(h.dur(args["lower"]), h.dur(args["upper"]), f))}
	case "sample":
		_, term := args["terminated"]
		return []string{fmt.Sprintf("sample=%v", Sample(h.dur(args["elapsed"]), h.dur(args["threshold"]), term))}
	case "init":
		cfg, names := h.config(args)
		c, err := New(cfg)
		if err != nil {
			return []string{"error: " + err.Error()}
		}
		h.c, h.t0, h.names = c, h.now, names
		return h.thresholds()
	case "reconfigure":
		cfg, names := h.config(args)
		if err := h.c.Reconfigure(cfg); err != nil {
			return []string{"error: " + err.Error()}
		}
		h.names = names
		return h.thresholds()
	case "arrive", "reject", "terminate":
		cl := h.class(args)
		for range h.count(args) {
			switch fields[0] {
			case "arrive":
				cl.Arrive()
			case "reject":
				cl.Reject()
			default:
				cl.Terminate()
			}
		}
		return nil
	case "tick":
		adv := 10 * time.Second
		if s, ok := args["advance"]; ok {
			adv = h.dur(s)
		}
		h.now = h.now.Add(adv)
		h.c.Tick(h.now)
		out := []string{fmt.Sprintf("t=%v", h.now.Sub(h.t0))}
		for i, cl := range h.c.Classes() {
			if cl == nil {
				continue
			}
			u := cl.Last()
			s := fmt.Sprintf("%s: arrived=%d lost=%d", h.names[i], u.Arrived, u.Lost)
			if u.Skipped {
				s += fmt.Sprintf(" skipped (min %d)", h.c.Params().MinArrivals)
			}
			s += fmt.Sprintf(" p=%.4f F=%.4f T=%v", u.P, u.F, u.Threshold)
			if u.Bounded {
				s += " bounded"
			}
			out = append(out, s)
		}
		return out
	case "look":
		adv := time.Second
		if s, ok := args["advance"]; ok {
			adv = h.dur(s)
		}
		h.now = h.now.Add(adv)
		h.c.Look(h.now)
		out := []string{fmt.Sprintf("t=%v", h.now.Sub(h.t0))}
		for i, cl := range h.c.Classes() {
			if cl == nil {
				continue
			}
			s := fmt.Sprintf("%s: T=%v", h.names[i], cl.Threshold())
			if u := cl.Last(); u.Early && u.At.Equal(h.now) {
				s += fmt.Sprintf(" early: arrived=%d lost=%d p=%.4f", u.Arrived, u.Lost, u.P)
			}
			out = append(out, s)
		}
		return out
	case "threshold":
		return h.thresholds()
	case "terminable":
		cl := h.class(args)
		m := args["method"]
		a, b := cl.Terminable(m), cl.TerminableBytes([]byte(m))
		if a != b {
			h.fatalf("Terminable %v, TerminableBytes %v", a, b)
		}
		return []string{fmt.Sprintf("%s %s: %v", args["class"], m, a)}
	}
	h.fatalf("unknown command %q", fields[0])
	return nil
}

func (h *harness) thresholds() []string {
	var out []string
	for i, n := range h.names {
		if cl := h.c.Class(i); cl != nil {
			out = append(out, fmt.Sprintf("%s: T=%v", n, cl.Threshold()))
		} else {
			out = append(out, n+": no termination")
		}
	}
	return out
}
