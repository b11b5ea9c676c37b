package control

import (
	"math"
	"sync/atomic"
	"time"
)

// window is a lock-free latency histogram for one measurement interval:
// log-spaced buckets (×1.25 from 100µs, 64 buckets up to ~100 s). The
// monitor reads and resets it once per interval; requests only add.
type window struct {
	counts [windowBuckets]atomic.Uint64
}

const (
	windowBuckets = 64
	windowBase    = 100 * time.Microsecond
	windowGrowth  = 1.25
)

var logGrowth = math.Log(windowGrowth)

func windowIndex(d time.Duration) int {
	if d <= windowBase {
		return 0
	}
	i := int(math.Log(float64(d)/float64(windowBase))/logGrowth) + 1
	return min(i, windowBuckets-1)
}

// upper returns the upper bound of bucket i.
func windowUpper(i int) time.Duration {
	return time.Duration(float64(windowBase) * math.Pow(windowGrowth, float64(i)))
}

func (w *window) add(d time.Duration) { w.counts[windowIndex(d)].Add(1) }

// drain returns the count and the q-quantile (0<q<1) of the interval and
// resets the window. The quantile is the upper bound of its bucket, so it
// errs on the pessimistic side by at most 25%.
func (w *window) drain(q float64) (n uint64, quantile time.Duration) {
	var c [windowBuckets]uint64
	for i := range c {
		c[i] = w.counts[i].Swap(0)
		n += c[i]
	}
	if n == 0 {
		return 0, 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	var seen uint64
	for i, v := range c {
		seen += v
		if seen >= rank {
			return n, windowUpper(i)
		}
	}
	return n, windowUpper(windowBuckets - 1)
}
