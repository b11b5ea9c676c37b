package control

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/fairshare"
	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// fairSim is ctlSim's farm behind a whole App with many clients: each
// client an open-loop Poisson source of one class at its own rate(t),
// named by its own address (127.0.0.x, or X-Forwarded-For behind a
// trusted proxy), keyed as the pipeline keys it (fairshare.AddrKey). It
// records, per client and second, what it offered and what was admitted,
// and every admitted response's latency by client.
type fairSim struct {
	ctlSim
	clients []fairClient
	// yaml is the app's classes, sla and admission sections.
	yaml string
	per  [][]fairSecond // [client][second]
	lat  [][]time.Duration
	// keyed: the clients' keys are fixed (simKey) rather than hashed
	// with the process's seed, so that a run repeats exactly.
	keyed bool
	// stall, when its end is set, freezes the box for [stall[0],
	// stall[1]): the farm completes nothing (a job due in it completes
	// the stall's length later), and the load generator, sharing the
	// box, sends nothing; what it should have sent in the stall goes out
	// in a burst after it, compressed 10× (a generator that lags sends
	// its backlog as fast as it can). Both seen in a run of
	// e2e/scenarios/fairshare.yaml at 10× on 2 cores.
	stall [2]time.Duration
	// stallSend: the generator keeps sending through the stall (only
	// the farm is frozen: the mode refuses what it cannot serve, and the
	// admitted rate sinks).
	stallSend bool
}

// deliver is when an arrival due at el reaches the proxy: el, or, from
// the stall's start until the generator has caught up, b + (el − a)/10
// (a monotone map: the backlog first, in order, at 10× its rate).
func (s *fairSim) deliver(el time.Duration) time.Duration {
	if a, b := s.stall[0], s.stall[1]; b > 0 && el >= a && !s.stallSend {
		if d := b + (el-a)/10; d > el {
			return d
		}
	}
	return el
}

