package load

import (
	"encoding/csv"
	"io"
	"math"
	"slices"
	"strconv"
	"time"
)

// TotalClass names the all-classes rows of Series and Summary.
const TotalClass = "all"

// Point is one class in one time bucket.
//
// Offered and Overflow are counted in the bucket of the scheduled arrival,
// Sent in that of the actual send; Completed, Rejected, Errors, Goodput
// and the latency percentiles in the bucket where the request finished,
// so Completed per bucket is the throughput (it stays at capacity under
// overload while latency grows).
type Point struct {
	// T is the bucket's start since the run started.
	T time.Duration
	// Class is a class name, or TotalClass.
	Class string
	// Offered arrivals (overflow included).
	Offered int
	// Overflow: arrivals not sent because MaxInFlight was full.
	Overflow int
	// Sent requests.
	Sent int
	// Completed: responses < 400 that were not rejections.
	Completed int
	// Rejected by sentry (503/429 with X-Sentry-Reject).
	Rejected int
	// Errors: connection errors, timeouts and other ≥ 400 responses.
	Errors int
	// Goodput: completed 2xx within the class's SLA.
	Goodput int
	// Admitted is the number of latency samples behind the percentiles:
	// non-rejected requests with a response, plus timeouts.
	Admitted int
	// P50, P95, P99 of admitted latency; 0 when Admitted is 0.
	P50, P95, P99 time.Duration
}

