package proxy

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sentry-proxy/sentry/policy"
)

// rapidReset opens an h2 connection and sends batches of HEADERS +
// RST_STREAM pairs (batch pairs per batch, gap between batches, at most
// batches batches) until the server sends GOAWAY. It returns the resets
// sent and the GOAWAY's error code (ok false: none came).
func rapidReset(t *testing.T, addr string, batch, batches int, gap time.Duration) (sent int, code http2.ErrCode, ok bool) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	return rapidResetOn(t, c, batch, batches, gap)
}

// rapidResetOn is rapidReset on a connection already made (TLS with h2,
// or plain TCP to an h2c listener); it closes c.
func rapidResetOn(t *testing.T, c net.Conn, batch, batches int, gap time.Duration) (sent int, code http2.ErrCode, ok bool) {
	t.Helper()
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	var wbuf bytes.Buffer
	fr := http2.NewFramer(&wbuf, c)
	fr.WriteSettings()
	var got atomic.Value
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if ga, ok := f.(*http2.GoAwayFrame); ok {
				got.Store(ga.ErrCode)
				return
			}
		}
	}()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	id := uint32(1)
	for b := 0; b < batches; b++ {
		wbuf.Reset()
		if b == 0 {
			fr.WriteSettings()
		}
		for i := 0; i < batch; i++ {
			hb.Reset()
			enc.WriteField(hpack.HeaderField{Name: ":method", Value: "GET"})
			enc.WriteField(hpack.HeaderField{Name: ":scheme", Value: "https"})
			enc.WriteField(hpack.HeaderField{Name: ":authority", Value: "x"})
			enc.WriteField(hpack.HeaderField{Name: ":path", Value: "/reset"})
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
			fr.WriteRSTStream(id, http2.ErrCodeCancel)
			id += 2
		}
		if _, err := c.Write(wbuf.Bytes()); err != nil {
			break
		}
		sent += batch
		select {
		case <-done:
			b = batches
		case <-time.After(gap):
		}
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	if v := got.Load(); v != nil {
		return sent, v.(http2.ErrCode), true
	}
	return sent, 0, false
}

func TestH2RapidReset(t *testing.T) {
	var hits atomic.Int64
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/reset" {
			hits.Add(1)
			time.Sleep(20 * time.Millisecond)
		}
		io.WriteString(w, "ok")
	})
	certFile, keyFile := writeTestCert(t)
	h := startProxy(t, []string{be}, func(_ *policy.Snapshot, a *policy.App) {
		a.TLS = &policy.TLS{CertFile: certFile, KeyFile: keyFile}
	})
	for _, tc := range []struct {
		name           string
		batch, batches int
		gap            time.Duration
	}{
		{"back-to-back", 1000, 1, 0},
		{"paced", 100, 30, 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := hits.Load()
			sent, code, ok := rapidReset(t, h.addr, tc.batch, tc.batches, tc.gap)
			if !ok || code != http2.ErrCodeEnhanceYourCalm {
				t.Errorf("after %d resets: GOAWAY %v (received %v), want ENHANCE_YOUR_CALM", sent, code, ok)
			}
			time.Sleep(100 * time.Millisecond)
			reached := hits.Load() - before
			t.Logf("%d resets sent, %d reached the backend", sent, reached)
			if reached*100 > int64(sent) {
				t.Errorf("%d of %d reset streams reached the backend (> 1%%)", reached, sent)
			}
		})
	}
	// Both GOAWAYs were the rapid-reset guard's.
	if v := testutil.ToFloat64(h.p.metrics.clientErrors.WithLabelValues(h.addr, "h2_reset_flood")); v != 2 {
		t.Errorf("h2_reset_flood = %v, want 2", v)
	}
	// A normal h2 client is still served.
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	if err := http2.ConfigureTransport(tr); err != nil {
		t.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	for i := 0; i < 150; i++ { // more than the reset limit, none reset
		resp, err := cl.Get("https://" + h.addr + "/fine")
		if err != nil {
			t.Fatalf("normal h2 request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "ok" || resp.ProtoMajor != 2 {
			t.Fatalf("normal h2 request %d: %d %q HTTP/%d", i, resp.StatusCode, b, resp.ProtoMajor)
		}
	}
}
