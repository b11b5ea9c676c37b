package proxy

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sentry-proxy/sentry/policy"
)

// TestH2ResetAfterDispatchCutsBackend: an h2 stream reset while its request
// is at a backend closes that backend exchange (abort.go), so a backend
// that stops work when its client goes (Go's r.Context()) stops. The
// connection is not reused, and the next requests (with and without a
// body, and one whose response streams) are served.
func TestH2ResetAfterDispatchCutsBackend(t *testing.T) {
	started := make(chan string, 64)
	var cancelled, finished atomic.Int64
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			b, _ := io.ReadAll(r.Body)
			started <- string(b)
			select {
			case <-r.Context().Done():
				cancelled.Add(1)
			case <-time.After(10 * time.Second):
				finished.Add(1)
				io.WriteString(w, "late")
			}
		case "/slowstream":
			w.Header().Set("Content-Type", "text/plain")
			w.Write([]byte(strings.Repeat("x", 64<<10)))
			w.(http.Flusher).Flush()
			started <- "stream"
			select {
			case <-r.Context().Done():
				cancelled.Add(1)
			case <-time.After(10 * time.Second):
				finished.Add(1)
			}
		default:
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("X-Got", r.Header.Get("Content-Length")+"/"+string(b))
			io.WriteString(w, "ok")
		}
	})
	certFile, keyFile := writeTestCert(t)
	h := startProxy(t, []string{be}, func(_ *policy.Snapshot, a *policy.App) {
		a.TLS = &policy.TLS{CertFile: certFile, KeyFile: keyFile}
		a.Timeouts.Response = 30 * time.Second // no timeout cuts the exchange here
	})
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	if err := http2.ConfigureTransport(tr); err != nil {
		t.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 15 * time.Second}

	resetAfterStart := func(method, path, body string) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, _ := http.NewRequestWithContext(ctx, method, "https://"+h.addr+path, rd)
		errc := make(chan error, 1)
		go func() {
			resp, err := cl.Do(req)
			if err == nil {
				_, err = io.ReadAll(resp.Body) // a streamed response: read until the reset
				resp.Body.Close()
			}
			errc <- err
		}()
		select {
		case got := <-started:
			if path == "/slow" && got != body {
				t.Errorf("backend got body %q, want %q", got, body)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s %s never reached the backend", method, path)
		}
		before := cancelled.Load()
		cancel() // RST_STREAM(CANCEL)
		if err := <-errc; err == nil {
			t.Errorf("%s %s: request succeeded after its reset", method, path)
		}
		// The backend sees its client go at once, not at a timeout.
		deadline := time.Now().Add(3 * time.Second)
		for cancelled.Load() == before && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if cancelled.Load() == before {
			t.Fatalf("%s %s: the backend exchange was not cut within 3s of the reset", method, path)
		}
	}

	const n = 20
	for i := 0; i < n; i++ {
		switch i % 4 {
		case 0:
			resetAfterStart("GET", "/slow", "")
		case 1:
			resetAfterStart("POST", "/slow", "a body held whole")
		case 2:
			resetAfterStart("GET", "/slowstream", "")
		default:
			resetAfterStart("HEAD", "/slow", "")
		}
	}
	if c := cancelled.Load(); c != n || finished.Load() != 0 {
		t.Fatalf("backend saw %d of %d reset exchanges cut (%d ran to the end)", c, n, finished.Load())
	}

	// The pool holds no cut connection: plain requests go through.
	for i := 0; i < 20; i++ {
		var rd io.Reader
		want := "/"
		if i%2 == 1 {
			rd, want = strings.NewReader("hello"), "5/hello"
		}
		method := map[bool]string{false: "GET", true: "POST"}[rd != nil]
		req, _ := http.NewRequest(method, "https://"+h.addr+"/fine", rd)
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatalf("request %d after the resets: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "ok" {
			t.Fatalf("request %d after the resets: %d %q", i, resp.StatusCode, b)
		}
		// A body-less request goes without Content-Length (the exchange
		// core's request writer, as on HTTP/1.1 and the loops' streams).
		if got := resp.Header.Get("X-Got"); (rd == nil && got != "/") || (rd != nil && got != want) {
			t.Errorf("request %d: backend saw %q", i, got)
		}
	}
}
