package proxy

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync"
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
	// Both GOAWAYs were sentry's (x/net has its own for floods of
	// queued streams).
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

// TestFrameTracker: frame boundaries are followed across arbitrary splits,
// and toBoundary finds the end of the frame in progress.
func TestFrameTracker(t *testing.T) {
	frame := func(typ byte, payload int) []byte {
		b := make([]byte, 9+payload)
		b[0], b[1], b[2], b[3] = byte(payload>>16), byte(payload>>8), byte(payload), typ
		return b
	}
	var stream []byte
	var ends []int // offsets where a frame ends
	for _, p := range []int{0, 5, 20000, 1, 0, 300} {
		stream = append(stream, frame(0x0, p)...)
		ends = append(ends, len(stream))
	}
	isEnd := map[int]bool{}
	for _, e := range ends {
		isEnd[e] = true
	}
	for _, step := range []int{1, 2, 7, 9, 10, 4096} {
		var f frameTracker
		headers := 0
		for off := 0; off < len(stream); off += step {
			chunk := stream[off:min(off+step, len(stream))]
			// toBoundary, from here, must land on the next frame end.
			if !f.boundary() {
				k := f.toBoundary(chunk)
				next := off + k
				if k < len(chunk) && !isEnd[next] {
					t.Fatalf("step %d: toBoundary at %d gives %d, not a frame end", step, off, next)
				}
			}
			f.feed(chunk, func(*[9]byte, int) bool { headers++; return true })
			if end := off + len(chunk); f.boundary() != isEnd[end] {
				t.Fatalf("step %d: at %d boundary=%v, want %v", step, end, f.boundary(), isEnd[end])
			}
		}
		if headers != len(ends) {
			t.Errorf("step %d: %d headers seen, want %d", step, headers, len(ends))
		}
	}
}

// goawayRec records what is written to it.
type goawayRec struct {
	net.Conn
	mu  sync.Mutex
	out bytes.Buffer
}

func (c *goawayRec) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.Write(b)
}

func (c *goawayRec) Close() error { return nil }

// TestH2GuardGoAwayAfterXNet: x/net's server sent GOAWAY (a graceful
// shutdown, last stream 3); the client then opened more streams and
// reset them until the guard tripped. The guard's GOAWAY would announce
// the last of them, more than x/net's (RFC 9113 §6.8 forbids a later
// GOAWAY to grow); it sends none, and closes.
func TestH2GuardGoAwayAfterXNet(t *testing.T) {
	h := startProxyOpts(t, nil, Options{H2: H2XNet}, func(_ *policy.Snapshot, a *policy.App) { a.H2C = true })
	h.p.mu.Lock()
	fe := h.p.mu.fronts[h.addr]
	h.p.mu.Unlock()
	rc := &goawayRec{}
	g := newH2Guard(rc, nil, fe)
	var xnet bytes.Buffer
	fr := http2.NewFramer(&xnet, nil)
	fr.WriteGoAway(3, http2.ErrCodeNo, nil)
	if _, err := g.Write(xnet.Bytes()); err != nil {
		t.Fatal(err)
	}
	for id := uint32(5); id <= 9; id += 2 {
		g.onFrame(&[9]byte{0, 0, 0, 0x1, 0x4, 0, 0, 0, byte(id)}, 9)
	}
	g.tripped.Store(true)
	g.goAway()
	fr = http2.NewFramer(nil, bytes.NewReader(rc.out.Bytes()))
	var ids []uint32
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			break
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			ids = append(ids, ga.LastStreamID)
		}
	}
	if len(ids) == 0 || ids[0] != 3 {
		t.Fatalf("GOAWAYs %v, want x/net's (3) first", ids)
	}
	for _, id := range ids[1:] {
		if id > 3 {
			t.Errorf("GOAWAY last-stream-ids %v: grew", ids)
		}
	}
}

// TestH2GuardResetRate: x/net's guard counts resets as a rate, as the own
// server does (h2srv.ResetMeter): a connection cancelling five streams a
// second for an hour of the manual clock is never cut; a burst of more
// than h2ResetLimit resets after it is.
func TestH2GuardResetRate(t *testing.T) {
	h := startProxyOpts(t, nil, Options{H2: H2XNet}, func(_ *policy.Snapshot, a *policy.App) { a.H2C = true })
	h.p.mu.Lock()
	fe := h.p.mu.fronts[h.addr]
	h.p.mu.Unlock()
	g := newH2Guard(&goawayRec{}, nil, fe)
	clock := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	g.now = func() time.Time { return clock }
	frame := func(typ byte, id uint32) *[9]byte {
		return &[9]byte{0, 0, 4, typ, 0, byte(id >> 24), byte(id >> 16), byte(id >> 8), byte(id)}
	}
	id := uint32(1)
	for i := 0; i < 5*3600; i++ {
		clock = clock.Add(200 * time.Millisecond)
		g.onFrame(frame(0x1, id), 9)
		if !g.onFrame(frame(0x3, id), 9) {
			t.Fatalf("cut after %d cancellations at 5 a second", i+1)
		}
		id += 2
	}
	for k := 0; k <= h2ResetLimit; k++ {
		g.onFrame(frame(0x1, id), 9)
		if !g.onFrame(frame(0x3, id), 9) {
			return
		}
		id += 2
	}
	t.Errorf("a burst of %d resets after the steady hour was not cut", h2ResetLimit+1)
}
