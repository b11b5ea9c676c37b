package e2e

import (
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// buckets reads one class's sentry_admitted_duration_seconds buckets
// (upper bound → cumulative count) from a scrape.
func admittedBuckets(m map[string]float64, app, class string) map[float64]float64 {
	out := map[float64]float64{}
	prefix := fmt.Sprintf(`sentry_admitted_duration_seconds_bucket{app="%s",class="%s",le="`, app, class)
	for k, v := range m {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		le, _, _ := strings.Cut(rest, `"`)
		f, err := strconv.ParseFloat(le, 64)
		if le == "+Inf" {
			f, err = math.Inf(1), nil
		}
		if err == nil {
			out[f] += v
		}
	}
	return out
}

// histogramQuantile is Prometheus's histogram_quantile on cumulative
// buckets: linear interpolation inside the bucket that holds the rank.
func histogramQuantile(q float64, b map[float64]float64) float64 {
	les := make([]float64, 0, len(b))
	for le := range b {
		les = append(les, le)
	}
	sort.Float64s(les)
	if len(les) == 0 {
		return math.NaN()
	}
	total := b[les[len(les)-1]]
	rank := q * total
	prevLe, prevCount := 0.0, 0.0
	for _, le := range les {
		c := b[le]
		if c >= rank {
			if math.IsInf(le, 1) {
				return prevLe
			}
			return prevLe + (le-prevLe)*(rank-prevCount)/(c-prevCount)
		}
		prevLe, prevCount = le, c
	}
	return prevLe
}

// bucketOf is the index of the bucket (upper bounds les, sorted) that
// holds v.
func bucketOf(v float64, les []float64) int {
	return sort.SearchFloat64s(les, v)
}

// TestFleetPercentileFromHistograms: two sentry processes, one in front
// of a fast backend and one in front of a slow one, scraped as Prometheus
// would. The SLA percentile computed from their summed per-class
// histograms (the dashboard's query) matches the percentile of every
// request's latency as the clients saw them within one bucket, and lies
// between the two processes' own figures.
func TestFleetPercentileFromHistograms(t *testing.T) {
	fast := newTestBackend(t, "fast", 5*time.Millisecond)
	slow := newTestBackend(t, "slow", 60*time.Millisecond)
	type inst struct{ admin, listen string }
	var insts []inst
	for _, be := range []*testBackend{fast, slow} {
		in := inst{admin: freePort(t), listen: freePort(t)}
		cfg := writeFile(t, "sentry.yaml", fmt.Sprintf(`
admin: {listen: %s}
apps:
  - name: web
    listen: %s
    backends: {static: [%s]}
`, in.admin, in.listen, be.addr))
		startSentry(t, "http://"+in.admin+"/readyz", "run", "-config", cfg)
		insts = append(insts, in)
	}
	// 120 requests to each, 4 at a time: far below either backend's
	// capacity, so nothing is rejected.
	var mu sync.Mutex
	var lat []float64
	for _, in := range insts {
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 30; i++ {
					start := time.Now()
					resp, err := http.Get("http://" + in.listen + "/")
					if err != nil {
						t.Error(err)
						return
					}
					resp.Body.Close()
					d := time.Since(start).Seconds()
					if resp.StatusCode != 200 {
						t.Errorf("status %d", resp.StatusCode)
						return
					}
					mu.Lock()
					lat = append(lat, d)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	if t.Failed() {
		return
	}
	sort.Float64s(lat)
	truth := lat[int(math.Ceil(0.95*float64(len(lat))))-1]

	fleet := map[float64]float64{}
	var own []float64
	for _, in := range insts {
		b := admittedBuckets(scrape(t, in.admin), "web", "default")
		if len(b) == 0 {
			t.Fatalf("%s: no sentry_admitted_duration_seconds buckets for web/default", in.admin)
		}
		own = append(own, histogramQuantile(0.95, b))
		for le, c := range b {
			fleet[le] += c
		}
	}
	var les []float64
	for le := range fleet {
		les = append(les, le)
	}
	sort.Float64s(les)
	if total := fleet[les[len(les)-1]]; int(total) != len(lat) {
		t.Fatalf("the histograms counted %v requests, the clients sent %d", total, len(lat))
	}
	got := histogramQuantile(0.95, fleet)
	t.Logf("p95: fleet from histograms %.1f ms, clients' %.1f ms, per process %.1f / %.1f ms",
		got*1e3, truth*1e3, own[0]*1e3, own[1]*1e3)
	if d := bucketOf(got, les) - bucketOf(truth, les); d < -1 || d > 1 {
		t.Errorf("fleet p95 %.4fs is %d buckets from the clients' %.4fs (buckets %v)", got, d, truth, les)
	}
	if got < min(own[0], own[1]) || got > max(own[0], own[1]) {
		t.Errorf("fleet p95 %.4fs outside the processes' own %.4fs and %.4fs", got, own[0], own[1])
	}
}
