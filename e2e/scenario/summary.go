package scenario

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sentry-proxy/sentry/sim/load"
)

// ClassTotals is one class (or TotalClass) over a whole run.
type ClassTotals struct {
	Class string
	// SLA is the class's target (the smallest for TotalClass).
	SLA time.Duration
	// Counts as in Row, over the run.
	Offered, Overflow, Admitted, Completed, Rejected, Errors, Goodput int
	Reasons                                                           map[string]int
	// Admitted latency over the run (requests with a response, plus
	// timeouts), nearest rank.
	Samples       int
	P50, P95, P99 time.Duration
	// OfferedRate and GoodputRate are per second of the scenario.
	OfferedRate, GoodputRate float64
	// RejectedFrac and ErrorFrac are of the sent requests (offered minus
	// overflow); AdmittedFrac likewise.
	RejectedFrac, ErrorFrac, AdmittedFrac float64
	// SecondsJudged: seconds with at least MinSamples samples; SecondsMet:
	// those whose p95 was within the SLA. For TotalClass, a second is
	// judged when any class is, and met when every judged class met its
	// own SLA.
	SecondsJudged, SecondsMet int
}

// PeerSummary is one peer's run of a scenario, as summary.md shows it. It
// is also saved as summary.json next to the series so summary.md can be
// rebuilt with peers run separately.
type PeerSummary struct {
	Scenario string
	Peer     string
	// Key identifies the scenario file and scaling the run used; summaries
	// with different keys are not shown together.
	Key      string
	Started  time.Time
	Duration time.Duration
	// Capacity is the reference capacity (req/s); 0 when infinite.
	Capacity float64
	Classes  []ClassTotals // classes in order, then TotalClass
	// GoodputOverCapacity is the TotalClass GoodputRate / Capacity.
	GoodputOverCapacity float64
	// MeanUtil is the farm's mean utilisation over the seconds of the
	// scenario's duration (-1 when not sampled).
	MeanUtil float64
	// Stop is why the load run ended; LagP99 the generator's p99 lag.
	Stop   string
	LagP99 time.Duration
	// FarmCompensationMax is the largest farm timer compensation seen: a
	// value near the farm's mean I/O time or 20 ms means the machine was
	// too loaded for the farm's model.
	FarmCompensationMax time.Duration
	// Notes are problems worth a look (overflow, errors, a late generator).
	Notes []string
}

// Total returns the TotalClass totals.
func (p *PeerSummary) Total() *ClassTotals { return &p.Classes[len(p.Classes)-1] }

