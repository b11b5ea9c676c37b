package estimator

import (
	"errors"
	"fmt"
	"math/bits"
	"time"
)

// DefaultEdges are the bucket edges of docs/algorithms.md §1: ×4 from 1 ms.
var DefaultEdges = []time.Duration{
	1 * time.Millisecond, 4 * time.Millisecond, 16 * time.Millisecond,
	64 * time.Millisecond, 256 * time.Millisecond, time.Second, 4 * time.Second,
}

// Buckets maps an inherent service time S to a bucket index in O(1).
//
// With edges s_1 < s_2 < … < s_b there are b+1 buckets:
//
//	bucket 0:   S ≤ s_1 (everything below the first edge, including 0)
//	bucket i:   s_i < S ≤ s_(i+1), for 1 ≤ i < b
//	bucket b:   S > s_b (everything above the last edge)
//
// so a value exactly on an edge belongs to the bucket below it, as in
// Cataclysm §3.2 ("s_i < S ≤ s_(i+1)").
//
// The lookup indexes a table by S's binary exponent and its next three bits
// (eight slots per octave), then steps over any edges inside that slot. Edges
// at least 12.5% apart (the default is ×4) never share a slot, so the step
// runs at most once: the mapping is a table load, a compare and no loop.
type Buckets struct {
	edges []time.Duration
	table [64 * 8]uint8 // slot -> first bucket whose range can hold the slot's lowest value
}

// NewBuckets validates edges (positive, strictly increasing, at most 255)
// and builds the table.
func NewBuckets(edges []time.Duration) (*Buckets, error) {
	if len(edges) == 0 {
		return nil, errors.New("no bucket edges")
	}
	if len(edges) > 255 {
		return nil, fmt.Errorf("%d bucket edges; at most 255", len(edges))
	}
	for i, e := range edges {
		if e <= 0 {
			return nil, fmt.Errorf("bucket edge %v is not positive", e)
		}
		if i > 0 && e <= edges[i-1] {
			return nil, fmt.Errorf("bucket edges must increase: %v after %v", e, edges[i-1])
		}
	}
	b := &Buckets{edges: append([]time.Duration(nil), edges...)}
	for s := range b.table {
		lo := slotLow(s)
		i := 0
		for i < len(edges) && lo > edges[i] {
			i++
		}
		b.table[s] = uint8(i)
	}
	return b, nil
}

// slot returns the table slot of v > 0: exponent*8 + the three bits after
// the leading one.
func slot(v uint64) int {
	n := bits.Len64(v) // 1..64
	var m uint64
	if n > 4 {
		m = (v >> (n - 4)) & 7
	} else {
		m = (v << (4 - n)) & 7
	}
	return (n-1)*8 + int(m)
}

// slotLow is the smallest value that maps to slot s.
func slotLow(s int) time.Duration {
	n, m := s/8+1, uint64(s%8)
	if n > 63 { // values ≥ 2^63 do not exist as positive Durations
		return 1<<63 - 1
	}
	var v uint64
	if n >= 4 {
		v = (8 | m) << (n - 4)
	} else {
		v = (8 | m) >> (4 - n)
	}
	if v == 0 || slot(v) != s { // slot unreachable for tiny n
		v = 1 << (n - 1)
	}
	return time.Duration(v)
}

// Bucket returns S's bucket index, 0 ≤ i ≤ len(Edges()).
func (b *Buckets) Bucket(s time.Duration) int {
	if s <= 0 {
		return 0
	}
	i := int(b.table[slot(uint64(s))])
	for i < len(b.edges) && s > b.edges[i] {
		i++
	}
	return i
}

// N is the number of buckets, len(Edges())+1.
func (b *Buckets) N() int { return len(b.edges) + 1 }

// Edges returns the edges; the slice must not be modified.
func (b *Buckets) Edges() []time.Duration { return b.edges }

// Bounds returns bucket i's range (lo, hi]. Bucket 0 has lo = 0; the last
// bucket has hi = 0, meaning unbounded.
func (b *Buckets) Bounds(i int) (lo, hi time.Duration) {
	if i > 0 {
		lo = b.edges[i-1]
	}
	if i < len(b.edges) {
		hi = b.edges[i]
	}
	return lo, hi
}
