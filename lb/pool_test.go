package lb

import (
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/hashicorp/go-hclog"
)

func TestLeastLoadedSpreadsWithoutRelease(t *testing.T) {
	for _, n := range []int{1, 3, 16} {
		p := NewPool(Options{Rand: seededRand(1)}, addrList(n))
		const per = 7
		var held []*Backend
		for range n * per {
			b := p.Pick()
			if b == nil {
				t.Fatal("Pick returned nil with healthy backends")
			}
			held = append(held, b)
		}
		for _, b := range p.Backends() {
			mustEqual(t, b.Addr()+" inflight", b.Inflight(), int64(per))
		}
		mustEqual(t, "pool inflight", p.Inflight(), int64(n*per))
		for _, b := range held {
			p.Release(b, true)
		}
		mustEqual(t, "pool inflight after release", p.Inflight(), int64(0))
		for _, b := range p.Backends() {
			mustEqual(t, b.Addr()+" requests", b.Requests(), uint64(per))
		}
	}
}

func TestLeastLoadedSpreadsEqualLoadsWithRelease(t *testing.T) {
	// Every backend is idle at every pick: the rotating start index must
	// still spread the picks evenly.
	p := NewPool(Options{}, addrList(4))
	for range 400 {
		p.Release(p.Pick(), true)
	}
	for _, b := range p.Backends() {
		mustEqual(t, b.Addr()+" requests", b.Requests(), uint64(100))
	}
}

func TestLeastLoadedAvoidsBusyBackend(t *testing.T) {
	p := NewPool(Options{}, addrList(3))
	busy := p.Backends()[1]
	for range 5 {
		take(p, busy)
	}
	counts := map[string]int{}
	for range 300 {
		b := p.Pick()
		if b == busy {
			t.Fatalf("picked busy backend %s (inflight %d)", b.Addr(), b.Inflight())
		}
		counts[b.Addr()]++
		p.Release(b, true)
	}
	mustEqual(t, "backends used", len(counts), 2)
	// Loaded without release, the busy one is only picked once the others
	// have caught up with it.
	var held []*Backend
	for range 10 {
		held = append(held, p.Pick())
	}
	mustEqual(t, "busy inflight", busy.Inflight(), int64(5))
	for _, b := range p.Backends() {
		if b != busy {
			mustEqual(t, b.Addr()+" inflight", b.Inflight(), int64(5))
		}
	}
	for _, b := range held {
		p.Release(b, true)
	}
}

func TestRoundRobinOrder(t *testing.T) {
	addrs := addrList(3)
	p := NewPool(Options{Algorithm: RoundRobin}, addrs)
	var got []string
	for range 7 {
		b := p.Pick()
		got = append(got, b.Addr())
		p.Release(b, true)
	}
	want := []string{addrs[0], addrs[1], addrs[2], addrs[0], addrs[1], addrs[2], addrs[0]}
	mustEqual(t, "order", strings.Join(got, ","), strings.Join(want, ","))

	// With the middle one down, the other two alternate evenly.
	setDown(p.Backends()[1], true)
	counts := map[string]int{}
	var prev string
	for range 100 {
		b := p.Pick()
		if b.Addr() == prev {
			t.Fatalf("round robin picked %s twice in a row", prev)
		}
		prev = b.Addr()
		counts[b.Addr()]++
		p.Release(b, true)
	}
	mustEqual(t, "first", counts[addrs[0]], 50)
	mustEqual(t, "down", counts[addrs[1]], 0)
	mustEqual(t, "third", counts[addrs[2]], 50)
}

