package pipeline

import (
	crand "crypto/rand"
	"math/rand/v2"
	"sync"
)

// requestid.go: request IDs and the random ids of trace context
// (docs/tracing.md).
//
// Decision: a request ID is 128 random bits written as 32 lowercase hex
// digits, nginx's $request_id (the length and alphabet the IDs had
// before, so a log parser keeps working). Random, not a counter: an ID
// seen by a client says nothing about how many requests sentry served,
// and one cannot be guessed from another. The bits come from ChaCha8
// (math/rand/v2), a cryptographically strong generator, one per holder
// -- an event loop's exchange scratch, a pooled generator for the
// goroutine paths -- each seeded from crypto/rand, so making an ID takes
// no lock, no system call and no allocation.

// IDGen makes random ids: request IDs, trace and span ids. Not safe for
// concurrent use: one per event loop (package exchange keeps one in each
// Scratch) or per goroutine at a time (IDPool). Its zero value seeds
// itself from crypto/rand on first use.
type IDGen struct {
	r      rand.ChaCha8
	seeded bool
	// counting (tests: Counting): a counter instead of random bits.
	counting bool
	prefix   [16]byte
	n        uint64
}

// Counting makes g a counter, for tests whose scripts print IDs: each
// request ID is prefix (16 characters) followed by the count in 16 hex
// digits, and Uint64 returns the count. Never used by the product.
func (g *IDGen) Counting(prefix string) {
	copy(g.prefix[:], prefix)
	g.counting, g.n = true, 0
}

// Seed seeds g with seed (tests: a reproducible sequence). An unseeded
// generator seeds itself from crypto/rand.
func (g *IDGen) Seed(seed [32]byte) {
	g.r.Seed(seed)
	g.seeded = true
}

// Seeded tells whether g has its seed.
func (g *IDGen) Seeded() bool { return g.seeded }

// Uint64 returns 64 random bits.
func (g *IDGen) Uint64() uint64 {
	if g.counting {
		g.n++
		return g.n
	}
	if !g.seeded {
		var seed [32]byte
		_, _ = crand.Read(seed[:]) // never fails (Go 1.24: it crashes the program instead)
		g.Seed(seed)
	}
	return g.r.Uint64()
}

// AppendID appends a fresh request ID (32 hex digits) to dst.
func (g *IDGen) AppendID(dst []byte) []byte {
	var b [32]byte
	if g.counting {
		copy(b[:16], g.prefix[:])
	} else {
		hexEncode(b[:16], g.Uint64())
	}
	hexEncode(b[16:], g.Uint64())
	return append(dst, b[:]...)
}

// IDs makes request IDs (PlanForwarding's fresh ID): an *IDGen, or an
// *IDPool on a goroutine path.
type IDs interface {
	AppendID(dst []byte) []byte
}

// IDPool hands IDGens to goroutines, one to each at a time (sync.Pool:
// per P, no lock in the common case, nothing allocated once warm). Safe
// for concurrent use; the zero value is ready.
type IDPool struct{ p sync.Pool }

func (p *IDPool) get() *IDGen {
	if g, ok := p.p.Get().(*IDGen); ok {
		return g
	}
	return new(IDGen)
}

// AppendID appends a fresh request ID to dst.
func (p *IDPool) AppendID(dst []byte) []byte {
	g := p.get()
	dst = g.AppendID(dst)
	p.p.Put(g)
	return dst
}

// StartTrace starts a trace in t (Trace.Start) with a pooled generator.
func (p *IDPool) StartTrace(t *Trace) {
	g := p.get()
	t.Start(g)
	p.p.Put(g)
}

const hexDigits = "0123456789abcdef"

func hexEncode(dst []byte, v uint64) {
	for i := 15; i >= 0; i-- {
		dst[i] = hexDigits[v&0xf]
		v >>= 4
	}
}