// Series aggregates the results into buckets of step (default 1s when
// step ≤ 0), one point per class and one TotalClass point per bucket,
// from 0 to the bucket of the last event, buckets without events
// included. Order: by T, then classes in config order, then TotalClass.
func (r *Report) Series(step time.Duration) []Point {
	if step <= 0 {
		step = time.Second
	}
	nc := len(r.Config.Classes)
	var last time.Duration
	for i := range r.Results {
		last = max(last, r.Results[i].End(), r.Results[i].Start)
	}
	nb := int(last/step) + 1
	pts := make([]Point, nb*(nc+1))
	lat := make([][]time.Duration, len(pts))
	for b := 0; b < nb; b++ {
		for c := 0; c <= nc; c++ {
			p := &pts[b*(nc+1)+c]
			p.T = time.Duration(b) * step
			if c < nc {
				p.Class = r.Config.Classes[c].Name
			} else {
				p.Class = TotalClass
			}
		}
	}
	idx := func(t time.Duration, c int) int { return int(max(t, 0)/step)*(nc+1) + c }
	for i := range r.Results {
		res := &r.Results[i]
		sla := r.Config.Classes[res.Class].SLA
		for _, c := range []int{res.Class, nc} {
			pts[idx(res.Start, c)].Offered++
			if res.Err == ErrOverflow {
				pts[idx(res.Start, c)].Overflow++
				continue
			}
			pts[idx(res.Sent(), c)].Sent++
			j := idx(res.End(), c)
			p := &pts[j]
			switch {
			case res.Rejected:
				p.Rejected++
			case res.Completed():
				p.Completed++
			default:
				p.Errors++
			}
			if res.Good(sla) {
				p.Goodput++
			}
			if res.admitted() {
				lat[j] = append(lat[j], res.Latency)
			}
		}
	}
	for j := range pts {
		if l := lat[j]; len(l) > 0 {
			slices.Sort(l)
			pts[j].Admitted = len(l)
			pts[j].P50, pts[j].P95, pts[j].P99 = percentile(l, 0.50), percentile(l, 0.95), percentile(l, 0.99)
		}
	}
	return pts
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// CSVHeader is the header row WriteCSV writes.
var CSVHeader = []string{"t_s", "class", "offered", "overflow", "sent", "completed", "rejected", "errors", "goodput", "admitted", "p50_ms", "p95_ms", "p99_ms"}

// WriteCSV writes a series, one row per point, with CSVHeader. Times are in
// seconds, latencies in milliseconds; latency cells are empty when the
// point has no admitted samples.
func WriteCSV(w io.Writer, pts []Point) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	ms := func(p *Point, d time.Duration) string {
		if p.Admitted == 0 {
			return ""
		}
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
	}
	for i := range pts {
		p := &pts[i]
		row := []string{
			strconv.FormatFloat(p.T.Seconds(), 'f', -1, 64), p.Class,
			strconv.Itoa(p.Offered), strconv.Itoa(p.Overflow), strconv.Itoa(p.Sent),
			strconv.Itoa(p.Completed), strconv.Itoa(p.Rejected), strconv.Itoa(p.Errors),
			strconv.Itoa(p.Goodput), strconv.Itoa(p.Admitted),
			ms(p, p.P50), ms(p, p.P95), ms(p, p.P99),
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// Summary is a whole run in numbers.
type Summary struct {
	// Elapsed is the run's wall time; Stop why it ended.
	Elapsed time.Duration
	Stop    StopReason
	// Classes in config order, then TotalClass.
	Classes []ClassSummary
}

// Class returns the named class's summary (or TotalClass).
func (s Summary) Class(name string) (ClassSummary, bool) {
	for _, c := range s.Classes {
		if c.Class == name {
			return c, true
		}
	}
	return ClassSummary{}, false
}

// ClassSummary is one class over the whole run. Counts are defined as in
// Point.
type ClassSummary struct {
	Class string
	// SLA of the class (0 for TotalClass, whose goodput sums the classes').
	SLA time.Duration
	// Duration is the class's schedule length (the longest for
	// TotalClass); the rates below are per second of it.
	Duration time.Duration

	Offered, Overflow, Sent, Completed, Rejected, Errors, Goodput, Admitted int

	// OfferedRate, Throughput (completed) and GoodputRate, per second.
	OfferedRate, Throughput, GoodputRate float64

	// Admitted latency: percentiles, mean and max.
	P50, P95, P99, Mean, Max time.Duration
	// Generator lag (send − scheduled arrival): p99 and max. Large values
	// mean the generator, not the target, was late.
	P99Lag, MaxLag time.Duration

	// ErrKinds counts failures by kind (overflow included).
	ErrKinds map[ErrKind]int
	// Statuses counts responses by HTTP status.
	Statuses map[int]int
	// Reasons counts sentry rejections by X-Sentry-Reject value.
	Reasons map[string]int
}

// Summary aggregates the whole run.
func (r *Report) Summary() Summary {
	nc := len(r.Config.Classes)
	cs := make([]ClassSummary, nc+1)
	lat := make([][]time.Duration, nc+1)
	lag := make([][]time.Duration, nc+1)
	for c := range cs {
		cs[c].ErrKinds, cs[c].Statuses, cs[c].Reasons = map[ErrKind]int{}, map[int]int{}, map[string]int{}
		if c < nc {
			k := &r.Config.Classes[c]
			cs[c].Class, cs[c].SLA, cs[c].Duration = k.Name, k.SLA, k.duration()
			cs[nc].Duration = max(cs[nc].Duration, cs[c].Duration)
		} else {
			cs[c].Class = TotalClass
		}
	}
	for i := range r.Results {
		res := &r.Results[i]
		sla := r.Config.Classes[res.Class].SLA
		for _, c := range []int{res.Class, nc} {
			s := &cs[c]
			s.Offered++
			if res.Err != "" {
				s.ErrKinds[res.Err]++
			}
			if res.Err == ErrOverflow {
				s.Overflow++
				continue
			}
			s.Sent++
			lag[c] = append(lag[c], res.Lag)
			if res.Status > 0 {
				s.Statuses[res.Status]++
			}
			switch {
			case res.Rejected:
				s.Rejected++
				s.Reasons[res.Reason]++
			case res.Completed():
				s.Completed++
			default:
				s.Errors++
			}
			if res.Good(sla) {
				s.Goodput++
			}
			if res.admitted() {
				lat[c] = append(lat[c], res.Latency)
			}
		}
	}
	for c := range cs {
		s := &cs[c]
		if sec := s.Duration.Seconds(); sec > 0 {
			s.OfferedRate = float64(s.Offered) / sec
			s.Throughput = float64(s.Completed) / sec
			s.GoodputRate = float64(s.Goodput) / sec
		}
		if l := lat[c]; len(l) > 0 {
			slices.Sort(l)
			var sum time.Duration
			for _, d := range l {
				sum += d
			}
			s.Admitted = len(l)
			s.P50, s.P95, s.P99 = percentile(l, 0.5), percentile(l, 0.95), percentile(l, 0.99)
			s.Mean, s.Max = sum/time.Duration(len(l)), l[len(l)-1]
		}
		if l := lag[c]; len(l) > 0 {
			slices.Sort(l)
			s.P99Lag, s.MaxLag = percentile(l, 0.99), l[len(l)-1]
		}
	}
	return Summary{Elapsed: r.Elapsed, Stop: r.Stop, Classes: cs}
}
