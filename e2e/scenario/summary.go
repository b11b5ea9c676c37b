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
	// OfferedRate and GoodputRate are per second of the scenario (of the
	// phase, in a PhaseSummary).
	OfferedRate, GoodputRate float64
	// GoodputOverCapacity is GoodputRate / the capacity (0 when the
	// capacity is infinite).
	GoodputOverCapacity float64
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
	// Priority checks, second by second, that the admitted share is
	// monotone in importance; nil with one class.
	Priority *PriorityCheck `json:",omitempty"`
	// Phases are the scenario's phases, each summarised on its own.
	Phases []PhaseSummary `json:",omitempty"`
	// Fairness is set when the scenario asks for it (Scenario.Fairness).
	Fairness *Fairness `json:",omitempty"`
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
	ps.Classes = windowTotals(rep, s.Classes, slas, ps.Capacity, math.MinInt64, math.MaxInt64, dur.Seconds())
	judgeSeconds(ps.Classes, s, 0, s.Seconds)
	if nc > 1 {
		pc := CheckPriority(s, 0, s.Seconds)
		ps.Priority = &pc
	}
	if capacity > 0 && !math.IsInf(capacity, 0) {
		ps.GoodputOverCapacity = ps.Total().GoodputRate / capacity
	}
	sec := dur.Seconds()
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