// simKey is splitmix64's finaliser: fixed keys spread like hashes.
func simKey(z uint64) uint64 {
	z += 0x9E3779B97F4A7C15
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

type fairClient struct {
	name  string
	addr  netip.Addr
	class int
	rate  func(t time.Duration) float64
}

// fairSecond is one client's second: what it offered, what was
// admitted, what was refused over_share, and how many of its requests
// the filter gave the marginal tier.
type fairSecond struct{ offered, admitted, overShare, marginal int }

// fairApp is one app with classes, SLA and admission given in yaml, every
// other key at its default, as a policy file gives it.
func fairApp(t testing.TB, yaml string) *policy.App {
	t.Helper()
	src := "apps:\n  - name: sim\n    listen: 127.0.0.1:1\n    backends: {static: [\"127.0.0.1:2\"]}\n" + yaml
	snap, err := policy.Parse("sim.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return snap.Apps[0]
}

// oneClass is the setup: one class, nothing tuned, SLA p95
// 100 ms, in mode, with extra admission keys.
func oneClass(mode, extra string) string {
	return fmt.Sprintf(`    classes: [{name: web, default: true}]
    sla: {percentile: 95, targets: [{target: 100ms}]}
    admission: {mode: %s%s}
`, mode, extra)
}

func newFairSim(t *testing.T, s *fairSim) {
	t.Helper()
	s.ck = newClock()
	s.logs = &syncBuf{}
	m, err := NewManager(Options{Registerer: prometheus.NewRegistry(), Now: s.ck.now,
		CPU:    func() (time.Duration, error) { return 0, nil },
		Logger: hclog.New(&hclog.LoggerOptions{Output: s.logs, Level: hclog.Info})})
	if err != nil {
		t.Fatal(err)
	}
	m.noMonitor, m.noLoops = true, true
	draw := rand.New(rand.NewPCG(3, 4))
	m.fairRand = draw.Uint32
	t.Cleanup(m.Close)
	s.srv = make([]ctlServer, s.servers)
	s.healthy.Store(int64(s.servers))
	if s.a, err = m.Build(fairApp(t, s.yaml), s); err != nil {
		t.Fatal(err)
	}
}

// farm1200 is the farm: 3 servers × 4 slots × 10 ms, 1,200
// requests a second.
const farm1200 = 1200.0

func fixed10ms(*rand.Rand, int, time.Duration) time.Duration { return 10 * time.Millisecond }

// run simulates length with seed: arrivals of every client merged in time
// order, the App's loops ticked on the manual clock (batch every 50 ms,
// the fair-share table every 100 ms, adaptive every 250 ms, the monitor
// every second).
func (s *fairSim) run(t *testing.T, length time.Duration, seed uint64) {
	t.Helper()
	arr := rand.New(rand.NewPCG(seed, 1))
	svc := rand.New(rand.NewPCG(seed, 2))
	start := s.ck.now()
	secs := int(length / time.Second)
	s.secs = make([]ctlSecond, secs)
	s.per = make([][]fairSecond, len(s.clients))
	s.lat = make([][]time.Duration, len(s.clients))
	for i := range s.per {
		s.per[i] = make([]fairSecond, secs)
	}
	// The keys as the pipeline makes them (fairshare.AddrKey) are seeded
	// per process; a simulation takes fixed ones of the same spread, so
	// that a run repeats.
	keys := make([]uint64, len(s.clients))
	for i, c := range s.clients {
		keys[i] = fairshare.AddrKey(c.addr, 64)
		if s.keyed {
			keys[i] = simKey(uint64(i) + 1)
		}
	}
	path := []byte("/search")
	next50 := start
	tickTo := func(to time.Time) {
		for !next50.After(to) {
			s.ck.add(next50.Sub(s.ck.now()))
			el := next50.Sub(start)
			s.a.batch.Tick(next50)
			if el%(100*time.Millisecond) == 0 {
				if ft := s.a.fair.Load(); ft != nil {
					ft.Tick(next50)
					if s.dbg != nil {
						s.dbg(el)
					}
				}
			}
			if el%(250*time.Millisecond) == 0 {
				s.a.adp.Load().Tick(next50)
			}
			if el%time.Second == 0 && el > 0 {
				s.a.tick(next50, time.Second)
				if i := int(el/time.Second) - 1; i < len(s.secs) {
					s.secs[i].mode = s.a.Mode()
				}
			}
			next50 = next50.Add(50 * time.Millisecond)
		}
	}
	complete := func(upTo time.Time) {
		for s.events.Len() > 0 && !s.events[0].at.After(upTo) {
			ev := heap.Pop(&s.events).(ctlEvent)
			if a, b := start.Add(s.stall[0]), start.Add(s.stall[1]); s.stall[1] > 0 && !ev.at.Before(a) && ev.at.Before(b) {
				// Frozen: it completes the stall's length later.
				s.seq++
				heap.Push(&s.events, ctlEvent{at: ev.at.Add(b.Sub(a)), seq: s.seq, job: ev.job})
				continue
			}
			tickTo(ev.at)
			s.ck.add(ev.at.Sub(s.ck.now()))
			if ev.job.gone {
				continue
			}
			s.finish(ev.job, ev.at, start)
			s.lat[ev.job.client] = append(s.lat[ev.job.client], ev.at.Sub(ev.job.tk.Arrival))
		}
	}
	// Each client's next arrival; rates are piecewise constant per 100 ms
	// step, so a client's gap is drawn at its rate when it is drawn.
	nextAt := make([]time.Duration, len(s.clients))
	draw := func(i int, from time.Duration) time.Duration {
		for from < length {
			r := s.clients[i].rate(from)
			step := (from/(100*time.Millisecond) + 1) * 100 * time.Millisecond
			if r <= 0 {
				from = step
				continue
			}
			gap := time.Duration(arr.ExpFloat64() / r * 1e9)
			if from+gap < step {
				return from + gap
			}
			from = step // memoryless: redraw at the next step's rate
		}
		return length
	}
	for i := range s.clients {
		nextAt[i] = draw(i, 0)
	}
	for {
		i := 0
		for j := range nextAt {
			if nextAt[j] < nextAt[i] {
				i = j
			}
		}
		due := nextAt[i]
		if due >= length {
			break
		}
		nextAt[i] = draw(i, due)
		el := s.deliver(due)
		now := start.Add(el)
		complete(now)
		tickTo(now)
		s.ck.add(now.Sub(s.ck.now()))
		sec := int(el / time.Second)
		c := &s.clients[i]
		s.secs[sec].offered++
		s.per[i][sec].offered++
		S, bucket := s.a.Estimate(c.class, path, now)
		r := admission.Request{Class: c.class, Bucket: bucket, S: S, Key: path, Client: keys[i], Addr: c.addr}
		d := s.a.Admit(&r)
		if d.Verdict == admission.RejectOverShare {
			s.per[i][sec].overShare++
		}
		if r.Share == admission.Marginal {
			s.per[i][sec].marginal++
		}
		if d.Verdict != admission.Admit {
			continue
		}
		s.secs[sec].admitted++
		s.per[i][sec].admitted++
		if d.OverTarget {
			s.secs[sec].over++
		}
		s.dispatch(&ctlJob{client: i, tk: admission.Ticket{Class: c.class, Key: path, S: S, Arrival: now, Mode: d.Mode, OverTarget: d.OverTarget}}, now, svc, el)
	}
	complete(start.Add(length))
	tickTo(start.Add(length))
}

// admitted is client i's admitted share of its offered requests over
// seconds [from, to).
func (s *fairSim) admitted(i, from, to int) (adm, off int) {
	for _, x := range s.per[i][from:to] {
		adm += x.admitted
		off += x.offered
	}
	return
}

// p95 of client i's admitted requests (all of the run).
func (s *fairSim) clientP95(i int) time.Duration {
	l := slices.Clone(s.lat[i])
	if len(l) == 0 {
		return 0
	}
	slices.Sort(l)
	return l[int(math.Ceil(0.95*float64(len(l))))-1]
}

// goodput is the responses within the target per second over seconds
// [from, to), as a fraction of capacity.
func (s *fairSim) goodput(from, to int, capacity float64) float64 {
	g := 0
	for _, x := range s.secs[from:to] {
		g += x.good
	}
	return float64(g) / float64(to-from) / capacity
}

func loopback(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, 0, byte(i / 250), byte(2 + i%250)})
}

