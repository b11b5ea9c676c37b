package thresholdac

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/admission"
)

// BenchmarkThreshold measures one decision for a request of the threshold
// class (the path with the random draw) and of a more important class (no
// draw), with each random source, across GOMAXPROCS goroutines:
//
//	go test -run '^$' -bench Threshold -benchtime 300ms -cpu 1,2 ./thresholdac
func BenchmarkThreshold(b *testing.B) {
	in := &fakeInputs{}
	in.set(1, []float64{0.5, 1, 1}, ms(1000, 1000, 1000)) // i = 1, p = 0.5
	sources := []struct {
		name string
		rand func() uint64
	}{
		{"rand=cheaprand", nil}, // the default
		{"rand=mathrandv2", rand.Uint64},
		{"rand=counter", NewCounterRand(1).Uint64},
	}
	for _, src := range sources {
		c, err := New(Config{Classes: 3, Inputs: in, PerServer: 1, Rand: src.rand})
		if err != nil {
			b.Fatal(err)
		}
		c.Recompute(time.Unix(1, 0))
		for _, cls := range []struct {
			name  string
			class int
		}{{"class=threshold", 1}, {"class=above", 0}} {
			b.Run(src.name+"/"+cls.name, func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					req := &admission.Request{Class: cls.class}
					var admitted int
					for pb.Next() {
						if c.Admit(req).Verdict == admission.Admit {
							admitted++
						}
					}
					_ = admitted
				})
			})
		}
	}
}

func BenchmarkRecompute(b *testing.B) {
	in := &fakeInputs{}
	in.set(8, []float64{10, 20, 30, 40}, ms(10, 20, 30, 40))
	c, err := New(Config{Classes: 4, Inputs: in, PerServer: 0.5})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	now := time.Unix(1, 0)
	for b.Loop() {
		c.Recompute(now)
	}
}
