package estimator

import (
	"fmt"
	"testing"
	"time"
)

func benchEstimator(b testing.TB) (*Estimator, [][]byte, time.Time) {
	e := mustNew(b, Config{})
	now := time.Unix(1_700_000_000, 0)
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("/api/v1/items/%d", i))
		e.Observe(i%2, keys[i], time.Duration(i)*time.Microsecond, time.Millisecond, now)
	}
	return e, keys, now
}

func TestHotPathAllocs(t *testing.T) {
	e, keys, now := benchEstimator(t)
	tm := Timing{CPU: ms(1), IO: ms(2), Queue: ms(1), HasCPU: true, HasIO: true, HasQueue: true}
	i := 0
	if n := testing.AllocsPerRun(1000, func() {
		k := keys[i%len(keys)]
		e.Estimate(i%2, k)
		e.Observe(i%2, k, ms(3), ms(1), now)
		e.ObserveMeasured(i%2, k, ms(3), now)
		e.ObserveTiming(i%2, k, tm, ms(5), now)
		e.Arrive(i%2, now)
		now = now.Add(time.Millisecond) // crosses refresh and rate windows too
		i++
	}); n != 0 {
		t.Fatalf("%v allocs", n)
	}
}

func BenchmarkEstimate(b *testing.B) {
	e, keys, _ := benchEstimator(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		e.Estimate(i&1, keys[i&1023])
		i++
	}
}

func BenchmarkEstimateUnseenKey(b *testing.B) {
	e, _, _ := benchEstimator(b)
	k := []byte("/never/seen")
	b.ReportAllocs()
	for b.Loop() {
		e.Estimate(0, k)
	}
}

func BenchmarkObserve(b *testing.B) {
	e, keys, now := benchEstimator(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		now = now.Add(10 * time.Microsecond)
		e.Observe(i&1, keys[i&1023], 3*time.Millisecond, time.Millisecond, now)
		i++
	}
}

func BenchmarkObserveTiming(b *testing.B) {
	e, keys, now := benchEstimator(b)
	v := []byte("cpu;dur=1.5, db;dur=2.25, queue;dur=0.5, cache;desc=hit")
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		now = now.Add(10 * time.Microsecond)
		tm, _ := ParseServerTiming(v)
		e.ObserveTiming(i&1, keys[i&1023], tm, 5*time.Millisecond, now)
		i++
	}
}

func BenchmarkEstimateObserveParallel(b *testing.B) {
	e, keys, now := benchEstimator(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			k := keys[i&1023]
			e.Estimate(i&1, k)
			e.Observe(i&1, k, 3*time.Millisecond, time.Millisecond, now.Add(time.Duration(i)*time.Microsecond))
			i++
		}
	})
}

func BenchmarkArrive(b *testing.B) {
	e, _, now := benchEstimator(b)
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Microsecond)
		e.Arrive(0, now)
	}
}

func BenchmarkParseServerTiming(b *testing.B) {
	v := []byte(`cpu;dur=12.5, db;dur=3;desc="select", queue;dur=0.4, cache;desc=hit`)
	b.ReportAllocs()
	for b.Loop() {
		ParseServerTiming(v)
	}
}

func BenchmarkStripServerTiming(b *testing.B) {
	v := []byte(`cpu;dur=12.5, db;dur=3;desc="select", queue;dur=0.4, cache;desc=hit`)
	dst := make([]byte, 0, 128)
	b.ReportAllocs()
	for b.Loop() {
		dst = StripServerTiming(dst[:0], v)
	}
}

func BenchmarkParseStripServerTiming(b *testing.B) {
	v := []byte(`cpu;dur=12.5, db;dur=3;desc="select", queue;dur=0.4, cache;desc=hit`)
	dst := make([]byte, 0, 128)
	b.ReportAllocs()
	for b.Loop() {
		_, _, dst = ParseStripServerTiming(dst[:0], v)
	}
}
