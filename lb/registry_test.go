package lb

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestRegistryKeepsStateAcrossReload(t *testing.T) {
	var r Registry
	al := newAttachLog()
	clk := newClock()
	opts := Options{Failures: 2, Cooldown: time.Minute, Now: clk.Now, Attach: al.attach, Detach: al.detach}
	p := r.Pool("shop", opts, []string{"a:1", "b:1"})
	a := byAddr(p, "a:1")
	take(p, a)
	p.Release(take(p, a), false)
	p.Release(take(p, a), false) // ejected

	// Reload: new algorithm and health parameters, one more backend.
	opts.Algorithm = RoundRobin
	opts.Failures = 3
	q := r.Pool("shop", opts, []string{"a:1", "b:1", "c:1"})
	if q != p {
		t.Fatal("reload built a new pool")
	}
	mustEqual(t, "algorithm", p.Algorithm(), RoundRobin)
	if byAddr(p, "a:1") != a {
		t.Fatal("reload replaced a retained backend")
	}
	mustEqual(t, "a inflight", a.Inflight(), int64(1))
	mustEqual(t, "a failures", a.Failures(), uint64(2))
	mustEqual(t, "a still ejected", a.Healthy(), false)
	mustEqual(t, "pool inflight", p.Inflight(), int64(1))
	at, _ := al.counts("a:1")
	mustEqual(t, "a attach calls", at, 1)
	mustEqual(t, "members", strings.Join(addrsOf(p.Backends()), ","), "a:1,b:1,c:1")

	other := r.Pool("blog", Options{}, []string{"x:1"})
	if other == p {
		t.Fatal("two apps share a pool")
	}
	r.Retain([]string{"shop", "blog"})
	if r.Pool("blog", Options{}, []string{"x:1"}) != other {
		t.Fatal("Retain dropped a retained app")
	}
	r.Retain([]string{"blog"})
	mustEqual(t, "dropped pool members", len(p.Backends()), 0)
	al.balanced(t)
	if r.Pool("shop", opts, []string{"a:1"}) == p {
		t.Fatal("a dropped app came back with its old pool")
	}
	p.Release(a, true)
	mustEqual(t, "dropped pool inflight", p.Inflight(), int64(0))
}

func TestRegistryDNSPoolKeepsResolvedMembers(t *testing.T) {
	var r Registry
	resolve := func(context.Context) ([]string, error) { return []string{"r1:80", "r2:80"}, nil }
	p := r.Pool("dns", Options{Resolve: resolve}, nil)
	p.resolveOnce(context.Background())
	mustEqual(t, "members", len(p.Backends()), 2)
	// A reload passes no static addresses: the resolved set stays.
	r.Pool("dns", Options{Resolve: resolve}, nil)
	mustEqual(t, "members after reload", len(p.Backends()), 2)
	// Switching to static addresses takes them.
	r.Pool("dns", Options{}, []string{"s:80"})
	mustEqual(t, "members after switch to static", strings.Join(addrsOf(p.Backends()), ","), "s:80")
}

func TestRegistryRunOwnsPoolRuns(t *testing.T) {
	before := runtime.NumGoroutine()
	var r Registry
	probed := func() (chan string, *Active) {
		ch := make(chan string, 64)
		fp := newFakeProbe()
		fp.called = ch
		return ch, &Active{Interval: time.Millisecond, Probe: fp.probe}
	}
	aCh, aActive := probed()
	pa := r.Pool("a", Options{Active: aActive}, addrList(2))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	<-aCh
	// A pool added while running is started too.
	bCh, bActive := probed()
	r.Pool("b", Options{Active: bActive}, addrList(2))
	<-bCh
	// Dropping an app stops its pool's Run.
	r.Retain([]string{"b"})
	deadline := time.Now().Add(5 * time.Second)
	for pa.running.Load() {
		if time.Now().After(deadline) {
			t.Fatal("dropped pool still running")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	waitGoroutines(t, before)
}

func TestConcurrentPickReleaseSetAddrs(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(string(alg), func(t *testing.T) {
			clk := newClock()
			al := newAttachLog()
			fp := newFakeProbe()
			opts := Options{
				Algorithm: alg, Failures: 3, Cooldown: time.Second, Now: clk.Now,
				Active: &Active{Rise: 1, Fall: 2, Probe: fp.probe},
				Attach: al.attach, Detach: al.detach,
			}
			all := addrList(12)
			p := NewPool(opts, all[:8])
			var seenMu sync.Mutex
			seen := map[*Backend]bool{}
			var stop atomic.Bool
			var workers, churn sync.WaitGroup
			for w := range 4 {
				workers.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), 1))
					local := map[*Backend]bool{}
					var held []*Backend
					for i := range 4000 {
						if b := p.Pick(); b != nil {
							if b.Inflight() < 1 {
								t.Errorf("picked backend with inflight %d", b.Inflight())
							}
							local[b] = true
							held = append(held, b)
						}
						if len(held) > 8 || (len(held) > 0 && i%2 == 0) {
							k := rng.IntN(len(held))
							p.Release(held[k], rng.IntN(10) != 0)
							held = append(held[:k], held[k+1:]...)
						}
						_ = p.Healthy()
						_ = p.Inflight()
					}
					for _, b := range held {
						p.Release(b, true)
					}
					seenMu.Lock()
					for b := range local {
						seen[b] = true
					}
					seenMu.Unlock()
				})
			}
			for s := range 2 { // membership, two writers racing
				churn.Go(func() {
					rng := rand.New(rand.NewPCG(99, uint64(s)))
					for !stop.Load() {
						lo := rng.IntN(6)
						p.SetAddrs(all[lo : lo+1+rng.IntN(len(all)-lo)])
						runtime.Gosched()
					}
				})
			}
			churn.Go(func() { // health and configuration
				rng := rand.New(rand.NewPCG(98, 1))
				for i := 0; !stop.Load(); i++ {
					fp.set(all[rng.IntN(len(all))], rng.IntN(2) == 0)
					p.checkOnce(context.Background())
					clk.Advance(300 * time.Millisecond)
					if i%10 == 0 {
						o := opts
						o.Algorithm = algorithms[i/10%3]
						p.Reconfigure(o)
					}
					runtime.Gosched()
				}
			})
			workers.Wait()
			stop.Store(true)
			churn.Wait()

			mustEqual(t, "pool inflight", p.Inflight(), int64(0))
			for b := range seen {
				mustEqual(t, b.Addr()+" inflight", b.Inflight(), int64(0))
			}
			checkAvail(t, p)
			p.Close()
			al.balanced(t)
			mustEqual(t, "healthy after close", p.Healthy(), 0)
		})
	}
}