func TestP2CPrefersLessLoaded(t *testing.T) {
	p := NewPool(Options{Algorithm: P2C, Rand: seededRand(7)}, addrList(2))
	heavy := p.Backends()[0]
	take(p, heavy)
	take(p, heavy)
	for range 100 {
		b := p.Pick()
		if b == heavy {
			t.Fatal("p2c picked the more loaded of two backends")
		}
		p.Release(b, true)
	}

	// Of four, a busy backend always loses its comparison; the idle ones
	// share the picks.
	p = NewPool(Options{Algorithm: P2C, Rand: seededRand(8)}, addrList(4))
	busy := p.Backends()[2]
	take(p, busy)
	counts := map[*Backend]int{}
	for range 3000 {
		b := p.Pick()
		counts[b]++
		p.Release(b, true)
	}
	mustEqual(t, "busy picks", counts[busy], 0)
	for _, b := range p.Backends() {
		if b != busy && (counts[b] < 800 || counts[b] > 1200) {
			t.Errorf("%s picked %d of 3000 times, want about 1000", b.Addr(), counts[b])
		}
	}

	// With one down and the rest idle, p2c still covers every healthy one.
	setDown(p.Backends()[0], true)
	clear(counts)
	for range 3000 {
		b := p.Pick()
		counts[b]++
		p.Release(b, true)
	}
	mustEqual(t, "down picks", counts[p.Backends()[0]], 0)
	mustEqual(t, "busy picks", counts[busy], 0)
	for _, b := range p.Backends()[1:] {
		if b != busy && (counts[b] < 1300 || counts[b] > 1700) {
			t.Errorf("%s picked %d of 3000 times, want about 1500", b.Addr(), counts[b])
		}
	}
}

// TestPassiveEjectionAndTrialWait: failures in a row eject a backend for
// its trial wait (doc.go, "Health"): TrialWait after a first ejection,
// twice its last after each failed trial, at most the cooldown; a
// success in half-open ends the ejection and restarts the wait.
func TestPassiveEjectionAndTrialWait(t *testing.T) {
	clk := newClock()
	var logs syncBuffer
	p := NewPool(Options{
		App: "shop", Algorithm: RoundRobin, Failures: 3, Cooldown: 10 * time.Second,
		Now: clk.Now, Logger: testLogger(&logs),
	}, addrList(2))
	a, other := p.Backends()[0], p.Backends()[1]

	// Two failures, a success resets the run, then three in a row eject.
	p.Release(take(p, a), false)
	p.Release(take(p, a), false)
	p.Release(take(p, a), true)
	p.Release(take(p, a), false)
	p.Release(take(p, a), false)
	mustEqual(t, "healthy after 2 consecutive failures", a.Healthy(), true)
	p.Release(take(p, a), false)
	mustEqual(t, "healthy after 3 consecutive failures", a.Healthy(), false)
	mustEqual(t, "pool healthy", p.Healthy(), 1)
	checkAvail(t, p)
	mustEqual(t, "failures counted", a.Failures(), uint64(5))
	until := a.EjectedUntil()
	mustEqual(t, "ejected until (the first trial wait)", until, clk.Now().Add(TrialWait))
	if !strings.Contains(logs.String(), "backend ejected") || !strings.Contains(logs.String(), "app=shop") ||
		!strings.Contains(logs.String(), "trial_after=1s") {
		t.Fatalf("ejection not logged with app and trial wait:\n%s", logs.String())
	}
	for range 20 {
		b := p.Pick()
		if b != other {
			t.Fatalf("picked %s while it is ejected", b.Addr())
		}
		p.Release(b, true)
	}

	// Late failures and late successes (requests picked before the
	// ejection) neither extend nor end it.
	clk.Advance(TrialWait / 2)
	p.Release(take(p, a), false)
	p.Release(take(p, a), true)
	mustEqual(t, "ejected until after late results", a.EjectedUntil(), until)
	clk.Advance(TrialWait/2 - 1)
	mustEqual(t, "healthy 1ns before the wait's end", a.Healthy(), false)

	// Wait over: half-open. Each failed trial doubles the wait, up to
	// the cooldown: 2, 4, 8, 10, 10 s.
	clk.Advance(1)
	mustEqual(t, "healthy at the wait's end", a.Healthy(), true)
	mustEqual(t, "pool healthy", p.Healthy(), 2)
	checkAvail(t, p)
	for _, want := range []time.Duration{2, 4, 8, 10, 10} {
		p.Release(take(p, a), false)
		mustEqual(t, "healthy after a failed trial", a.Healthy(), false)
		mustEqual(t, "re-ejected until", a.EjectedUntil(), clk.Now().Add(want*time.Second))
		clk.Advance(want*time.Second - 1)
		mustEqual(t, "healthy 1ns before the wait's end", a.Healthy(), false)
		clk.Advance(1)
		mustEqual(t, "healthy at the wait's end", a.Healthy(), true)
	}

	// Half-open; a success ends the ejection, resets the count and the
	// wait.
	got := p.Pick()
	for got != a {
		p.Release(got, true)
		got = p.Pick()
	}
	p.Release(got, true)
	mustEqual(t, "ejected until after success", a.EjectedUntil(), time.Time{})
	if !strings.Contains(logs.String(), "backend rejoined") {
		t.Fatalf("rejoin not logged:\n%s", logs.String())
	}
	p.Release(take(p, a), false)
	p.Release(take(p, a), false)
	mustEqual(t, "healthy after 2 failures post-rejoin", a.Healthy(), true)
	p.Release(take(p, a), false)
	mustEqual(t, "ejected again: the first wait", a.EjectedUntil(), clk.Now().Add(TrialWait))
	mustEqual(t, "inflight", p.Inflight(), int64(0))

	// A cooldown below TrialWait caps the first wait too.
	p = NewPool(Options{Failures: 1, Cooldown: 300 * time.Millisecond, Now: clk.Now}, addrList(1))
	b := p.Backends()[0]
	p.Release(take(p, b), false)
	mustEqual(t, "ejected until (cooldown 300ms)", b.EjectedUntil(), clk.Now().Add(300*time.Millisecond))
}