func steady(r float64) func(time.Duration) float64 { return func(time.Duration) float64 { return r } }

// floodCase: five polite clients at 0.1× capacity each and one flood at
// mult× capacity, one class, the farm, in mode.
func floodCase(mode string, mult float64) *fairSim {
	s := &fairSim{ctlSim: ctlSim{servers: 3, slots: 4, target: 100 * time.Millisecond, service: fixed10ms}, keyed: true, yaml: oneClass(mode, "")}
	for i := range 5 {
		s.clients = append(s.clients, fairClient{name: fmt.Sprintf("polite%d", i+1), addr: loopback(i + 1), rate: steady(0.1 * farm1200)})
	}
	s.clients = append(s.clients, fairClient{name: "flood", addr: loopback(0), rate: steady(mult * farm1200)})
	return s
}

var fairModes = []string{"batch", "threshold", "adaptive", "auto"}

// TestFairFlood: a flood at 5× and 10× capacity beside five polite
// clients at 0.1× each (the setup), in every mode: the polite
// clients are admitted ≥ 99% with their p95 within the 100 ms target,
// and the farm's goodput is ≥ 0.95× its capacity; the flood gets what is
// left. The first 2 s (before the rates are known) are left out.
func TestFairFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation")
	}
	for _, mode := range fairModes {
		for _, mult := range []float64{5, 10} {
			t.Run(fmt.Sprintf("%s-%gx", mode, mult), func(t *testing.T) {
				s := floodCase(mode, mult)
				newFairSim(t, s)
				const length = 20
				s.run(t, length*time.Second, 7)
				polAdm, polOff := 0, 0
				var worst time.Duration
				for i := range 5 {
					a, o := s.admitted(i, 2, length)
					polAdm, polOff = polAdm+a, polOff+o
					worst = max(worst, s.clientP95(i))
				}
				fa, fo := s.admitted(5, 2, length)
				good := s.goodput(2, length, farm1200)
				share := float64(polAdm) / float64(polOff)
				t.Logf("polite admitted %.2f%% (%d/%d), worst polite p95 %v; flood %.1f%% (%d/%d); goodput %.3f× capacity",
					100*share, polAdm, polOff, worst, 100*float64(fa)/float64(fo), fa, fo, good)
				if share < 0.99 {
					t.Errorf("polite admitted %.2f%%, want ≥ 99%%\n%s", 100*share, s.table(0, length))
				}
				if worst > s.target {
					t.Errorf("a polite client's p95 %v, want ≤ %v", worst, s.target)
				}
				if good < 0.95 {
					t.Errorf("goodput %.3f× capacity, want ≥ 0.95\n%s", good, s.table(0, length))
				}
			})
		}
	}
}

