package lb

import (
	"fmt"
	"testing"
)

func BenchmarkPickRelease(b *testing.B) {
	for _, alg := range algorithms {
		for _, n := range []int{3, 16, 128} {
			b.Run(fmt.Sprintf("%s/n=%d", alg, n), func(b *testing.B) {
				p := NewPool(Options{Algorithm: alg}, addrList(n))
				b.ReportAllocs()
				for b.Loop() {
					p.Release(p.Pick(), true)
				}
			})
			b.Run(fmt.Sprintf("%s/n=%d/parallel", alg, n), func(b *testing.B) {
				p := NewPool(Options{Algorithm: alg}, addrList(n))
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						p.Release(p.Pick(), true)
					}
				})
			})
		}
	}
}

// BenchmarkPickReleaseLoaded keeps every backend busy (8 requests each held
// open), so least_loaded must scan the whole pool.
func BenchmarkPickReleaseLoaded(b *testing.B) {
	for _, alg := range algorithms {
		for _, n := range []int{16, 128} {
			b.Run(fmt.Sprintf("%s/n=%d", alg, n), func(b *testing.B) {
				p := NewPool(Options{Algorithm: alg}, addrList(n))
				for range 8 * n {
					p.Pick()
				}
				b.ReportAllocs()
				for b.Loop() {
					p.Release(p.Pick(), true)
				}
			})
		}
	}
}

// BenchmarkPickReleaseImpaired has one backend down, which sends round
// robin and p2c down their counting paths.
func BenchmarkPickReleaseImpaired(b *testing.B) {
	for _, alg := range algorithms {
		for _, n := range []int{16, 128} {
			b.Run(fmt.Sprintf("%s/n=%d", alg, n), func(b *testing.B) {
				p := NewPool(Options{Algorithm: alg}, addrList(n))
				setDown(p.Backends()[n/2], true)
				b.ReportAllocs()
				for b.Loop() {
					p.Release(p.Pick(), true)
				}
			})
		}
	}
}