func TestPassiveDisabled(t *testing.T) {
	clk := newClock()
	p := NewPool(Options{Now: clk.Now}, addrList(1))
	b := p.Backends()[0]
	for range 100 {
		p.Release(take(p, b), false)
	}
	mustEqual(t, "healthy with Failures 0", b.Healthy(), true)
	mustEqual(t, "failures counted", b.Failures(), uint64(100))

	// Turning passive checks off ends a running ejection.
	p.Reconfigure(Options{Now: clk.Now, Failures: 1, Cooldown: time.Hour})
	p.Release(take(p, b), false)
	mustEqual(t, "healthy after failure", b.Healthy(), false)
	p.Reconfigure(Options{Now: clk.Now})
	mustEqual(t, "healthy after disabling passive", b.Healthy(), true)
	checkAvail(t, p)
}

func TestNeverPicksUnhealthy(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(string(alg), func(t *testing.T) {
			clk := newClock()
			p := NewPool(Options{Algorithm: alg, Failures: 1, Cooldown: time.Minute, Now: clk.Now, Rand: seededRand(3)}, addrList(16))
			bad := map[*Backend]bool{}
			for i, b := range p.Backends() {
				switch i % 4 {
				case 0:
					setDown(b, true)
					bad[b] = true
				case 1:
					p.Release(take(p, b), false) // ejected
					bad[b] = true
				}
			}
			mustEqual(t, "healthy", p.Healthy(), 8)
			seen := map[*Backend]int{}
			var held []*Backend
			for i := range 800 {
				b := p.Pick()
				if b == nil || bad[b] {
					t.Fatalf("pick %d returned %v", i, b)
				}
				seen[b]++
				if i%3 == 0 {
					held = append(held, b)
				} else {
					p.Release(b, true)
				}
			}
			mustEqual(t, "distinct healthy picked", len(seen), 8)
			for _, b := range held {
				p.Release(b, true)
			}
		})
	}
}

func TestPickNilWhenNoneHealthy(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(string(alg), func(t *testing.T) {
			clk := newClock()
			p := NewPool(Options{Algorithm: alg, Failures: 1, Cooldown: time.Second, Now: clk.Now}, nil)
			if b := p.Pick(); b != nil {
				t.Fatalf("empty pool picked %v", b.Addr())
			}
			p.SetAddrs(addrList(3))
			bs := p.Backends()
			setDown(bs[0], true)
			setDown(bs[1], true)
			p.Release(take(p, bs[2]), false)
			mustEqual(t, "healthy", p.Healthy(), 0)
			for range 10 {
				if b := p.Pick(); b != nil {
					t.Fatalf("picked %v with none healthy", b.Addr())
				}
			}
			mustEqual(t, "inflight", p.Inflight(), int64(0))
			clk.Advance(time.Second)
			if b := p.Pick(); b != bs[2] {
				t.Fatalf("after cooldown picked %v, want the half-open backend", b)
			}
		})
	}
}

