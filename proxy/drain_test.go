package proxy

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sentry-proxy/sentry/policy"
)

// TestShutdownDrainsH2: a shutdown lets an h2 stream in progress finish
// (the connection is told GOAWAY, not closed), then returns. fasthttp alone
// would close an h2 connection five seconds into a shutdown (see
// tlsListener); the e2e upgrade test covers that longer case.
func TestShutdownDrainsH2(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i < 10; i++ {
			w.Write(make([]byte, 8<<10))
			w.(http.Flusher).Flush()
			time.Sleep(60 * time.Millisecond)
		}
	})
	certFile, keyFile := writeTestCert(t)
	h := startProxy(t, []string{be}, func(_ *policy.Snapshot, a *policy.App) {
		a.TLS = &policy.TLS{CertFile: certFile, KeyFile: keyFile}
	})
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	if err := http2.ConfigureTransport(tr); err != nil {
		t.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := cl.Get("https://" + h.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	if resp.ProtoMajor != 2 {
		t.Fatalf("client spoke HTTP/%d", resp.ProtoMajor)
	}
	type res struct {
		n   int64
		err error
		at  time.Time
	}
	done := make(chan res, 1)
	go func() {
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done <- res{n, err, time.Now()}
	}()
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := h.p.ShutdownAll(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	returned := time.Now()
	r := <-done
	if r.err != nil || r.n != 10*8<<10 {
		t.Fatalf("h2 stream cut by the shutdown: %d bytes, %v", r.n, r.err)
	}
	if returned.Before(r.at) {
		t.Errorf("shutdown returned before the h2 stream ended")
	}
	if d := returned.Sub(r.at); d > time.Second {
		t.Errorf("shutdown took %v after the last stream ended", d)
	}
	t.Logf("shutdown took %v; the stream ended %v before it returned", returned.Sub(start).Round(time.Millisecond), returned.Sub(r.at).Round(time.Millisecond))
}
