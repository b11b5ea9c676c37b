package estimator

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/internal/scripttest"
)

// The scripts in testdata/*.txt drive an Estimator on a manual clock, in
// the style of batchac's scripts (CockroachDB datadriven):
//
//	# comment (kept on -rewrite)
//	command key=value ...
//	----
//	expected output
//	<blank line>
//
// Commands:
//
//	init classes=gold,bronze [half_life=30s] [probe=1s]
//	                          new estimator at t=0
//	reload classes=... [half_life=] [probe=]
//	                          Reconfigure, as a policy reload does
//	observe class=gold key=/k s=10ms [n=1] [every=0]
//	                          n samples of reported S (Observe), the clock
//	                          moving by every after each; "{i}" in key is
//	                          replaced by the sample's index (fresh keys)
//	measured class=gold key=/k d=12s [n=1] [every=0]
//	                          the same through ObserveMeasured
//	advance 5s                moves the clock; prints t=
//	estimate class=gold key=/k
//	                          Estimate: S and bucket
//	key class=gold key=/k     Stats: the estimate (mean), σ, weight
//	class gold                Refresh(now), then the class's prior (what an
//	                          unseen key gets), σ and weight, and Q
//	probe class=gold [key=/k] Probe: granted or refused
//
// Durations print rounded to 10µs. Run with -rewrite to regenerate the
// expected output.
func TestScripts(t *testing.T) {
	scripttest.RunAll(t, "testdata/*.txt", func(t *testing.T, path string) scripttest.Exec {
		h := &scriptHarness{t: t, path: path, start: time.Unix(1_700_000_000, 0)}
		h.now = h.start
		return func(line int, cmd string) []string {
			h.line = line
			return h.exec(cmd)
		}
	})
}

type scriptHarness struct {
	t          *testing.T
	path       string
	line       int
	e          *Estimator
	start, now time.Time
	classes    []string
}

func (h *scriptHarness) fatalf(format string, args ...any) {
	h.t.Helper()
	h.t.Fatalf("%s:%d: "+format, append([]any{h.path, h.line}, args...)...)
}

func (h *scriptHarness) args(fields []string) map[string]string {
	m := map[string]string{}
	for _, f := range fields {
		k, v, _ := strings.Cut(f, "=")
		m[k] = v
	}
	return m
}

func (h *scriptHarness) dur(s string) time.Duration {
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		h.fatalf("%v", err)
	}
	return d
}

func (h *scriptHarness) class(name string) int {
	for i, c := range h.classes {
		if c == name {
			return i
		}
	}
	h.fatalf("unknown class %q", name)
	return -1
}

func (h *scriptHarness) config(a map[string]string) (Config, []string) {
	return Config{HalfLife: h.dur(a["half_life"]), ProbeInterval: h.dur(a["probe"])}, strings.Split(a["classes"], ",")
}

func round(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }

func (h *scriptHarness) exec(cmd string) []string {
	fields := strings.Fields(cmd)
	a := h.args(fields[1:])
	switch fields[0] {
	case "init":
		cfg, cl := h.config(a)
		e, err := New(cfg, cl)
		if err != nil {
			h.fatalf("%v", err)
		}
		h.e, h.classes, h.now = e, cl, h.start
		return nil
	case "reload":
		cfg, cl := h.config(a)
		if err := h.e.Reconfigure(cfg, cl); err != nil {
			h.fatalf("%v", err)
		}
		h.classes = cl
		return nil
	case "observe", "measured":
		n := 1
		if a["n"] != "" {
			var err error
			if n, err = strconv.Atoi(a["n"]); err != nil {
				h.fatalf("%v", err)
			}
		}
		c, every := h.class(a["class"]), h.dur(a["every"])
		for i := range n {
			k := []byte(strings.ReplaceAll(a["key"], "{i}", strconv.Itoa(i)))
			if fields[0] == "observe" {
				h.e.Observe(c, k, h.dur(a["s"]), -1, h.now)
			} else {
				h.e.ObserveMeasured(c, k, h.dur(a["d"]), h.now)
			}
			h.now = h.now.Add(every)
		}
		return []string{fmt.Sprintf("t=%v", h.now.Sub(h.start))}
	case "advance":
		h.now = h.now.Add(h.dur(fields[1]))
		return []string{fmt.Sprintf("t=%v", h.now.Sub(h.start))}
	case "estimate":
		s, b := h.e.Estimate(h.class(a["class"]), []byte(a["key"]))
		return []string{fmt.Sprintf("S=%v bucket=%d", round(s), b)}
	case "key":
		st, ok := h.e.Stats(h.class(a["class"]), []byte(a["key"]))
		if !ok {
			return []string{"not in the table"}
		}
		return []string{fmt.Sprintf("mean=%v stddev=%v weight=%.2f", round(st.Mean), round(st.StdDev), st.Weight)}
	case "class":
		h.e.Refresh(h.now)
		m, sd, w := h.e.ClassStats(h.class(fields[1]))
		return []string{fmt.Sprintf("prior=%v stddev=%v weight=%.2f Q=%v", round(m), round(sd), w, round(h.e.Q()))}
	case "probe":
		var k []byte
		if key, ok := a["key"]; ok {
			k = []byte(key)
		}
		if h.e.Probe(h.class(a["class"]), k, h.now) {
			return []string{"granted"}
		}
		return []string{"refused"}
	}
	h.fatalf("unknown command %q", fields[0])
	return nil
}