func TestStaleSnapshotFallsBack(t *testing.T) {
	// A transition that the available set does not show yet (it is rebuilt
	// right after) must still never be picked.
	for _, alg := range algorithms {
		p := NewPool(Options{Algorithm: alg, Rand: seededRand(5)}, addrList(3))
		bs := p.Backends()
		bs[1].down.Store(true) // no refresh
		for range 60 {
			b := p.Pick()
			if b == nil || b == bs[1] {
				t.Fatalf("%s: picked %v from a stale snapshot", alg, b)
			}
			p.Release(b, true)
		}
		bs[0].down.Store(true)
		bs[2].down.Store(true)
		if b := p.Pick(); b != nil {
			t.Fatalf("%s: picked %s with every backend down", alg, b.Addr())
		}
		mustEqual(t, "inflight", p.Inflight(), int64(0))
	}
}

func TestSetAddrsKeepsStateAndAttaches(t *testing.T) {
	al := newAttachLog()
	var logs syncBuffer
	p := NewPool(Options{Attach: al.attach, Detach: al.detach, Failures: 5, Logger: testLogger(&logs)},
		[]string{"a:1", "b:1", "c:1", "b:1"})
	mustEqual(t, "members", strings.Join(addrsOf(p.Backends()), ","), "a:1,b:1,c:1")
	a, b := byAddr(p, "a:1"), byAddr(p, "b:1")
	bAttachment := b.Attachment
	take(p, b)
	take(p, b)
	take(p, a)
	p.Release(take(p, b), false)
	p.Release(take(p, b), true)
	p.Release(take(p, b), false)

	p.SetAddrs([]string{"d:1", "b:1", "c:1"})
	mustEqual(t, "members", strings.Join(addrsOf(p.Backends()), ","), "d:1,b:1,c:1")
	if byAddr(p, "b:1") != b {
		t.Fatal("retained address got a new Backend")
	}
	mustEqual(t, "b inflight", b.Inflight(), int64(2))
	mustEqual(t, "b requests", b.Requests(), uint64(3))
	mustEqual(t, "b failures", b.Failures(), uint64(2))
	mustEqual(t, "b consecutive", b.consec.Load(), int64(1))
	mustEqual(t, "b attachment kept", b.Attachment, bAttachment)
	for addr, want := range map[string][2]int{"a:1": {1, 1}, "b:1": {1, 0}, "c:1": {1, 0}, "d:1": {1, 0}} {
		at, de := al.counts(addr)
		mustEqual(t, addr+" attach calls", at, want[0])
		mustEqual(t, addr+" detach calls", de, want[1])
	}
	if !strings.Contains(logs.String(), "backends changed") {
		t.Fatalf("membership change not logged:\n%s", logs.String())
	}

	// A request still in flight on a removed backend is released normally.
	mustEqual(t, "pool inflight", p.Inflight(), int64(3))
	p.Release(a, true)
	mustEqual(t, "pool inflight", p.Inflight(), int64(2))

	// The same set in another order changes nothing.
	before := p.Backends()
	p.SetAddrs([]string{"c:1", "b:1", "d:1"})
	if &before[0] != &p.Backends()[0] {
		t.Fatal("same set republished the membership")
	}

	// A removed address that comes back is a new backend.
	p.SetAddrs([]string{"a:1"})
	if byAddr(p, "a:1") == a {
		t.Fatal("re-added address reused the removed backend")
	}
	at, _ := al.counts("a:1")
	mustEqual(t, "a attach calls", at, 2)

	p.Close()
	mustEqual(t, "members after close", len(p.Backends()), 0)
	p.SetAddrs([]string{"x:1"})
	mustEqual(t, "members after SetAddrs on closed pool", len(p.Backends()), 0)
	al.balanced(t)
	p.Release(b, true)
	p.Release(b, true)
	mustEqual(t, "pool inflight", p.Inflight(), int64(0))
}

