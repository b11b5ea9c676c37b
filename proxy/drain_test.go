package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync/atomic"
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
	var beDone atomic.Int64 // unix nanos when the backend wrote its last byte
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i < 10; i++ {
			w.Write(make([]byte, 8<<10))
			w.(http.Flusher).Flush()
			time.Sleep(60 * time.Millisecond)
		}
		beDone.Store(time.Now().UnixNano())
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
	last := time.Unix(0, beDone.Load())
	if returned.Before(last) {
		t.Errorf("shutdown returned before the backend finished the h2 stream")
	}
	if d := returned.Sub(last); d > time.Second {
		t.Errorf("shutdown took %v after the stream ended", d)
	}
	t.Logf("shutdown took %v, %v after the backend's last write", returned.Sub(start).Round(time.Millisecond), returned.Sub(last).Round(time.Millisecond))
}

// TestShutdownIdleKeepAlive: a keep-alive connection idle when a shutdown
// starts is not cut. A request sent on it within idleGrace is answered
// (with Connection: close), and a connection that stays idle ends with a
// clean end of stream, not a reset.
func TestShutdownIdleKeepAlive(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	h := startProxy(t, []string{be}, nil)
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(5 * time.Second))
		return c, bufio.NewReader(c)
	}
	get := func(c net.Conn, br *bufio.Reader) *http.Response {
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	busy, busyR := dial()
	idle, idleR := dial()
	get(busy, busyR)
	get(idle, idleR)

	done := make(chan error, 1)
	start := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- h.p.ShutdownAll(ctx)
	}()
	time.Sleep(200 * time.Millisecond) // the shutdown has closed its idle connections
	resp := get(busy, busyR)
	if resp.StatusCode != 200 || !resp.Close {
		t.Errorf("request on an idle connection during the drain: %d, Connection: close %v", resp.StatusCode, resp.Close)
	}
	for _, x := range []struct {
		name string
		br   *bufio.Reader
	}{{"served", busyR}, {"idle", idleR}} {
		if _, err := x.br.ReadByte(); err != io.EOF {
			t.Errorf("%s connection ended with %v, want a clean EOF", x.name, err)
		}
	}
	if err := <-done; err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if d := time.Since(start); d > idleGrace+lingerTimeout+time.Second {
		t.Errorf("shutdown took %v", d)
	}
}
