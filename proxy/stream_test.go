package proxy

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// streamSize is 1 GiB, or 64 MiB under -short.
func streamSize() int64 {
	if testing.Short() {
		return 64 << 20
	}
	return 1 << 30
}

// heapWatch samples the heap while a transfer runs and reports the peak
// growth over the starting point.
func heapWatch() (stop func() uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				if m.HeapInuse > base && m.HeapInuse-base > peak.Load() {
					peak.Store(m.HeapInuse - base)
				}
			}
		}
	}()
	return func() uint64 { close(done); <-finished; return peak.Load() }
}

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

const flatLimit = 48 << 20 // heap growth allowed for a streamed transfer

func TestStreamingDownloadFlatMemory(t *testing.T) {
	size := streamSize()
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		io.Copy(w, io.LimitReader(zeros{}, size))
	})
	h := startProxy(t, []string{be}, nil)
	stop := heapWatch()
	resp, err := http.Get(h.url("/big"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	peak := stop()
	if err != nil || n != size {
		t.Fatalf("downloaded %d of %d bytes: %v", n, size, err)
	}
	t.Logf("download %d MiB, peak heap growth %d KiB", size>>20, peak>>10)
	if peak > flatLimit {
		t.Fatalf("heap grew by %d MiB during a streamed download", peak>>20)
	}
}

func TestStreamingUploadFlatMemory(t *testing.T) {
	size := streamSize()
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%d %v", n, err)
	})
	h := startProxy(t, []string{be}, nil)
	stop := heapWatch()
	req, _ := http.NewRequest("PUT", h.url("/up"), io.LimitReader(zeros{}, size))
	req.ContentLength = size
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	peak := stop()
	if want := fmt.Sprintf("%d <nil>", size); string(b) != want {
		t.Fatalf("backend got %q, want %q", b, want)
	}
	t.Logf("upload %d MiB, peak heap growth %d KiB", size>>20, peak>>10)
	if peak > flatLimit {
		t.Fatalf("heap grew by %d MiB during a streamed upload", peak>>20)
	}
}
