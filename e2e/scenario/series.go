package scenario

import (
	"encoding/csv"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/sentry-proxy/sentry/sim/load"
)

// MinSamples is the fewest admitted latency samples a second needs for
// its p95 to be judged against the target.
const MinSamples = 20

// PeerRejectReason is the reason given to a 503 from a peer that does not
// mark its rejections (HAProxy, nginx).
const PeerRejectReason = "peer_503"

// MarkPeerRejects counts every 503 without sentry's reject header as a
// rejection with reason PeerRejectReason. Use it for peers whose only way
// to refuse is a plain 503.
func MarkPeerRejects(results []load.Result) {
	for i := range results {
		r := &results[i]
		if r.Err == "" && !r.Rejected && r.Status == 503 {
			r.Rejected = true
			r.Reason = PeerRejectReason
		}
	}
}

// FarmSample is the farm's state at one instant, summed over its servers.
type FarmSample struct {
	// At is the time since the load run started.
	At time.Duration
	// BusyTime is the integral of busy slots (slot-seconds) since the farm
	// started; Completed counts responses.
	BusyTime  time.Duration
	Completed uint64
	// Abandoned counts requests dropped because their client (the peer)
	// went away while they waited for a slot.
	Abandoned uint64
	// Busy slots and Waiting requests at this instant.
	Busy, Waiting int
}

// Row is one class (or TotalClass) in one second.
//
// Offered, Overflow and Admitted count arrivals in the second they were
// scheduled, so Offered and Admitted compare like for like; Completed,
// Rejected (and Reasons), Errors, Goodput and the percentiles count
// requests in the second they finished, so Completed is the throughput.
type Row struct {
	T     int    // second since the run started
	Class string // class name or load.TotalClass
	// Offered arrivals (generator overflow included) and Overflow
	// (arrivals the generator could not send: not the peer's fault).
	Offered, Overflow int
	// Admitted arrivals: sent and not rejected (errors included).
	Admitted int
	// Completed responses < 400 that were not rejections.
	Completed int
	// Rejected by the peer, and by reason.
	Rejected int
	Reasons  map[string]int
	// Errors: connection errors, timeouts, ≥ 400 that are not rejections.
	Errors int
	// Goodput: 2xx within the class's SLA.
	Goodput int
	// Samples behind the percentiles: admitted requests with a response,
	// plus timeouts (at their timeout).
	Samples       int
	P50, P95, P99 time.Duration
	// Target is the class's SLA (the smallest SLA for TotalClass).
	Target time.Duration
	// Util is the farm's utilisation in this second (busy slot-seconds /
	// slot-seconds), FarmDone the responses it wrote and FarmAbandoned the
	// requests it dropped because the peer closed their connection; Busy
	// and Waiting its state at the second's end. NaN and -1 when not
	// sampled.
	Util                    float64
	FarmDone, FarmAbandoned int
	Busy, Waiting           int
}

// MeetsTarget reports whether the second had enough samples to judge and
// its p95 was within target.
func (r *Row) MeetsTarget() (judged, ok bool) {
	if r.Samples < MinSamples {
		return false, false
	}
	return true, r.P95 <= r.Target
}

// Series is a run's per-second rows: for each second, one row per class in
// order, then TotalClass.
type Series struct {
	Classes []string
	Reasons []string // every reject reason seen, sorted
	Rows    []Row
	Seconds int
}

// At returns the row of class c (index; len(Classes) for TotalClass) in
// second t.
func (s *Series) At(t, c int) *Row { return &s.Rows[t*(len(s.Classes)+1)+c] }