func TestPartition(t *testing.T) {
	addrs := addrList(200)
	owner := map[string]int{}
	sizes := make([]int, 3)
	for i := range 3 {
		for _, a := range (Partition{Index: i, Count: 3}).Filter(addrs) {
			if prev, dup := owner[a]; dup {
				t.Fatalf("%s owned by %d and %d", a, prev, i)
			}
			owner[a] = i
			sizes[i]++
		}
	}
	mustEqual(t, "covered", len(owner), len(addrs))
	for i, n := range sizes {
		if n < 66 || n > 67 {
			t.Errorf("partition %d owns %d of 200", i, n)
		}
	}
	p := NewPool(Options{Partition: Partition{Index: 1, Count: 3}}, addrs)
	mustEqual(t, "pool members", len(p.Backends()), sizes[1])
	p.Reconfigure(Options{})
	mustEqual(t, "pool members after dropping the partition", len(p.Backends()), 200)
}

func TestPickReleaseDoNotAllocate(t *testing.T) {
	for _, alg := range algorithms {
		clk := newClock()
		p := NewPool(Options{Algorithm: alg, Failures: 1, Cooldown: time.Second, Now: clk.Now}, addrList(16))
		for _, impaired := range []bool{false, true} {
			if impaired {
				setDown(p.Backends()[3], true)
				p.Release(take(p, p.Backends()[5]), false)
			}
			allocs := testing.AllocsPerRun(1000, func() {
				b := p.Pick()
				p.Release(b, true)
			})
			if allocs != 0 {
				t.Errorf("%s impaired=%v: %v allocs per Pick+Release", alg, impaired, allocs)
			}
		}
	}
}

func TestLayout(t *testing.T) {
	var b Backend
	mustEqual(t, "sizeof backendHot", unsafe.Sizeof(b.backendHot), uintptr(56))
	mustEqual(t, "offsetof Backend.Attachment", unsafe.Offsetof(b.Attachment), uintptr(cacheLine))
	mustEqual(t, "sizeof Backend % cacheLine", unsafe.Sizeof(b)%cacheLine, uintptr(0))
	var p Pool
	mustEqual(t, "sizeof poolHot", unsafe.Sizeof(p.poolHot), uintptr(24))
	mustEqual(t, "offsetof Pool.next", unsafe.Offsetof(p.next), uintptr(cacheLine))
	mustEqual(t, "offsetof Pool.running", unsafe.Offsetof(p.running), uintptr(2*cacheLine))
}

func TestUnknownAlgorithmFallsBack(t *testing.T) {
	var logs syncBuffer
	p := NewPool(Options{Algorithm: "fastest", Logger: testLogger(&logs)}, addrList(2))
	mustEqual(t, "algorithm", p.Algorithm(), LeastLoaded)
	if !strings.Contains(logs.String(), "unknown balancing algorithm") {
		t.Fatalf("unknown algorithm not logged:\n%s", logs.String())
	}
}

func TestLoggerNamedOnce(t *testing.T) {
	var logs syncBuffer
	root := hclog.New(&hclog.LoggerOptions{Name: "sentry", Output: &logs, Level: hclog.Info})
	NewPool(Options{App: "shop", Logger: root.Named("lb").With("app", "shop")}, addrList(1))
	NewPool(Options{App: "blog", Logger: root}, addrList(1))
	out := logs.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	mustEqual(t, "log lines", len(lines), 2)
	for _, l := range lines {
		if strings.Count(l, "sentry.lb:") != 1 || strings.Count(l, "app=") != 1 || strings.Contains(l, "lb.lb") {
			t.Errorf("badly named log line: %s", l)
		}
	}
}

func TestEject(t *testing.T) {
	clk := newClock()
	p := NewPool(Options{Failures: 3, Cooldown: time.Second, Now: clk.Now}, addrList(2))
	a := p.Backends()[0]
	p.Eject(take(p, a))
	mustEqual(t, "healthy after Eject", a.Healthy(), false)
	mustEqual(t, "failures", a.Failures(), uint64(1))
	mustEqual(t, "inflight", p.Inflight(), int64(0))
	checkAvail(t, p)

	p = NewPool(Options{Now: clk.Now}, addrList(1))
	b := p.Backends()[0]
	p.Eject(take(p, b))
	mustEqual(t, "healthy after Eject with passive checks off", b.Healthy(), true)
	mustEqual(t, "failures", b.Failures(), uint64(1))
}
