package status

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// AppRates are an app's per-second rates between two snapshots.
type AppRates struct {
	Name, Mode string
	// Percentile is the SLA percentile (e.g. 95); Target is R_sla.
	Percentile float64
	Target     time.Duration
	CPU        *float64
	// Requests answered per second.
	Requests float64
	Classes  []ClassRates
	Backends []BackendRates
}

// ClassRates are a class's per-second decisions between two snapshots.
type ClassRates struct {
	Name                        string
	Arrival, Admitted, Rejected float64
	// Reasons are the rejections per second by verdict (non-zero only).
	Reasons map[string]float64
	// Latency is the admitted requests' SLA percentile (cur's).
	Latency time.Duration
}

// BackendRates are a backend's load.
type BackendRates struct {
	Addr     string
	Healthy  bool
	Inflight float64
	// Requests relayed per second.
	Requests float64
}

// delta is a counter's increase, a reset counted from zero.
func delta(cur, prev float64) float64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// Rates computes per-second rates from prev to cur. With prev nil (or no
// time between them) the rates are zero and only gauges are filled.
func Rates(prev, cur *Snapshot) []AppRates {
	dt := 0.0
	if prev != nil {
		dt = cur.Time - prev.Time
	}
	per := func(c, p float64) float64 {
		if dt <= 0 {
			return 0
		}
		return delta(c, p) / dt
	}
	var out []AppRates
	for _, a := range cur.Apps {
		var pa *App
		if prev != nil {
			if i := slices.IndexFunc(prev.Apps, func(x App) bool { return x.Name == a.Name }); i >= 0 {
				pa = &prev.Apps[i]
			}
		}
		r := AppRates{Name: a.Name, Mode: a.Mode, Percentile: a.Percentile, Target: seconds(a.TargetSeconds), CPU: a.CPU}
		if pa != nil {
			r.Requests = per(a.Requests, pa.Requests)
		}
		for _, c := range a.Classes {
			cr := ClassRates{Name: c.Name, Latency: seconds(c.PercentileSeconds), Reasons: map[string]float64{}}
			var pc *Class
			if pa != nil {
				if i := slices.IndexFunc(pa.Classes, func(x Class) bool { return x.Name == c.Name }); i >= 0 {
					pc = &pa.Classes[i]
				}
			}
			if pc != nil {
				for v, n := range c.Decisions {
					d := per(n, pc.Decisions[v])
					cr.Arrival += d
					if v == Admitted {
						cr.Admitted += d
					} else if d > 0 {
						cr.Rejected += d
						cr.Reasons[v] += d
					}
				}
			}
			r.Classes = append(r.Classes, cr)
		}
		for _, b := range a.Backends {
			br := BackendRates{Addr: b.Addr, Healthy: b.Healthy, Inflight: b.Inflight}
			if pa != nil {
				if i := slices.IndexFunc(pa.Backends, func(x Backend) bool { return x.Addr == b.Addr }); i >= 0 {
					br.Requests = per(b.Requests, pa.Backends[i].Requests)
				}
			}
			r.Backends = append(r.Backends, br)
		}
		out = append(out, r)
	}
	return out
}

// reasonNames are short names of the reject verdicts.
var reasonNames = map[string]string{
	"rejected_test":      "test",
	"rejected_cascade":   "cascade",
	"queue_full":         "queue full",
	"rejected_threshold": "threshold",
	"no_backend":         "no backend",
	"client_gone":        "gone",
	"rejected_priority":  "priority",
	"rejected_adaptive":  "adaptive",
}

func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}

// WriteText writes a compact table of the rates from prev to cur, for a
// terminal: per app a header line, then per class arrival, admitted and
// rejected per second and the latency percentile against the target, then
// per backend health, in-flight requests and requests per second.
func WriteText(w io.Writer, prev, cur *Snapshot) error {
	bw := bufio.NewWriter(w)
	for _, a := range Rates(prev, cur) {
		mode := a.Mode
		if mode == "" {
			mode = "(no admission metrics)"
		}
		fmt.Fprintf(bw, "app %s  mode %s  target %s (p%g)  %.0f req/s", a.Name, mode, fmtDur(a.Target), a.Percentile, a.Requests)
		if a.CPU != nil {
			fmt.Fprintf(bw, "  cpu %.0f%%", *a.CPU*100)
		}
		fmt.Fprintln(bw)
		if len(a.Classes) > 0 {
			fmt.Fprintf(bw, "  %-10s %10s %10s %10s %8s %6s  %s\n", "class", "arrival/s", "admitted/s", "rejected/s", fmt.Sprintf("p%g", a.Percentile), "", "rejected by reason")
		}
		for _, c := range a.Classes {
			verdict := ""
			if c.Latency > 0 && a.Target > 0 {
				verdict = "ok"
				if c.Latency > a.Target {
					verdict = "OVER"
				}
			}
			var rs []string
			for v, n := range c.Reasons {
				name := reasonNames[v]
				if name == "" {
					name = v
				}
				rs = append(rs, fmt.Sprintf("%s %.0f", name, n))
			}
			slices.Sort(rs)
			fmt.Fprintf(bw, "  %-10s %10.1f %10.1f %10.1f %8s %6s  %s\n", c.Name, c.Arrival, c.Admitted, c.Rejected, fmtDur(c.Latency), verdict, strings.Join(rs, ", "))
		}
		if len(a.Backends) > 0 {
			fmt.Fprintf(bw, "  %-21s %4s %10s %10s\n", "backend", "up", "in-flight", "req/s")
		}
		for _, b := range a.Backends {
			up := "no"
			if b.Healthy {
				up = "yes"
			}
			fmt.Fprintf(bw, "  %-21s %4s %10.0f %10.1f\n", b.Addr, up, b.Inflight, b.Requests)
		}
	}
	return bw.Flush()
}