// TestFairFloodWithoutSharing: the same flood with fair_share off, the
// issue's finding: the polite clients are shed in the flood's proportion.
func TestFairFloodWithoutSharing(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation")
	}
	s := floodCase("batch", 5)
	s.yaml = oneClass("batch", ", fair_share: {enabled: false}")
	newFairSim(t, s)
	s.run(t, 10*time.Second, 7)
	polAdm, polOff := 0, 0
	for i := range 5 {
		a, o := s.admitted(i, 2, 10)
		polAdm, polOff = polAdm+a, polOff+o
	}
	share := float64(polAdm) / float64(polOff)
	t.Logf("polite admitted %.1f%% without fair sharing", 100*share)
	if share > 0.5 {
		t.Errorf("polite admitted %.1f%% without fair sharing; the case no longer shows the problem", 100*share)
	}
}

// equalCase: n clients of equal demand, mult× capacity in total.
func equalCase(mode string, n int, mult float64, rotate time.Duration) *fairSim {
	s := &fairSim{ctlSim: ctlSim{servers: 3, slots: 4, target: 100 * time.Millisecond, service: fixed10ms}, keyed: true,
		yaml: oneClass(mode, fmt.Sprintf(", fair_share: {rotate: %v}", rotate))}
	for i := range n {
		s.clients = append(s.clients, fairClient{name: fmt.Sprintf("c%d", i), addr: loopback(i), rate: steady(mult * farm1200 / float64(n))})
	}
	return s
}

// TestFairEqualShares: 100 clients of equal demand at 3× capacity in
// total, in every mode: over a rotation period (2 min here) each
// client's admitted share -- its admitted requests over the mean
// client's -- is within ±10% of the mean. Each client's turn is the
// fraction f/rate of a rotation, rate its own measured demand, so every
// client is admitted at the fair level f over the period (doc.go, Turns).
// (Admitted over offered differs by each client's own Poisson demand.)
func TestFairEqualShares(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation")
	}
	for _, mode := range fairModes {
		t.Run(mode, func(t *testing.T) {
			s := equalCase(mode, 100, 3, 2*time.Minute)
			newFairSim(t, s)
			// One rotation to settle (the turns given when sharing starts
			// are cut where they began), then one to judge.
			const from, to = 125, 245
			s.run(t, to*time.Second, 5)
			adm := make([]float64, len(s.clients))
			var mean, ratio float64
			for i := range s.clients {
				a, o := s.admitted(i, from, to)
				adm[i] = float64(a)
				mean += adm[i] / float64(len(adm))
				ratio += float64(a) / float64(o) / float64(len(adm))
			}
			lo, hi := slices.Min(adm), slices.Max(adm)
			out := 0
			for _, x := range adm {
				if math.Abs(x-mean) > 0.1*mean {
					out++
				}
			}
			good := s.goodput(from, to, farm1200)
			t.Logf("mean admitted %.0f requests (%.1f%% of offered), min %.0f (%.3f×), max %.0f (%.3f×), %d of %d outside ±10%%; goodput %.3f× capacity",
				mean, 100*ratio, lo, lo/mean, hi, hi/mean, out, len(adm), good)
			if out > 0 {
				t.Errorf("%d clients outside ±10%% of the mean admitted %.0f (min %.0f, max %.0f)", out, mean, lo, hi)
			}
			if good < 0.95 {
				t.Errorf("goodput %.3f× capacity, want ≥ 0.95", good)
			}
		})
	}
}

// consistent counts, over every 10 s window in [from, to), the share of
// clients admitted ≥ 95% or ≤ 5% of their requests; it returns the worst.
func (s *fairSim) consistent(from, to int) (worst float64, at int) {
	worst = 1
	for w := from; w+10 <= to; w++ {
		ok := 0
		for i := range s.clients {
			a, o := s.admitted(i, w, w+10)
			if o == 0 {
				ok++
				continue
			}
			if x := float64(a) / float64(o); x >= 0.95 || x <= 0.05 {
				ok++
			}
		}
		if x := float64(ok) / float64(len(s.clients)); x < worst {
			worst, at = x, w
		}
	}
	return worst, at
}

