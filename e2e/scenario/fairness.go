package scenario

import (
	"fmt"
	"math"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// FairnessSpec asks the summary for the fair-share figures of issue 30
// over a span of the run: how evenly the clients were admitted, and how
// consistently (Fairness). The clients are the scenario's classes, or
// those expanded from one entry (Class.Clients).
type FairnessSpec struct {
	// Start and End bound the span, in the file's time (scaled with the
	// run); whole seconds. End defaults to the scenario's duration; the
	// span must hold at least one window.
	Start time.Duration `yaml:"start,omitempty"`
	End   time.Duration `yaml:"end,omitempty"`
	// Window is the consistency window; whole seconds, default 10s.
	Window time.Duration `yaml:"window,omitempty"`
	// Group names the entry whose clients are compared (Class.Clients);
	// default every class.
	Group string `yaml:"group,omitempty"`
}

// The thresholds of the fair-share figures (issue 30): each client's
// admitted requests within ShareTolerance of the clients' mean; a client
// is all-or-nothing in a window when it was admitted at least AllShare
// or at most NoneShare of what it sent in it; a window meets the
// consistency target when at least ConsistentTarget of the clients are.
const (
	ShareTolerance   = 0.10
	AllShare         = 0.95
	NoneShare        = 0.05
	ConsistentTarget = 0.90
	DefaultWindow    = 10 * time.Second
)

// Fairness is how a peer shared the farm among equal clients over the
// seconds [From, To) of a run, counting requests by the second they
// arrived in (Row.Offered, Overflow, Admitted).
//
// Share spread: a client's share is its admitted requests (sent and not
// rejected) over the span; MaxDeviation is the largest |share − mean| /
// mean over the clients, Outside the number of clients for which it
// exceeds ShareTolerance.
//
// Consistency: for every window of Window seconds starting at a whole
// second w, From ≤ w ≤ To − Window (sliding, a second apart), a client is
// all-or-nothing in it when its admitted requests over its sent ones
// (offered minus generator overflow) in the window are ≥ AllShare or
// ≤ NoneShare, or it sent nothing. A window's figure is the fraction of
// clients all-or-nothing in it; WorstConsistent is the smallest over the
// windows (issue 30's target: ≥ ConsistentTarget in every window), Under
// the number of windows below the target, MeanConsistent their mean, and
// AlwaysConsistent the fraction of clients all-or-nothing
// in every window (a stricter reading).
type Fairness struct {
	From, To int // seconds since the load started
	Clients  int
	// MeanAdmitted is the clients' mean admitted requests over the span;
	// MeanAdmittedFrac their mean admitted share of what each sent.
	MeanAdmitted, MeanAdmittedFrac float64
	// MinRatio and MaxRatio are the smallest and largest client's
	// admitted requests over the mean.
	MinRatio, MaxRatio float64
	MaxDeviation       float64
	Outside            int
	// Window is in seconds; Windows counts the windows judged.
	Window, Windows  int
	WorstConsistent  float64
	WorstWindow      int // the start second of the worst window
	Under            int // windows below ConsistentTarget
	MeanConsistent   float64
	AlwaysConsistent float64
	// GoodputOverCapacity is the goodput of every class over the span
	// (counted by completion second), per second, over the capacity; 0
	// without one.
	GoodputOverCapacity float64
}

// ComputeFairness works out the figures over the seconds [from, to) of s
// for the classes at indices clients (all classes when nil). window is in
// seconds. ok is false when the span holds no window or there are no
// clients.
func ComputeFairness(s *Series, clients []int, from, to, window int, capacity float64) (f Fairness, ok bool) {
	if clients == nil {
		for c := range s.Classes {
			clients = append(clients, c)
		}
	}
	from, to = max(from, 0), min(to, s.Seconds)
	if window < 1 || len(clients) == 0 || to-from < window {
		return Fairness{}, false
	}
	f = Fairness{From: from, To: to, Clients: len(clients), Window: window, WorstConsistent: 1, WorstWindow: -1}
	adm := make([]float64, len(clients))
	for i, c := range clients {
		a, sent := 0, 0
		for t := from; t < to; t++ {
			r := s.At(t, c)
			a += r.Admitted
			sent += r.Offered - r.Overflow
		}
		adm[i] = float64(a)
		f.MeanAdmitted += adm[i] / float64(len(clients))
		if sent > 0 {
			f.MeanAdmittedFrac += float64(a) / float64(sent) / float64(len(clients))
		}
	}
	f.MinRatio, f.MaxRatio = math.Inf(1), math.Inf(-1)
	for _, a := range adm {
		if f.MeanAdmitted > 0 {
			x := a / f.MeanAdmitted
			f.MinRatio, f.MaxRatio = min(f.MinRatio, x), max(f.MaxRatio, x)
			f.MaxDeviation = max(f.MaxDeviation, math.Abs(x-1))
			if math.Abs(x-1) > ShareTolerance {
				f.Outside++
			}
		}
	}
	if f.MeanAdmitted == 0 {
		f.MinRatio, f.MaxRatio = 0, 0
	}
	always := make([]bool, len(clients))
	for i := range always {
		always[i] = true
	}
	for w := from; w+window <= to; w++ {
		n := 0
		for i, c := range clients {
			a, sent := 0, 0
			for t := w; t < w+window; t++ {
				r := s.At(t, c)
				a += r.Admitted
				sent += r.Offered - r.Overflow
			}
			if x := float64(a) / float64(sent); sent == 0 || x >= AllShare || x <= NoneShare {
				n++
			} else {
				always[i] = false
			}
		}
		x := float64(n) / float64(len(clients))
		f.Windows++
		f.MeanConsistent += x
		if x < f.WorstConsistent {
			f.WorstConsistent, f.WorstWindow = x, w
		}
		if x < ConsistentTarget {
			f.Under++
		}
	}
	f.MeanConsistent /= float64(f.Windows)
	if f.WorstWindow < 0 {
		f.WorstWindow = from
	}
	n := 0
	for _, ok := range always {
		if ok {
			n++
		}
	}
	f.AlwaysConsistent = float64(n) / float64(len(clients))
	if capacity > 0 && !math.IsInf(capacity, 0) {
		good := 0
		for t := from; t < to; t++ {
			good += s.At(t, len(s.Classes)).Goodput
		}
		f.GoodputOverCapacity = float64(good) / float64(to-from) / capacity
	}
	return f, true
}

// bounds is the spec's end (the run's duration when unset) and window
// (DefaultWindow when unset).
func (fs *FairnessSpec) bounds(duration time.Duration) (end, window time.Duration) {
	end, window = fs.End, fs.Window
	if end == 0 {
		end = duration
	}
	if window == 0 {
		window = DefaultWindow
	}
	return end, window
}

// fairnessSpan returns the spec's span in whole seconds of the run
// (scaled by the time factor k), its window in seconds (not scaled: it
// is the target's), and the indices of its clients.
func (sc *Scenario) fairnessSpan(k float64) (from, to, window int, clients []int) {
	fs := sc.Fairness
	end, w := fs.bounds(sc.Duration)
	sec := func(d time.Duration) int { return int(math.Round(float64(d) * k / float64(time.Second))) }
	// The window is the target's, not the schedule's: not scaled.
	from, to, window = sec(fs.Start), sec(end), int(w/time.Second)
	for i, c := range sc.Classes {
		if fs.Group == "" || c.Group == fs.Group {
			clients = append(clients, i)
		}
	}
	return from, to, window, clients
}

func (sc *Scenario) validateFairness(root *yaml.Node) error {
	fs := sc.Fairness
	if fs == nil {
		return nil
	}
	at := func(msg, key string) error { return sc.errAt(root, "fairness: "+msg, "fairness", key) }
	end, w := fs.bounds(sc.Duration)
	whole := func(d time.Duration) bool { return d%time.Second == 0 }
	switch {
	case fs.Start < 0 || !whole(fs.Start):
		return at(fmt.Sprintf("start %v: want whole seconds ≥ 0", fs.Start), "start")
	case !whole(end) || end > sc.Duration:
		return at(fmt.Sprintf("end %v: want whole seconds, at most the duration %v", end, sc.Duration), "end")
	case w <= 0 || !whole(w):
		return at(fmt.Sprintf("window %v: want whole seconds > 0", w), "window")
	case end-fs.Start < w:
		return at(fmt.Sprintf("the span %v–%v holds no %v window", fs.Start, end, w), "end")
	}
	if _, _, _, clients := sc.fairnessSpan(1); len(clients) < 2 {
		return at(fmt.Sprintf("group %q: fewer than two clients to compare", fs.Group), "group")
	}
	return nil
}

// writeFairness writes the Fairness table of summary.md.
func writeFairness(b *strings.Builder, sc *Scenario, peers []PeerSummary) {
	b.WriteString("\n## Fair share among the clients\n\n")
	fmt.Fprintf(b, "Over the seconds [from, to) of the run, by arrival second. **Spread**: each client's admitted requests against the clients' mean: the largest deviation (%% of the mean), min–max, and how many clients are outside ±%.0f%%. ", 100*ShareTolerance)
	fmt.Fprintf(b, "**Consistency**: in every window of W seconds starting a second apart, the fraction of clients admitted ≥ %.0f%% or ≤ %.0f%% of what they sent in it; the worst window (its start second), the windows under %.0f%% (of those judged), the mean over windows, and the clients all-or-nothing in every window. ", 100*AllShare, 100*NoneShare, 100*ConsistentTarget)
	b.WriteString("Goodput over the span against the capacity.\n\n")
	b.WriteString("| peer | seconds | clients | mean admitted (of sent) | max deviation | min–max / mean | outside ±10% | W | consistent, worst window | windows under target | mean | in every window | goodput / capacity |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range peers {
		f := p.Fairness
		if f == nil {
			continue
		}
		fmt.Fprintf(b, "| %s | %d–%d | %d | %.0f (%s) | **%s** | %.2f–%.2f | **%d** | %d s | **%s** (s %d) | %d of %d | %s | %s | %.2f |\n",
			p.Peer, f.From, f.To, f.Clients, f.MeanAdmitted, pct(f.MeanAdmittedFrac), pct(f.MaxDeviation), f.MinRatio, f.MaxRatio, f.Outside,
			f.Window, pct(f.WorstConsistent), f.WorstWindow, f.Under, f.Windows, pct(f.MeanConsistent), pct(f.AlwaysConsistent), f.GoodputOverCapacity)
	}
}

// String is the one-line form the runner prints.
func (f *Fairness) String() string {
	return fmt.Sprintf("clients %d, s %d–%d: share max deviation %s (%.2f–%.2f× the mean), %d outside ±%.0f%%; consistent (≥%.0f%% or ≤%.0f%% in a %d s window) worst %s (s %d), %d of %d windows under %.0f%%, mean %s, in every window %s; goodput %.2f× capacity",
		f.Clients, f.From, f.To, pct(f.MaxDeviation), f.MinRatio, f.MaxRatio, f.Outside, 100*ShareTolerance, 100*AllShare, 100*NoneShare, f.Window,
		pct(f.WorstConsistent), f.WorstWindow, f.Under, f.Windows, 100*ConsistentTarget, pct(f.MeanConsistent), pct(f.AlwaysConsistent), f.GoodputOverCapacity)
}
