package batchac

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/admission"
)

// BenchmarkPolicerRound measures one policer run over 3 classes × 8 buckets
// with perBucket requests queued in each (384 in all): the O(b·L) tests plus
// the O(β) decision delivery. Each iteration queues the waiters (no
// goroutines: the pooled structs are pushed directly), runs Tick and
// receives every decision.
func BenchmarkPolicerRound(b *testing.B) {
	for _, tc := range []struct {
		name     string
		n        int
		inflight int64
	}{
		{"admit-all", 64, 0},    // every bucket passes in one test
		{"overload", 4, 16},     // buckets split: prefix scans and rejections
		{"cascade", 4, 1 << 20}, // C1 fails, C2 and C3 are rejected untested
	} {
		b.Run(tc.name, func(b *testing.B) {
			const classes, buckets, perBucket = 3, 8, 16
			st := newFakeState(tc.n, tc.inflight, time.Millisecond, time.Second)
			clock := &manualClock{t: time.Unix(0, 0)}
			cfg := Config{Buckets: buckets, QueueCap: perBucket, Now: clock.Now}
			for _, name := range []string{"gold", "silver", "bronze"} {
				cfg.Classes = append(cfg.Classes, ClassConfig{Name: name, Period: 10 * time.Millisecond})
			}
			c, err := New(st, cfg)
			if err != nil {
				b.Fatal(err)
			}
			ws := make([]*waiter, 0, classes*buckets*perBucket)
			qs := make([]*queue, 0, cap(ws))
			for _, cl := range c.snap.Load().classes {
				for bi, q := range cl.queues {
					for range perBucket {
						w := &waiter{ch: make(chan admission.Decision, 1), s: float64(time.Duration(1+bi) * 4 * time.Millisecond)}
						ws = append(ws, w)
						qs = append(qs, q)
					}
				}
			}
			var verdicts [maxVerdicts]int
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				for i, w := range ws {
					qs[i].push(w)
				}
				clock.Advance(10 * time.Millisecond)
				c.Tick(clock.Now())
				for _, w := range ws {
					d := <-w.ch
					verdicts[d.Verdict]++
					if d.Verdict == admission.Admit {
						c.pending.Add(-1)
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ws)), "ns/request")
			b.ReportMetric(float64(verdicts[admission.Admit])/float64(b.N*len(ws)), "admitted/request")
		})
	}
}

// BenchmarkAdmitQueued measures the per-request cost of queueing, parking,
// being released by a policer run and returning, with many parallel Admit
// callers and a policer that ticks as fast as it can (period 1ns).
func BenchmarkAdmitQueued(b *testing.B) {
	st := newFakeState(4, 0, 0, time.Second)
	c, err := New(st, Config{Classes: []ClassConfig{{Name: "gold", Period: time.Nanosecond}}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			c.Tick(time.Now())
			runtime.Gosched()
		}
	}()
	b.SetParallelism(8)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := &admission.Request{S: time.Millisecond, Gone: make(chan struct{})}
		for pb.Next() {
			if c.Admit(req).Verdict != admission.Admit {
				b.Error("rejected")
				return
			}
		}
	})
	b.StopTimer()
	stop.Store(true)
	<-done
}

// BenchmarkAdmitImmediate measures the d = 0 path: one synchronous test.
func BenchmarkAdmitImmediate(b *testing.B) {
	st := newFakeState(4, 0, 0, time.Second)
	c, err := New(st, Config{Classes: []ClassConfig{{Name: "gold"}, {Name: "silver"}}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := &admission.Request{Class: 1, S: time.Millisecond}
		for pb.Next() {
			c.Admit(req)
		}
	})
}