// TestFairConsistent: during a steady 3× overload of 100 equal clients,
// in every mode, at least 90% of the clients are admitted ≥ 95% or ≤ 5%
// of the time over any 10 s window (the default rotation, 10 min): an
// admitted client stays admitted (DAGOR's user priority).
func TestFairConsistent(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation")
	}
	for _, mode := range fairModes {
		t.Run(mode, func(t *testing.T) {
			s := equalCase(mode, 100, 3, fairshare.DefaultRotate)
			newFairSim(t, s)
			const from, to = 5, 35
			s.run(t, to*time.Second, 9)
			worst, at := s.consistent(from, to)
			good := s.goodput(from, to, farm1200)
			t.Logf("worst 10 s window (from s=%d): %.0f%% of clients all-or-nothing; goodput %.3f× capacity", at, 100*worst, good)
			if worst < 0.9 {
				t.Errorf("in the window from s=%d only %.0f%% of clients were admitted ≥ 95%% or ≤ 5%%, want ≥ 90%%", at, 100*worst)
			}
			if good < 0.95 {
				t.Errorf("goodput %.3f× capacity, want ≥ 0.95", good)
			}
		})
	}
}

// TestFairConsistentFarm600: e2e/scenarios/fair100.yaml simulated, a
// farm of 3 × 2 slots × 10 ms (600/s) and 100 clients at 18/s each, for
// 400 s of the default rotation: in every 10 s window from 10 s on, at
// least 90% of the clients are all-or-nothing, and the marginal tier,
// ranked (fairshare's doc, Turns), is held by at most 5 clients a
// second: what the mode refuses of it falls on its last ranks, not
// spread over every client it goes to (docs/performance.md). Batch
// (auto, the default) and threshold mode; adaptive mode does not rank
// its marginal tier.
func TestFairConsistentFarm600(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation")
	}
	for _, mode := range []string{"auto", "threshold"} {
		t.Run(mode, func(t *testing.T) {
			s := &fairSim{ctlSim: ctlSim{servers: 3, slots: 2, target: 100 * time.Millisecond, service: fixed10ms}, keyed: true,
				yaml: oneClass(mode, "")}
			for i := range 100 {
				s.clients = append(s.clients, fairClient{name: fmt.Sprintf("c%d", i), addr: loopback(i), rate: steady(18)})
			}
			newFairSim(t, s)
			const from, to = 10, 400
			s.run(t, to*time.Second, 7)
			var under []int
			var sum float64
			for w := from; w+10 <= to; w++ {
				ok := 0
				for i := range s.clients {
					a, o := s.admitted(i, w, w+10)
					if x := float64(a) / float64(o); o == 0 || x >= 0.95 || x <= 0.05 {
						ok++
					}
				}
				x := float64(ok) / float64(len(s.clients))
				sum += x
				if x < 0.9 {
					under = append(under, w)
				}
			}
			worst, at := s.consistent(from, to)
			marg := 0
			for i := range s.clients {
				for _, x := range s.per[i][from:to] {
					if x.marginal > 0 {
						marg++
					}
				}
			}
			perSec := float64(marg) / float64(to-from)
			good := s.goodput(from, to, 600)
			t.Logf("worst window %.0f%% (from s=%d), mean %.1f%%, windows under 90%%: %v; the marginal tier held by %.1f clients a second; goodput %.3f× capacity",
				100*worst, at, 100*sum/float64(to-from-9), under, perSec, good)
			if len(under) > 0 {
				t.Errorf("%d windows with fewer than 90%% of the clients all-or-nothing (from s=%v)", len(under), under)
			}
			if perSec > 5 {
				t.Errorf("the marginal tier held by %.1f clients a second, want at most 5", perSec)
			}
			if good < 0.95 {
				t.Errorf("goodput %.3f× capacity, want ≥ 0.95", good)
			}
		})
	}
}

