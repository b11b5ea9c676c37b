package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"
)

// TestLimiterRefusesBeyondItsLimit: with a limit of 2 and no queue, 8
// concurrent slow requests get 2 answers from the backend and 503s for the
// rest; the backend never sees more than 2 at once; afterwards requests
// pass again.
func TestLimiterRefusesBeyondItsLimit(t *testing.T) {
	var mu sync.Mutex
	cur, peak := 0, 0
	release := make(chan struct{})
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		cur++
		peak = max(peak, cur)
		mu.Unlock()
		if r.URL.Path == "/slow" {
			<-release
		}
		mu.Lock()
		cur--
		mu.Unlock()
		io.WriteString(w, "ok")
	}))
	defer be.Close()
	u, _ := url.Parse(be.URL)
	px := httptest.NewServer(newHandler([]*backend{{url: u}}, 2, 2, 0))
	defer px.Close()

	var wg sync.WaitGroup
	codes := make(chan int, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(px.URL + "/slow")
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	// The 6 refused answer at once; then the 2 admitted are let go.
	refused := 0
	deadline := time.After(5 * time.Second)
	for refused < 6 {
		select {
		case c := <-codes:
			if c != http.StatusServiceUnavailable {
				t.Fatalf("status %d before the slow ones were released, want 503", c)
			}
			refused++
		case <-deadline:
			t.Fatalf("%d refused within 5s, want 6", refused)
		}
	}
	close(release)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Errorf("admitted request got %d", c)
		}
	}
	if peak > 2 {
		t.Errorf("backend saw %d at once, limit 2", peak)
	}
	resp, err := http.Get(px.URL + "/fast")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after the burst: %v %v", err, resp)
	}
	resp.Body.Close()
}