// Summarize works out a peer's summary from its run and series. dur is the
// scenario's (scaled) duration.
func Summarize(rep *load.Report, s *Series, slas []time.Duration, capacity float64, dur time.Duration) PeerSummary {
	nc := len(s.Classes)
	ps := PeerSummary{Duration: dur, Stop: string(rep.Stop), MeanUtil: -1}
	if capacity > 0 && !math.IsInf(capacity, 0) {
		ps.Capacity = capacity
	}
	ps.Classes = make([]ClassTotals, nc+1)
	lat := make([][]time.Duration, nc+1)
	for c := range ps.Classes {
		ct := &ps.Classes[c]
		ct.Reasons = map[string]int{}
		if c < nc {
			ct.Class, ct.SLA = s.Classes[c], slas[c]
		} else {
			ct.Class = load.TotalClass
			for _, v := range slas {
				if ct.SLA == 0 || v < ct.SLA {
					ct.SLA = v
				}
			}
		}
	}
	for i := range rep.Results {
		res := &rep.Results[i]
		for _, c := range []int{res.Class, nc} {
			ct := &ps.Classes[c]
			ct.Offered++
			if res.Err == load.ErrOverflow {
				ct.Overflow++
				continue
			}
			switch {
			case res.Rejected:
				ct.Rejected++
				ct.Reasons[res.Reason]++
			case res.Completed():
				ct.Completed++
			default:
				ct.Errors++
			}
			if !res.Rejected {
				ct.Admitted++
			}
			if res.Good(slas[res.Class]) {
				ct.Goodput++
			}
			if !res.Rejected && (res.Status > 0 || res.Err == load.ErrTimeout) {
				lat[c] = append(lat[c], res.Latency)
			}
		}
	}
	sec := dur.Seconds()
	for c := range ps.Classes {
		ct := &ps.Classes[c]
		if l := lat[c]; len(l) > 0 {
			slices.Sort(l)
			ct.Samples = len(l)
			ct.P50, ct.P95, ct.P99 = Percentile(l, 0.5), Percentile(l, 0.95), Percentile(l, 0.99)
		}
		if sec > 0 {
			ct.OfferedRate = float64(ct.Offered) / sec
			ct.GoodputRate = float64(ct.Goodput) / sec
		}
		if sent := ct.Offered - ct.Overflow; sent > 0 {
			ct.RejectedFrac = float64(ct.Rejected) / float64(sent)
			ct.ErrorFrac = float64(ct.Errors) / float64(sent)
			ct.AdmittedFrac = float64(ct.Admitted) / float64(sent)
		}
	}
	// Seconds within target.
	for t := 0; t < s.Seconds; t++ {
		anyJudged, allMet := false, true
		for c := 0; c < nc; c++ {
			judged, ok := s.At(t, c).MeetsTarget()
			if !judged {
				continue
			}
			anyJudged = true
			ps.Classes[c].SecondsJudged++
			if ok {
				ps.Classes[c].SecondsMet++
			} else {
				allMet = false
			}
		}
		if anyJudged {
			ps.Classes[nc].SecondsJudged++
			if allMet {
				ps.Classes[nc].SecondsMet++
			}
		}
	}
	if capacity > 0 && !math.IsInf(capacity, 0) {
		ps.GoodputOverCapacity = ps.Total().GoodputRate / capacity
	}
	var usum float64
	var un int
	for t := 0; t < min(s.Seconds, int(math.Ceil(sec))); t++ {
		if u := s.At(t, nc).Util; !math.IsNaN(u) {
			usum += u
			un++
		}
	}
	if un > 0 {
		ps.MeanUtil = usum / float64(un)
	}
	if sum, ok := rep.Summary().Class(load.TotalClass); ok {
		ps.LagP99 = sum.P99Lag
	}
	tot := ps.Total()
	if tot.Overflow > 0 {
		ps.Notes = append(ps.Notes, fmt.Sprintf("%d arrivals (%.1f%%) overflowed the generator's max_in_flight and were not sent", tot.Overflow, 100*float64(tot.Overflow)/float64(max(tot.Offered, 1))))
	}
	if ps.LagP99 > 50*time.Millisecond {
		ps.Notes = append(ps.Notes, fmt.Sprintf("generator p99 send lag %v: the load generator was late (machine saturated?)", ps.LagP99.Round(time.Millisecond)))
	}
	if rep.Stop != load.StopSchedule {
		ps.Notes = append(ps.Notes, fmt.Sprintf("the load run stopped early: %s", rep.Stop))
	}
	return ps
}

// errorKinds describes a run's errors by kind and status, for notes.
func errorKinds(rep *load.Report) string {
	kinds := map[string]int{}
	for i := range rep.Results {
		r := &rep.Results[i]
		if !r.Failed() {
			continue
		}
		if r.Err != "" {
			kinds[string(r.Err)]++
		} else {
			kinds[fmt.Sprintf("status %d", r.Status)]++
		}
	}
	var keys []string
	for k := range kinds {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %d", k, kinds[k]))
	}
	return strings.Join(parts, ", ")
}

// SummaryInfo is the scenario-wide part of summary.md.
type SummaryInfo struct {
	Scenario *Scenario
	Capacity Capacity
	Scaling  Scaling
	Duration time.Duration
	// Skipped peers and why.
	Skipped map[string]string
}