// TestFairHeavyTail: 60 clients whose demands follow a Pareto law (shape
// 1.2, the largest many times the median), 3× capacity in total, in every
// mode. Max-min fairness over a rotation (2 min here): the clients below
// the fair level f are admitted whole (≥ 99%), and each client above it
// is admitted at about f (within ±30%: turns of clients of different
// rates overlap, the budget cuts the one nearest its turn's end, and the
// marginal tier, what the turns leave, falls to the clients just past
// their turns, which puts a few at 0.73-1.23× f over one rotation). The
// farm stays at capacity.
func TestFairHeavyTail(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation")
	}
	const n = 60
	r := rand.New(rand.NewPCG(21, 22))
	rates := make([]float64, n)
	var sum float64
	for i := range rates {
		rates[i] = math.Pow(1-r.Float64(), -1/1.2) // Pareto, x_m = 1
		sum += rates[i]
	}
	for i := range rates {
		rates[i] *= 3 * farm1200 / sum
	}
	sorted := slices.Sorted(slices.Values(rates))
	var f float64
	{
		left := farm1200
		f = math.Inf(1)
		for i, x := range sorted {
			if share := left / float64(n-i); x > share {
				f = share
				break
			}
			left -= x
		}
	}
	for _, mode := range fairModes {
		t.Run(mode, func(t *testing.T) {
			s := &fairSim{ctlSim: ctlSim{servers: 3, slots: 4, target: 100 * time.Millisecond, service: fixed10ms}, keyed: true,
				yaml: oneClass(mode, ", fair_share: {rotate: 2m}")}
			for i, x := range rates {
				s.clients = append(s.clients, fairClient{name: fmt.Sprintf("c%d", i), addr: loopback(i), rate: steady(x)})
			}
			newFairSim(t, s)
			const from, to = 125, 245
			s.run(t, to*time.Second, 23)
			secs := float64(to - from)
			under, over, bad := 0, 0, 0
			var worstUnder float64 = 1
			var lo, hi float64 = math.Inf(1), 0
			for i, x := range rates {
				a, o := s.admitted(i, from, to)
				switch {
				case x < 0.9*f:
					under++
					share := float64(a) / float64(o)
					worstUnder = min(worstUnder, share)
					if share < 0.99 {
						bad++
						t.Errorf("client %d at %.1f/s (below f = %.1f/s) admitted %.1f%%", i, x, f, 100*share)
					}
				case x > 1.1*f:
					over++
					got := float64(a) / secs
					lo, hi = min(lo, got/f), max(hi, got/f)
					if math.Abs(got-f) > 0.3*f {
						bad++
						t.Errorf("client %d at %.1f/s (above f = %.1f/s) admitted %.1f/s, want f ±30%%", i, x, f, got)
					}
				}
			}
			good := s.goodput(from, to, farm1200)
			t.Logf("f = %.1f/s; %d clients below it, worst admitted %.2f%%; %d above it, admitted %.2f–%.2f× f; goodput %.3f× capacity",
				f, under, 100*worstUnder, over, lo, hi, good)
			if good < 0.95 {
				t.Errorf("goodput %.3f× capacity, want ≥ 0.95", good)
			}
		})
	}
}

// TestFairRising: five polite clients at 0.1× capacity and one that is
// polite too, then floods at 5× for 10 s, then is polite again, in every
// mode. The polite clients stay admitted ≥ 99% throughout (the flood's
// first requests count as over share within the tick they arrive in),
// and the riser is admitted whole again within 5 s of calming down.
func TestFairRising(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation")
	}
	for _, mode := range fairModes {
		t.Run(mode, func(t *testing.T) {
			s := floodCase(mode, 5)
			s.clients[5].rate = func(el time.Duration) float64 {
				if el >= 10*time.Second && el < 20*time.Second {
					return 5 * farm1200
				}
				return 0.1 * farm1200
			}
			newFairSim(t, s)
			const length = 35
			s.run(t, length*time.Second, 31)
			polAdm, polOff := 0, 0
			for i := range 5 {
				a, o := s.admitted(i, 0, length)
				polAdm, polOff = polAdm+a, polOff+o
			}
			share := float64(polAdm) / float64(polOff)
			ra, ro := s.admitted(5, 25, length)
			fa, fo := s.admitted(5, 10, 20)
			t.Logf("polite admitted %.2f%%; the riser %.1f%% while flooding, %.2f%% from 5 s after", 100*share, 100*float64(fa)/float64(fo), 100*float64(ra)/float64(ro))
			if share < 0.99 {
				t.Errorf("polite admitted %.2f%%, want ≥ 99%%\n%s", 100*share, s.table(0, length))
			}
			if x := float64(ra) / float64(ro); x < 0.99 {
				t.Errorf("the riser admitted %.2f%% from 5 s after it calmed down, want ≥ 99%%", 100*x)
			}
			if g := s.goodput(11, 20, farm1200); g < 0.95 {
				t.Errorf("goodput while it floods %.3f× capacity, want ≥ 0.95", g)
			}
		})
	}
}

