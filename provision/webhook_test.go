package provision

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func startNotifier(t *testing.T, cfg WebhookConfig) (*Notifier, func()) {
	n := NewNotifier(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); n.Run(ctx) }()
	return n, func() { cancel(); wg.Wait() }
}

func TestWebhookDelivers(t *testing.T) {
	got := make(chan Request, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s with %q", r.Method, r.Header.Get("Content-Type"))
		}
		var req Request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Error(err)
		}
		got <- req
	}))
	defer srv.Close()
	n, stop := startNotifier(t, WebhookConfig{URL: srv.URL})
	defer stop()
	n.Notify(Request{App: "shop", Ask: 2, Current: 3, Needed: 5, DropRatio: 0.6, Time: t0})
	select {
	case r := <-got:
		if r.App != "shop" || r.Ask != 2 || r.Current != 3 || r.Needed != 5 || r.DropRatio != 0.6 || !r.Time.Equal(t0) {
			t.Fatalf("received %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
	waitFor(t, "sent", func() bool { return n.Sent() == 1 })
}

// A 500 is retried; the third attempt succeeds.
func TestWebhookRetries(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	n, stop := startNotifier(t, WebhookConfig{URL: srv.URL, Retries: 2, Backoff: time.Millisecond})
	defer stop()
	n.Notify(Request{App: "a", Ask: 1})
	waitFor(t, "sent", func() bool { return n.Sent() == 1 })
	if calls.Load() != 3 || n.Failed() != 0 {
		t.Fatalf("calls %d failed %d", calls.Load(), n.Failed())
	}
	// Always failing: 1 + Retries attempts, then counted as failed.
	calls.Store(-100)
	n.Notify(Request{App: "a", Ask: 1})
	waitFor(t, "failed", func() bool { return n.Failed() == 1 })
	if a := n.Attempts(); a != 6 {
		t.Fatalf("attempts %d, want 3 + 3", a)
	}
}

// A hanging endpoint: each attempt ends at the timeout, and Notify never
// blocks: asks beyond the queue are dropped and counted, at once.
func TestWebhookHangingEndpoint(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	n, stop := startNotifier(t, WebhookConfig{URL: srv.URL, Timeout: 50 * time.Millisecond, Retries: -1, Queue: 2})
	defer stop()
	queued := 0
	start := time.Now()
	for i := 0; i < 100; i++ {
		if n.Notify(Request{App: "a", Ask: 1}) {
			queued++
		}
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("100 Notify calls took %v", elapsed)
	}
	// At most the queue plus the one being delivered were taken.
	if queued > 3 || n.Dropped() != uint64(100-queued) {
		t.Fatalf("queued %d dropped %d", queued, n.Dropped())
	}
	waitFor(t, "timeouts", func() bool { return n.Failed() == uint64(queued) })
	if n.Sent() != 0 {
		t.Fatalf("sent %d to a hanging endpoint", n.Sent())
	}
}

// Run returns when its context ends, even in the middle of a retry wait.
func TestWebhookStops(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	n, stop := startNotifier(t, WebhookConfig{URL: srv.URL, Retries: 5, Backoff: time.Hour})
	n.Notify(Request{App: "a"})
	waitFor(t, "first attempt", func() bool { return n.Attempts() == 1 })
	done := make(chan struct{})
	go func() { stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop")
	}
	if n.Failed() != 1 {
		t.Fatalf("failed %d", n.Failed())
	}
}