// windowTotals counts the results that arrived (Start) in [from, to) by
// class and in all (the last element). Rates are per span seconds; a
// capacity of 0 leaves GoodputOverCapacity at 0.
func windowTotals(rep *load.Report, names []string, slas []time.Duration, capacity float64, from, to time.Duration, span float64) []ClassTotals {
	nc := len(names)
	cts := make([]ClassTotals, nc+1)
	lat := make([][]time.Duration, nc+1)
	for c := range cts {
		ct := &cts[c]
		ct.Reasons = map[string]int{}
		if c < nc {
			ct.Class, ct.SLA = names[c], slas[c]
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
		if res.Start < from || res.Start >= to {
			continue
		}
		for _, c := range []int{res.Class, nc} {
			ct := &cts[c]
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
	for c := range cts {
		ct := &cts[c]
		if l := lat[c]; len(l) > 0 {
			slices.Sort(l)
			ct.Samples = len(l)
			ct.P50, ct.P95, ct.P99 = Percentile(l, 0.5), Percentile(l, 0.95), Percentile(l, 0.99)
		}
		if span > 0 {
			ct.OfferedRate = float64(ct.Offered) / span
			ct.GoodputRate = float64(ct.Goodput) / span
		}
		if capacity > 0 {
			ct.GoodputOverCapacity = ct.GoodputRate / capacity
		}
		if sent := ct.Offered - ct.Overflow; sent > 0 {
			ct.RejectedFrac = float64(ct.Rejected) / float64(sent)
			ct.ErrorFrac = float64(ct.Errors) / float64(sent)
			ct.AdmittedFrac = float64(ct.Admitted) / float64(sent)
		}
	}
	return cts
}

// judgeSeconds fills SecondsJudged and SecondsMet from the series'
// seconds [t0, t1). For TotalClass (the last element), a second is judged
// when any class is, and met when every judged class met its own SLA.
func judgeSeconds(cts []ClassTotals, s *Series, t0, t1 int) {
	nc := len(s.Classes)
	for t := max(t0, 0); t < min(t1, s.Seconds); t++ {
		anyJudged, allMet := false, true
		for c := 0; c < nc; c++ {
			judged, ok := s.At(t, c).MeetsTarget()
			if !judged {
				continue
			}
			anyJudged = true
			cts[c].SecondsJudged++
			if ok {
				cts[c].SecondsMet++
			} else {
				allMet = false
			}
		}
		if anyJudged {
			cts[nc].SecondsJudged++
			if allMet {
				cts[nc].SecondsMet++
			}
		}
	}
}

// PriorityCheck is the check that, in every second, a less important
// class got no larger a share of its requests admitted than a more
// important one (classes are in importance order). A class's share in a
// second is Admitted / (Offered − Overflow) of the requests that arrived
// in it; classes that sent nothing in a second are left out of it.
type PriorityCheck struct {
	// SecondsJudged counts the seconds in which at least two classes
	// sent requests.
	SecondsJudged int
	// SecondsViolated counts those in which some class's share exceeded
	// that of a more important class, by any amount.
	SecondsViolated int
	// WorstGap is the largest such excess (a fraction, 0–1), in second
	// WorstSecond, by class WorstClass; 0, -1 and "" when there is none.
	WorstGap    float64
	WorstSecond int
	WorstClass  string
}

// CheckPriority checks the series' seconds [t0, t1).
func CheckPriority(s *Series, t0, t1 int) PriorityCheck {
	pc := PriorityCheck{WorstSecond: -1}
	nc := len(s.Classes)
	for t := max(t0, 0); t < min(t1, s.Seconds); t++ {
		lowest := math.Inf(1) // the smallest share of a more important class
		classes, violated := 0, false
		for c := 0; c < nc; c++ {
			r := s.At(t, c)
			sent := r.Offered - r.Overflow
			if sent <= 0 {
				continue
			}
			classes++
			share := float64(r.Admitted) / float64(sent)
			if gap := share - lowest; gap > 0 {
				violated = true
				if gap > pc.WorstGap {
					pc.WorstGap, pc.WorstSecond, pc.WorstClass = gap, t, r.Class
				}
			}
			lowest = min(lowest, share)
		}
		if classes >= 2 {
			pc.SecondsJudged++
			if violated {
				pc.SecondsViolated++
			}
		}
	}
	return pc
}

// PhaseSummary is one phase of a run (Scenario.Phases): the requests that
// arrived in it, per class and in all, with rates per second of the
// phase; the seconds whose p95 met the SLA; and the priority check over
// its seconds.
type PhaseSummary struct {
	Name       string
	Start, End time.Duration
	Classes    []ClassTotals
	// GoodputOverCapacity is the TotalClass GoodputRate / Capacity.
	GoodputOverCapacity float64
	// Capacity is what the phase's goodput is measured against: the
	// scenario's, or the capacity after the events (Phase.Capacity).
	Capacity float64 `json:",omitempty"`
	// NewCapacity tells that Capacity is the one after the events.
	NewCapacity bool           `json:",omitempty"`
	Priority    *PriorityCheck `json:",omitempty"`
	// Recovery is set for a phase with Phase.Recovery.
	Recovery *Recovery `json:",omitempty"`
}

// Recovery is how long after a phase's start (a capacity shift, a load
// step) the admitted p95 was back within the SLA for good.
type Recovery struct {
	// Seconds from the phase's start to the first second from which every
	// judged second of the phase met the SLA (all classes, as TotalClass
	// judges); -1 when the phase's last judged second missed it.
	Seconds int
	// First: seconds from the phase's start to the first of RecoveryRun
	// judged seconds in a row that all met the SLA (unjudged seconds
	// between them do not break the run); -1 when there is none.
	First int
	// Missed counts the judged seconds of the phase that missed; Judged
	// the judged seconds.
	Missed, Judged int
	// WorstP95 is the largest per-second p95 (any class, judged seconds)
	// over its SLA: the overshoot. 0 when no second was judged.
	WorstP95Ratio float64
	// ToCapacity: seconds from the phase's start to the first second of
	// the phase whose goodput (all classes, counted when the responses
	// finished) reached RecoveryShare of the phase's capacity: the time
	// an event's end takes to give the farm's goodput back (issue 31).
	// 0 when the phase's first second reached it; -1 never, or no
	// capacity.
	ToCapacity int
	// ToBusy: seconds from the phase's start to the first second whose
	// farm utilisation reached RecoveryShare: the farm full, beyond which
	// no admission gives more goodput. Where the farm's capacity varies
	// second to second (a rare heavy request holds a slot for 100 light
	// ones), ToCapacity may come later than the farm was full; ToBusy
	// tells the two apart. -1 never, or the farm not sampled.
	ToBusy int
	// Early is the goodput over the phase's first RecoveryWindow seconds
	// (fewer when the phase or the run is shorter), per second, over the
	// phase's capacity; 0 without a capacity.
	Early float64
}

// RecoveryRun is how many judged seconds in a row must meet the SLA for
// Recovery.First.
const RecoveryRun = 3

// RecoveryShare and RecoveryWindow: Recovery.ToCapacity is the time to
// RecoveryShare of the capacity, Recovery.Early the goodput over the
// phase's first RecoveryWindow seconds (issue 31's targets: 0.95× within
// 1 s of an event's end, and the 6 s after it against HAProxy's).
const (
	RecoveryShare  = 0.95
	RecoveryWindow = 6
)

// recovery works out a phase's Recovery over the series' seconds
// [t0, t1), against the phase's capacity (requests per second; 0 if
// unknown).
func recovery(s *Series, t0, t1 int, capacity float64) *Recovery {
	nc := len(s.Classes)
	r := &Recovery{Seconds: -1, First: -1, ToCapacity: -1, ToBusy: -1}
	for t := max(t0, 0); t < min(t1, s.Seconds); t++ {
		if u := s.At(t, nc).Util; !math.IsNaN(u) && u >= RecoveryShare {
			r.ToBusy = t - t0
			break
		}
	}
	if capacity > 0 {
		good, n := 0, 0
		for t := max(t0, 0); t < min(t1, s.Seconds); t++ {
			g := s.At(t, nc).Goodput
			if r.ToCapacity < 0 && float64(g) >= RecoveryShare*capacity {
				r.ToCapacity = t - t0
			}
			if n < RecoveryWindow {
				good, n = good+g, n+1
			}
		}
		if n > 0 {
			r.Early = float64(good) / float64(n) / capacity
		}
	}
	lastMiss := t0 - 1
	runStart, run := -1, 0
	for t := max(t0, 0); t < min(t1, s.Seconds); t++ {
		judged, met := false, true
		for c := 0; c < nc; c++ {
			row := s.At(t, c)
			j, ok := row.MeetsTarget()
			if !j {
				continue
			}
			judged = true
			if !ok {
				met = false
			}
			if row.Target > 0 {
				r.WorstP95Ratio = max(r.WorstP95Ratio, float64(row.P95)/float64(row.Target))
			}
		}
		if !judged {
			continue
		}
		r.Judged++
		if !met {
			r.Missed++
			lastMiss = t
			run = 0
			continue
		}
		if run == 0 {
			runStart = t
		}
		if run++; run == RecoveryRun && r.First < 0 {
			r.First = runStart - t0
		}
	}
	if r.Judged > 0 && lastMiss < min(t1, s.Seconds)-1 {
		// Some judged second after the last miss must exist.
		for t := lastMiss + 1; t < min(t1, s.Seconds); t++ {
			if hasJudged(s, t) {
				r.Seconds = lastMiss + 1 - t0
				break
			}
		}
	}
	return r
}

func hasJudged(s *Series, t int) bool {
	for c := 0; c < len(s.Classes); c++ {
		if j, _ := s.At(t, c).MeetsTarget(); j {
			return true
		}
	}
	return false
}

// Total returns the TotalClass totals.
func (p *PhaseSummary) Total() *ClassTotals { return &p.Classes[len(p.Classes)-1] }

// SummarizePhases summarises each phase of a run (times as run, i.e.
// scaled). A phase's seconds are those that start within it.
func SummarizePhases(rep *load.Report, s *Series, slas []time.Duration, capacity float64, phases []Phase) []PhaseSummary {
	if capacity <= 0 || math.IsInf(capacity, 0) {
		capacity = 0
	}
	var out []PhaseSummary
	for _, ph := range phases {
		p := PhaseSummary{Name: ph.Name, Start: ph.Start, End: ph.End, Capacity: capacity}
		if ph.rate > 0 {
			p.Capacity, p.NewCapacity = ph.rate, true
		}
		p.Classes = windowTotals(rep, s.Classes, slas, p.Capacity, ph.Start, ph.End, (ph.End - ph.Start).Seconds())
		t0 := int((ph.Start + time.Second - 1) / time.Second)
		t1 := int((ph.End + time.Second - 1) / time.Second)
		judgeSeconds(p.Classes, s, t0, t1)
		if ph.Recovery {
			p.Recovery = recovery(s, t0, t1, p.Capacity)
		}
		p.GoodputOverCapacity = p.Total().GoodputOverCapacity
		if len(s.Classes) > 1 {
			pc := CheckPriority(s, t0, t1)
			p.Priority = &pc
		}
		out = append(out, p)
	}
	return out
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
		if h := r.Heavy; !h.IsZero() {
			fmt.Fprintf(b, "; heavy share %g", h.Share)
			if !h.IO.IsZero() {
				fmt.Fprintf(b, ", io %s", h.IO)
			}
			if !h.CPU.IsZero() {
				fmt.Fprintf(b, ", cpu %s", h.CPU)
			}
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

	// Per-class columns only for a few classes (not for a hundred clients:
	// the per-peer tables list every class).
	cols := sc.Classes
	if len(cols) > maxClassColumns {
		cols = nil
	}
	if len(peers) > 0 {
		b.WriteString("\n## Comparison\n\n")
		b.WriteString("Goodput is 2xx answers within the class SLA, per second of the scenario. ")
		fmt.Fprintf(b, "\"p95 ok\" counts the seconds whose admitted p95 met the SLA among those with ≥ %d samples.\n\n", MinSamples)
		b.WriteString("| peer | goodput/s | goodput / capacity |")
		for _, k := range cols {
			fmt.Fprintf(b, " %s goodput/s |", k.Name)
		}
		b.WriteString(" rejected | errors | p95 ok (all classes) | mean util |\n|---|---|---|")
		for range cols {
			b.WriteString("---|")
		}
		b.WriteString("---|---|---|---|\n")
		for _, p := range peers {
			t := p.Total()
			fmt.Fprintf(b, "| %s | %.1f | %.2f |", p.Peer, t.GoodputRate, p.GoodputOverCapacity)
			for i := range cols {
				if i < len(p.Classes)-1 {
					fmt.Fprintf(b, " %.1f |", p.Classes[i].GoodputRate)
				} else {
					b.WriteString(" – |")
				}
			}
			fmt.Fprintf(b, " %s | %s | %d / %d | %s |\n", pct(t.RejectedFrac), pct(t.ErrorFrac), t.SecondsMet, t.SecondsJudged, fmtUtil(p.MeanUtil))
		}
	}
	if len(peers) > 0 && (len(sc.Classes) > 1 || len(sc.Phases) > 0) && len(sc.Classes) <= maxClassColumns {
		writePriority(b, sc, peers)
	}
	if len(peers) > 0 && sc.Fairness != nil {
		writeFairness(b, sc, peers)
	}
	if len(peers) > 0 {
		writeRecovery(b, sc, peers)
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

// maxClassColumns is the most classes summary.md gives a column each in
// the comparison and priority tables.
const maxClassColumns = 12

// writePriority writes the figures of issue 11's targets: per class the
// admitted share, the p95 of admitted and goodput / capacity; total goodput
// / capacity; and the priority check. One table for the whole run, then one
// per phase.
func writePriority(b *strings.Builder, sc *Scenario, peers []PeerSummary) {
	multi := len(sc.Classes) > 1
	b.WriteString("\n## Priority\n\n")
	b.WriteString("Per class: admitted % of sent · p95 of admitted · goodput / capacity. ")
	if multi {
		b.WriteString("\"Share monotone\" counts the seconds in which a class got a larger admitted share of its sent requests than a more important class (any excess), among the seconds in which at least two classes sent; the worst excess follows in points, with its second and class. ")
	}
	b.WriteString("In a phase, requests count by arrival and rates are per second of the phase.\n")
	table := func(title string, get func(p *PeerSummary) ([]ClassTotals, float64, *PriorityCheck, bool)) {
		fmt.Fprintf(b, "\n### %s\n\n| peer |", title)
		for _, k := range sc.Classes {
			fmt.Fprintf(b, " %s |", k.Name)
		}
		b.WriteString(" goodput / capacity |")
		if multi {
			b.WriteString(" share monotone: violated s / judged s (worst) |")
		}
		b.WriteString("\n|---|")
		for range sc.Classes {
			b.WriteString("---|")
		}
		b.WriteString("---|")
		if multi {
			b.WriteString("---|")
		}
		b.WriteString("\n")
		for i := range peers {
			cts, gc, pc, ok := get(&peers[i])
			if !ok {
				continue
			}
			fmt.Fprintf(b, "| %s |", peers[i].Peer)
			for c := range sc.Classes {
				if c >= len(cts)-1 {
					b.WriteString(" – |")
					continue
				}
				ct := &cts[c]
				fmt.Fprintf(b, " %s · %s · %.2f |", pct(ct.AdmittedFrac), fmtDur(ct.P95, ct.Samples), ct.GoodputOverCapacity)
			}
			fmt.Fprintf(b, " %.2f |", gc)
			if multi {
				if pc == nil {
					b.WriteString(" – |")
				} else {
					fmt.Fprintf(b, " %d / %d%s |", pc.SecondsViolated, pc.SecondsJudged, fmtWorst(pc))
				}
			}
			b.WriteString("\n")
		}
	}
	table("Whole run", func(p *PeerSummary) ([]ClassTotals, float64, *PriorityCheck, bool) {
		return p.Classes, p.GoodputOverCapacity, p.Priority, true
	})
	for _, ph := range sc.Phases {
		table(fmt.Sprintf("Phase %s (%v–%v in the file's time)", ph.Name, ph.Start, ph.End), func(p *PeerSummary) ([]ClassTotals, float64, *PriorityCheck, bool) {
			for i := range p.Phases {
				if p.Phases[i].Name == ph.Name {
					return p.Phases[i].Classes, p.Phases[i].GoodputOverCapacity, p.Phases[i].Priority, true
				}
			}
			return nil, 0, nil, false
		})
	}
}

// writeRecovery writes, for each phase that asks for it (Phase.Recovery or
// Phase.Capacity events), when the p95 was back within the SLA and the
// goodput against the capacity in force: issue 13's capacity-shift
// figures.
func writeRecovery(b *strings.Builder, sc *Scenario, peers []PeerSummary) {
	for _, ph := range sc.Phases {
		if !ph.Recovery && ph.Capacity != PhaseCapacityEvents {
			continue
		}
		fmt.Fprintf(b, "\n## Recovery: phase %s (%v–%v in the file's time)\n\n", ph.Name, ph.Start, ph.End)
		fmt.Fprintf(b, "\"Back within SLA\" is the seconds from the phase's start to the first of %d judged seconds in a row (all classes) that met their SLA; \"for good\" to the first second from which every judged second did; \"never\" when there is none. ", RecoveryRun)
		b.WriteString("\"Worst p95\" is the largest per-second p95 over its SLA in the phase. Goodput is against the phase's capacity")
		if ph.Capacity == PhaseCapacityEvents {
			b.WriteString(" (the farm's after the events up to the phase's start)")
		}
		fmt.Fprintf(b, ". \"To %.0f%%\" is the seconds from the phase's start to the first second whose goodput (counted when the responses finished) reached %.0f%% of that capacity (0: the phase's first second did); \"busy\" the seconds to the first second whose farm utilisation reached %.0f%% (the farm full: no admission gives more); \"first %d s\" the goodput over the phase's first %d seconds against it.",
			100*RecoveryShare, 100*RecoveryShare, 100*RecoveryShare, RecoveryWindow, RecoveryWindow)
		b.WriteString("\n\n| peer | back within SLA | for good | missed / judged s | worst p95 / SLA | to 95% | busy | first 6 s | goodput/s | capacity | goodput / capacity |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for i := range peers {
			var p *PhaseSummary
			for j := range peers[i].Phases {
				if peers[i].Phases[j].Name == ph.Name {
					p = &peers[i].Phases[j]
				}
			}
			if p == nil {
				continue
			}
			back, good, missed, worst, toCap, busy, early := "–", "–", "–", "–", "–", "–", "–"
			if r := p.Recovery; r != nil {
				busy = "never"
				if r.ToBusy >= 0 {
					busy = fmt.Sprintf("%d s", r.ToBusy)
				}
				if p.Capacity > 0 {
					toCap, early = "never", fmt.Sprintf("%.2f", r.Early)
					if r.ToCapacity >= 0 {
						toCap = fmt.Sprintf("%d s", r.ToCapacity)
					}
				}
				back, good = "never", "never"
				if r.First >= 0 {
					back = fmt.Sprintf("%d s", r.First)
				}
				if r.Seconds >= 0 {
					good = fmt.Sprintf("%d s", r.Seconds)
				}
				missed = fmt.Sprintf("%d / %d", r.Missed, r.Judged)
				if r.Judged > 0 {
					worst = fmt.Sprintf("%.2f×", r.WorstP95Ratio)
				}
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %.1f | %.0f | %.2f |\n", peers[i].Peer, back, good, missed, worst, toCap, busy, early,
				p.Total().GoodputRate, p.Capacity, p.GoodputOverCapacity)
		}
	}
}

func fmtWorst(pc *PriorityCheck) string {
	if pc.WorstSecond < 0 {
		return ""
	}
	return fmt.Sprintf(" (%.1f points, s %d, %s)", 100*pc.WorstGap, pc.WorstSecond, pc.WorstClass)
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