// TestFairBehindProxy: the flood case with every client behind one
// trusted proxy (10.0.0.1), each named by the X-Forwarded-For it adds, the
// key the pipeline makes of it (pipeline.ClientFromXFF after
// trusted_proxies, then fairshare.AddrKey). Untrusted, the proxy is one
// client and the polite clients share its fate.
func TestFairBehindProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation")
	}
	proxy := netip.MustParseAddr("10.0.0.1")
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	for _, tc := range []struct {
		name    string
		trusted []netip.Prefix
		min     float64 // polite admitted at least
		max     float64 // and at most
	}{
		{"trusted", trusted, 0.99, 1},
		{"untrusted", nil, 0, 0.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := floodCase("auto", 5)
			s.keyed = false
			for i := range s.clients {
				// As the engines resolve it: X-Forwarded-For only from a
				// trusted peer (pipeline.App.TrustedPeer, ClientAddr).
				if pipeline.Trusted(tc.trusted, proxy) {
					xff := []byte(s.clients[i].addr.String())
					s.clients[i].addr = pipeline.ClientFromXFF(tc.trusted, proxy, xff)
				} else {
					s.clients[i].addr = proxy
				}
			}
			newFairSim(t, s)
			const length = 15
			s.run(t, length*time.Second, 41)
			polAdm, polOff := 0, 0
			for i := range 5 {
				a, o := s.admitted(i, 2, length)
				polAdm, polOff = polAdm+a, polOff+o
			}
			share := float64(polAdm) / float64(polOff)
			t.Logf("polite admitted %.2f%%", 100*share)
			if share < tc.min || share > tc.max {
				t.Errorf("polite admitted %.2f%%, want %.0f%%–%.0f%%", 100*share, 100*tc.min, 100*tc.max)
			}
		})
	}
}

// goldBronze is gold (ten clients, 0.8× capacity together, /gold/) beside
// five polite bronze clients (0.02× each) and, at flood× capacity, one
// flooding bronze client, in mode.
func goldBronze(mode string, flood float64, fair bool) *fairSim {
	s := &fairSim{ctlSim: ctlSim{servers: 3, slots: 4, target: 100 * time.Millisecond, service: fixed10ms}, keyed: true,
		yaml: fmt.Sprintf(`    classes:
      - {name: gold, rules: [{path_prefix: /gold/}]}
      - {name: bronze, default: true}
    sla: {percentile: 95, targets: [{target: 100ms}]}
    admission: {mode: %s, fair_share: {enabled: %v}}
`, mode, fair)}
	for i := range 10 {
		s.clients = append(s.clients, fairClient{name: fmt.Sprintf("gold%d", i), addr: loopback(i), class: 0, rate: steady(0.08 * farm1200)})
	}
	for i := range 5 {
		s.clients = append(s.clients, fairClient{name: fmt.Sprintf("bronze%d", i), addr: loopback(10 + i), class: 1, rate: steady(0.02 * farm1200)})
	}
	if flood > 0 {
		s.clients = append(s.clients, fairClient{name: "flood", addr: loopback(20), class: 1, rate: steady(flood * farm1200)})
	}
	return s
}

// TestFairGoldInBronzeFlood: fair sharing keeps classes in order. Gold
// beside a bronze flood from one client at 10× and five polite bronze
// clients, in every mode: gold is admitted whole, and the polite bronze
// clients get within two points (three in adaptive mode) of what they
// get with no flood and no fair sharing at all -- less than 100%: gold's
// reserve holds bronze back (about 83% in batch mode with this mix).
// Over these four seeds the flood costs them 1.5 points in batch mode,
// 1.9 in threshold mode and 2.7 in adaptive mode (the room the mode holds
// for them is a rate, and the controllers' paths part in the first
// seconds, while the class's capacity is learned). The polite bronze share is
// the mean of four seeds (one seed's share spreads over 76-86% in batch
// mode, and its cost of the flood by half a point either way), gold's the
// worst of them. Judged from 5 s on, and from 10 s in adaptive mode: it
// starts at its highest rate, admits the flood's first second whole, and
// its controller takes some seconds to recover, fair sharing or not (from
// 5 s the polite bronze clients lose 6 points to the flood). And fair
// sharing never makes them worse off: with no flood, sharing on admits
// them as sharing off does (within a point).
// The reserve's refusals (rejected_priority) say when gold bursts, not
// what bronze can carry between its bursts; followed, they sank the
// class's capacity burst by burst (74% against 83% in batch, threshold
// and auto modes).
func TestFairGoldInBronzeFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation")
	}
	const length = 20
	for _, mode := range fairModes {
		t.Run(mode, func(t *testing.T) {
			from := 5
			if mode == "adaptive" {
				from = 10
			}
			share := func(s *fairSim, lo, hi int) float64 {
				adm, off := 0, 0
				for i := lo; i < hi; i++ {
					a, o := s.admitted(i, from, length)
					adm, off = adm+a, off+o
				}
				return float64(adm) / float64(off)
			}
			const seeds = 4 // the comment above: one seed reads by chance
			gold := 1.0
			var bronze, alone, calmShare, floodShare, good float64
			for seed := range uint64(seeds) {
				run := func(flood float64, fair bool) *fairSim {
					s := goldBronze(mode, flood, fair)
					newFairSim(t, s)
					s.run(t, length*time.Second, 51+seed)
					return s
				}
				calm, calmFair, s := run(0, false), run(0, true), run(10, true)
				gold = min(gold, share(s, 0, 10))
				bronze += share(s, 10, 15) / seeds
				alone += share(calm, 10, 15) / seeds
				calmShare += share(calmFair, 10, 15) / seeds
				floodShare += share(s, 15, 16) / seeds
				good += s.goodput(from, length, farm1200) / seeds
			}
			t.Logf("gold admitted %.2f%% (worst of %d runs), polite bronze %.2f%% (without the flood: %.2f%%; with fair sharing on %.2f%%), the flood %.2f%%; goodput %.3f× capacity",
				100*gold, seeds, 100*bronze, 100*alone, 100*calmShare, 100*floodShare, good)
			if gold < 0.999 {
				t.Errorf("gold admitted %.2f%%, want 100%%", 100*gold)
			}
			slack := 0.02
			if mode == "adaptive" {
				slack = 0.03
			}
			if bronze < alone-slack {
				t.Errorf("polite bronze admitted %.2f%% beside the flood, %.2f%% without it: the flood took their share", 100*bronze, 100*alone)
			}
			if calmShare < alone-0.01 {
				t.Errorf("polite bronze admitted %.2f%% with fair sharing on, %.2f%% with it off (no flood): sharing made them worse off", 100*calmShare, 100*alone)
			}
			if good < 0.9 {
				t.Errorf("goodput %.3f× capacity, want ≥ 0.9", good)
			}
		})
	}
}