// WriteMarkdown writes summary.md: the scenario, its capacity, then a
// comparison across peers and a table per peer.
func WriteMarkdown(w io.Writer, info SummaryInfo, peers []PeerSummary) error {
	sc := info.Scenario
	sl := info.Scaling.norm()
	b := &strings.Builder{}
	fmt.Fprintf(b, "# Scenario %s\n\n", sc.Name)
	if d := strings.TrimSpace(sc.Description); d != "" {
		fmt.Fprintf(b, "%s\n\n", d)
	}
	fc := sc.Farm
	fmt.Fprintf(b, "- file: `%s`; duration %v", sc.Source, info.Duration)
	if sl.Time != 1 || sl.Level != 1 || sc.Scale != 1 {
		fmt.Fprintf(b, " (time scale %g, level scale %g × file scale %g)", sl.Time, sl.Level, sc.Scale)
	}
	fmt.Fprintf(b, "\n- farm: %d servers × %d slots = %d slots, seed %d\n", fc.Servers, fc.Slots, fc.Servers*fc.Slots, fc.Seed)
	for _, r := range fc.Routes {
		kind := "exact"
		if r.Prefix {
			kind = "prefix"
		}
		fmt.Fprintf(b, "  - route `%s` (%s): mean service %v", r.Path, kind, r.MeanService())
		if !r.IO.IsZero() {
			fmt.Fprintf(b, ", io %s", r.IO)
		}
		if !r.CPU.IsZero() {
			fmt.Fprintf(b, ", cpu %s", r.CPU)
		}
		if r.Bytes > 0 {
			fmt.Fprintf(b, ", %d bytes", r.Bytes)
		}
		if cp, err := fc.Capacity(r.Path); err == nil && !math.IsInf(cp, 0) {
			fmt.Fprintf(b, " → %.0f req/s alone", cp)
		}
		b.WriteString("\n")
	}
	c := info.Capacity
	fmt.Fprintf(b, "- capacity: **%.0f req/s** (%s", c.Rate, c.Source)
	if c.MeanService > 0 {
		fmt.Fprintf(b, ": %d slots / mean service %v", c.Slots, c.MeanService.Round(10*time.Microsecond))
	}
	b.WriteString(")\n")
	if n := strings.TrimSpace(sc.Capacity.Note); n != "" {
		fmt.Fprintf(b, "  - %s\n", n)
	}
	for i, k := range sc.Classes {
		how := "open loop"
		if k.Closed != nil {
			how = fmt.Sprintf("closed loop, peak %.0f users, think %v", k.Closed.Users.Peak()*sc.Scale*sl.Level, k.Closed.Think)
		} else {
			peak := k.Open.Rate.Peak() * sc.Scale * sl.Level
			if k.Unit == UnitCapacity {
				how = fmt.Sprintf("open loop, peak %.2f× capacity = %.0f req/s", peak, peak*c.Rate)
			} else {
				how = fmt.Sprintf("open loop, peak %.0f req/s = %.2f× capacity", peak, peak/c.Rate)
			}
		}
		fmt.Fprintf(b, "- class `%s`: SLA %v, %s; its own path mix alone: %.0f req/s\n", k.Name, sc.SLA(i), how, c.Classes[i])
	}
	keys := map[string]bool{}
	for _, p := range peers {
		keys[p.Key] = true
	}
	if len(keys) > 1 {
		b.WriteString("\n**Warning:** these peers ran different versions or scalings of the scenario.\n")
	}
	if len(info.Skipped) > 0 {
		b.WriteString("\nSkipped:\n")
		for _, n := range PeerNames {
			if why, ok := info.Skipped[n]; ok {
				fmt.Fprintf(b, "- %s: %s\n", n, why)
			}
		}
	}

	if len(peers) > 0 {
		b.WriteString("\n## Comparison\n\n")
		b.WriteString("Goodput is 2xx answers within the class SLA, per second of the scenario. ")
		fmt.Fprintf(b, "\"p95 ok\" counts the seconds whose admitted p95 met the SLA among those with ≥ %d samples.\n\n", MinSamples)
		b.WriteString("| peer | goodput/s | goodput / capacity |")
		for _, k := range sc.Classes {
			fmt.Fprintf(b, " %s goodput/s |", k.Name)
		}
		b.WriteString(" rejected | errors | p95 ok (all classes) | mean util |\n|---|---|---|")
		for range sc.Classes {
			b.WriteString("---|")
		}
		b.WriteString("---|---|---|---|\n")
		for _, p := range peers {
			t := p.Total()
			fmt.Fprintf(b, "| %s | %.1f | %.2f |", p.Peer, t.GoodputRate, p.GoodputOverCapacity)
			for i := range sc.Classes {
				if i < len(p.Classes)-1 {
					fmt.Fprintf(b, " %.1f |", p.Classes[i].GoodputRate)
				} else {
					b.WriteString(" – |")
				}
			}
			fmt.Fprintf(b, " %s | %s | %d / %d | %s |\n", pct(t.RejectedFrac), pct(t.ErrorFrac), t.SecondsMet, t.SecondsJudged, fmtUtil(p.MeanUtil))
		}
	}
	for _, p := range peers {
		fmt.Fprintf(b, "\n## %s\n\n", p.Peer)
		fmt.Fprintf(b, "Run %s; load stopped by %s.\n\n", p.Started.Format(time.RFC3339), p.Stop)
		b.WriteString("| class | SLA | offered | offered/s | admitted | goodput | goodput/s | p50 | p95 | p99 | p95 ok s | rejected | errors | overflow | reject reasons |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, ct := range p.Classes {
			fmt.Fprintf(b, "| %s | %v | %d | %.1f | %d (%s) | %d | %.1f | %s | %s | %s | %d / %d | %d (%s) | %d (%s) | %d | %s |\n",
				ct.Class, ct.SLA, ct.Offered, ct.OfferedRate, ct.Admitted, pct(ct.AdmittedFrac), ct.Goodput, ct.GoodputRate,
				fmtDur(ct.P50, ct.Samples), fmtDur(ct.P95, ct.Samples), fmtDur(ct.P99, ct.Samples),
				ct.SecondsMet, ct.SecondsJudged, ct.Rejected, pct(ct.RejectedFrac), ct.Errors, pct(ct.ErrorFrac), ct.Overflow, fmtReasons(ct.Reasons))
		}
		fmt.Fprintf(b, "\nOverall goodput %.1f req/s = **%.2f × capacity** (%.0f req/s); rejected %s of sent; errors %s; mean farm utilisation %s.\n",
			p.Total().GoodputRate, p.GoodputOverCapacity, p.Capacity, pct(p.Total().RejectedFrac), pct(p.Total().ErrorFrac), fmtUtil(p.MeanUtil))
		if p.FarmCompensationMax > 0 {
			fmt.Fprintf(b, "Farm timer compensation peaked at %v.\n", p.FarmCompensationMax.Round(10*time.Microsecond))
		}
		for _, n := range p.Notes {
			fmt.Fprintf(b, "- %s\n", n)
		}
		fmt.Fprintf(b, "\nFiles: [series.csv](%[1]s/series.csv), [arrival.png](%[1]s/arrival.png), [p95.png](%[1]s/p95.png), [util.png](%[1]s/util.png)\n", p.Peer)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

func fmtUtil(u float64) string {
	if u < 0 || math.IsNaN(u) {
		return "–"
	}
	return fmt.Sprintf("%.0f%%", 100*u)
}

func fmtDur(d time.Duration, n int) string {
	if n == 0 {
		return "–"
	}
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(100 * time.Microsecond).String()
}

func fmtReasons(m map[string]int) string {
	if len(m) == 0 {
		return "–"
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
