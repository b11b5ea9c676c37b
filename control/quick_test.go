package control

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/internal/scripttest"
	"github.com/sentry-proxy/sentry/policy"
)

// quickSim is quick mode (`sentry run -listen -backend`: policy.FromFlags,
// auto mode, one class without a period, every default) in front of one
// backend of workers slots, FIFO beyond them, whose every request takes
// service and whose responses carry no Server-Timing (as e2e's test
// backend), on a manual clock with the App's loops ticked as the proxy's
// would be. clients closed-loop clients send together, wait for every
// answer (a refusal comes at once) and send again: one round each.
type quickSim struct {
	clients, workers int
	service          time.Duration
	// timing: responses carry Server-Timing (cpu and queue), as sim/farm's
	// do; else none, as e2e's test backend.
	timing bool

	a      *App
	ck     *manualClock
	flight atomic.Int64
}

func (s *quickSim) Healthy() int    { return 1 }
func (s *quickSim) Inflight() int64 { return s.flight.Load() }

// quickRound is what one round gave: admitted (over target among them),
// refused, and the state when it ended.
type quickRound struct {
	start          time.Duration
	admitted, over int
	refused        []admission.Verdict
	p, qNow        float64 // learned P, QNow (ms) at the round's end
	mode           admission.Mode
}

func newQuickSim(t *testing.T, clients, workers int, service time.Duration) *quickSim {
	t.Helper()
	s := &quickSim{clients: clients, workers: workers, service: service, ck: newClock()}
	snap, err := policy.FromFlags("127.0.0.1:1", []string{"127.0.0.1:2"}, "off")
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewManager(Options{Registerer: prometheus.NewRegistry(), Now: s.ck.now,
		CPU:    func() (time.Duration, error) { return 0, nil },
		Logger: hclog.New(&hclog.LoggerOptions{Output: &syncBuf{}, Level: hclog.Info})})
	if err != nil {
		t.Fatal(err)
	}
	m.noMonitor, m.noLoops = true, true
	t.Cleanup(m.Close)
	if s.a, err = m.Build(snap.Apps[0], s); err != nil {
		t.Fatal(err)
	}
	return s
}

// run plays rounds rounds.
func (s *quickSim) run(rounds int) []quickRound {
	start := s.ck.now()
	next := start // the next 50ms tick
	tickTo := func(to time.Time) {
		for !next.After(to) {
			s.ck.add(next.Sub(s.ck.now()))
			el := next.Sub(start)
			s.a.batch.Tick(next)
			if el%(250*time.Millisecond) == 0 {
				s.a.adp.Load().Tick(next)
			}
			if el%time.Second == 0 && el > 0 {
				s.a.tick(next, time.Second)
			}
			next = next.Add(50 * time.Millisecond)
		}
		s.ck.add(to.Sub(s.ck.now()))
	}
	key := []byte("/report")
	var out []quickRound
	for range rounds {
		now := s.ck.now()
		r := quickRound{start: now.Sub(start)}
		type job struct {
			tk      admission.Ticket
			inSvc   int
			end     time.Time
			waiting time.Duration
		}
		var jobs []job
		for range s.clients {
			S, bucket := s.a.Estimate(0, key, now)
			d := s.a.Admit(&admission.Request{Class: 0, Bucket: bucket, S: S, Key: key})
			if d.Verdict != admission.Admit {
				r.refused = append(r.refused, d.Verdict)
				continue
			}
			r.admitted++
			if d.OverTarget {
				r.over++
			}
			// FIFO on workers slots: the k-th request of a round (every
			// round starts on an empty backend) waits for k/workers
			// services.
			k := len(jobs)
			wait := time.Duration(k/s.workers) * s.service
			jobs = append(jobs, job{
				tk:    admission.Ticket{Class: 0, Key: key, S: S, Arrival: now, Mode: d.Mode, OverTarget: d.OverTarget},
				inSvc: k + 1, end: now.Add(wait + s.service), waiting: wait,
			})
			s.flight.Add(1)
		}
		slices.SortStableFunc(jobs, func(a, b job) int { return a.end.Compare(b.end) })
		for _, j := range jobs {
			tickTo(j.end)
			s.flight.Add(-1)
			res := admission.Result{Measured: j.end.Sub(j.tk.Arrival), InService: j.inSvc, End: j.end}
			if s.timing {
				res.ServerTiming = fmt.Appendf(nil, "cpu;dur=%d, queue;dur=%d", s.service.Milliseconds(), j.waiting.Milliseconds())
			}
			s.a.Done(&j.tk, res)
		}
		if len(jobs) == 0 {
			tickTo(now.Add(time.Second)) // every client refused: they come back after Retry-After
		}
		r.p = s.a.batch.Parallelism()
		r.qNow = float64(s.a.est.QNow()) / 1e6 // the estimator's: nothing is in flight between rounds
		r.mode = s.a.Mode()
		out = append(out, r)
	}
	return out
}

// TestQuickScripts runs testdata/quick-*.txt: quick mode on the manual
// clock (quickSim), round by round:
//
//	quick clients=N workers=W service=D rounds=R [timing]
//
// (timing: the responses carry Server-Timing)
// prints, per round, its start, what was admitted (over target among
// them) and refused, the learned parallelism P and the queue now (QNow)
// at its end, and the mode.
func TestQuickScripts(t *testing.T) {
	scripttest.RunAll(t, "testdata/quick-*.txt", func(t *testing.T, path string) scripttest.Exec {
		return func(line int, cmd string) []string {
			fields := strings.Fields(cmd)
			args := scripttest.Args(fields[1:])
			if fields[0] != "quick" {
				t.Fatalf("%s:%d: unknown command %q", path, line, fields[0])
			}
			num := func(k string) int {
				n, err := strconv.Atoi(args[k])
				if err != nil {
					t.Fatalf("%s:%d: %s: %v", path, line, k, err)
				}
				return n
			}
			svc, err := time.ParseDuration(args["service"])
			if err != nil {
				t.Fatalf("%s:%d: service: %v", path, line, err)
			}
			s := newQuickSim(t, num("clients"), num("workers"), svc)
			_, s.timing = args["timing"]
			var out []string
			for i, r := range s.run(num("rounds")) {
				refused := "-"
				if len(r.refused) > 0 {
					counts := map[admission.Verdict]int{}
					for _, v := range r.refused {
						counts[v]++
					}
					var parts []string
					for _, v := range admission.Verdicts() {
						if counts[v] > 0 {
							parts = append(parts, fmt.Sprintf("%s=%d", v, counts[v]))
						}
					}
					refused = strings.Join(parts, ",")
				}
				out = append(out, fmt.Sprintf("round=%d t=%v admitted=%d over=%d refused=%s P=%.2f qnow=%.0fms mode=%v",
					i, r.start, r.admitted, r.over, refused, r.p, r.qNow, r.mode))
			}
			return out
		}
	})
}
