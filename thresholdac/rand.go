package thresholdac

import (
	"math/bits"
	"sync/atomic"
)

// CounterRand is a seeded, concurrency-safe generator: wyrand over an
// atomic counter. Each call takes the next counter value, so the sequence
// is reproducible for a given seed and call order (tests, simulations).
// Under contention the shared counter's cache line bounces between cores;
// the default source (math/rand/v2, per-thread runtime state) does not, so
// production should leave Config.Rand nil.
type CounterRand struct {
	state atomic.Uint64
}

// NewCounterRand returns a generator seeded with seed.
func NewCounterRand(seed uint64) *CounterRand {
	r := &CounterRand{}
	r.state.Store(seed)
	return r
}

// Uint64 returns the next value of the sequence.
func (r *CounterRand) Uint64() uint64 {
	s := r.state.Add(0xa0761d6478bd642f)
	hi, lo := bits.Mul64(s, s^0xe7037ed1a0b428db)
	return hi ^ lo
}