// Aggregate builds the per-second series of a run. slas holds each class's
// SLA; samples the farm's state sampled about once a second (may be nil);
// minSeconds extends the series to at least that many seconds.
func Aggregate(rep *load.Report, slas []time.Duration, samples []FarmSample, slots int, minSeconds int) *Series {
	nc := len(rep.Config.Classes)
	s := &Series{}
	for _, k := range rep.Config.Classes {
		s.Classes = append(s.Classes, k.Name)
	}
	last := time.Duration(0)
	for i := range rep.Results {
		last = max(last, rep.Results[i].Start, rep.Results[i].End())
	}
	n := max(int(last/time.Second)+1, minSeconds, 1)
	s.Seconds = n
	s.Rows = make([]Row, n*(nc+1))
	lat := make([][]time.Duration, len(s.Rows))
	minSLA := time.Duration(0)
	for _, v := range slas {
		if minSLA == 0 || v < minSLA {
			minSLA = v
		}
	}
	for t := 0; t < n; t++ {
		for c := 0; c <= nc; c++ {
			r := s.At(t, c)
			r.T = t
			r.Reasons = map[string]int{}
			r.Util, r.Busy, r.Waiting, r.FarmDone, r.FarmAbandoned = math.NaN(), -1, -1, -1, -1
			if c < nc {
				r.Class, r.Target = s.Classes[c], slas[c]
			} else {
				r.Class, r.Target = load.TotalClass, minSLA
			}
		}
	}
	sec := func(d time.Duration) int { return min(int(max(d, 0)/time.Second), n-1) }
	reasons := map[string]bool{}
	for i := range rep.Results {
		res := &rep.Results[i]
		for _, c := range []int{res.Class, nc} {
			a := s.At(sec(res.Start), c)
			a.Offered++
			if res.Err == load.ErrOverflow {
				a.Overflow++
				continue
			}
			if !res.Rejected {
				a.Admitted++
			}
			e := s.At(sec(res.End()), c)
			switch {
			case res.Rejected:
				e.Rejected++
				e.Reasons[res.Reason]++
				reasons[res.Reason] = true
			case res.Completed():
				e.Completed++
			default:
				e.Errors++
			}
			if res.Good(slas[res.Class]) {
				e.Goodput++
			}
			if !res.Rejected && (res.Status > 0 || res.Err == load.ErrTimeout) {
				j := sec(res.End())*(nc+1) + c
				lat[j] = append(lat[j], res.Latency)
			}
		}
	}
	for j := range s.Rows {
		if l := lat[j]; len(l) > 0 {
			slices.Sort(l)
			r := &s.Rows[j]
			r.Samples = len(l)
			r.P50, r.P95, r.P99 = Percentile(l, 0.50), Percentile(l, 0.95), Percentile(l, 0.99)
		}
	}
	for r := range reasons {
		s.Reasons = append(s.Reasons, r)
	}
	sort.Strings(s.Reasons)
	s.addFarm(samples, slots)
	return s
}

// addFarm fills each second's utilisation from the samples: the busy
// slot-seconds between the samples nearest the second's start and end,
// over the slot-seconds between them.
func (s *Series) addFarm(samples []FarmSample, slots int) {
	if len(samples) < 2 || slots <= 0 {
		return
	}
	nearest := func(at time.Duration) int {
		i := sort.Search(len(samples), func(i int) bool { return samples[i].At >= at })
		switch {
		case i == len(samples):
			return i - 1
		case i > 0 && at-samples[i-1].At < samples[i].At-at:
			return i - 1
		}
		return i
	}
	nc := len(s.Classes)
	for t := 0; t < s.Seconds; t++ {
		a, b := nearest(time.Duration(t)*time.Second), nearest(time.Duration(t+1)*time.Second)
		if b <= a {
			continue
		}
		dt := samples[b].At - samples[a].At
		if dt < 500*time.Millisecond {
			continue
		}
		u := float64(samples[b].BusyTime-samples[a].BusyTime) / (float64(slots) * float64(dt))
		for c := 0; c <= nc; c++ {
			r := s.At(t, c)
			r.Util = u
			r.FarmDone = int(samples[b].Completed - samples[a].Completed)
			r.FarmAbandoned = int(samples[b].Abandoned - samples[a].Abandoned)
			r.Busy, r.Waiting = samples[b].Busy, samples[b].Waiting
		}
	}
}

// Percentile is the nearest-rank percentile of sorted durations.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// CSVHeader returns the header WriteCSV writes for s: fixed columns with a
// rejected_<reason> column per reason seen inserted after rejected.
func (s *Series) CSVHeader() []string {
	h := []string{"t_s", "class", "offered", "overflow", "admitted", "completed", "rejected"}
	for _, r := range s.Reasons {
		h = append(h, "rejected_"+r)
	}
	return append(h, "errors", "goodput", "samples", "p50_ms", "p95_ms", "p99_ms", "target_ms", "util", "farm_completed", "farm_abandoned", "farm_busy", "farm_waiting")
}

// WriteCSV writes the series: one row per second and class (TotalClass
// rows are "all"). Latency cells are empty in seconds without samples,
// farm cells in seconds without a farm sample.
func (s *Series) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(s.CSVHeader()); err != nil {
		return err
	}
	ms := func(r *Row, d time.Duration) string {
		if r.Samples == 0 {
			return ""
		}
		return fmtMS(d)
	}
	for i := range s.Rows {
		r := &s.Rows[i]
		row := []string{strconv.Itoa(r.T), r.Class, strconv.Itoa(r.Offered), strconv.Itoa(r.Overflow),
			strconv.Itoa(r.Admitted), strconv.Itoa(r.Completed), strconv.Itoa(r.Rejected)}
		for _, reason := range s.Reasons {
			row = append(row, strconv.Itoa(r.Reasons[reason]))
		}
		row = append(row, strconv.Itoa(r.Errors), strconv.Itoa(r.Goodput), strconv.Itoa(r.Samples),
			ms(r, r.P50), ms(r, r.P95), ms(r, r.P99), fmtMS(r.Target))
		if math.IsNaN(r.Util) {
			row = append(row, "", "", "", "", "")
		} else {
			row = append(row, strconv.FormatFloat(r.Util, 'f', 4, 64), strconv.Itoa(r.FarmDone), strconv.Itoa(r.FarmAbandoned),
				strconv.Itoa(r.Busy), strconv.Itoa(r.Waiting))
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func fmtMS(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
}