// TestFairStall: the 10× flood case through a stall of the box it runs
// on, in every mode, as seen in a run of e2e/scenarios/fairshare.yaml on
// 2 cores: the farm frozen for 1.5 s (its jobs finish that much later),
// and either the load generator frozen with it (its arrivals of the
// stall sent in a burst after it) or still sending (the mode refuses
// what the frozen farm cannot serve, and the class's admitted rate
// sinks). A polite client is within its share throughout: its share is
// judged by the capacity the class held over the last seconds, not by
// the dip, and its burst fits its bucket. So no polite request is ever
// refused as over_share, and from a second after the stall the polite
// clients are admitted ≥ 99%. (The farm's own refusals in the stall are
// the mode's: nothing waits 1.5 s within a 100 ms SLA.) Without the fix
// the polite clients were over their share for up to 2 s after the
// stall: 220-390 over_share refusals.
func TestFairStall(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation")
	}
	for _, send := range []bool{false, true} {
		for _, mode := range fairModes {
			name := mode + "-box"
			if send {
				name = mode + "-farm"
			}
			t.Run(name, func(t *testing.T) {
				s := floodCase(mode, 10)
				s.stall = [2]time.Duration{8 * time.Second, 9500 * time.Millisecond}
				s.stallSend = send
				newFairSim(t, s)
				const length = 16
				s.run(t, length*time.Second, 7)
				over, adm, off := 0, 0, 0
				for i := range 5 {
					for _, x := range s.per[i] {
						over += x.overShare
					}
					a, o := s.admitted(i, 11, length)
					adm, off = adm+a, off+o
				}
				share := float64(adm) / float64(off)
				good := s.goodput(10, length, farm1200)
				t.Logf("polite: %d over_share refusals, admitted %.2f%% from 1 s after the stall; goodput %.3f× capacity from its end", over, 100*share, good)
				if over > 0 {
					t.Errorf("%d polite requests refused as over_share\n%s", over, s.table(5, length))
				}
				if share < 0.99 {
					t.Errorf("polite admitted %.2f%% from 1 s after the stall, want ≥ 99%%", 100*share)
				}
				// The capacity the filter shares is not forgotten while
				// nothing arrives (without that: 0.93 in the box's stall).
				// Adaptive mode's own rate takes longer to regain after
				// the 1.5 s the farm answered nothing (its recovery, not
				// fair sharing's): logged only.
				if mode != "adaptive" && good < 0.94 {
					t.Errorf("goodput %.3f× capacity from the stall's end, want ≥ 0.94\n%s", good, s.table(5, length))
				}
			})
		}
	}
}
