package lb

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

var algorithms = []Algorithm{LeastLoaded, RoundRobin, P2C}

// manualClock is a clock that moves only when told to.
type manualClock struct{ n atomic.Int64 }

func newClock() *manualClock {
	c := &manualClock{}
	c.n.Store(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *manualClock) Now() time.Time          { return time.Unix(0, c.n.Load()) }
func (c *manualClock) Advance(d time.Duration) { c.n.Add(int64(d)) }

// seededRand is a deterministic, concurrency-safe Rand.
func seededRand(seed uint64) func() uint64 {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	return func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Uint64()
	}
}

func addrList(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.0.0.%d:80", i+1)
	}
	return out
}

// syncBuffer is a bytes.Buffer safe for concurrent writes and reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func testLogger(buf *syncBuffer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: buf, Level: hclog.Debug})
}

// take marks b as picked, as Pick would, so a test can release a chosen
// backend.
func take(p *Pool, b *Backend) *Backend {
	b.inflight.Add(1)
	p.inflight.Add(1)
	return b
}

// setDown marks b down or up as an active check would.
func setDown(b *Backend, down bool) {
	b.mu.Lock()
	b.down.Store(down)
	b.mu.Unlock()
	b.pool.refresh()
}

// checkAvail asserts that the available set is exactly the members
// eligible now, in membership order. Call it only while nothing changes.
func checkAvail(t *testing.T, p *Pool) {
	t.Helper()
	now := lazyNow{f: p.cfg.Load().now}
	var want []string
	for _, b := range p.Backends() {
		if b.eligible(&now) {
			want = append(want, b.Addr())
		}
	}
	mustEqual(t, "Healthy", p.Healthy(), len(want))
	mustEqual(t, "available set", strings.Join(addrsOf(p.avail.Load().list), ","), strings.Join(want, ","))
}

func byAddr(p *Pool, addr string) *Backend {
	for _, b := range p.Backends() {
		if b.Addr() == addr {
			return b
		}
	}
	return nil
}

func addrsOf(bs []*Backend) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.Addr()
	}
	return out
}

func mustEqual[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

// attachLog records Attach and Detach calls.
type attachLog struct {
	mu       sync.Mutex
	attached map[string]int
	detached map[string]int
	bad      []string
}

func newAttachLog() *attachLog {
	return &attachLog{attached: map[string]int{}, detached: map[string]int{}}
}

func (l *attachLog) attach(addr string) any {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.attached[addr]++
	v := new(int)
	*v = l.attached[addr]
	return v
}

func (l *attachLog) detach(addr string, a any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.detached[addr]++
	if a == nil {
		l.bad = append(l.bad, "nil attachment for "+addr)
	}
}

func (l *attachLog) counts(addr string) (int, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.attached[addr], l.detached[addr]
}

func (l *attachLog) balanced(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for a, n := range l.attached {
		if l.detached[a] != n {
			t.Errorf("%s: attached %d times, detached %d", a, n, l.detached[a])
		}
	}
	for a, n := range l.detached {
		if l.attached[a] < n {
			t.Errorf("%s: detached %d times, attached %d", a, n, l.attached[a])
		}
	}
	for _, s := range l.bad {
		t.Error(s)
	}
}
