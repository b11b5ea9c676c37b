package estimator

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func linearBucket(edges []time.Duration, s time.Duration) int {
	i := 0
	for i < len(edges) && s > edges[i] {
		i++
	}
	return i
}

func TestBucketBoundaries(t *testing.T) {
	b, err := NewBuckets(DefaultEdges)
	if err != nil {
		t.Fatal(err)
	}
	ms := time.Millisecond
	tests := []struct {
		s    time.Duration
		want int
	}{
		{-5, 0},
		{0, 0},
		{1, 0},                 // below the first edge
		{ms, 0},                // exactly on the first edge: bucket below it
		{ms + 1, 1},            // just above
		{4 * ms, 1},            // on s_2
		{4*ms + 1, 2},          // just above s_2
		{16 * ms, 2},           // on s_3
		{time.Second, 5},       // on s_6
		{time.Second + 1, 6},   // just above
		{4 * time.Second, 6},   // on the last edge
		{4*time.Second + 1, 7}, // above the last edge: the open top bucket
		{time.Hour, 7},
		{1<<63 - 1, 7},
	}
	for _, tc := range tests {
		if got := b.Bucket(tc.s); got != tc.want {
			t.Errorf("Bucket(%v) = %d, want %d", tc.s, got, tc.want)
		}
	}
	if b.N() != 8 {
		t.Errorf("N = %d", b.N())
	}
	if lo, hi := b.Bounds(0); lo != 0 || hi != ms {
		t.Errorf("Bounds(0) = %v, %v", lo, hi)
	}
	if lo, hi := b.Bounds(3); lo != 16*ms || hi != 64*ms {
		t.Errorf("Bounds(3) = %v, %v", lo, hi)
	}
	if lo, hi := b.Bounds(7); lo != 4*time.Second || hi != 0 {
		t.Errorf("Bounds(7) = %v, %v", lo, hi)
	}
}

// TestBucketMatchesLinear checks the table against a linear search around
// every edge and at random points, for the default and random (also dense)
// edge sets.
func TestBucketMatchesLinear(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	sets := [][]time.Duration{DefaultEdges, {1}, {1, 2, 3}, {7, 8, 9, 1000}}
	for range 50 {
		n := 1 + rng.IntN(20)
		var e []time.Duration
		for range n {
			e = append(e, time.Duration(1+rng.Int64N(int64(10*time.Second))))
		}
		slices.Sort(e)
		e = slices.Compact(e)
		sets = append(sets, e)
	}
	for _, edges := range sets {
		b, err := NewBuckets(edges)
		if err != nil {
			t.Fatal(err)
		}
		check := func(s time.Duration) {
			if got, want := b.Bucket(s), linearBucket(edges, s); got != want {
				t.Fatalf("edges %v: Bucket(%d) = %d, want %d", edges, s, got, want)
			}
		}
		for _, e := range edges {
			for d := time.Duration(-2); d <= 2; d++ {
				check(e + d)
			}
		}
		for range 2000 {
			check(time.Duration(rng.Int64N(int64(20 * time.Second))))
			check(time.Duration(rng.Uint64() >> 1))
		}
		for s := time.Duration(0); s < 100; s++ {
			check(s)
		}
	}
}

func TestBucketErrors(t *testing.T) {
	for _, edges := range [][]time.Duration{nil, {0}, {-1, 2}, {2, 2}, {3, 1}, make([]time.Duration, 256)} {
		if _, err := NewBuckets(edges); err == nil {
			t.Errorf("%v: no error", edges)
		}
	}
}

func BenchmarkBucket(b *testing.B) {
	bk, _ := NewBuckets(DefaultEdges)
	s := 37 * time.Millisecond
	var sink int
	for b.Loop() {
		sink += bk.Bucket(s)
		s += 1013
	}
	_ = sink
}
